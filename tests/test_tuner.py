"""The search's batching for ahead-of-time compilation: every timed candidate was handed to ``prepare`` first."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from conftest import BIASED_SCORES, SCORES_AND_SOFTMAX

import amk
from amk.errors import InvalidArgumentError
from amk.lowering.tile import TilePass
from amk.oplist import build_module
from amk.passes.fuse import FusePass
from amk.pipeline import make_context
from amk.tuner import TunerConfig, compile_workers, config_key, tune

GRID = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [16, 32, 64], "BLOCK_K": [16, 32], "num_warps": [2, 4]}  # 36 candidates


def tiled_kernel(rows: int = 64, dtype: torch.dtype = torch.float32, width: int = 64):
    module = build_module(["matmul", "add_bias", "relu"], [(rows, width), (width, width), (width,)], dtype)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))


class Recorder:
    """A fake ``build_and_run`` and ``prepare``: records the order of both; the time is a function of the config."""

    def __init__(self):
        self.prepared: set[str] = set()
        self.batches: list[int] = []
        self.timed_unprepared: list[str] = []

    def prepare(self, configs):
        self.batches.append(len(configs))
        self.prepared.update(config_key(c) for c in configs)

    def build_and_run(self, config):
        if config_key(config) not in self.prepared:
            self.timed_unprepared.append(config_key(config))

        def launch():
            Recorder.launched = config

        return launch, (lambda: None)


@pytest.fixture
def clock(monkeypatch):
    """Candidates 'run' in a time that favours BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4."""
    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        return (abs(config.BLOCK_M - 32) + abs(config.BLOCK_N - 64) + abs(config.BLOCK_K - 32)
                + abs(config.num_warps - 4) + 1.0)

    monkeypatch.setattr(amk.tuner, "measure", measure)


@pytest.mark.parametrize("strategy,budget", [("exhaustive", 36), ("random", 10), ("bayesian", 12)])
def test_every_timed_candidate_was_prepared_first(clock, strategy, budget):
    kernel = tiled_kernel()
    recorder = Recorder()
    heuristic = amk.pipeline.heuristic_config(kernel)
    best, trials = tune(kernel, TunerConfig(search=strategy, search_budget=budget), GRID, heuristic,
                        recorder.build_and_run, prepare=recorder.prepare, batch=4)
    timed = [t for t in trials if t.status == "ok"]
    assert len(timed) == budget
    assert recorder.timed_unprepared == []
    assert sum(recorder.batches) == budget, "a candidate was prepared but never timed"
    if strategy == "bayesian":
        assert max(recorder.batches) == 4 and len(recorder.batches) >= 3
    else:
        assert recorder.batches == [budget]
    assert best == min(timed, key=lambda t: t.time_ms).config


@pytest.mark.parametrize("strategy", ["random", "bayesian"])
def test_the_heuristic_is_timed_first_when_the_space_holds_it(clock, strategy):
    """The strategy's default configuration (the measured best of its kind) is never left to chance; the rest of
    the budget is searched as before."""
    kernel = tiled_kernel()
    heuristic = amk.tuner.KernelConfig(BLOCK_M=64, BLOCK_N=16, BLOCK_K=16, num_warps=2)
    recorder = Recorder()
    _, trials = tune(kernel, TunerConfig(search=strategy, search_budget=6), GRID, heuristic,
                     recorder.build_and_run, prepare=recorder.prepare)
    timed = [t.config for t in trials if t.status == "ok"]
    assert timed[0] == heuristic and len(timed) == 6 and timed.count(heuristic) == 1
    outside = amk.tuner.KernelConfig(BLOCK_M=128, BLOCK_N=16, BLOCK_K=16, num_warps=2)  # not a point of GRID
    _, trials = tune(kernel, TunerConfig(search=strategy, search_budget=6), GRID, outside,
                     recorder.build_and_run, prepare=recorder.prepare)
    assert outside not in [t.config for t in trials]


def test_a_block_k_wider_than_the_contraction_is_pruned():
    """K = 64: BLOCK_K 128 would multiply padding; with a K of 48, BLOCK_K 64 covers it in one step and stays."""
    from amk.symbolic import Dim
    from amk.tuner import DeviceLimits, prune_reason

    limits = DeviceLimits("H200", 1 << 20, 132)
    wide = amk.tuner.KernelConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128)
    assert "wider than K = 64" in prune_reason(wide, "tile2d", True, 2, limits, contraction=Dim(64))
    assert prune_reason(wide, "tile2d", True, 2, limits, contraction=Dim(128)) is None
    assert prune_reason(amk.tuner.KernelConfig(BLOCK_K=64), "tile2d", True, 2, limits, contraction=Dim(48)) is None
    assert prune_reason(wide, "tile2d", True, 2, limits, contraction=Dim("K")) is None  # symbolic: not known


def test_column_tiles_hold_whole_groups_of_a_rotation_in_registers(clock):
    """A projection whose heads (groups of 128 columns) are rotated in its epilogue: the heuristic's BLOCK_N is
    raised to a whole group, the search times no BLOCK_N that splits one (the clock favours 64, which does), and
    staging a configuration that splits one says so."""
    from amk.lowering.stage import rotation_group
    from amk.pipeline import stage_and_emit

    module = build_module(["matmul", ("rotate_half", {"group": 128})], [(64, 256), (256, 512)], torch.float16)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    assert rotation_group(kernel) == 128
    heuristic = amk.pipeline.heuristic_config(kernel)
    assert heuristic.BLOCK_N % 128 == 0
    grid = GRID | {"BLOCK_N": [32, 64, 128, 256]}
    _, trials = tune(kernel, TunerConfig(search="exhaustive", search_budget=72), grid, heuristic,
                     Recorder().build_and_run)
    timed = [t.config for t in trials if t.status == "ok"]
    assert timed and all(config.BLOCK_N in (128, 256) for config in timed)
    with pytest.raises(Exception, match="BLOCK_N must be a multiple of 128"):
        stage_and_emit(kernel, dataclasses.replace(heuristic, BLOCK_N=64))


def test_row_resident_searches_rows_and_warps_with_the_whole_row_as_its_tile():
    """No BLOCK_N: the column tile is the row (4096 columns here), which is what the register bound counts."""
    from amk.symbolic import Dim
    from amk.tuner import DeviceLimits, default_space, prune_reason

    space = default_space("row_resident", Dim(64), has_dot=False)
    assert "BLOCK_N" not in space and set(space) == {"BLOCK_M", "num_warps", "num_stages"}
    limits = DeviceLimits("H200", 1 << 20, 132)
    fits = amk.tuner.KernelConfig(BLOCK_M=2, num_warps=4)  # 2 x 4096 / 128 threads = 64 values each
    spills = amk.tuner.KernelConfig(BLOCK_M=16, num_warps=4)  # 512 values each
    assert prune_reason(fits, "row_resident", False, 2, limits, cols=Dim(4096)) is None
    assert "registers" in prune_reason(spills, "row_resident", False, 2, limits, cols=Dim(4096))


def test_a_kernel_without_a_matmul_searches_half_the_budget(clock):
    """A row pass is memory-bound: its candidates lie close together, and half the budget finds its fastest."""
    module = build_module(["add_bias", "layernorm"], [(4096, 1024), (1024,), (1024,), (1024,)], torch.float32)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    row_pass = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    for kernel, searched in ((row_pass, 8), (tiled_kernel(), 16)):
        recorder = Recorder()
        tune(kernel, TunerConfig(search="random", search_budget=16), None, amk.pipeline.heuristic_config(kernel),
             recorder.build_and_run, prepare=recorder.prepare)
        assert recorder.batches[0] == searched  # the search's candidates, handed to the compiler at once


@pytest.mark.parametrize(("wanted", "batch", "sizes"), [
    (16, 15, [16]),  # the H200 host's 15 workers and the default budget: one round, not a second for one candidate
    (16, 2, [2] * 8), (24, 15, [15, 9]), (13, 4, [4, 4, 5]), (5, 15, [5]), (0, 4, []),
])
def test_a_last_round_of_under_half_a_batch_joins_the_one_before(wanted, batch, sizes):
    assert amk.tuner.batch_sizes(wanted, batch) == sizes


def test_the_default_budget_compiles_in_one_round_on_fifteen_workers(clock):
    kernel = tiled_kernel()
    recorder = Recorder()
    tune(kernel, TunerConfig(search="bayesian", search_budget=16), GRID, amk.pipeline.heuristic_config(kernel),
         recorder.build_and_run, prepare=recorder.prepare, batch=15)
    assert recorder.batches == [16] and recorder.timed_unprepared == []


def test_a_search_of_one_round_draws_its_candidates_without_optuna(clock, monkeypatch):
    """Nothing is timed before the last candidate of a single round is drawn: a model would learn nothing, and its
    sampling cost most of a kernel's search on the CPU. Each parameter is drawn on its own, seeds first."""
    import optuna

    monkeypatch.setattr(optuna, "create_study", lambda **kwargs: pytest.fail("a one-round search asked optuna"))
    kernel = tiled_kernel()
    heuristic = amk.tuner.KernelConfig(BLOCK_M=64, BLOCK_N=16, BLOCK_K=16, num_warps=2)  # a point of GRID
    recorder = Recorder()
    _, trials = tune(kernel, TunerConfig(search="bayesian", search_budget=16), GRID, heuristic,
                     recorder.build_and_run, prepare=recorder.prepare, batch=15)
    timed = [t.config for t in trials if t.status == "ok"]
    assert recorder.batches[0] == 16 and timed[0] == heuristic and len(set(timed)) == 16
    for key, values in GRID.items():  # 16 draws of 36 configurations: every value of every parameter is met
        assert {getattr(config, key) for config in timed} == set(values), key
    again = Recorder()
    tune(kernel, TunerConfig(search="bayesian", search_budget=16), GRID, heuristic, again.build_and_run,
         prepare=again.prepare, batch=15)
    assert again.prepared == recorder.prepared, "a build's candidates depend on nothing but its space"


