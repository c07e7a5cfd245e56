"""The search times the strategy's heuristic first, then the configurations that won before on the device class
(where the space holds them), and stops timing candidates that are clearly slower than the best so far."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import tile_level_kernel

import amk
from amk.lowering.configs import GEMM_HOPPER_PRIORS
from amk.pipeline import heuristic_config
from amk.tuner import EARLY_STOP_FACTOR, DeviceLimits, TunerConfig, tune

H200 = DeviceLimits("H200", 227 * 1024, 132, tma=True, gluon=True)


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
    monkeypatch.setattr(amk.tuner, "_final_round", lambda *args: {})
    return runs, (lambda config: ((lambda: launched.append(config)), (lambda: None)))


@pytest.mark.parametrize("search", ["bayesian", "random"])
def test_the_heuristic_then_the_device_classes_winners_are_timed_first(monkeypatch, timings, search):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    runs, build_and_run = timings
    kernel = gemm_kernel()
    heuristic = heuristic_config(kernel)
    tune(kernel, TunerConfig(search=search, search_budget=8), None, heuristic, build_and_run)
    order = [config for config, _ in runs]
    expected = [heuristic] + [type(heuristic)(**(heuristic.as_dict() | prior)) for prior in GEMM_HOPPER_PRIORS]
    assert order[:len(expected)] == expected


def test_attention_probabilities_time_their_measured_tiles_right_after_the_heuristic(monkeypatch, timings):
    """softmax(q @ k^T * c) at K = 64 (chunk_recompute): after the heuristic, the tiles it chose in every model-table
    run (128 x 64, two chunks a row, 4 warps, 3 stages); not G's Triton prior, whose BLOCK_K (128) this K's kernel
    has not, nor the Gluon one, below the Gluon form's size."""
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    runs, build_and_run = timings
    kernel = tile_level_kernel(["matmul", ("scale", {"factor": 0.125}), "softmax"], [(4096, 64), (64, 512)],
                               torch.float16)
    assert kernel.strategy.data == "chunk_recompute"
    heuristic = heuristic_config(kernel)
    tune(kernel, TunerConfig(search_budget=8), None, heuristic, build_and_run)
    order = [config for config, _ in runs]
    assert order[:2] == [heuristic, replace(heuristic, BLOCK_M=128, BLOCK_N=64, SPLIT_N=2, num_warps=4, num_stages=3)]
    assert not any(config.GLUON or config.BLOCK_K != heuristic.BLOCK_K for config in order)


def test_a_gluon_prior_is_skipped_where_gluon_kernels_do_not_run(monkeypatch, timings):
    """A device with TMA but without Hopper's wgmma (a Blackwell): the Triton priors, in order, without B's Gluon one."""
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("B200", 227 * 1024, 148, tma=True)))
    runs, build_and_run = timings
    kernel = gemm_kernel()
    heuristic = heuristic_config(kernel)
    tune(kernel, TunerConfig(search="random", search_budget=8), None, heuristic, build_and_run)
    order = [config for config, _ in runs]
    triton_priors = [prior for prior in GEMM_HOPPER_PRIORS if not prior.get("GLUON")]
    assert len(triton_priors) == len(GEMM_HOPPER_PRIORS) - 1 and not any(config.GLUON for config in order)
    assert order[:1 + len(triton_priors)] == [heuristic] + [type(heuristic)(**(heuristic.as_dict() | prior))
                                                            for prior in triton_priors]


def test_no_priors_where_none_were_measured(monkeypatch, timings):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("A100", 164 * 1024, 108)))
    assert amk.tuner.priors("tile2d", True, DeviceLimits.current()) == []


def test_candidates_are_timed_against_the_best_so_far(monkeypatch, timings):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
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
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    bounds, launched = [], []

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        bounds.append(give_up_above)
        return amk.tuner.GRAPH_TIMING_BELOW_MS / 4

    monkeypatch.setattr(amk.tuner, "measure", measure)
    monkeypatch.setattr(amk.tuner, "_final_round", lambda *args: {})
    kernel = gemm_kernel()
    tune(kernel, TunerConfig(search="exhaustive", search_budget=4), amk.tuner.validate_grid(
        {"BLOCK_SIZE_M": [64, 128], "num_stages": [3, 4]}), heuristic_config(kernel),
         lambda config: ((lambda: launched.append(config)), (lambda: None)))
    assert len(bounds) == 4 and bounds == [None] * 4


