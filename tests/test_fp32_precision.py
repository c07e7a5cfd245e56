"""fp32 matmuls follow PyTorch's float32 matmul precision: fp32-accurate (IEEE) dots under "highest", PyTorch's
default, TF32 under "high" and "medium"; the setting is part of the cache key, so a kernel built under one is never
reused under the other."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, INTERPRETER_WARNINGS

import amk
from amk.lowering.emit_triton import EmitTritonPass

pytestmark = INTERPRETER_WARNINGS

OPS, SHAPES = ["matmul", "add_bias", "relu"], [(8, 32), (32, 16), (16,)]


@pytest.fixture
def precision():
    """Sets torch's float32 matmul precision for the test (conftest puts it back after every test)."""
    return torch.set_float32_matmul_precision


def test_highest_gives_ieee_dots_and_high_gives_tf32(tmp_path, precision):
    settings = amk.TunerConfig(target_cache_dir=tmp_path)
    precision("highest")
    accurate = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    precision("high")
    fast = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    assert 'input_precision="ieee"' in accurate.source and "tf32" not in accurate.source
    assert 'input_precision="tf32"' in fast.source
    assert fast.cache_key != accurate.cache_key and not fast.cache_hit
    precision("highest")
    again = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    assert again.cache_hit and again.cache_key == accurate.cache_key and "tf32" not in again.source
    x, w, b = (torch.randn(shape).to(DEVICE) for shape in SHAPES)
    torch.testing.assert_close(fast(x, w, b), torch.relu(x @ w + b), rtol=1e-2, atol=1e-2)


def test_compiled_modules_follow_the_precision_too(tmp_path, precision):
    precision("high")
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).to(DEVICE)
    compiled = amk.compile(model, autotune=False, tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    with torch.no_grad():
        compiled(torch.randn(4, 32).to(DEVICE))
    sources = [p.read_text() for p in (tmp_path / "sources").glob("*.py")]
    dots = [s for s in sources if "tl.dot" in s]
    assert dots and all('input_precision="tf32"' in s for s in dots)


def test_an_unknown_fp32_dot_is_refused():
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import PassFailedException

    from amk.context import make_context

    with pytest.raises(PassFailedException, match="fp32_dot must be one of ieee, tf32x3, tf32"):
        EmitTritonPass(fp32_dot="fast").apply(make_context(), ModuleOp([]))


def fp32_kernel(dtype=torch.float32, rows: int = 64):
    """The tile-level kernel of a Linear + ReLU of ``rows`` rows in ``dtype``."""
    from amk.dialects import tiled_loop
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass
    from amk.pipeline import make_context

    module = build_module(OPS, [(rows, 64), (64, 64), (64,)], dtype)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))


@pytest.mark.parametrize(("fp32_dot", "tf32x3_faster"), [("ieee", True), ("ieee", False), ("tf32", True)])
def test_tf32x3_is_a_candidate_under_highest_only_and_wins_when_faster(monkeypatch, fp32_dot, tf32x3_faster):
    """Under "highest" (IEEE dots) the tuner also times each finalist with its fp32 dots as three TF32 products and
    keeps whichever is faster; under "high" (TF32 dots) that switch is never a candidate."""
    import amk.tuner
    from amk.tuner import tune

    kernel = fp32_kernel()
    launched = []

    def build_and_run(config):
        return (lambda: launched.append(config)), (lambda: None)

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = launched[-1]
        return 1.0 + config.BLOCK_M / 64 - (0.5 if config.TF32X3 and tf32x3_faster else 0.0) + 0.25 * config.TF32X3

    monkeypatch.setattr(amk.tuner, "measure", measure)
    heuristic = amk.pipeline.heuristic_config(kernel)
    best, trials = tune(kernel, amk.TunerConfig(search_budget=6), None, heuristic, build_and_run, fp32_dot=fp32_dot)
    timed = [t.config for t in trials if t.status == "ok"]
    if fp32_dot == "tf32":
        assert not any(config.TF32X3 for config in timed) and not best.TF32X3
    else:
        assert any(config.TF32X3 for config in timed)
        assert best.TF32X3 == int(tf32x3_faster)


def test_the_dot_precision_is_refined_even_behind_the_other_program(monkeypatch):
    """A search may end far behind the vendor GEMM program (beaten_at_ms): the finalists are timed with every setting
    of TF32X3 and TMA all the same (three TF32 products with TMA can be the fastest by far); only the launch
    switches' own refinement (PERSISTENT) and the final round are skipped."""
    import amk.tuner
    from amk.tuner import DeviceLimits, tune

    kernel = fp32_kernel(rows=1024)
    launched = []
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("hopper", 232448, 132, True)))
    monkeypatch.setattr(amk.tuner, "priors", lambda strategy, has_dot, limits: [])  # no seeds with launch switches

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = launched[-1]
        return (1.0 + config.BLOCK_M / 64) / (4 if config.TF32X3 and config.TMA else 1)  # over 3x the other program

    monkeypatch.setattr(amk.tuner, "measure", measure)
    best, trials = tune(kernel, amk.TunerConfig(search_budget=4), None, amk.pipeline.heuristic_config(kernel),
                        lambda config: ((lambda: launched.append(config)), (lambda: None)), beaten_at_ms=0.1)
    timed = [t.config for t in trials if t.status == "ok"]
    assert best.TF32X3 == 1 and best.TMA == 1
    assert {(config.TF32X3, config.TMA) for config in timed} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert not any(config.PERSISTENT for config in timed)
    assert not any(t.detail.startswith("finalist") for t in trials)