def test_independent_draws_fill_a_space_they_rarely_hit():
    """4 viable configurations among 256 combinations of the parameters' values: the 80 draws hit about one, the
    rest of the pick is filled from the viable ones."""
    sizes = (16, 32, 64, 128)
    configs = [amk.tuner.KernelConfig(BLOCK_M=s, BLOCK_N=s, BLOCK_K=s, GROUP_M=s) for s in sizes]
    picked = amk.tuner._independent_picks(configs, 4, keep_first=1)
    assert picked[0] == configs[0] and sorted(picked, key=lambda c: c.BLOCK_M) == configs
    assert sorted(amk.tuner._independent_picks(configs, 10), key=lambda c: c.BLOCK_M) == configs


def test_batched_bayesian_search_still_finds_the_best_of_a_smooth_space(clock):
    kernel = tiled_kernel()
    recorder = Recorder()
    heuristic = amk.pipeline.heuristic_config(kernel)
    best, _ = tune(kernel, TunerConfig(search="bayesian", search_budget=18), GRID, heuristic,
                   recorder.build_and_run, prepare=recorder.prepare, batch=6)
    assert (best.BLOCK_M, best.BLOCK_N, best.BLOCK_K, best.num_warps) == (32, 64, 32, 4)


def test_compile_workers_setting(monkeypatch):
    monkeypatch.setenv("AMK_COMPILE_WORKERS", "3")
    assert compile_workers() == 3
    monkeypatch.setenv("AMK_COMPILE_WORKERS", "0")
    assert compile_workers() == 0
    monkeypatch.setenv("AMK_COMPILE_WORKERS", "many")
    with pytest.raises(InvalidArgumentError, match="AMK_COMPILE_WORKERS"):
        compile_workers()
    monkeypatch.delenv("AMK_COMPILE_WORKERS")
    assert compile_workers() == max(0, min(16, (os.cpu_count() or 1) - 1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiling without launching needs a CUDA device")
def test_parallel_compilation_fills_tritons_cache(tmp_path, monkeypatch):
    """Worker processes compile each job into Triton's on-disk cache (one binary per job), without launching."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    from amk.compile_worker import CompileWorkers
    from amk.pipeline import stage_and_emit
    from amk.tuner import compile_job

    kernel = tiled_kernel()
    configs = [amk.pipeline.heuristic_config(kernel)]
    configs.append(type(configs[0])(**(configs[0].as_dict() | {"num_warps": 8})))
    jobs = [compile_job(kernel, config, stage_and_emit(kernel, config).source) for config in configs]
    compiler = CompileWorkers(2)
    try:
        assert compiler.compile(jobs) == [None, None]
    finally:
        compiler.close()
    assert len([p for p in tmp_path.rglob("*.cubin")]) == 2


def tune_timed_twice(monkeypatch, first_time: dict[int, float], later_time: dict[int, float]):
    """``tune`` over BLOCK_M in ``first_time``'s keys, each candidate taking ``first_time[BLOCK_M]`` the first time it is
    measured (the search) and ``later_time[BLOCK_M]`` every time after (the finalists' rounds): the best config and the
    trials."""
    kernel = tiled_kernel()
    recorder = Recorder()
    seen: set = set()

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        key = config_key(config)
        value = (later_time if key in seen else first_time)[config.BLOCK_M]
        seen.add(key)
        return value

    monkeypatch.setattr(amk.tuner, "measure", measure)
    grid = {"BLOCK_M": list(first_time), "BLOCK_N": [32], "BLOCK_K": [32]}
    heuristic = amk.pipeline.heuristic_config(kernel)
    return tune(kernel, TunerConfig(search="exhaustive"), grid, heuristic, recorder.build_and_run,
                prepare=recorder.prepare)


def test_finalists_are_timed_again_and_the_interleaved_median_decides(monkeypatch):
    """A candidate that looked fastest once (a noisy first measurement) loses to the one that is fastest when the
    finalists are timed against each other."""
    best, trials = tune_timed_twice(monkeypatch, first_time={16: 1.0, 32: 2.0, 64: 3.0},
                                    later_time={16: 2.5, 32: 2.0, 64: 3.0})
    assert best.BLOCK_M == 32
    finalists = [t for t in trials if t.detail.startswith("finalist")]
    assert len(finalists) == 3 and {t.time_ms for t in finalists} == {2.5, 2.0, 3.0}


def test_a_candidate_timed_once_does_not_beat_the_finalists_retimed_on_a_hotter_gpu(monkeypatch):
    """The finalists' medians are taken after the search, when the GPU runs slower: the fourth candidate of the
    search, timed once in cooler conditions, is no finalist and must not win on that single time (B on the H200:
    3.24 ms once, then 3.50 in the benchmark against the finalist's 3.34)."""
    best, trials = tune_timed_twice(monkeypatch, first_time={16: 1.0, 32: 1.1, 64: 1.2, 128: 1.3},  # 4th: 128
                                    later_time={16: 2.1, 32: 2.0, 64: 2.2, 128: 2.5})  # timed again, later
    assert {t.config.BLOCK_M for t in trials if t.detail.startswith("finalist")} == {16, 32, 64}
    assert best.BLOCK_M == 32


def test_a_reused_time_below_every_finalists_first_time_still_wins():
    """A trial reused from the timings cache is not re-timed; it wins where it beat the finalists as they were first
    timed, and loses where only their re-timed medians are slower."""
    def trial(block_m: int, time_ms: float, reused: bool = False) -> amk.tuner.Trial:
        config = amk.pipeline.heuristic_config(tiled_kernel())
        return amk.tuner.Trial(dataclasses.replace(config, BLOCK_M=block_m), "ok", time_ms, reused=reused)

    finalists = [trial(16, 2.1), trial(32, 2.0)]
    retimed = {id(finalists[0]): 1.0, id(finalists[1]): 1.1}
    fast_reused, slow_reused = trial(64, 0.9, reused=True), trial(64, 1.05, reused=True)
    assert amk.tuner._chosen([*finalists, fast_reused], retimed) is fast_reused
    assert amk.tuner._chosen([*finalists, slow_reused], retimed) is finalists[1]
    assert amk.tuner._chosen([*finalists, slow_reused], {}) is slow_reused  # no final round: the fastest


def test_switches_refine_the_finalists_instead_of_multiplying_the_search(monkeypatch):
    """PERSISTENT and TMA are not searched: the search holds them at their first value, then every setting of them
    is timed on the three fastest configurations, where the fastest variant wins."""
    hopper = amk.tuner.DeviceLimits("H200", 1 << 20, 132, tma=True)
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: hopper))

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        return (abs(config.BLOCK_M - 32) + 2 * abs(config.BLOCK_N - 64) + 1.0 - 0.5 * config.PERSISTENT
                - 0.25 * config.TMA)

    monkeypatch.setattr(amk.tuner, "measure", measure)
    kernel = tiled_kernel(rows=1024)
    assert kernel.strategy.data == "tile2d"
    recorder = Recorder()
    grid = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32], "PERSISTENT": [0, 1], "TMA": [0, 1]}
    best, trials = tune(kernel, TunerConfig(search="exhaustive"), grid, amk.pipeline.heuristic_config(kernel),
                        recorder.build_and_run, prepare=recorder.prepare)
    timed = [t.config for t in trials if t.status == "ok"]
    base = [c for c in timed if not (c.PERSISTENT or c.TMA)]
    assert len(base) == 6 and recorder.timed_unprepared == []
    variants = [c for c in timed if c.PERSISTENT or c.TMA]
    assert len(variants) == 3 * 3 and {(c.BLOCK_M, c.BLOCK_N) for c in variants} == {(32, 64), (16, 64), (64, 64)}
    assert (best.BLOCK_M, best.BLOCK_N, best.PERSISTENT, best.TMA) == (32, 64, 1, 1)


