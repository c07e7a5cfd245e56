"""The strategies for a matmul followed by a row reduction (amk-tile's ``reduction_strategy``): each must match
PyTorch call after call (strip_finish's strip counters must be back at zero after every launch), and ``auto`` must
pick by contraction length and output size as documented. strip_sync has its own GPU tests (test_strip_sync.py).
Also the strategies of a row reduction without a matmul (row_resident, row_strip), and the program that leaves the
matmul to the vendor library and fuses the rest (amk-fuse's ``vendor_gemm``)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import DEVICE, INTERPRETER_WARNINGS, rel_l2

import amk
from amk.lowering.configs import KernelConfig
from amk.lowering.tile import TilePass
from amk.oplist import build_module, normalize_ops
from amk.passes.fuse import FusePass
from amk.pipeline import compile_module, make_context
from amk.runtime import default_device

pytestmark = INTERPRETER_WARNINGS

CASES = [  # shapes that are not multiples of the tiles, so the strips have ragged edges; short contractions (3-4
    # steps of the K loop, the last one ragged), since the interpreter's time goes mostly to the K loop
    (["matmul", "add_bias", "gelu", "layernorm"], [(37, 100), (100, 75), (75,), (75,), (75,)], torch.float16),
    (["matmul", "add", "rmsnorm"], [(50, 80), (80, 130), (50, 130)], torch.bfloat16),
    (["matmul", "softmax"], [(33, 70), (70, 100)], torch.float32),
    (["matmul", "logsumexp"], [(20, 72), (72, 90)], torch.float32),
    # every value in [-2, -1] (clamp, then minus 3): a padding state read as 0 would win the max
    (["matmul", ("clamp", {"min": 1.0, "max": 2.0}), "sub", "max"], [(24, 70), (70, 70), (70,)], torch.float32),
]


def SMALL_TILES(kernel) -> KernelConfig:
    """Tiles of 32 columns, so that every row of the cases spans several tiles (3 to 5) whose statistics merge;
    chunk_recompute splits them between two programs (chunks of 2 and 1, or 3 and 2 tiles)."""
    return KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_N=2, num_warps=4, num_stages=2)


@pytest.mark.parametrize("strategy,merge_chunk", [
    ("tile_stats", 1), ("tile_stats", 4), ("tile_recompute", 1), ("tile_recompute", 16), ("strip_finish", 1),
    ("strip_finish", 2), ("row_strip", 1), ("strip_recompute", 1), ("chunk_recompute", 1), ("chunk_recompute", 2)])
@pytest.mark.parametrize("ops,shapes,dtype", CASES, ids=["-".join(op if isinstance(op, str) else op[0] for op in case[0]) for case in CASES])
def test_each_strategy_matches_pytorch_call_after_call(strategy, merge_chunk, ops, shapes, dtype):
    """Merge chunks wider than one state load several tiles' statistics at once, also past the row's last tile (75
    columns in tiles of 32 make 3 tiles: a chunk of 4 or 16 is partly padding)."""
    compiled = compile_module(build_module(ops, shapes, dtype), SMALL_TILES, reduction_strategy=strategy,
                              merge_chunk=merge_chunk)
    assert f'strategy = "{strategy}"' in compiled.ir["tiled_loop"]
    assert compiled.ir["tiled_loop"].count("tiled_loop.relaunch") == (strategy in ("tile_stats", "tile_recompute",
                                                                                    "chunk_recompute"))
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)


@pytest.mark.parametrize("strategy", ["tile_stats", "tile_recompute", "strip_finish", "row_strip", "strip_recompute",
                                      "chunk_recompute", "row_resident"])
def test_each_strategy_of_symbolic_rows_matches_pytorch_at_even_and_uneven_launches(strategy):
    """Rows of a symbolic count are masked only at launches where the count is not a multiple of BLOCK_M (the
    launcher's EVEN_TILES): 48 rows in tiles of 16 run without row masks, 19 with them, the same kernel."""
    from xdsl.parser import Parser

    from amk.ir_dump import module_text

    ops = ["matmul", "add_bias", "layernorm"]
    shapes = [(999, 48), (48, 80), (80,), (80,), (80,)]
    text = module_text(build_module(ops, shapes, torch.float16)).replace("999", "M")
    compiled = compile_module(Parser(make_context(), text).parse_module(), SMALL_TILES, reduction_strategy=strategy)
    assert "even_tiles = M % 16 == 0" in compiled.ir["triton"]
    for rows in (48, 19):
        assert_matches_pytorch_call_after_call(compiled, ops, [(rows, 48), *shapes[1:]], torch.float16)


def assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype, weight: int = 1,
                                           transform=lambda index, tensor: tensor) -> None:
    """Two calls of ``compiled`` on fresh random inputs (the ``weight``-th scaled by 1/sqrt(K); each passed through
    ``transform``), each compared with the fp64 reference of ``ops``."""
    generator = torch.Generator().manual_seed(0)
    inputs = [transform(i, (torch.randn(s, generator=generator) / (s[0] ** 0.5 if i == weight else 1)).to(
        default_device(), dtype)) for i, s in enumerate(shapes)]
    if "sub" in ops:
        inputs[-1] = torch.full_like(inputs[-1], 3.0)
    expected = amk.verification.reference_for(normalize_ops(ops), len(shapes))(*[t.double() for t in inputs])
    tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    for _ in range(2):
        out = compiled.program(*inputs)[0].double()
        error = ((out - expected).norm() / expected.norm()).item()
        assert error < tolerance, error