def test_priors_bring_launch_switches_only_to_tile_grid_strategies():
    from amk.lowering.strategies import STRATEGIES

    hopper = H200
    for name, strategy in STRATEGIES.items():
        seeds = amk.tuner.priors(name, True, hopper)
        assert len({tuple(sorted(seed.items())) for seed in seeds}) == len(seeds), f"{name} repeats a prior"
        if not strategy.tile_grid:
            assert not any("PERSISTENT" in seed or "TMA" in seed for seed in seeds), name
    assert any(seed.get("PERSISTENT") and seed.get("TMA") for seed in amk.tuner.priors("tile2d", True, hopper))


def test_the_winners_of_a_kernels_family_are_found_most_recent_first(tmp_path):
    import os

    from amk import cache

    store = cache.Store(tmp_path)
    family = {"strategy": "tile2d", "element_bytes": 2, "fp32_dot": "ieee", "device": {"name": "H200"}}

    def timed(key, config_ms, age, **meta):
        trials = {f"c{i}": {"config": {"BLOCK_SIZE_M": m}, "status": "ok", "time_ms": ms}
                  for i, (m, ms) in enumerate(config_ms)}
        trials["bad"] = {"config": {"BLOCK_SIZE_M": 16}, "status": "failed", "time_ms": None}
        store.merge_timings(key, trials, {**family, **meta})
        path = tmp_path / "timings" / f"{key}.json"
        os.utime(path, (age, age))

    timed("a" * 64, [(64, 2.0), (128, 1.0)], 100)
    timed("b" * 64, [(256, 0.5)], 300)
    timed("c" * 64, [(32, 0.1)], 200, strategy="row_resident")  # another family
    timed("d" * 64, [(128, 3.0)], 50)  # the same winner as "a": once
    assert store.winners(family, 4) == [{"BLOCK_SIZE_M": 256}, {"BLOCK_SIZE_M": 128}]
    assert store.winners(family, 1) == [{"BLOCK_SIZE_M": 256}]
    assert store.winners({**family, "device": {"name": "A100"}}, 4) == []


def test_a_siblings_winner_is_timed_right_after_the_priors(monkeypatch, timings):
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    runs, build_and_run = timings
    kernel = gemm_kernel()
    heuristic = heuristic_config(kernel)
    sibling = type(heuristic)(**(heuristic.as_dict() | dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_stages=4,
                                                               SPLIT_K=2)))  # SPLIT_K: not searched, not taken
    tune(kernel, TunerConfig(search="random", search_budget=12), None, heuristic, build_and_run, learned=[sibling])
    order = [config for config, _ in runs]
    priors = [type(heuristic)(**(heuristic.as_dict() | prior)) for prior in GEMM_HOPPER_PRIORS]
    assert order[:len(priors) + 2] == [heuristic, *priors, type(heuristic)(**(sibling.as_dict() | {
        "SPLIT_K": heuristic.SPLIT_K}))]


def test_a_build_is_seeded_with_what_won_for_an_earlier_build_of_its_family(monkeypatch, tmp_path):
    """Through the build service (as on a GPU, the timing faked): the winner recorded for one shape is offered to
    the next build of the same strategy, dtype and device, and not to a build of another dtype."""
    import amk.build
    import amk.oplist
    from amk.build import BuildRequest, build
    from amk.lowering.configs import KernelConfig
    from amk.tuner import Trial

    offered = []
    winner = KernelConfig(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_stages=4)

    def tuner(settings, grid, on_tuned, known, fp32_dot, size_hints, learned, beaten_at_ms):  # autotune_chooser's signature
        def choose(kernel):
            offered.append(learned(kernel))
            on_tuned(kernel, winner, [Trial(winner, "ok", 1.0), Trial(KernelConfig(), "ok", 2.0)])
            return winner
        return choose

    monkeypatch.setattr(amk.build, "autotune_chooser", tuner)
    monkeypatch.setattr(BuildRequest, "timed", property(lambda self: True))
    monkeypatch.setattr(amk.build, "start_compile_workers", lambda: None)  # the tuning is faked: nothing to compile
    settings = amk.TunerConfig(target_cache_dir=tmp_path, vendor_gemm=False)
    for rows, dtype in [(2048, torch.float16), (4096, torch.float16), (4096, torch.float32)]:  # not launch-bound
        shapes = [(rows, 256), (256, 256), (256,)]
        build(BuildRequest(lambda shapes=shapes, dtype=dtype: amk.oplist.build_module(
            ["matmul", "add_bias", "relu"], shapes, dtype), shapes, dtype, tuner_config=settings), save=False)
    assert offered == [[], [winner.user_view()], []]