@pytest.mark.parametrize(("beaten_at_ms", "refined"), [(None, True), (1.0, True), (0.8, False)])
def test_a_kernel_that_cannot_beat_the_other_program_is_not_refined(monkeypatch, beaten_at_ms, refined):
    """Given the time of the build's other program (the vendor GEMM's), a kernel whose search leaves it more than
    OUTRUN_MARGIN slower is not refined: no switch variants timed, no finalists re-timed; the search's best stands.
    Within the margin (1.0 ms against 1.0) refinement goes on, as without another program."""
    hopper = amk.tuner.DeviceLimits("H200", 1 << 20, 132, tma=True)
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: hopper))

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        return abs(config.BLOCK_M - 32) + 1.0 - 0.5 * config.PERSISTENT - 0.25 * config.TMA

    monkeypatch.setattr(amk.tuner, "measure", measure)
    kernel = tiled_kernel(rows=1024)
    recorder = Recorder()
    grid = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [64], "BLOCK_K": [32], "PERSISTENT": [0, 1], "TMA": [0, 1]}
    best, trials = tune(kernel, TunerConfig(search="exhaustive"), grid, amk.pipeline.heuristic_config(kernel),
                        recorder.build_and_run, prepare=recorder.prepare, beaten_at_ms=beaten_at_ms)
    switched = [t for t in trials if t.config.PERSISTENT or t.config.TMA]
    finalists = [t for t in trials if t.detail.startswith("finalist")]
    assert bool(switched) == refined and bool(finalists) == refined
    assert (best.BLOCK_M, best.PERSISTENT, best.TMA) == ((32, 1, 1) if refined else (32, 0, 0))


def two_kernels_tuned_in_steps(monkeypatch, fastest: dict[str, float]):
    """Two kernels of one program (``fused_0``, ``fused_1``) and a fake ``tune_in_steps`` whose search finds
    ``fastest[name]``: the ``beaten_at_ms`` each kernel's refinement was sent, by name, in the order sent."""
    from xdsl.dialects.builtin import StringAttr

    from amk.compile_worker import CompileWorkers
    from amk.tuner import Trial

    monkeypatch.setattr(amk.tuner, "start_compile_workers", lambda: CompileWorkers(0))
    sent: dict[str, float] = {}

    def tune_in_steps(kernel, settings, grid, heuristic, *rest, **options):
        name = kernel.sym_name.data
        trials = [Trial(heuristic, "ok", fastest[name] + 0.01), Trial(heuristic, "failed"),
                  Trial(heuristic, "ok", fastest[name])]
        sent[name] = yield fastest[name]
        return heuristic, trials

    monkeypatch.setattr(amk.tuner, "tune_in_steps", tune_in_steps)
    first = tiled_kernel()
    second = first.clone()
    second.sym_name = StringAttr("fused_1")
    return first, second, sent