def tiled_strategy(ops, shapes, dtype=torch.float16) -> str:
    """The strategy ``auto`` picks, from the tile pass alone (no kernel is built)."""
    module = build_module(ops, shapes, dtype)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    (strategy,) = {op.strategy.data for op in module.walk() if op.name == "tiled_loop.kernel"}
    return strategy


STANDALONE = [  # rows of a static length that is not a power of two: the resident tile is padded and masked
    (["add_bias", "gelu", "layernorm"], [(37, 300), (300,), (300,), (300,)], torch.float16),
    (["add", "rmsnorm"], [(50, 130), (50, 130)], torch.bfloat16),
    ([("scale", {"factor": 0.125}), "softmax"], [(33, 100)], torch.float32),
    (["logsumexp"], [(20, 90)], torch.float32),
]


@pytest.mark.parametrize("strategy", ["row_resident", "row_strip"])
@pytest.mark.parametrize("ops,shapes,dtype", STANDALONE,
                         ids=["-".join(op if isinstance(op, str) else op[0] for op in case[0]) for case in STANDALONE])
def test_rows_without_a_matmul_match_pytorch_resident_or_in_strips(strategy, ops, shapes, dtype):
    """row_resident loads each row once and has no loop; row_strip sweeps the row's tiles twice."""
    compiled = compile_module(build_module(ops, shapes, dtype), SMALL_TILES, reduction_strategy=strategy)
    assert f'strategy = "{strategy}"' in compiled.ir["tiled_loop"]
    assert ("tiled_loop.for" in compiled.ir["tiled_loop"]) == (strategy == "row_strip")
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype, weight=-1)


def test_auto_keeps_static_rows_of_at_most_16384_columns_resident():
    assert tiled_strategy(["add_bias", "gelu", "layernorm"], [(64, 4096), (4096,), (4096,), (4096,)]) == "row_resident"
    assert tiled_strategy(["softmax"], [(8, 16384)]) == "row_resident"
    assert tiled_strategy(["softmax"], [(8, 16385)]) == "row_strip"
    # asked for with a matmul (whose columns come from the K loop, not a load), row_resident means row_strip
    ops, shapes, dtype = CASES[0]
    compiled = compile_module(build_module(ops, shapes, dtype), SMALL_TILES, reduction_strategy="row_resident")
    assert 'strategy = "row_strip"' in compiled.ir["tiled_loop"]


@pytest.mark.parametrize("ops,shapes,dtype", CASES[:3], ids=["layernorm", "rmsnorm", "softmax"])
def test_vendor_gemm_leaves_the_matmul_to_pytorch_and_fuses_the_rest(ops, shapes, dtype):
    compiled = compile_module(build_module(ops, shapes, dtype), vendor_gemm=True)
    steps = compiled.program.steps
    assert [step.kind for step in steps] == ["op", "launch", "return"]
    assert steps[0].operation().name == "tensor_op.matmul"
    assert 'strategy = "row_resident"' in compiled.ir["tiled_loop"]
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)


def test_the_vendor_gemm_is_tried_where_a_row_reduction_reads_a_matmul():
    from amk.build import _row_reduction_follows_matmul

    def follows(ops, shapes):
        return _row_reduction_follows_matmul(build_module(normalize_ops(ops), shapes, torch.float16))

    assert follows(*CASES[0][:2]) and follows(["matmul", ("scale", {"factor": 0.5}), "softmax"], [(8, 16), (16, 32)])
    assert not follows(["matmul", "add_bias", "relu"], [(8, 16), (16, 32), (32,)])
    assert not follows(["rmsnorm", "matmul", "add"], [(8, 16), (16,), (16, 32), (8, 32)])  # the norm comes first


def test_auto_picks_by_contraction_and_output_size():
    layernorm = ["matmul", "add_bias", "gelu", "layernorm"]
    assert tiled_strategy(["matmul", "softmax"], [(8192, 128), (128, 8192)]) == "chunk_recompute"
    assert tiled_strategy(["matmul", "softmax"], [(16384, 128), (128, 16384)]) == "chunk_recompute"
    assert tiled_strategy(["rmsnorm", "matmul", "softmax"], [(512, 128), (128,), (128, 512)]) == "row_strip"
    assert tiled_strategy(layernorm, [(16384, 4096), (4096, 4096), (4096,), (4096,), (4096,)]) == "tile_stats"
    assert tiled_strategy(["matmul", "add", "rmsnorm"], [(32768, 8192), (8192, 8192), (32768, 8192)]) == "strip_finish"
    assert tiled_strategy(["matmul", "add", "rmsnorm"], [(64, 512), (512, 80), (64, 80)]) == "tile_stats"