def test_timings_of_one_kernel_are_kept_apart_per_fp32_precision():
    """A tile-level kernel's text is the same under every float32 matmul precision; its times are not, so trials
    timed with TF32 dots are never reused for IEEE ones (nor the reverse)."""
    from amk import cache

    assert cache.timing_key("kernel", [(8, 8)], None, "ieee") != cache.timing_key("kernel", [(8, 8)], None, "tf32")


def test_tf32x3_kernels_say_so_and_compute_the_chain(precision):
    from amk.lowering.configs import KernelConfig
    from amk.pipeline import stage_and_emit
    from amk.tuner import DeviceLimits, offers_tf32x3, prune_reason

    kernel = fp32_kernel()
    config = KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, TF32X3=1)
    assert 'input_precision="tf32x3"' in stage_and_emit(kernel, config).source
    limits = DeviceLimits("test", 1 << 20, 1)
    assert offers_tf32x3(kernel, "ieee") and prune_reason(config, "tile2d", True, 4, limits, tf32x3=True) is None
    assert not offers_tf32x3(kernel, "tf32")
    assert "TF32X3 applies to fp32 dots" in prune_reason(config, "tile2d", True, 4, limits, tf32x3=False)
    # fp16 dots have nothing to gain, whatever the kernel's other operands
    assert not offers_tf32x3(fp32_kernel(torch.float16), "ieee")
    precision("highest")
    grid = {"BLOCK_SIZE_M": [16], "BLOCK_SIZE_N": [32], "BLOCK_SIZE_K": [32], "TF32X3": [1]}
    kernel = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, parameter_grid=grid)
    assert 'input_precision="tf32x3"' in kernel.source
    x, w, b = (torch.randn(shape).to(DEVICE) for shape in SHAPES)
    reference = torch.relu(x.double() @ w.double() + b.double())
    error = ((kernel(x, w, b).double() - reference).norm() / reference.norm()).item()
    assert error < 1e-5


def test_the_dot_precision_is_refined_with_every_launch_setting(monkeypatch):
    """On Hopper an fp32 tile grid has TF32X3, PERSISTENT and TMA to refine, and TF32X3 interacts with TMA: TF32X3
    alone may be slower than the IEEE dots while TF32X3 with TMA is the fastest (the fp32 LayerNorm row on the H200).
    The search runs TF32X3 (the tiles fastest with IEEE dots are not those fastest with it); the finalists are timed
    with every setting of TF32X3 and TMA (three more each), then with the launch switches (PERSISTENT too)."""
    import amk.tuner
    from amk.tuner import DeviceLimits, tune

    kernel = fp32_kernel(rows=1024)  # a tile grid (64 rows would take a decode strategy)
    assert kernel.strategy.data == "tile2d"
    launched = []
    monkeypatch.setattr(DeviceLimits, "current", staticmethod(lambda: DeviceLimits("hopper", 232448, 132, True)))
    monkeypatch.setattr(amk.tuner, "priors", lambda strategy, has_dot, limits: [])

    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        config = launched[-1]
        return 1.0 + config.BLOCK_M / 64 + 0.2 * config.TF32X3 - 0.6 * config.TF32X3 * config.TMA

    monkeypatch.setattr(amk.tuner, "measure", measure)
    heuristic = amk.pipeline.heuristic_config(kernel)
    best, trials = tune(kernel, amk.TunerConfig(search_budget=4), None, heuristic,
                        lambda config: ((lambda: launched.append(config)), (lambda: None)))
    assert best.TF32X3 == 1 and best.TMA == 1
    ran = [t.config for t in trials if t.status == "ok"]
    searched = [config for config in ran if not (config.PERSISTENT or config.TMA) and config != heuristic]
    assert searched and all(config.TF32X3 for config in searched[:3])  # the search's own picks run TF32X3
    refined = [config for config in ran if config.PERSISTENT or config.TMA]
    # the first refinement: TF32X3 and TMA only, both values of each
    first = [config for config in refined if not config.PERSISTENT]
    assert {config.TF32X3 for config in first} == {0, 1} and refined[0].PERSISTENT == 0
    assert {(config.PERSISTENT, config.TMA) for config in ran if config.TF32X3} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert len(ran) - len(searched) - 1 <= 3 * 3 + 3 * 3