def test_each_kernel_is_refined_against_what_the_kernels_searched_before_it_leave_of_the_other_program(monkeypatch):
    """The build's other program (0.1 ms) must be beaten by this program's kernels together: chosen one after the
    other, the second kernel is refined against what the first one's fastest time (0.06 ms) leaves of it, the margin
    kept for the whole program (its refinement is skipped above 0.1 x OUTRUN_MARGIN - 0.06 ms)."""
    from amk.tuner import OUTRUN_MARGIN, Trial

    first, second, sent = two_kernels_tuned_in_steps(monkeypatch, {"fused_0": 0.06, "fused_1": 0.03})
    choose = amk.tuner.autotune_chooser(TunerConfig(), None, beaten_at_ms=0.1)
    choose(first), choose(second)
    assert list(sent) == ["fused_0", "fused_1"] and sent["fused_0"] == pytest.approx(0.1)
    assert sent["fused_1"] * OUTRUN_MARGIN == pytest.approx(0.1 * OUTRUN_MARGIN - 0.06)
    assert amk.tuner._outrun([Trial(None, "ok", 0.1 * OUTRUN_MARGIN - 0.06 + 1e-6)], sent["fused_1"])
    assert not amk.tuner._outrun([Trial(None, "ok", 0.1 * OUTRUN_MARGIN - 0.06 - 1e-6)], sent["fused_1"])


def test_kernels_all_searched_first_are_each_refined_against_the_whole_program(monkeypatch):
    """compile_module searches every kernel of the program before it chooses any: the first kernel's refinement then
    counts the second's search too (on the H200, BERT's GEMM + GELU kernel was refined for 2.0 s because the GEMM +
    LayerNorm kernel's time, which put their program out of the race, was not known yet)."""
    from amk.tuner import OUTRUN_MARGIN

    first, second, sent = two_kernels_tuned_in_steps(monkeypatch, {"fused_0": 0.0521, "fused_1": 0.0627})
    choose = amk.tuner.autotune_chooser(TunerConfig(), None, beaten_at_ms=0.0935)
    choose.search(first), choose.search(second)
    assert sent == {}, "a kernel was refined before every kernel was searched"
    choose(first), choose(second)
    assert sent["fused_0"] * OUTRUN_MARGIN == pytest.approx(0.0935 * OUTRUN_MARGIN - 0.0627)
    assert sent["fused_1"] * OUTRUN_MARGIN == pytest.approx(0.0935 * OUTRUN_MARGIN - 0.0521)


def test_compile_module_searches_every_kernel_before_it_chooses_any():
    """A chooser with a ``search`` step (the tuner's) has every kernel of the program searched before the first is
    chosen; a plain chooser is called once per kernel, as before."""
    from amk.oplist import normalize_ops
    from amk.pipeline import compile_module, heuristic_config

    events = []

    def choose(kernel):
        events.append(("choose", kernel.sym_name.data))
        return heuristic_config(kernel)

    choose.search = lambda kernel: events.append(("search", kernel.sym_name.data))
    ops, shapes = ["rmsnorm", "matmul", "add"], [(37, 100), (100,), (100, 75), (37, 75)]
    compile_module(build_module(normalize_ops(ops), shapes, torch.float16), choose, vendor_gemm=True)
    assert events == [("search", "fused_0"), ("search", "fused_1"), ("choose", "fused_0"), ("choose", "fused_1")]


def test_the_first_round_compiled_ahead_is_the_first_round_the_tuning_times(monkeypatch, clock):
    """first_round_chooser hands the workers the candidates that tune() prepares first, drawn the same way (the
    default search: one round of 16 on 15 workers), times none and returns the heuristic at once."""
    from amk.compile_worker import CompileWorkers

    hopper = amk.tuner.DeviceLimits("H200", 232448, 132, tma=True)
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: hopper))
    monkeypatch.setattr(amk.tuner, "start_compile_workers", lambda: CompileWorkers(15))  # never started: no job
    handed: list = []
    monkeypatch.setattr(amk.tuner._CandidateCompiles, "prepare", lambda self, configs: handed.append(list(configs)))
    kernel = tiled_kernel(rows=4096, dtype=torch.float16, width=1024)
    heuristic = amk.pipeline.heuristic_config(kernel)
    assert amk.tuner.first_round_chooser(TunerConfig(), None)(kernel) == heuristic
    assert len(handed) == 1 and len(handed[0]) == 16

    recorder, tuned_rounds = Recorder(), []

    def prepare(configs):
        tuned_rounds.append(list(configs))
        recorder.prepare(configs)

    tune(kernel, TunerConfig(), None, heuristic, recorder.build_and_run, prepare=prepare, batch=15)
    assert tuned_rounds[0] == handed[0]


def test_a_candidate_is_emitted_once_for_the_first_round_ahead_and_for_its_tuning(monkeypatch):
    """The build emits a kernel's first round when it hands it to the workers ahead, then tunes the same kernel passed
    again (another copy of its module): the candidates' sources are not emitted a second time."""
    monkeypatch.setattr(amk.tuner, "_EMITTED", {})  # nothing emitted by earlier tests
    emitted = []
    emit = amk.pipeline.stage_and_emit
    monkeypatch.setattr(amk.pipeline, "stage_and_emit", lambda *args: emitted.append(args[1]) or emit(*args))
    kernel = tiled_kernel(rows=512)
    config = amk.pipeline.heuristic_config(kernel)
    ahead = amk.tuner._CandidateCompiles(kernel, "ieee", {}, None).source(config)
    again = amk.tuner._CandidateCompiles(kernel.clone(), "ieee", {}, None).source(config)
    assert again == ahead and emitted == [config]
    amk.tuner._CandidateCompiles(kernel, "tf32", {}, None).source(config)  # another dot precision: another source
    assert len(emitted) == 2


def test_switch_values_are_checked():
    from amk.tuner import validate_grid

    assert validate_grid({"PERSISTENT": [0, 1], "TMA": 1}) == {"PERSISTENT": [0, 1], "TMA": [1]}
    with pytest.raises(InvalidArgumentError, match="0 and/or 1"):
        validate_grid({"TMA": [2]})


HOPPER = amk.tuner.DeviceLimits("H200", 232448, 132, tma=True, gluon=True)
B_GLUON = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1, TMA=1, GLUON=1)


def test_gluon_is_searched_for_tile2d_gemms_where_its_kernels_run():
    from amk.symbolic import Dim
    from amk.tuner import default_space

    assert default_space("tile2d", Dim(4096), True, HOPPER)["GLUON"] == [0, 1]
    assert default_space("chunk_recompute", Dim(4096), True, HOPPER, contraction=Dim(128))["GLUON"] == [0, 1]
    for strategy, limits in [("tile_stats", HOPPER), ("tile2d", amk.tuner.DeviceLimits("B200", 232448, 148, tma=True)),
                             ("tile2d", None), ("chunk_recompute", None)]:
        assert "GLUON" not in default_space(strategy, Dim(4096), True, limits), strategy