@pytest.mark.parametrize("ops,shapes,dtype", [
    (["matmul", ("scale", {"factor": 0.125}), "softmax"], [(40, 100), (100, 150)], torch.float16),
    (["matmul", "add_bias", "gelu", "layernorm"], [(37, 48), (48, 75), (75,), (75,), (75,)], torch.float32),
], ids=["softmax-K100", "layernorm-K48"])
def test_chunk_recompute_loads_a_short_k_whole_once_per_launch(ops, shapes, dtype):
    """A static K of at most 256 is one tile (padded to a power of two and masked): each launch loads its rows' A
    tile once, before the loop over its chunk's column tiles, which is then the loop whose loads are pipelined."""
    compiled = compile_module(build_module(ops, shapes, dtype), SMALL_TILES, reduction_strategy="chunk_recompute")
    source = compiled.ir["triton"]
    k_tile = 128 if shapes[0][1] == 100 else 64
    assert len(re.findall(rf"x_cols(_\d+)? = 0 \+ tl.arange\(0, {k_tile}\)", source)) == 2  # one A tile a launch
    assert "for k in" not in source  # ... and no K loop
    assert source.count("BLOCK_N, num_stages=2):") == 2  # both sweeps over the chunk are pipelined
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)


def test_tile_recompute_falls_back_to_tile_stats_with_a_prologue():
    """Its second launch would need the prologue's statistics again."""
    module = build_module(["rmsnorm", "matmul", "softmax"], [(512, 1024), (1024,), (1024, 512)], torch.float16)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass(reduction_strategy="tile_recompute").apply(ctx, module)
    assert {op.strategy.data for op in module.walk() if op.name == "tiled_loop.kernel"} == {"tile_stats"}


def test_strip_recompute_applies_the_prologue_in_both_sweeps():
    """Unlike tile_recompute, the same program runs both sweeps, so the prologue's statistics serve both."""
    ops, shapes, dtype = ["rmsnorm", "matmul", "softmax"], [(20, 100), (100,), (100, 90)], torch.float32
    compiled = compile_module(build_module(ops, shapes, dtype), SMALL_TILES, reduction_strategy="strip_recompute")
    assert 'strategy = "strip_recompute"' in compiled.ir["tiled_loop"]
    generator = torch.Generator().manual_seed(2)
    inputs = [torch.randn(s, generator=generator).to(default_device(), dtype) for s in shapes]
    expected = amk.verification.reference_for(normalize_ops(ops), len(shapes))(*[t.double() for t in inputs])
    out = compiled.program(*inputs)[0].double()
    assert ((out - expected).norm() / expected.norm()).item() < 1e-5


def test_a_merge_chunk_that_is_not_a_power_of_two_is_refused():
    with pytest.raises(Exception, match=r"merge_chunk must be 0 \(the default, 64\) or one of 1, 2, 4, 8, 16, 32, 64, got 3"):
        compile_module(build_module(["matmul", "softmax"], [(8, 64), (64, 16)], torch.float32), merge_chunk=3)


def test_an_unknown_reduction_strategy_names_the_choices():
    # the registered row-reduction strategies, in registration order (amk.lowering.strategies)
    with pytest.raises(Exception, match="auto, row_strip, tile_stats, tile_recompute, strip_finish, strip_sync, "
                                        "strip_recompute, chunk_recompute, row_resident, got 'diagonal'"):
        compile_module(build_module(["matmul", "softmax"], [(8, 64), (64, 16)], torch.float32),
                       reduction_strategy="diagonal")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the tuner times programs on a GPU")
def test_the_tuner_keeps_the_faster_of_the_fused_and_the_vendor_gemm_programs(tmp_path):
    """Either program may win at this size; whichever is kept computes the chain, comes back from the cache as it
    was built, and is never the vendor one when ``vendor_gemm`` is off. With it on, both programs were built and
    raced (the vendor one first, the fused kernels' first round compiling meanwhile)."""
    ops, shapes, dtype = CASES[0]
    for vendor_gemm in (True, False):
        settings = amk.TunerConfig(search_budget=2, vendor_gemm=vendor_gemm, target_cache_dir=tmp_path / str(vendor_gemm))
        built = amk.build_fused_kernel(ops, shapes, dtype, tuner_config=settings)
        assert built.torch_ops in ([], ["tensor_op.matmul"]) if vendor_gemm else built.torch_ops == []
        assert set(built.program_times) == ({"fused", "vendor_gemm"} if vendor_gemm else set())
        assert_matches_pytorch_call_after_call(built.compiled, ops, shapes, dtype)
        again = amk.build_fused_kernel(ops, shapes, dtype, tuner_config=settings)
        assert again.cache_hit and again.torch_ops == built.torch_ops


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the tuner times programs on a GPU")
def test_the_vendor_program_is_tuned_with_a_share_of_the_search_budget(tmp_path, monkeypatch):
    """The vendor program (row passes beside the vendor's matmuls) searches ``VENDOR_PROGRAM_SEARCH_SHARE`` of the
    budget, the fused program all of it."""
    from amk import build

    budgets = []

    def recording(request, *args, **kwargs):
        budgets.append(request.tuner_config.search_budget)
        return chooser(request, *args, **kwargs)

    chooser = build.config_chooser
    monkeypatch.setattr(build, "config_chooser", recording)
    ops, shapes, dtype = CASES[0]
    built = amk.build_fused_kernel(ops, shapes, dtype,
                                   tuner_config=amk.TunerConfig(search_budget=8, target_cache_dir=tmp_path))
    assert set(built.program_times) >= {"fused", "vendor_gemm"}
    # the vendor program's and the fused program's first rounds handed to the workers, the vendor program, then the
    # fused program
    vendor_budget = math.ceil(8 * build.VENDOR_PROGRAM_SEARCH_SHARE)
    assert budgets == [vendor_budget, 8, vendor_budget, 8]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("strategy", ["tile_stats", "tile_recompute", "chunk_recompute", "strip_finish", "vendor_gemm"])
