"""A ``parameter_grid`` applies to the kernels it fits: a kernel of the program that no point of the grid can serve
(a row_resident pass over a wide row, given a grid written for the GEMM) is tuned over its own default space, with
one line saying so, never left at the heuristic configuration."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import tile_level_kernel

import amk
from amk.pipeline import heuristic_config
from amk.tuner import TunerConfig, tune

GEMM_GRID = {"BLOCK_SIZE_M": [32, 64, 128], "BLOCK_SIZE_N": [64, 128], "BLOCK_SIZE_K": [64], "num_warps": [4, 8]}


def row_resident_kernel(columns: int = 8192):
    """The kernel of a residual add + RMSNorm over ``columns``-wide rows (the vendor-GEMM program's second step)."""
    kernel = tile_level_kernel(["add", "rmsnorm"], [(64, columns), (64, columns), (columns,)], torch.bfloat16)
    assert kernel.strategy.data == "row_resident"
    return kernel


@pytest.fixture
def timed(monkeypatch):
    """Every candidate 'runs' in a time that favours few rows per program."""
    launched = []
    monkeypatch.setattr(amk.tuner, "measure", lambda fn, warmup, runs, give_up_above=None: (fn(), launched[-1].BLOCK_M + 1.0)[1])
    hopper = amk.tuner.DeviceLimits("H200", 227 * 1024, 132, tma=True)
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: hopper))

    def build_and_run(config):
        return (lambda: launched.append(config)), (lambda: None)

    return build_and_run


def test_a_grid_that_fits_no_configuration_of_a_kernel_gives_way_to_its_own_space(timed, caplog):
    kernel = row_resident_kernel()
    with caplog.at_level(logging.WARNING, logger="amk"):
        best, trials = tune(kernel, TunerConfig(search="exhaustive"), amk.tuner.validate_grid(GEMM_GRID),
                            heuristic_config(kernel), timed)
    timed_trials = [t for t in trials if t.status == "ok"]
    assert timed_trials and best.BLOCK_M == 1  # searched over row_resident's space: 1 row per program is fastest
    warnings = [r.getMessage() for r in caplog.records if "parameter_grid" in r.getMessage()]
    assert len(warnings) == 1 and "fused_0" in warnings[0] and "registers" in warnings[0]


def test_a_grid_that_fits_is_searched_as_given(timed, caplog):
    kernel = row_resident_kernel(columns=256)
    grid = amk.tuner.validate_grid({"BLOCK_SIZE_M": [2, 4], "num_warps": [4]})
    with caplog.at_level(logging.WARNING, logger="amk"):
        best, trials = tune(kernel, TunerConfig(search="exhaustive"), grid, heuristic_config(kernel), timed)
    assert {t.config.BLOCK_M for t in trials if t.status == "ok"} == {2, 4} and best.BLOCK_M == 2
    assert not [r for r in caplog.records if "parameter_grid" in r.getMessage()]