@pytest.mark.parametrize(("change", "strategy", "element_bytes", "limits", "reason"), [
    ({}, "tile2d", 2, HOPPER, None),
    ({"PERSISTENT": 0}, "tile2d", 2, HOPPER, "persistent TMA kernels"),
    ({"TMA": 0}, "tile2d", 2, HOPPER, "persistent TMA kernels"),
    ({"WARP_SPECIALIZE": 1}, "tile2d", 2, HOPPER, "warp-specialized by construction"),
    ({}, "tile2d", 4, HOPPER, "fp16 or bf16"),
    ({"num_stages": 4}, "tile2d", 2, HOPPER, None),  # the output tile staged in pieces of 64 columns
    ({"num_stages": 5}, "tile2d", 2, HOPPER, "245760 bytes leave too little of 232448"),
    ({"BLOCK_M": 64}, "tile2d", 2, HOPPER, "cannot be split between 8 warps"),
    ({}, "tile_stats", 2, HOPPER, "GEMM kernels of tile2d, chunk_recompute on Hopper"),
    ({}, "tile2d", 2, amk.tuner.DeviceLimits("B200", 232448, 148, tma=True), "not to this tile2d kernel on B200"),
])
def test_gluon_candidates_the_emitter_cannot_take_are_pruned(change, strategy, element_bytes, limits, reason):
    from amk.tuner import KernelConfig, prune_reason

    got = prune_reason(KernelConfig(**B_GLUON | change), strategy, True, element_bytes, limits)
    assert got is None if reason is None else reason in got


# chunk_recompute's Gluon form (a column sweep) at G's best by hand: two consumer warpgroups of 64 rows
SWEEP_GLUON = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, SPLIT_N=2, num_warps=4, num_stages=3, GLUON=1)


@pytest.mark.parametrize(("change", "contraction", "reason"), [
    ({}, 128, None),
    ({"BLOCK_M": 64}, 128, None),  # one consumer
    # four consumers, each two 64 x 64 products in flight (2 stages: the tuner's general check counts an lhs tile
    # per stage)
    ({"BLOCK_M": 256, "BLOCK_N": 64, "num_stages": 2}, 128, None),
    ({"BLOCK_M": 256, "num_stages": 2}, 128, "at most 64 fp32 registers a thread"),  # 64 x 128 products spill
    ({"BLOCK_N": 256}, 128, "at most 128 fp32 registers a thread"),
    ({"num_warps": 8}, 128, "each consumer warpgroup (num_warps = 4) 64 rows"),
    ({"BLOCK_M": 96}, 128, "each consumer warpgroup (num_warps = 4) 64 rows"),
    ({"PERSISTENT": 1, "TMA": 1}, 128, "PERSISTENT and TMA apply to the tile-grid strategies"),
    ({"WARP_SPECIALIZE": 1}, 128, "WARP_SPECIALIZE applies to the tile loop of a persistent TMA kernel"),
    ({"num_stages": 1}, 128, "num_stages is 1"),
    ({}, None, "the whole K once"),  # a symbolic K is no single tile
    ({"num_stages": 8}, 256, "shared memory"),  # 256 x 128 rhs tiles: 8 stages are 512 KB
])
def test_gluon_column_sweeps_the_emitter_cannot_take_are_pruned(change, contraction, reason):
    """chunk_recompute's Gluon kernels are column sweeps: a program per row strip and chunk (not persistent), 4-warp
    consumer warpgroups of 64 rows, two products in flight within each consumer's registers, the whole K one tile,
    and the lhs tiles, the ring and the staging tiles in shared memory."""
    from amk.symbolic import Dim
    from amk.tuner import KernelConfig, prune_reason

    config = KernelConfig(**SWEEP_GLUON | change)
    got = prune_reason(config, "chunk_recompute", True, 2, HOPPER, Dim(8192),
                       Dim(contraction) if contraction else Dim("K"))
    assert got is None if reason is None else reason in got, got


@pytest.mark.parametrize(("tiles", "pruned"), [
    ({"BLOCK_M": 128, "BLOCK_N": 256, "num_stages": 3}, True),  # 245,760 bytes: failed at launch on the H100
    ({"BLOCK_M": 128, "BLOCK_N": 256, "num_stages": 2}, False),  # 212,992
    ({"BLOCK_M": 64, "BLOCK_N": 256, "num_stages": 3}, False),  # ran in every attention row's search
    ({"BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 3}, False),  # attention's prior
])
def test_chunk_recompute_counts_its_fp32_products_in_shared_memory(tiles, pruned):
    """chunk_recompute's Triton kernel holds the A tile over the whole K, its ring of B column tiles and a column
    tile's fp32 product in shared memory at once: attention's q @ k^T (K = 64, fp16) at 128 x 256 tiles and three
    stages needs more than Hopper's 232,448 bytes, though its lhs and rhs tiles alone would fit."""
    from amk.symbolic import Dim
    from amk.tuner import KernelConfig, prune_reason

    config = KernelConfig(BLOCK_K=64, SPLIT_N=4, num_warps=8, **tiles)
    got = prune_reason(config, "chunk_recompute", True, 2, HOPPER, Dim(512), Dim(64))
    assert (got is not None and "shared memory" in got) if pruned else got is None, got
    assert prune_reason(config, "tile_stats", True, 2, HOPPER, Dim(512), Dim(64)) is None  # its ring alone counts
    # The A tile and the ring span the whole K, whatever BLOCK_K says: at K = 256, 64 x 64 tiles and two stages
    # need 32,768 + 65,536 + 16,384 bytes, where BLOCK_K = 64 would count a quarter of the first two.
    wide = prune_reason(KernelConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, num_stages=2), "chunk_recompute", True, 2,
                        amk.tuner.DeviceLimits("small", 100_000, 132), Dim(512), Dim(256))
    assert wide is not None and "114688 bytes" in wide, wide


TRANSPOSED_LHS = """
func.func @xt_w(%x : !tensor_op.tensor<[4096, 65536], f16>, %w : !tensor_op.tensor<[4096, 4096], f16>) -> !tensor_op.tensor<[65536, 4096], f16> {
  %0 = tensor_op.matmul %x, %w {transpose_lhs = true} : (!tensor_op.tensor<[4096, 65536], f16>, !tensor_op.tensor<[4096, 4096], f16>) -> !tensor_op.tensor<[65536, 4096], f16>
  func.return %0 : !tensor_op.tensor<[65536, 4096], f16>
}
"""


def parse_module(text: str):
    from xdsl.parser import Parser

    return Parser(make_context(), text).parse_module()


def test_gluon_is_offered_for_transposed_weights_but_not_a_transposed_lhs_or_small_gemms():
    """nn.Linear's weight, read transposed, is loaded as tiles of its own rows (a K-major B for wgmma); a transposed
    lhs is not taken, nor a GEMM under its strategy's gluon_min_macs multiply-adds; the output tile is staged at the output's size,
    whole or in pieces."""
    from amk.lowering.tile import TilePass
    from amk.symbolic import Dim
    from amk.tuner import KernelConfig, gluon_fit, prune_reason

    def fit(ops, shapes):
        module = build_module(ops, shapes, torch.float16) if isinstance(ops, list) else parse_module(ops)
        FusePass().apply(make_context(), module)
        TilePass().apply(make_context(), module)
        kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
        (m, k), n = shapes[0], shapes[-1][0]
        return gluon_fit(kernel, Dim(m), Dim(n), Dim(k))

    big = [(1 << 16, 4096), (4096, 4096), (4096,)]
    assert fit(["matmul", "add_bias", "relu"], big) == amk.tuner.GluonFit(None, 2, 2)
    linear = fit([("matmul", {"transpose_b": True}), "relu"], [(1 << 16, 4096), (4096, 4096)])
    assert linear == amk.tuner.GluonFit(None, 2, 2)
    transposed_lhs = fit(TRANSPOSED_LHS, [(1 << 16, 4096), (4096,)])
    assert "transposed" in transposed_lhs.refusal
    small = fit(["matmul", "add_bias", "relu"], [(512, 4096), (4096, 4096), (4096,)])
    assert "too small" in small.refusal
    config = KernelConfig(**B_GLUON)
    assert prune_reason(config, "tile2d", True, 2, HOPPER, gluon=linear) is None
    assert "transposed" in prune_reason(config, "tile2d", True, 2, HOPPER, gluon=transposed_lhs)
    # An fp32 output tile does not fit whole beside 3 stages (147456 + 131072 bytes > 232448), but in pieces of 64
    # columns through two buffers (+ 65536); 4 stages leave too little even for those.
    fp32_output = amk.tuner.GluonFit(None, 2, 4)
    assert prune_reason(config, "tile2d", True, 2, HOPPER, gluon=fp32_output) is None
    four_stages = KernelConfig(**{**B_GLUON, "num_stages": 4})
    assert "196608 bytes leave too little of 232448" in prune_reason(four_stages, "tile2d", True, 2, HOPPER,
                                                                     gluon=fp32_output)
    # B's fp16 tile at 4 stages: 196608 bytes of ring + 2 x 16384 of staging pieces fit
    assert prune_reason(four_stages, "tile2d", True, 2, HOPPER, gluon=amk.tuner.GluonFit(None, 2, 2)) is None


def test_a_gluon_variant_is_timed_on_the_finalists_and_kept_when_faster(monkeypatch):
    """On Hopper the B prior (a Gluon kernel) is timed right after the heuristic, GLUON refines the finalists like the
    other switches, and the chosen configuration stages and emits as Gluon."""
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: HOPPER))

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        return 2.0 - config.PERSISTENT * config.TMA * (0.5 + config.GLUON) + config.BLOCK_M / 1024

    monkeypatch.setattr(amk.tuner, "measure", measure)
    kernel = tiled_kernel(rows=1 << 16, dtype=torch.float16, width=1024)
    recorder = Recorder()
    best, trials = tune(kernel, TunerConfig(search_budget=8), None, amk.pipeline.heuristic_config(kernel),
                        recorder.build_and_run, prepare=recorder.prepare)
    ran = [t.config for t in trials if t.status == "ok"]
    assert ran[1] == amk.tuner.KernelConfig(**{**amk.pipeline.heuristic_config(kernel).as_dict(), **B_GLUON})
    # the fastest here: a Gluon variant with the fewest rows (64 x 256, 5 stages, its output tile stored in pieces)
    assert (best.GLUON, best.BLOCK_M) == (1, 64) and recorder.timed_unprepared == []
    assert any(t.status == "pruned" and "GLUON" in t.detail for t in trials)
    source = amk.pipeline.stage_and_emit(kernel, best).source
    assert "gl.warp_specialize(" in source and "def launch(x, w, bias, out0):" in source