def test_each_strategy_replays_under_a_cuda_graph(strategy):
    """Two or three launches (tile_stats), or counters the kernel resets itself (strip_finish), or cuBLAS's GEMM
    and a row_resident kernel (vendor_gemm): all must replay correctly."""
    ops, shapes, dtype = CASES[0]
    vendor_gemm = strategy == "vendor_gemm"
    compiled = compile_module(build_module(ops, shapes, dtype), reduction_strategy="auto" if vendor_gemm else strategy,
                              vendor_gemm=vendor_gemm)
    generator = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(s, generator=generator) / (s[0] ** 0.5 if i == 1 else 1)).to("cuda", dtype)
              for i, s in enumerate(shapes)]
    expected = amk.verification.reference_for(normalize_ops(ops), len(shapes))(*[t.double() for t in inputs])
    compiled.program(*inputs)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = compiled.program(*inputs)[0]
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        error = ((captured.double() - expected).norm() / expected.norm()).item()
        assert error < 2e-3, (strategy, error)


def test_fp32_matmuls_under_highest_also_try_the_vendor_gemm():
    """IEEE fp32 dots run on the CUDA cores, so cuBLAS's fp32 GEMM may beat any fused kernel: under "highest" every
    fp32 chain with a matmul times it; TF32 dots (under "high") and fp16 only where a row reduction follows (or an
    activation that cuBLASLt's epilogue computes, as ReLU: SiLU here)."""
    from amk.build import _vendor_gemm_may_win

    def may_win(dtype, fp32_dot, ops=("matmul", "add_bias", "silu")):
        module = build_module(normalize_ops(list(ops)), [(8, 16), (16, 32), (32,)], dtype)
        return _vendor_gemm_may_win(module, fp32_dot, {})

    assert may_win(torch.float32, "ieee")
    assert not may_win(torch.float32, "tf32") and not may_win(torch.float16, "ieee")
    layernorm = build_module(normalize_ops(["matmul", "add_bias", "layernorm"]), [(8, 16), (16, 32), (32,), (32,),
                                                                               (32,)], torch.float16)
    assert _vendor_gemm_may_win(layernorm, "ieee", {})


def test_a_norm_before_a_matmul_of_many_rows_also_tries_the_vendor_gemm():
    """A norm read as a matmul's lhs runs inside the fused kernel's K loop: at decode sizes that saves a launch, from
    PROLOGUE_VENDOR_MIN_ROWS rows (at the size hints, for symbolic rows) the vendor program, the norm as a row kernel
    before cuBLAS's GEMM, is timed too; and it computes the chain."""
    from xdsl.parser import Parser

    from amk.build import PROLOGUE_VENDOR_MIN_ROWS, _vendor_gemm_may_win
    from amk.context import make_context

    def may_win(rows, hints=None, ops=("rmsnorm", "matmul", "add")):
        """``rows`` an int, or a symbol's name (the module's rows made symbolic in its text, as amk.compile's are)."""
        shapes = [(999, 16), (16,), (16, 32), (999, 32)] if ops[0] == "rmsnorm" else [(999, 16), (16, 32), (32,)]
        text = str(build_module(normalize_ops(list(ops)), shapes, torch.float16)).replace("[999,", f"[{rows},")
        return _vendor_gemm_may_win(Parser(make_context(), text).parse_module(), "ieee", hints or {})

    assert may_win(PROLOGUE_VENDOR_MIN_ROWS) and not may_win(PROLOGUE_VENDOR_MIN_ROWS - 1)
    assert may_win("s0", {"s0": 4096}) and not may_win("s0", {"s0": 16})
    assert not may_win("s0")  # rows without a hint: not judged
    assert not may_win(4096, ops=("matmul", "add_bias", "silu"))  # no norm before the matmul, nor an epilogue
    ops, shapes = ["rmsnorm", "matmul", "add"], [(37, 100), (100,), (100, 75), (37, 75)]
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float16), vendor_gemm=True)
    assert [step.kind for step in compiled.program.steps] == ["launch", "op", "launch", "return"]
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, torch.float16, weight=2)