def test_ties_go_to_the_candidate_timed_first(monkeypatch):
    """Finalists timed side by side within TIE_TOLERANCE of the fastest are equals: the first timed (the heuristic)
    is kept, whatever the noise ordered them; a clearly faster one still wins; and a first-pass time never ties with
    finalists re-timed side by side (a search heats the GPU: later passes run slower)."""
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    kernel = gemm_kernel()
    heuristic = heuristic_config(kernel)
    others = [m for m in (32, 64, 128, 256) if m != heuristic.BLOCK_M][:3]
    launched = []

    def chosen_with(times, candidates=3):
        grid = amk.tuner.validate_grid({"BLOCK_SIZE_M": [heuristic.BLOCK_M, *others][:candidates]})
        timed_before: dict = {}

        def measure(fn, warmup, runs, give_up_above=None):
            fn()
            config = launched[-1]
            timed_before[config] = timed_before.get(config, 0) + 1
            return times(config, timed_before[config] > 1)

        monkeypatch.setattr(amk.tuner, "measure", measure)
        config, _ = tune(kernel, TunerConfig(search="exhaustive"), grid, heuristic,
                         lambda config: ((lambda: launched.append(config)), (lambda: None)))
        return config

    assert chosen_with(lambda c, again: 1.0 if c == heuristic else 0.995) == heuristic
    assert chosen_with(lambda c, again: 1.0 if c == heuristic else 0.95).BLOCK_M == others[0]
    # Four candidates: the three others are the finalists (0.97 in their first pass, 0.995 side by side); the
    # heuristic's first pass, 1.0, is not compared with their 0.995.
    assert chosen_with(lambda c, again: 1.0 if c == heuristic else (0.995 if again else 0.97), 4) != heuristic


def test_fp32_tile_grids_time_the_tf32x3_winners_first_and_fp16_ones_never(monkeypatch, timings):
    """Under "highest" an fp32 tile grid times the TF32X3 priors (three TF32 products with TMA) right after the
    heuristic and the other priors that fit; an fp16 one, whose dots have no such switch, never times them."""
    from amk.lowering.configs import TF32X3_HOPPER_PRIORS

    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: H200))
    runs, build_and_run = timings
    shapes = [(4096, 4096), (4096, 4096), (4096,)]
    fp32 = tile_level_kernel(["matmul", "add_bias", "relu"], shapes, torch.float32)
    heuristic = heuristic_config(fp32)
    tune(fp32, TunerConfig(search="random", search_budget=8), None, heuristic, build_and_run, fp32_dot="ieee")
    order = [config for config, _ in runs]
    tf32x3_priors = [type(heuristic)(**(heuristic.as_dict() | prior)) for prior in TF32X3_HOPPER_PRIORS]
    # fp32's staged tiles are twice fp16's: none of the fp16 priors fits the shared memory, so the TF32X3 ones follow
    # the heuristic at once
    assert order[:1 + len(tf32x3_priors)] == [heuristic, *tf32x3_priors]
    for kernel, fp32_dot in ((fp32, "tf32"), (gemm_kernel(), "ieee")):  # TF32 dots, fp16 dots: no such switch
        runs.clear()
        tune(kernel, TunerConfig(search="random", search_budget=8), None, heuristic_config(kernel), build_and_run,
             fp32_dot=fp32_dot)
        assert runs and not any(config.TF32X3 for config, _ in runs)