SCORES = """func.func @scores(%q : !tensor_op.tensor<[{batch}8192, 128], f16>, %k : !tensor_op.tensor<[{batch}{k}], f16>)
    -> !tensor_op.tensor<[{batch}8192, 8192], f16> {{
  %0 = tensor_op.matmul %q, %k{transpose} : (!tensor_op.tensor<[{batch}8192, 128], f16>, !tensor_op.tensor<[{batch}{k}], f16>)
    -> !tensor_op.tensor<[{batch}8192, 8192], f16>
  %1 = tensor_op.softmax %0 {{axis = -1 : i64}} : !tensor_op.tensor<[{batch}8192, 8192], f16>
  func.return %1 : !tensor_op.tensor<[{batch}8192, 8192], f16>
}}"""


@pytest.mark.parametrize("batched", [False, True])
def test_chunk_recompute_times_its_gluon_column_sweep_on_hopper(monkeypatch, batched):
    """G's chain (and attention's batched q @ k^T, keys read transposed): on Hopper the tuner times the Gluon prior
    (G's best form by hand) right after the heuristic, refines the finalists with GLUON, and the chosen column sweep
    stages and emits as Gluon."""
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current", staticmethod(lambda: HOPPER))

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        return 2.0 - Recorder.launched.GLUON + Recorder.launched.BLOCK_N / 1024

    monkeypatch.setattr(amk.tuner, "measure", measure)
    text = SCORES.format(batch="B, H, " if batched else "", k="8192, 128" if batched else "128, 8192",
                         transpose=" {transpose_rhs = true}" if batched else "")
    module = parse_module(text)
    FusePass().apply(make_context(), module)
    TilePass().apply(make_context(), module)
    kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    assert kernel.strategy.data == "chunk_recompute" and kernel.batched == batched
    recorder = Recorder()
    hints = {"B": 2, "H": 4} if batched else None
    best, trials = tune(kernel, TunerConfig(search_budget=8), None, amk.pipeline.heuristic_config(kernel, hints),
                        recorder.build_and_run, prepare=recorder.prepare, size_hints=hints)
    ran = [t.config for t in trials if t.status == "ok"]
    assert ran[2] == amk.tuner.KernelConfig(**{**amk.pipeline.heuristic_config(kernel, hints).as_dict(),
                                               **SWEEP_GLUON})
    assert best.GLUON == 1 and best.BLOCK_N <= 128 and best.num_warps == 4, best
    # finalists the column sweep cannot take (8 warps, 256 columns) are pruned, saying why
    assert any(t.status == "pruned" and t.config.GLUON and "consumer" in t.detail for t in trials)
    source = amk.pipeline.stage_and_emit(kernel, best).source
    assert source.count("gl.warp_specialize([") == 2 and "def launch(q, k, out0, partial0, partial1):" in source


def test_gluon_fit_of_column_sweeps():
    """A column sweep's fit: its output tile staged at the output's size (the fp32 workspace of statistics is no
    output), no Gluon kernel where a launch has no column loop (a logsumexp's finishing launch only merges the
    chunks' statistics), nor below chunk_recompute's 2^32 multiply-adds (G2's 4096 x 4096 x 64 ran slower)."""
    from amk.symbolic import Dim
    from amk.tuner import gluon_fit

    def fit(reduction: str, result: str, sizes=(8192, 8192, 128)):
        text = SCORES.format(batch="", k="128, 8192", transpose="").replace(
            "%1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[8192, 8192], f16>", reduction)
        module = parse_module(text.replace("func.return %1 : !tensor_op.tensor<[8192, 8192], f16>", result)
                              .replace("-> !tensor_op.tensor<[8192, 8192], f16> {", result.split(" : ")[1].join(
                                  ("-> ", " {"))))
        FusePass().apply(make_context(), module)
        TilePass().apply(make_context(), module)
        kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
        assert kernel.strategy.data == "chunk_recompute"
        return gluon_fit(kernel, *map(Dim, sizes))

    softmax = fit("%1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[8192, 8192], f16>",
                  "func.return %1 : !tensor_op.tensor<[8192, 8192], f16>")
    assert softmax == amk.tuner.GluonFit(None, 2, 2)
    small = fit("%1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[8192, 8192], f16>",
                "func.return %1 : !tensor_op.tensor<[8192, 8192], f16>", sizes=(4096, 4096, 64))
    assert "too small for a GLUON kernel" in small.refusal
    logsumexp = fit("%1 = tensor_op.logsumexp %0 {axis = -1 : i64} : !tensor_op.tensor<[8192, 8192], f16> -> "
                    "!tensor_op.tensor<[8192], f16>", "func.return %1 : !tensor_op.tensor<[8192], f16>")
    assert "its launch 2 has 0 loops over column tiles" in logsumexp.refusal