def test_an_autocast_linear_of_many_rows_also_tries_the_vendor_gemm_judged_at_bf16():
    """Under autocast a Linear's fp32 arguments are cast to bf16 in its subgraph: the fused kernel converts every lhs
    tile in its K loop (95 us against cuBLAS's 45 at 1024 x 4096 x 4096 on the H100). From PROLOGUE_VENDOR_MIN_ROWS
    rows the vendor program (the casts as kernels, cuBLAS's bf16 GEMM) is timed too; a matmul of fp32 arguments cast
    to bf16 is no fp32 matmul (not tried at few rows), and the two programs are compared at bf16's tolerance, not at
    the fp32 arguments' (which refused the vendor program for rounding the GEMM's output to bf16 before its bias)."""
    from xdsl.parser import Parser

    from amk.build import PROLOGUE_VENDOR_MIN_ROWS, _program_tolerance, _vendor_gemm_may_win
    from amk.context import make_context
    from amk.verification import TOLERANCES

    def autocast_linear(rows):
        return Parser(make_context(), f"""builtin.module {{
  func.func @subgraph(%x: !tensor_op.tensor<[{rows}, 64], f32>, %w: !tensor_op.tensor<[128, 64], f32>) -> !tensor_op.tensor<[{rows}, 128], bf16> {{
    %xb = tensor_op.cast %x : !tensor_op.tensor<[{rows}, 64], f32> -> !tensor_op.tensor<[{rows}, 64], bf16>
    %wb = tensor_op.cast %w : !tensor_op.tensor<[128, 64], f32> -> !tensor_op.tensor<[128, 64], bf16>
    %y = tensor_op.matmul %xb, %wb {{transpose_rhs = true}} : (!tensor_op.tensor<[{rows}, 64], bf16>, !tensor_op.tensor<[128, 64], bf16>) -> !tensor_op.tensor<[{rows}, 128], bf16>
    func.return %y : !tensor_op.tensor<[{rows}, 128], bf16>
  }}
}}""").parse_module()

    assert _vendor_gemm_may_win(autocast_linear(PROLOGUE_VENDOR_MIN_ROWS), "ieee", {})
    assert not _vendor_gemm_may_win(autocast_linear(PROLOGUE_VENDOR_MIN_ROWS - 1), "ieee", {})
    assert _program_tolerance(autocast_linear(8)) == TOLERANCES[torch.bfloat16]
    fp32 = build_module(normalize_ops(["matmul", "relu"]), [(8, 16), (16, 32)], torch.float32)
    assert _program_tolerance(fp32) == TOLERANCES[torch.float32]


def test_a_subgraph_of_mixed_argument_dtypes_also_tries_the_vendor_gemm(monkeypatch):
    """A bf16 model that keeps its RMSNorm in fp32 gives amk.compile a subgraph of fp32 and bf16 arguments (its
    request has no one dtype): the vendor program is timed as for one dtype, on random inputs of each argument's
    dtype, judged at the narrowest dtype computed in. An fp8 argument (no plain vendor GEMM) still rules it out."""
    from xdsl.parser import Parser

    from amk.build import BuildRequest, _argument_dtypes, _program_tolerance, _tries_the_vendor_program
    from amk.context import make_context
    from amk.verification import TOLERANCES, random_inputs

    def norm_linear(x_type="f32"):
        return Parser(make_context(), f"""builtin.module {{
  func.func @subgraph(%x: !tensor_op.tensor<[s0, 64], {x_type}>, %g: !tensor_op.tensor<[64], f32>, %w: !tensor_op.tensor<[128, 64], bf16>) -> !tensor_op.tensor<[s0, 128], bf16> {{
    %n = tensor_op.rmsnorm %x weight %g {{eps = 1.0e-06 : f64}} : !tensor_op.tensor<[s0, 64], {x_type}> weight !tensor_op.tensor<[64], f32> -> !tensor_op.tensor<[s0, 64], f32>
    %nb = tensor_op.cast %n : !tensor_op.tensor<[s0, 64], f32> -> !tensor_op.tensor<[s0, 64], bf16>
    %y = tensor_op.matmul %nb, %w {{transpose_rhs = true}} : (!tensor_op.tensor<[s0, 64], bf16>, !tensor_op.tensor<[128, 64], bf16>) -> !tensor_op.tensor<[s0, 128], bf16>
    func.return %y : !tensor_op.tensor<[s0, 128], bf16>
  }}
}}""").parse_module()

    monkeypatch.setattr(BuildRequest, "timed", property(lambda self: True))  # as on a GPU
    request = BuildRequest(norm_linear, [("s0", "64"), (64,), (128, 64)], None, size_hints=(("s0", 4096),))
    module = norm_linear()
    assert _argument_dtypes(module) == [torch.float32, torch.float32, torch.bfloat16]
    assert _tries_the_vendor_program(request, module)
    assert _program_tolerance(module) == TOLERANCES[torch.bfloat16]
    assert not _tries_the_vendor_program(request, norm_linear("f8E4M3FN"))
    inputs = random_inputs([(2, 64), (64,), (128, 64)], _argument_dtypes(module), "cpu")
    assert [tensor.dtype for tensor in inputs] == [torch.float32, torch.float32, torch.bfloat16]


BROADCAST_ROWS = """builtin.module {{
  func.func @f(%x: !tensor_op.tensor<[B, T, 1024], f32>, %w: !tensor_op.tensor<[1024, 64], f32>, %p: !tensor_op.tensor<[1, T, 64], f32>, %m: !tensor_op.tensor<[B, 1, 64], f32>) -> !tensor_op.tensor<[B, T, 64], f32> {{
    %h = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B, T, 1024], f32>, !tensor_op.tensor<[1024, 64], f32>) -> !tensor_op.tensor<[B, T, 64], f32>
    %s = tensor_op.add %h, %p : (!tensor_op.tensor<[B, T, 64], f32>, !tensor_op.tensor<[1, T, 64], f32>) -> !tensor_op.tensor<[B, T, 64], f32>
    %e = tensor_op.mul %s, %m : (!tensor_op.tensor<[B, T, 64], f32>, !tensor_op.tensor<[B, 1, 64], f32>) -> !tensor_op.tensor<[B, T, 64], f32>
    %y = tensor_op.{last} : !tensor_op.tensor<[B, T, 64], f32>
    func.return %y : !tensor_op.tensor<[B, T, 64], f32>
  }}
}}"""