@pytest.fixture
def newer_api():
    """torch.backends' ``fp32_precision`` settings (the API newer torch has beside the legacy setters) for the test
    (conftest puts them back after every test)."""
    if not hasattr(torch.backends, "fp32_precision"):
        pytest.skip("this torch has no fp32_precision settings")
    return torch.backends.cuda.matmul


def test_the_newer_precision_api_is_followed(tmp_path, newer_api):
    """``torch.backends.cuda.matmul.fp32_precision`` (or the generic setting it inherits) is what cuBLAS and Inductor
    follow: amk read ``torch.get_float32_matmul_precision()``, which raises once that API is used (build_fused_kernel
    failed; amk.compile left every subgraph to PyTorch) and misses it where the two disagree (TF32 dots where PyTorch
    had gone back to IEEE)."""
    settings = amk.TunerConfig(target_cache_dir=tmp_path)

    def dots() -> str:
        source = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings).source
        return "tf32" if 'input_precision="tf32"' in source else "ieee" if 'input_precision="ieee"' in source else "?"

    newer_api.fp32_precision = "tf32"
    assert dots() == "tf32"
    newer_api.fp32_precision, torch.backends.fp32_precision = "none", "tf32"  # inherited
    assert dots() == "tf32"
    torch.set_float32_matmul_precision("high")
    newer_api.fp32_precision = "ieee"  # the two disagree: cuBLAS follows the newer one
    assert dots() == "ieee"
    newer_api.fp32_precision = "tf32"
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).to(DEVICE)
    compiled = amk.compile(model, autotune=False, tuner_config=settings)
    with torch.no_grad():
        compiled(torch.randn(4, 32).to(DEVICE))
    assert "fused subgraph" in str(amk.explain(compiled, print_report=False))


def test_a_torch_without_the_newer_api_reads_the_legacy_setting(monkeypatch, precision):
    """Before torch's fp32_precision settings, the legacy one is read, "medium" (TF32 on CUDA too) as "high"."""
    import types

    from amk.environment import float32_matmul_precision

    monkeypatch.setattr(torch.backends.cuda, "matmul", types.SimpleNamespace())
    for legacy, read in (("highest", "highest"), ("high", "high"), ("medium", "high")):
        precision(legacy)
        assert float32_matmul_precision() == read


def test_a_kernel_keeps_the_precision_it_was_built_at(tmp_path, precision):
    """A kernel built under "highest" and called under "high" with other leading dims built those with TF32 dots,
    and its copies (deepcopy, pickles) were built at the precision of the moment; its verification judged fp32 at
    1e-5 whatever its dots (TF32 dots are fp16's mantissa: 1e-3)."""
    import copy

    from amk.verification import TF32_TOLERANCE, TOLERANCES

    settings = amk.TunerConfig(target_cache_dir=tmp_path)
    precision("highest")
    kernel = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    precision("high")
    with torch.no_grad():
        kernel(*(torch.randn(shape).to(DEVICE) for shape in [(24, 32), (32, 16), (16,)]))
    assert len(kernel._compiled) == 2
    assert all('input_precision="ieee"' in compiled.source for compiled in kernel._compiled.values())
    assert 'input_precision="ieee"' in copy.deepcopy(kernel).source
    assert kernel.float32_matmul_precision == "highest"
    fast = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
    reference = amk.verification.reference_for(OPS, len(SHAPES))
    assert amk.verify(fast, reference).results[0].tolerance == TF32_TOLERANCE
    assert amk.verify(kernel, reference).results[0].tolerance == TOLERANCES[torch.float32]
    no_matmul = amk.build_fused_kernel(["softmax"], [(8, 32)], torch.float32, autotune=False, tuner_config=settings)
    assert amk.verify(no_matmul, amk.verification.reference_for(["softmax"], 1)).results[0].tolerance == TOLERANCES[
        torch.float32]


def test_cuda_graph_replays_are_kept_apart_per_precision(precision):
    """A replay skips TorchDynamo's guards, so its signature holds the precision: a graph captured under "high"
    (TF32 kernels and cuBLAS) was replayed after "highest" was asked for."""
    from amk.frontend.graphs import _signature

    precision("high")
    fast = _signature([], None, None)
    precision("highest")
    assert _signature([], None, None) != fast


def test_an_exact_cast_up_is_checked_at_the_precision_after_it():
    """amk.compile's first-call check judged every output at the coarsest dtype anywhere in the subgraph: an fp32
    Linear of a bf16 input cast up with ``.float()`` (exact) was judged at bf16's 1e-2. Per output, the dtypes
    computed on its way count, not the arguments'."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from amk.frontend.subgraph import _coarsest_floats

    x, w = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(16, 8)
    exact = make_fx(lambda x, w: (torch.nn.functional.linear(x.float(), w), x.float() * 2))(x, w)
    assert _coarsest_floats(exact) == [torch.float32, torch.float32]
    rounded = make_fx(lambda x, w: (torch.nn.functional.linear(x, w.bfloat16()).float(), x.float()))(x, w)
    assert _coarsest_floats(rounded) == [torch.bfloat16, torch.float32]