def test_gluon_fit_counts_a_batched_kernels_matrices():
    """chunk_recompute's floor of 2^32 multiply-adds counts every matrix of a batched kernel (attention's 8 x 16
    heads of 512 x 512 x 64 are 2^31 together): one matrix's were compared with it, refusing any batch of them."""
    from amk.symbolic import Dim
    from amk.tuner import gluon_fit

    module = parse_module(SCORES.format(batch="B, H, ", k="8192, 128", transpose=" {transpose_rhs = true}"))
    FusePass().apply(make_context(), module)
    TilePass().apply(make_context(), module)
    kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    assert kernel.strategy.data == "chunk_recompute" and kernel.batched
    attention = gluon_fit(kernel, Dim(512), Dim(512), Dim(64), {"B": 8, "H": 16})
    assert "a GEMM of 128 x 512 x 512 x 64 is too small for a GLUON kernel" in attention.refusal
    assert gluon_fit(kernel, Dim(512), Dim(512), Dim(64), {"B": 64, "H": 32}).refusal is None


def test_gluon_fit_refuses_rows_of_symbolic_length():
    """A key length T that is a symbol: the hints (T = 8192) make its rows 16-byte multiples, but the same kernel
    serves T = 8191, whose output rows TMA cannot store; GLUON is not offered (its launcher raised a ValueError)."""
    from amk.symbolic import Dim
    from amk.tuner import gluon_fit

    module = parse_module(SCORES.format(batch="", k="128, T", transpose="").replace("8192, 8192", "8192, T"))
    FusePass().apply(make_context(), module)
    TilePass().apply(make_context(), module)
    kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    assert kernel.strategy.data == "chunk_recompute"
    assert "a row length of symbolic size (T" in gluon_fit(kernel, Dim(8192), Dim(8192), Dim(128)).refusal


@pytest.mark.parametrize("text, refusal", [
    (SCORES_AND_SOFTMAX, "its launches store different output tiles through TMA"),
    (BIASED_SCORES, "its buffers are not all matrices"),
], ids=["scores-and-softmax", "biased-scores"])
def test_gluon_fit_refuses_the_column_sweeps_the_emitter_refuses_whatever_the_configuration(text, refusal):
    """What amk-emit-gluon refuses of a column sweep whatever its tiles, the tuner does not offer GLUON for: every
    candidate would fail to emit (two outputs stored by the two launches raised a KeyError in the emitter)."""
    from amk.symbolic import Dim
    from amk.tuner import gluon_fit

    module = parse_module(text)
    FusePass().apply(make_context(), module)
    TilePass().apply(make_context(), module)
    kernel = next(op for op in module.walk() if isinstance(op, amk.dialects.tiled_loop.KernelOp))
    assert kernel.strategy.data == "chunk_recompute"
    assert refusal in gluon_fit(kernel, Dim(8192), Dim(1024), Dim(64)).refusal


def test_a_grid_that_asks_for_gluon_where_it_cannot_run_gets_the_triton_kernel(caplog, tmp_path):
    """Untimed (here: the interpreter), the grid point nearest the heuristic would be a Gluon kernel, which neither runs
    here nor would run in the interpreter: the Triton kernel is emitted instead, and the log says why."""
    import logging

    shapes = [(64, 64), (64, 64), (64,)]
    grid = {"BLOCK_SIZE_M": [64], "GLUON": [1], "PERSISTENT": [1], "TMA": [1]}
    with caplog.at_level(logging.WARNING, logger="amk.tuner"):
        kernel = amk.build_fused_kernel(["matmul", "add_bias", "relu"], shapes, torch.float16, parameter_grid=grid,
                                        tuner_config=TunerConfig(target_cache_dir=str(tmp_path)), autotune=False)
    assert kernel.config["GLUON"] == 0 and "gl.warp_specialize" not in kernel.source
    assert sum("asks for GLUON=1" in r.getMessage() for r in caplog.records) == 1
    x, w, b = (torch.randn(shape, dtype=torch.float16, device=kernel.device) for shape in shapes)
    expected = torch.relu(x.float() @ w.float() + b.float())
    assert ((kernel(x, w, b).float() - expected).norm() / expected.norm()).item() < 1e-3


def test_launch_bound_kernels_are_told_by_their_bytes_multiply_adds_and_loop_length():
    """A 64 x 64 x 64 GEMM with its bias (49408 bytes, 2^18 multiply-adds) and a 16-row LayerNorm over 1024 columns
    are bound by their launch; a 4096-square GEMM, 512 LayerNorm rows (4 MiB) are not, and neither are a decode step's
    long loops in few bytes: one 32000-wide softmax row, split_k over K = 4096."""
    from conftest import tile_level_kernel

    from amk.tuner import launch_bound_reason

    assert "launch-bound at 64 x 64 x 64 (49408 bytes moved" in launch_bound_reason(tiled_kernel())
    assert launch_bound_reason(tiled_kernel(rows=4096, width=4096)) is None

    def layernorm(rows):
        return tile_level_kernel(["layernorm"], [(rows, 1024), (1024,), (1024,)], torch.float32)

    assert "launch-bound at 16 x 1024 (139264 bytes moved, 0 multiply-adds)" in launch_bound_reason(layernorm(16))
    assert launch_bound_reason(layernorm(512)) is None
    softmax = tile_level_kernel(["softmax"], [(1, 32000)], torch.float32)  # 256000 bytes, but one 32000-value loop
    assert launch_bound_reason(softmax) is None
    decode = tile_level_kernel(["matmul"], [(1, 4096), (4096, 16)], torch.float16)  # 139 KB, a 4096-long contraction
    assert launch_bound_reason(decode) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the tuner times candidates on a GPU")