@pytest.mark.parametrize(("strategy", "sizes"), [
    *((strategy, (3, 5)) for strategy in ("auto", "row_resident", "tile_stats", "strip_finish", "row_strip",
                                          "tile_recompute", "chunk_recompute")),
    ("split_k", (2, 4)),  # 8 rows of a GEMM, then an elementwise epilogue (GELU, not the softmax)
])
def test_operands_whose_rows_broadcast_are_read_through_the_map_by_every_strategy(strategy, sizes):
    """Position embeddings [1, T, N] and a per-sequence vector [B, 1, N] in a GEMM's epilogue before a softmax: each
    strategy's loads map the space's rows (B*T) to the operand's (r % T, r // T), every output right; they were left
    to PyTorch ("a fused kernel reads an operand whole")."""
    from xdsl.parser import Parser

    from amk.context import make_context

    batch, length = sizes
    softmax = strategy != "split_k"
    module = Parser(make_context(), BROADCAST_ROWS.format(
        last="softmax %e {axis = -1 : i64}" if softmax else "gelu %e")).parse_module()
    small_tiles = KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, SPLIT_K=2, SPLIT_N=2, num_warps=4, num_stages=2)
    compiled = compile_module(module, lambda kernel: small_tiles, reduction_strategy=strategy if softmax else "auto",
                              size_hints={"B": batch, "T": length})
    assert [step.kind for step in compiled.program.steps] == ["launch", "return"]
    assert "broadcast_rows" in compiled.ir["tiled_loop"]
    assert softmax or 'strategy = "split_k"' in compiled.ir["tiled_loop"]
    generator = torch.Generator().manual_seed(0)
    x, w, p, m = (torch.randn(shape, generator=generator) for shape in
                  ((batch, length, 1024), (1024, 64), (1, length, 64), (batch, 1, 64)))
    x, w = x.to(DEVICE), (w / 32).to(DEVICE)
    p, m = p.to(DEVICE), m.to(DEVICE)
    (out,) = compiled.program(x, w, p, m)
    product = (x.double() @ w.double() + p.double()) * m.double()
    expected = product.softmax(-1) if softmax else torch.nn.functional.gelu(product)
    assert rel_l2(out, expected) < 1e-5


def test_the_row_map_of_an_operand_broadcast_over_leading_dims():
    """broadcast_row_map: the space's rows, then divisor, period, stride; kept dims last (r % their product) or first
    (r // the product of the others); None where the operand has the space's rows, keeps dims in the middle, or the
    kernel is batched."""
    from amk.lowering.plan import Space, broadcast_row_map
    from amk.symbolic import Dim

    def row_map(dims, lead, batch=()):
        result = broadcast_row_map(tuple(map(Dim, dims)), Space(tuple(map(Dim, lead)), Dim(64), tuple(map(Dim, batch))))
        return None if result is None else [str(d) for d in result]

    assert row_map(["1", "T", "64"], ["B", "T"]) == ["B*T", "1", "T", "1"]
    assert row_map(["T", "64"], ["B", "T"]) == ["B*T", "1", "T", "1"]  # numpy's leading 1s
    assert row_map(["1", "H", "T", "64"], ["B", "H", "T"]) == ["B*H*T", "1", "H*T", "1"]
    assert row_map(["B", "1", "1", "64"], ["B", "H", "T"]) == ["B*H*T", "H*T", "B", "1"]
    assert row_map(["B", "T", "64"], ["B", "T"]) is None
    assert row_map(["1", "H", "1", "64"], ["B", "H", "T"]) is None
    assert row_map(["64"], ["B", "T"]) is None and row_map(["1", "1", "64"], ["B", "T"]) is None  # row vectors
    # a dim the space has of size 1 (a decoding step's one token) is neither kept nor broadcast
    assert row_map(["1", "H", "1", "64"], ["B", "H", "1"]) == ["B*H", "1", "H", "1"]
    assert row_map(["B", "1", "1", "64"], ["B", "H", "1"]) == ["B*H", "H", "B", "1"]
    assert row_map(["1", "T", "64"], ["T"], batch=["B"]) is None


