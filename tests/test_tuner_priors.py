"""The search times the strategy's heuristic first, then the configurations that won before on the device class
(where the space holds them), and stops timing candidates that are clearly slower than the best so far."""

from __future__ import annotations

import pytest
import torch
from conftest import tile_level_kernel

import amk
from amk.lowering.configs import GEMM_HOPPER_PRIORS
from amk.pipeline import heuristic_config
from amk.tuner import EARLY_STOP_FACTOR, DeviceLimits, TunerConfig, tune


def gemm_kernel():
    kernel = tile_level_kernel(["matmul", "add_bias", "relu"], [(4096, 4096), (4096, 4096), (4096,)], torch.float16)
    assert kernel.strategy.data == "tile2d"
    return kernel


@pytest.fixture
def timings(monkeypatch):
    """Fake timing on a fake device: returns the list of (config, give_up_above) in the order candidates ran."""
    runs: list = []
    launched: list = []

    def measure(fn, warmup, runs_count, give_up_above=None):
        fn()
        runs.append((launched[-1], give_up_above))
        return 1.0 + launched[-1].BLOCK_M / 64 + launched[-1].num_stages / 10

    monkeypatch.setattr(amk.tuner, "measure", measure)
    monkeypatch.setattr(amk.tuner, "_final_round", lambda *args: None)
    return runs, (lambda config: ((lambda: launched.append(config)), (lambda: None)))


@pytest.mark.parametrize("search", ["bayesian", "random"])
def test_the_heuristic_then_the_device_classes_winners_are_timed_first(monkeypatch, timings, search):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("H200", 227 * 1024, 132, tma=True)))
    runs, build_and_run = timings
    kernel = gemm_kernel()
    heuristic = heuristic_config(kernel)
    tune(kernel, TunerConfig(search=search, search_budget=8), None, heuristic, build_and_run)
    order = [config for config, _ in runs]
    expected = [heuristic] + [type(heuristic)(**(heuristic.as_dict() | prior)) for prior in GEMM_HOPPER_PRIORS]
    assert order[:len(expected)] == expected


def test_no_priors_where_none_were_measured(monkeypatch, timings):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("A100", 164 * 1024, 108)))
    assert amk.tuner.priors("tile2d", True, DeviceLimits.current()) == []


def test_candidates_are_timed_against_the_best_so_far(monkeypatch, timings):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("H200", 227 * 1024, 132, tma=True)))
    runs, build_and_run = timings
    kernel = gemm_kernel()
    tune(kernel, TunerConfig(search="exhaustive", search_budget=4), amk.tuner.validate_grid(
        {"BLOCK_SIZE_M": [64, 128], "num_stages": [3, 4]}), heuristic_config(kernel), build_and_run)
    assert runs[0][1] is None  # the first candidate has nothing to beat
    bounds = [bound for _, bound in runs[1:]]
    first_time = 1.0 + runs[0][0].BLOCK_M / 64 + runs[0][0].num_stages / 10
    assert bounds[0] == pytest.approx(first_time * EARLY_STOP_FACTOR)
    assert all(later <= earlier for earlier, later in zip(bounds, bounds[1:]))  # the best only improves


def test_no_early_stop_against_a_best_timed_by_graph_replay(monkeypatch):
    """Decode-sized kernels are re-timed by CUDA-graph replay (warm L2): the next candidate's first flushed launches
    are not comparable with that, so they are timed to the end."""
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("H200", 227 * 1024, 132, tma=True)))
    bounds, launched = [], []

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        bounds.append(give_up_above)
        return amk.tuner.GRAPH_TIMING_BELOW_MS / 4

    monkeypatch.setattr(amk.tuner, "measure", measure)
    monkeypatch.setattr(amk.tuner, "_final_round", lambda *args: None)
    kernel = gemm_kernel()
    tune(kernel, TunerConfig(search="exhaustive", search_budget=4), amk.tuner.validate_grid(
        {"BLOCK_SIZE_M": [64, 128], "num_stages": [3, 4]}), heuristic_config(kernel),
         lambda config: ((lambda: launched.append(config)), (lambda: None)))
    assert len(bounds) == 4 and bounds == [None] * 4


def test_priors_bring_launch_switches_only_to_tile_grid_strategies():
    from amk.lowering.strategies import STRATEGIES

    hopper = DeviceLimits("H200", 227 * 1024, 132, tma=True)
    for name, strategy in STRATEGIES.items():
        seeds = amk.tuner.priors(name, True, hopper)
        assert len({tuple(sorted(seed.items())) for seed in seeds}) == len(seeds), f"{name} repeats a prior"
        if not strategy.tile_grid:
            assert not any("PERSISTENT" in seed or "TMA" in seed for seed in seeds), name
    assert any(seed.get("PERSISTENT") and seed.get("TMA") for seed in amk.tuner.priors("tile2d", True, hopper))