def test_a_launch_bound_kernel_keeps_the_heuristic_without_a_search(tmp_path):
    """Nothing is compiled or timed for it: its log is one untimed trial, of the configuration the kernel runs with,
    saying why; the kernel computes the chain."""
    from amk.tuner import KernelConfig

    ops, shapes = ["matmul", "add_bias", "relu"], [(8, 64), (64, 64), (64,)]
    built = amk.build_fused_kernel(ops, shapes, torch.float16, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    (trial,) = built.tuning_log["fused_0"]
    assert trial["status"] == "untimed" and "launch-bound at 8 x 64 x 64" in trial["detail"]
    assert KernelConfig.from_user_view(trial["config"]) == built.compiled.kernels["fused_0"].config
    x, w, b = (torch.randn(shape, device="cuda", dtype=torch.float16) for shape in shapes)
    torch.testing.assert_close(built(x, w, b), torch.relu(x @ w + b), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(("runs", "per_launch_ms", "measure_ms", "expected"), [
    (30, 6.7, 100.0, 14),  # C's GEMM: what fits in 100 ms
    (30, 1.0, 100.0, 30),  # A's: all of them
    (30, 40.0, 100.0, 5),  # never under the five that judged it
    (40, 6.7, None, 40),  # no bound
])
def test_a_long_kernel_is_timed_for_at_most_the_measuring_time(runs, per_launch_ms, measure_ms, expected):
    from amk.benchmarking import runs_within

    assert runs_within(runs, per_launch_ms, measure_ms, 5) == expected


def test_the_finalists_variants_compile_while_the_search_is_still_timed(monkeypatch):
    """Once every candidate of the search is with the compile workers, the persistent / TMA variants of the fastest so
    far are handed to them too, before the search's last candidate is timed: the refinement then finds most compiled
    (the workers would otherwise idle, then compile them in a round of their own)."""
    monkeypatch.setattr(amk.tuner.DeviceLimits, "current",
                        staticmethod(lambda: amk.tuner.DeviceLimits("H200", 232448, 132, tma=True)))

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = Recorder.launched
        return 2.0 - 0.5 * config.PERSISTENT * config.TMA + config.BLOCK_M / 1024

    monkeypatch.setattr(amk.tuner, "measure", measure)
    events: list[tuple[str, set[str]]] = []

    class Ordered(Recorder):
        def prepare(self, configs):
            super().prepare(configs)
            events.append(("prepare", {config_key(c) for c in configs}))

        def build_and_run(self, config):
            events.append(("time", {config_key(config)}))
            return super().build_and_run(config)

    kernel = tiled_kernel(rows=1024)  # a grid of output tiles (64 rows would take skinny_m, without the switches)
    recorder = Ordered()
    grid = GRID | {"PERSISTENT": [0, 1], "TMA": [0, 1]}  # the search runs at 0, 0; the refinement sets them
    best, trials = tune(kernel, TunerConfig(search_budget=8), grid, amk.pipeline.heuristic_config(kernel),
                        recorder.build_and_run, prepare=recorder.prepare, batch=8)
    variants = {config_key(t.config) for t in trials if t.status == "ok" and (t.config.PERSISTENT or t.config.TMA)}
    assert variants and best.PERSISTENT and best.TMA and recorder.timed_unprepared == []
    first_variant = next(i for i, (kind, keys) in enumerate(events) if kind == "time" and keys & variants)
    assert any(kind == "prepare" and keys & variants for kind, keys in events[:first_variant - 1])


def test_whole_programs_are_raced_on_equal_terms(monkeypatch):
    """A program timed by events (above GRAPH_TIMING_BELOW_MS, or not capturable) counts launch latency that
    another's graph replays leave out: then the replayed ones are timed again by events, and those times decide."""
    from amk.benchmarking import EVENTS, GRAPH

    calls = []

    def timed_by(fn, graph_below=None, **options):
        name = fn()
        calls.append((name, graph_below))
        if graph_below is None:  # events only: launch latency counted for both
            return {"amk": 0.019, "pytorch": 0.029}[name], EVENTS
        return {"amk": (0.019, EVENTS), "pytorch": (0.015, GRAPH)}[name]

    monkeypatch.setattr(amk.tuner, "timed_by", timed_by)
    programs = {"amk": lambda: "amk", "pytorch": lambda: "pytorch"}
    assert amk.tuner.fastest_program(programs, TunerConfig()) == ("amk", {"amk": 0.019, "pytorch": 0.029}, EVENTS)
    assert calls == [("amk", amk.tuner.GRAPH_TIMING_BELOW_MS), ("pytorch", amk.tuner.GRAPH_TIMING_BELOW_MS),
                     ("pytorch", None)]  # amk, timed by events already, is not timed again

    calls.clear()
    monkeypatch.setattr(amk.tuner, "timed_by", lambda fn, **options: (calls.append(fn()) or 0.01, GRAPH))
    assert amk.tuner.fastest_program(programs, TunerConfig()) == ("amk", {"amk": 0.01, "pytorch": 0.01}, GRAPH)
    assert calls == ["amk", "pytorch"]  # timed alike the first time: not again


def test_candidates_get_their_operands_laid_out_as_a_programs_calls_lay_them_out():
    """A weight read transposed (``nn.Linear``'s ``[N, K]``) reaches the kernel as ``W^T``, strides ``(1, K)``. The
    tuner's example operands and the compile workers' jobs have the strides a call hands the kernel: Triton
    specializes on a stride of 1, and candidates timed on a contiguous ``[K, N]`` weight were another binary, timed
    for a layout no call has, and compiled again at the program's first call."""
    from conftest import DEVICE, tile_level_kernel

    from amk.pipeline import heuristic_config
    from amk.tuner import call_arguments, kernel_example_arguments

    ops = [("matmul", {"transpose_b": True}), "add_bias", "relu"]
    shapes = [(64, 32), (48, 32), (48,)]
    kernel = tile_level_kernel(ops, shapes, torch.float32)
    config = heuristic_config(kernel)
    examples = kernel_example_arguments(kernel, config, DEVICE)
    compiled_on = call_arguments(kernel, config)  # what the compile workers' jobs are captured on
    assert [tensor.stride() for tensor in examples] == [strides for _, _, strides in compiled_on]
    assert examples[1].shape == (32, 48) and examples[1].stride() == (1, 32)

    fused = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False)
    (compiled,) = fused.compiled.kernels.values()
    launched, launch = [], compiled.launch
    compiled.launch = lambda *views: launched.append([view.stride() for view in views]) or launch(*views)
    generator = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(shape, generator=generator).to(DEVICE) for shape in shapes)
    torch.testing.assert_close(fused(x, w, b), torch.relu(x @ w.t() + b), atol=1e-5, rtol=1e-5)
    assert launched == [[tensor.stride() for tensor in examples]]


def test_a_relative_target_cache_dir_is_fixed_when_the_config_is_made(tmp_path, monkeypatch):
    """A kernel re-specialized after an ``os.chdir`` (a new leading dim) keeps its programs where the first build
    put them, as does its ``with_dtype`` copy."""
    from amk.runtime import default_device

    monkeypatch.chdir(tmp_path)
    config = TunerConfig(target_cache_dir="kernels")
    assert config.target_cache_dir == str(tmp_path / "kernels")
    kernel = amk.build_fused_kernel(["matmul", "relu"], [(8, 16), (16, 32)], torch.float32, tuner_config=config)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    x, w = (torch.randn(*shape, device=default_device()) for shape in ((5, 16), (16, 32)))
    torch.testing.assert_close(kernel(x, w), torch.relu(x @ w))
    kernel.with_dtype(torch.float16)
    assert not (tmp_path / "elsewhere" / "kernels").exists()
    assert len(list((tmp_path / "kernels" / "entries").iterdir())) == 3