def test_the_vendor_program_of_a_length_grown_by_one_binds_the_length(monkeypatch, tmp_path):
    """A decoding step's shared build has its key length only as ``s1 + 1`` in its arguments' shapes (the cache
    concatenated with the new key): the vendor program was run without the bucket's value of ``s1`` and failed
    (KeyError 's1', on the H100), so such builds never raced the vendor GEMM. It is now run, and compared with the
    fused program, at the bucket's hints."""
    from xdsl.parser import Parser

    import amk.verification
    from amk import build, cache
    from amk.context import make_context

    def scores_softmax():
        return Parser(make_context(), """builtin.module {
  func.func @subgraph(%q: !tensor_op.tensor<[s0, 16], f32>, %k: !tensor_op.tensor<[s1 + 1, 16], f32>) -> !tensor_op.tensor<[s0, s1 + 1], f32> {
    %s = tensor_op.matmul %q, %k {transpose_rhs = true} : (!tensor_op.tensor<[s0, 16], f32>, !tensor_op.tensor<[s1 + 1, 16], f32>) -> !tensor_op.tensor<[s0, s1 + 1], f32>
    %p = tensor_op.softmax %s {axis = -1 : i64} : !tensor_op.tensor<[s0, s1 + 1], f32>
    func.return %p : !tensor_op.tensor<[s0, s1 + 1], f32>
  }
}""").parse_module()

    made = amk.verification.random_inputs
    monkeypatch.setattr(amk.verification, "random_inputs", lambda *args, **kw: made(*args[:2], DEVICE, **kw))
    monkeypatch.setattr(build, "measure", lambda run, *_: (run(), 1.0)[1])  # runs it once; nothing to time here
    request = build.BuildRequest(scores_softmax, [("s0", "16"), ("s1 + 1", "16")], None,
                                 size_hints=(("s0", 4), ("s1", 6)))
    vendor = build._vendor_program(request, scores_softmax(), cache.Store(tmp_path))
    assert vendor is not None and vendor.bindings == {"s0": 4, "s1": 6}
    assert [tuple(tensor.shape) for tensor in vendor.inputs] == [(4, 16), (7, 16)]
    fused = compile_module(scores_softmax(), size_hints={"s0": 4, "s1": 6})
    (got,), (want,) = vendor.run(vendor.compiled), vendor.run(fused)
    q, k = vendor.inputs
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, (q.double() @ k.double().T).softmax(-1).float(), rtol=1e-5, atol=1e-6)


def test_a_fused_program_whose_kernel_alone_loses_is_not_raced():
    """The fused program runs every kernel it tuned: one of them, at its best time, more than OUTRUN_MARGIN times the
    vendor program's time, and the vendor program is kept without racing (or compiling) the fused one; within the
    margin, they race, however many kernels (each timed from a cold L2, which the program may not pay). Untimed
    kernels (launch-bound, heuristic) count nothing; below GRAPH_TIMING_BELOW_MS, where kernels may have been timed
    in two ways, they race."""
    from amk.build import _outrun_by_vendor, _VendorProgram
    from amk.tuner import OUTRUN_MARGIN

    vendor = _VendorProgram(compiled=None, tuning_log={}, inputs=[], time_ms=0.050, bindings={})
    fused_log = {"fused_0": [{"status": "ok", "time_ms": 0.060}, {"status": "ok", "time_ms": 0.045},
                             {"status": "failed"}],
                 "fused_1": [{"status": "untimed"}], "fused_2": [{"status": "ok", "time_ms": 0.040}]}
    times: dict[str, float] = {}
    assert not _outrun_by_vendor(fused_log, vendor, times) and times == {}
    fused_log["fused_3"] = [{"status": "ok", "time_ms": 0.050 * OUTRUN_MARGIN + 1e-4}]
    assert _outrun_by_vendor(fused_log, vendor, times)
    assert times == {"fused_kernel_alone": pytest.approx(0.050 * OUTRUN_MARGIN + 1e-4), "vendor_gemm": 0.050}
    decode = _VendorProgram(compiled=None, tuning_log={}, inputs=[], time_ms=0.010, bindings={})  # kernels maybe graph-timed
    assert not _outrun_by_vendor({"fused_0": [{"status": "ok", "time_ms": 0.020}]}, decode, {})


def test_the_vendor_program_keeps_one_norm_and_times_on_scaled_weights():
    """With the matmuls in the vendor library, amk.compile's pipeline does not clone a norm per matmul (each clone
    would be a kernel of its own); the random inputs the two programs are raced on scale each weight by 1/sqrt(K),
    whichever argument it is (a gated MLP at scale 1 overflows fp16). A Linear's epilogue goes to the vendor GEMM
    first (amk-vendor-epilogues)."""
    from amk.build import _weight_scales
    from amk.passes.duplicate_norm_prologues import DuplicateNormProloguesPass
    from amk.passes.fuse import FusePass
    from amk.passes.vendor_epilogues import VendorEpiloguesPass
    from amk.pipeline import fusion_passes

    passes = fusion_passes("amk-duplicate-norm-prologues,amk-fuse", vendor_gemm=True)
    assert [type(p) for p in passes] == [VendorEpiloguesPass, FusePass] and passes[1].vendor_gemm
    assert isinstance(fusion_passes("amk-duplicate-norm-prologues,amk-fuse")[0], DuplicateNormProloguesPass)
    shapes = [(37, 100), (100,), (100, 75), (37, 75)]
    module = build_module(normalize_ops(["rmsnorm", "matmul", "add"]), shapes, torch.float16)
    assert _weight_scales(module, shapes) == [1.0, 1.0, 0.1, 1.0]


@pytest.mark.parametrize(("ops", "shapes"), [
    (["rmsnorm", "matmul", "add"], [(37, 100), (100,), (100, 75), (37, 75)]),
    (["layernorm", "matmul"], [(8, 64), (64,), (64,), (64, 32)]),
    ([("matmul", {"transpose_b": True}), "relu"], [(8, 64), (32, 64)]),
    (["add", "matmul", "matmul"], [(8, 64), (8, 64), (64, 16), (16, 4)]),
])
def test_op_lists_scale_their_matmul_weights_as_the_vendor_race_does(ops, shapes):
    """amk.verify's random inputs for an op list scale each matmul's weight by 1/sqrt(K), whichever input it is, as
    the vendor race scales the weights it reads from the module."""
    from amk.build import _weight_scales
    from amk.verification import input_scales

    normalized = normalize_ops(ops)
    scales = input_scales(normalized, shapes)
    assert scales == _weight_scales(build_module(normalized, shapes, torch.float16), shapes)
    assert sum(scale != 1.0 for scale in scales) == sum(name == "matmul" for name, _ in normalized)


def test_a_pipeline_string_takes_the_vendor_gemm_option_too():
    """amk.compile's subgraphs run a pipeline string (duplicated norm prologues, then amk-fuse): its vendor-GEMM
    program leaves the matmul to PyTorch as the default pipeline's does."""
    ops, shapes, dtype = CASES[0]
    compiled = compile_module(build_module(ops, shapes, dtype), pipeline="amk-duplicate-norm-prologues,amk-fuse",
                              vendor_gemm=True)
    assert [step.kind for step in compiled.program.steps] == ["op", "launch", "return"]
    assert_matches_pytorch_call_after_call(compiled, ops, shapes, dtype)


def test_the_vendor_gemm_is_timed_at_the_size_buckets_shapes():
    """A subgraph's program is timed on inputs of its bucket's sizes (expressions of symbols too); a size without a
    hint leaves the vendor-GEMM program untried."""
    from amk.build import BuildRequest, _shapes_at_hints

    def shapes(dims, hints=()):
        return _shapes_at_hints(BuildRequest(lambda: None, dims, torch.float16, size_hints=hints))

    assert shapes([("s0", "64"), ("64", "32"), (32,)], (("s0", 16),)) == [(16, 64), (64, 32), (32,)]
    assert shapes([("s0*s1", "64")], (("s0", 16), ("s1", 1))) == [(16, 64)]
    assert shapes([("s0", "64")]) is None


@pytest.mark.parametrize("strategy", ["tile_stats", "strip_finish", "row_strip", "row_resident", "tile_recompute"])
def test_an_fp32_output_after_the_row_reduction_is_not_rounded_by_a_narrower_one(strategy):
    """A norm's result read twice, cast to fp16 (for the next matmul) and in fp32: the strategies that keep the
    product between their two sweeps kept it in the first output written after the reduction, the fp16 one, and
    every output of the second sweep, the fp32 one too, was computed from fp16 values (relative error 1.6e-3, fp32's
    bound 1e-5). The product now stays in an output of its own type, else in a scratch buffer. Found by a fuzz of
    hand-written programs."""
    from xdsl.parser import Parser

    from amk.verification import evaluate_function, evaluate_reference

    text = """builtin.module {
  func.func @f(%x: !tensor_op.tensor<[19, 48], f32>, %w: !tensor_op.tensor<[48, 80], f32>) -> (!tensor_op.tensor<[19, 80], f16>, !tensor_op.tensor<[19, 80], f32>) {
    %y = tensor_op.matmul %x, %w : (!tensor_op.tensor<[19, 48], f32>, !tensor_op.tensor<[48, 80], f32>) -> !tensor_op.tensor<[19, 80], f32>
    %n = tensor_op.layernorm %y {eps = 1.0e-05 : f64} : !tensor_op.tensor<[19, 80], f32> -> !tensor_op.tensor<[19, 80], f32>
    %h = tensor_op.cast %n : !tensor_op.tensor<[19, 80], f32> -> !tensor_op.tensor<[19, 80], f16>
    %r = tensor_op.relu %n : !tensor_op.tensor<[19, 80], f32>
    func.return %h, %r : !tensor_op.tensor<[19, 80], f16>, !tensor_op.tensor<[19, 80], f32>
  }
}"""
    compiled = compile_module(Parser(make_context(), text).parse_module(), SMALL_TILES, reduction_strategy=strategy)
    torch.manual_seed(0)
    x, w = torch.randn(19, 48, dtype=torch.float64), torch.randn(48, 80, dtype=torch.float64) / 48 ** 0.5
    module = Parser(make_context(), text).parse_module()
    function = next(op for op in module.walk() if op.name == "func.func")
    _, expected = evaluate_function(function, [x, w], evaluate=evaluate_reference)
    half, full = compiled.program(x.float().to(DEVICE), w.float().to(DEVICE))
    assert half.dtype == torch.float16 and full.dtype == torch.float32
    assert rel_l2(full.double().cpu(), expected) <= 1e-5


def test_a_subgraph_of_mixed_argument_dtypes_counts_its_bytes_argument_by_argument():
    """Whether a build starts its compile workers at once (its operands outgrow a launch-bound kernel) was judged by
    the request's one dtype: a subgraph of mixed dtypes, which has none, never started them early."""
    from amk.build import BuildRequest, _operands_outgrow_a_launch
    from amk.tuner import LAUNCH_BOUND_BYTES

    rows = LAUNCH_BOUND_BYTES // (4 * 64) + 1  # fp32 [rows, 64] alone outgrows the bound; in bf16 it does not
    request = BuildRequest(lambda: None, [("s0", "64"), (64,)], None, size_hints=(("s0", rows),))
    assert not _operands_outgrow_a_launch(request)  # no dtype to judge by
    assert _operands_outgrow_a_launch(request, [torch.float32, torch.bfloat16])
    assert not _operands_outgrow_a_launch(request, [torch.bfloat16, torch.float32])
