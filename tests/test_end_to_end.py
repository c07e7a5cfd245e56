"""End to end: every op of the op-list vocabulary, built with ``amk.build_fused_kernel`` and run (in Triton's
interpreter without a GPU), matches PyTorch in fp32, fp16 and bf16.

Shapes are deliberately not multiples of any tile size (M=37, K=100, N=75), so every mask and every partial tile is
exercised; some cases also force small tiles through ``parameter_grid`` so that the K loop and the column sweeps of
row reductions run several partial iterations. The reference is an eager float64 evaluation written in conftest.py
(independent of amk.reference); errors are relative L2 with amk's per-dtype tolerances.
"""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE, eager, make_inputs, rel_l2

import amk
from amk.verification import TOLERANCES, reference_for

M, K, N = 37, 100, 75
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
ALL_DTYPES = [FP32, FP16, BF16]
SMALL_TILES = {"BLOCK_SIZE_M": [16], "BLOCK_SIZE_N": [32], "BLOCK_SIZE_K": [32]}

pytestmark = pytest.mark.filterwarnings(
    # Padding lanes of partial tiles (masked out of every store) may divide 0 by 0 in the interpreter.
    "ignore:invalid value encountered in divide:RuntimeWarning",
    "ignore:divide by zero encountered in divide:RuntimeWarning",
)


def run_chain(ops, shapes, dtype, *, grid=None, out_dtype=None, kernels=1, seed=0, weight_scale=1.0):
    """Build, run on seeded inputs, compare with the float64 eager reference; returns (kernel, error)."""
    kernel = amk.build_fused_kernel(ops, shapes, dtype, parameter_grid=grid, autotune=False)
    inputs = make_inputs(ops, shapes, dtype, seed=seed, weight_scale=weight_scale)
    output = kernel(*inputs)
    expected = eager(ops, [t.double() for t in inputs])
    assert output.dtype == (out_dtype or dtype)
    assert output.device == inputs[0].device
    error = rel_l2(output, expected)
    tolerance = max(TOLERANCES[dtype], TOLERANCES[out_dtype or dtype])
    assert error <= tolerance, f"{ops} {shapes} {dtype}: rel L2 {error:.3e} > {tolerance:.0e}"
    if kernels is not None:
        assert kernel.num_kernels == kernels, f"{ops} compiled to {kernel.num_kernels} kernels"
    return kernel, error


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


dtypes = pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)

# --------------------------------------------------------------------------------------------------------------------
# Elementwise ops
# --------------------------------------------------------------------------------------------------------------------

UNARY = [
    "relu", "gelu", ("gelu", {"approximate": "tanh"}), "silu", "sigmoid", "tanh", "exp", "mish", "leaky_relu",
    ("leaky_relu", {"negative_slope": 0.2}), ("clamp", {"min": -0.5, "max": 0.75}), ("clamp", {"min": 0.1}),
    ("clamp", {"max": -0.1}), "hardtanh", ("hardtanh", {"min_val": -0.3, "max_val": 0.4}), ("scale", {"factor": 0.125}),
    ("scale", {"factor": -3}), "abs", "erf", "softplus", ("softplus", {"beta": 2.0, "threshold": 5.0}), "hardsigmoid",
    "hardswish",
]


@dtypes
@pytest.mark.parametrize("op", ["sqrt", "rsqrt", "log"])
def test_a_function_of_positive_numbers_after_matmul(op, dtype):
    run_chain(["matmul", ("clamp", {"min": 0.5}), op], [(M, K), (K, N)], dtype)


def op_id(op):
    if isinstance(op, str):
        return op
    name, params = op
    return name + "[" + ",".join(f"{k}={v}" for k, v in params.items()) + "]"


@dtypes
@pytest.mark.parametrize("op", UNARY, ids=op_id)
def test_unary_after_matmul(op, dtype):
    run_chain(["matmul", op], [(M, K), (K, N)], dtype)


@dtypes
@pytest.mark.parametrize("op", UNARY, ids=op_id)
def test_unary_standalone(op, dtype):
    run_chain([op], [(M, N)], dtype)


@dtypes
@pytest.mark.parametrize("op", ["relu", "gelu", "silu", "tanh", "mish"], ids=op_id)
def test_unary_after_matmul_bias(op, dtype):
    run_chain(["matmul", "add_bias", op], [(M, K), (K, N), (N,)], dtype)


@dtypes
def test_rotate_half_times_a_table_over_heads_is_one_kernel(dtype):
    """RoPE's ``rotate_half(x) * sin + x * cos`` over heads in memory order ([tokens, heads, head_dim], the table
    broadcast over the heads; the op list's chain adds a tensor in place of ``x * cos``): rotate_half reads x at
    the rotated columns in the same kernel as the rest."""
    run_chain(["rotate_half", "mul", "add"], [(M, 4, 64), (M, 1, 64), (M, 4, 64)], dtype)
    # A table shared by every sequence keeps a run of dims in the middle ([1, T, 1, D] over [B, T, H, D]).
    run_chain(["rotate_half", "mul"], [(3, 7, 4, 64), (1, 7, 1, 64)], dtype)


@pytest.mark.parametrize("ops, shapes, kernels", [
    (["matmul", "rotate_half"], [(M, K), (K, 64)], 1),
    ([("scale", {"factor": 2.0}), "rotate_half", "relu"], [(M, 64)], 1),
    (["matmul", ("rotate_half", {"group": 32}), "mul"], [(M, K), (K, 128), (M, 128)], 1),
    ([("scale", {"factor": 2.0}), ("rotate_half", {"group": 6}), "relu"], [(M, 24)], 2),
    (["rotate_half", "matmul"], [(M, K), (K, N)], 2),
], ids=["after_matmul", "after_scale", "heads_after_matmul", "groups_not_a_power_of_two", "before_matmul"])
def test_rotate_half_of_a_computed_value(ops, shapes, kernels):
    """rotate_half of a tile computed in registers (a product, a scaled tile) permutes the tile's registers in the
    same kernel, each group of columns (a projection's heads side by side) rotated within itself; the column tiles
    hold whole groups. Groups of a width that is not a power of two are read rotated from the producer's stored
    output, and a matmul's lhs, read in K tiles, is rotated by a kernel of its own."""
    run_chain(ops, shapes, FP16, kernels=kernels)


def test_a_grid_whose_block_n_splits_the_rotated_groups_keeps_whole_ones(caplog, tmp_path):
    """A user's parameter_grid whose BLOCK_N values all split the groups rotated in registers: the heuristic's
    BLOCK_N (whole groups) is used, with a warning saying why (on a build, not a cache hit: a cache of its own),
    and the result is right."""
    ops, shapes = ["matmul", ("rotate_half", {"group": 64}), "mul"], [(M, K), (K, 128), (M, 128)]
    with caplog.at_level("WARNING", logger="amk.tuner"):
        kernel = amk.build_fused_kernel(ops, shapes, FP16, autotune=False, parameter_grid={"BLOCK_SIZE_N": [32]},
                                        tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    assert "split the groups of 64 columns" in caplog.text
    inputs = make_inputs(ops, shapes, FP16)
    assert rel_l2(kernel(*inputs), eager(ops, [t.double() for t in inputs])) <= TOLERANCES[FP16]


@dtypes
def test_rotate_half_in_groups_of_an_input(dtype):
    """A kernel input rotated in groups of columns (heads side by side) is read at each group's rotated columns."""
    run_chain([("rotate_half", {"group": 16}), "mul"], [(M, 64), (M, 64)], dtype)


BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
OPERAND_SHAPES = {"full": (M, N), "row": (N,), "column": (M, 1), "row2d": (1, N)}


@dtypes
@pytest.mark.parametrize("operand", list(OPERAND_SHAPES))
@pytest.mark.parametrize("op", BINARY)
def test_binary_after_matmul(op, operand, dtype):
    run_chain(["matmul", op], [(M, K), (K, N), OPERAND_SHAPES[operand]], dtype)


@dtypes
@pytest.mark.parametrize("op", BINARY)
def test_binary_standalone(op, dtype):
    run_chain([op], [(M, N), (M, N)], dtype)


@pytest.mark.parametrize("op", BINARY)
def test_binary_standalone_broadcast_row(op):
    run_chain([op], [(M, N), (N,)], FP16)


@dtypes
def test_add_bias(dtype):
    run_chain(["matmul", "add_bias"], [(M, K), (K, N), (N,)], dtype)


@dtypes
def test_matmul_alone(dtype):
    run_chain(["matmul"], [(M, K), (K, N)], dtype)


@dtypes
@pytest.mark.parametrize("target", ALL_DTYPES, ids=dtype_id)
def test_cast_standalone(dtype, target):
    run_chain([("cast", {"dtype": target})], [(M, N)], dtype, out_dtype=target)


@dtypes
@pytest.mark.parametrize("target", [FP32, FP16], ids=dtype_id)
def test_cast_after_matmul(dtype, target):
    run_chain(["matmul", "add_bias", ("cast", {"dtype": target})], [(M, K), (K, N), (N,)], dtype, out_dtype=target)


@dtypes
@pytest.mark.parametrize("ops, shapes", [
    (["matmul", "add_bias", "silu", "mul"], [(M, K), (K, N), (N,), (M, N)]),
    (["matmul", "add_bias", "tanh", ("clamp", {"min": -0.5, "max": 0.5}), ("scale", {"factor": 2.0})],
     [(M, K), (K, N), (N,)]),
    (["matmul", "sub", "exp", "div"], [(M, K), (K, N), (N,), (M, N)]),
    (["matmul", "maximum", "minimum", "leaky_relu"], [(M, K), (K, N), (M, N), (M, 1)]),
    (["sigmoid", "mul", "add", "hardtanh"], [(M, N), (M, N), (N,)]),
], ids=["swiglu-like", "tanh-clamp-scale", "sub-exp-div", "max-min-leaky", "standalone-chain"])
def test_elementwise_chains(ops, shapes, dtype):
    run_chain(ops, shapes, dtype)


# --------------------------------------------------------------------------------------------------------------------
# Row reductions, softmax and norms
# --------------------------------------------------------------------------------------------------------------------

REDUCTIONS = ["sum", "mean", "max", "logsumexp", "var"]
ROW_OPS = REDUCTIONS + ["softmax", "layernorm", "rmsnorm"]


@dtypes
@pytest.mark.parametrize("op", ROW_OPS)
def test_row_op_after_matmul(op, dtype):
    run_chain(["matmul", op], [(M, K), (K, N)], dtype)


@dtypes
@pytest.mark.parametrize("op", ROW_OPS)
def test_row_op_standalone(op, dtype):
    run_chain([op], [(M, N)], dtype)


@pytest.mark.parametrize("op", ROW_OPS)
def test_row_op_after_matmul_small_tiles(op):
    """Several partial N tiles per row and a K loop with a partial last tile."""
    run_chain(["matmul", op], [(M, K), (K, N)], FP32, grid=SMALL_TILES)


@pytest.mark.parametrize("dtype", [FP32, FP16], ids=dtype_id)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_keepdim(op, dtype):
    run_chain(["matmul", (op, {"keepdim": True})], [(M, K), (K, N)], dtype)
    run_chain([(op, {"keepdim": True, "dim": -1})], [(M, N)], dtype)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_then_elementwise(op):
    run_chain(["matmul", "add_bias", op, "exp"], [(M, K), (K, N), (N,)], FP32)


@pytest.mark.parametrize("ops, shapes", [
    ([("sum", {"dim": 0})], [(M, N)]),
    ([("mean", {"dim": 0, "keepdim": True})], [(M, N)]),
    ([("max", {"dim": 1})], [(2, 5, N)]),
    ([("logsumexp", {"dim": -2})], [(2, 5, N)]),
    ([("var", {"dim": 0, "correction": 0})], [(M, N)]),
    ([("softmax", {"dim": 0})], [(M, N)]),
    (["matmul", ("softmax", {"dim": 0})], [(M, K), (K, N)]),
    (["matmul", ("sum", {"dim": 0})], [(M, K), (K, N)]),
], ids=["sum0", "mean0-keepdim", "max1-3d", "lse-2-3d", "var0", "softmax0", "matmul-softmax0", "matmul-sum0"])
def test_non_last_axis_reductions(ops, shapes):
    """Not fusable as row reductions; whatever amk does with them (eager fallback), the numbers must be right."""
    run_chain(ops, shapes, FP16, kernels=None)


@dtypes
@pytest.mark.parametrize("op, extra", [
    ("layernorm", [(N,), (N,)]),
    ("layernorm", [(N,)]),
    (("layernorm", {"eps": 1e-3}), [(N,), (N,)]),
    ("rmsnorm", [(N,)]),
    (("rmsnorm", {"eps": 1e-2}), [(N,)]),
], ids=["ln-gamma-beta", "ln-gamma", "ln-eps", "rms-weight", "rms-eps"])
def test_norm_with_weights(op, extra, dtype):
    run_chain(["matmul", op], [(M, K), (K, N), *extra], dtype)
    run_chain([op], [(M, N), *extra], dtype)


@dtypes
@pytest.mark.parametrize("ops, shapes", [
    (["matmul", ("scale", {"factor": 0.5}), "softmax"], [(M, K), (K, N)]),
    (["matmul", "add", "softmax"], [(M, K), (K, N), (M, N)]),
    (["matmul", "add_bias", "layernorm", "relu"], [(M, K), (K, N), (N,), (N,), (N,)]),
    (["matmul", "softmax", "mul"], [(M, K), (K, N), (M, N)]),
    (["matmul", "rmsnorm", "silu"], [(M, K), (K, N), (N,)]),
], ids=["scale-softmax", "add-softmax", "ln-relu", "softmax-mul", "rms-silu"])
def test_row_op_chains(ops, shapes, dtype):
    run_chain(ops, shapes, dtype)


@dtypes
@pytest.mark.parametrize("ops, shapes", [
    (["rmsnorm", "matmul", "add"], [(M, K), (K,), (K, N), (M, N)]),
    (["rmsnorm", "matmul"], [(M, K), (K, N)]),
    (["layernorm", "matmul", "add_bias"], [(M, K), (K,), (K,), (K, N), (N,)]),
    (["layernorm", "matmul", "add_bias", "gelu"], [(M, K), (K, N), (N,)]),
], ids=["rms-matmul-add", "rms-matmul", "ln-matmul-bias", "ln-noaffine-matmul-bias-gelu"])
def test_norm_prologue_before_matmul(ops, shapes, dtype):
    run_chain(ops, shapes, dtype)


@pytest.mark.parametrize("k", [100, 1024], ids=["skinny_m", "split_k"])
def test_norm_prologue_of_a_single_row_fuses(k):
    """Decode with one row: the [1, K] input is the full tile of a one-row space, not a broadcast row, so the
    RMSNorm prologue fuses into the matmul kernel (it once ran as a separate PyTorch op)."""
    kernel, _ = run_chain(["rmsnorm", "matmul", "add"], [(1, k), (k,), (k, N), (1, N)], FP32, kernels=1)
    assert [step.kind for step in kernel.compiled.program.steps] == ["launch", "return"]
    # fp32 rows keep element-wise sums of squares: x @ x^T in fp32 would leave the tensor cores (or round to tf32).
    assert "tiled_loop.diagonal" not in kernel.ir["tiled_loop"]


@pytest.mark.parametrize("dtype", [FP16, BF16], ids=dtype_id)
@pytest.mark.parametrize("rows,k", [(16, 2048), (3, 1100), (5, 200)], ids=["split_k", "split_k-ragged", "skinny_m"])
def test_rmsnorm_prologue_scales_the_accumulator(rows, k, dtype):
    """Decode kernels gather RMSNorm's statistics inside the K loop (each split over its own chunk of K, merged by
    the finisher) and scale the accumulator's rows, ``(rstd * x * g) @ W = rstd * ((x * g) @ W)``: there is no
    loop over K before the main loop; the sums of squares of the 16-bit rows are the diagonal of ``x @ x^T`` (exact
    products; ragged K and padded rows load as zeros). LayerNorm, whose mean does not factor out, keeps that loop.
    In fp16 the norm has no weight here: ``x * g`` might not fit an fp16 operand (the next test)."""
    weight = [(k,)] if dtype == BF16 else []
    kernel, _ = run_chain(["rmsnorm", "matmul", "add"], [(rows, k), *weight, (k, N), (rows, N)], dtype)
    assert kernel.ir["tiled_loop"].count('tiled_loop.for "k"') == 1
    assert kernel.ir["tiled_loop"].count("tiled_loop.diagonal") == 1
    layernorm, _ = run_chain(["layernorm", "matmul", "add_bias"], [(rows, k), (k,), (k,), (k, N), (N,)], dtype)
    assert layernorm.ir["tiled_loop"].count('tiled_loop.for "k"') == 2


@pytest.mark.parametrize("rows,k", [(1, 64), (16, 2048)], ids=["skinny_m", "split_k"])
def test_an_fp16_rmsnorm_weight_is_applied_before_the_matmul(rows, k):
    """fp16 holds ``x`` and ``rstd * x * g`` (all PyTorch rounds) but not always ``x * g``: a 20000 times a gain of 4
    overflowed the unscaled operand and made the row NaN. The fp16 norm with a weight keeps its loop over K first."""
    torch.manual_seed(0)
    x, w = torch.randn(rows, k, dtype=FP16, device=DEVICE), torch.randn(k, N, dtype=FP16, device=DEVICE) / k ** 0.5
    x[0, 1] = 20000.0
    g = torch.full((k,), 4.0, dtype=FP16, device=DEVICE)
    kernel = amk.build_fused_kernel(["rmsnorm", "matmul"], [x.shape, g.shape, w.shape], FP16, autotune=False)
    output = kernel(x, g, w)
    expected = torch.nn.functional.rms_norm(x.double(), (k,), g.double(), eps=1e-5) @ w.double()
    assert torch.isfinite(output).all()
    assert rel_l2(output, expected) <= TOLERANCES[FP16]
    assert kernel.ir["tiled_loop"].count('tiled_loop.for "k"') == 2


@pytest.mark.parametrize("rows,gram", [(32, True), (40, False)])
def test_gram_statistics_are_limited_to_the_row_counts_timed(rows, gram):
    """The Gram accumulator is [BLOCK_M, BLOCK_M]: up to 32 rows (timed on the H200) the sums of squares come from
    x @ x^T, above it element-wise."""
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass
    from amk.pipeline import make_context, module_text

    module = build_module(["rmsnorm", "matmul", "add"], [(rows, 2048), (2048,), (2048, N), (rows, N)], BF16)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    assert ("tiled_loop.diagonal" in module_text(module)) == gram


@pytest.mark.parametrize("hints,gram", [("s0=16", True), ("s0=1", True), ("s0=64", False), ("", False)])
def test_a_decode_bucket_of_symbolic_rows_gets_the_gram_statistics(hints, gram):
    """amk.compile's kernels have symbolic rows: the size bucket being built (its upper bound, ``size_hints``) decides
    as a static row count would (amk.compile's D ran 0.0118 ms against build_fused_kernel's 0.0089 without them,
    2026-12-03-h200-decode-gap); without hints the row count is unknown and the statistics stay element-wise."""
    from xdsl.parser import Parser

    from amk.lowering.tile import TilePass
    from amk.passes.fuse import FusePass
    from amk.pipeline import make_context, module_text

    x, g, w, y = "!tensor_op.tensor<[s0, 2048], bf16>", "!tensor_op.tensor<[2048], bf16>", \
        "!tensor_op.tensor<[2048, 2048], bf16>", "!tensor_op.tensor<[s0, 2048], bf16>"
    ctx = make_context()
    module = Parser(ctx, f"""
func.func @decode(%x : {x}, %g : {g}, %w : {w}, %r : {y}) -> {y} {{
  %0 = tensor_op.rmsnorm %x weight %g {{eps = 1.0e-05 : f64}} : {x} weight {g} -> {x}
  %1 = tensor_op.matmul %0, %w : ({x}, {w}) -> {y}
  %2 = tensor_op.add %1, %r : ({y}, {y}) -> {y}
  func.return %2 : {y}
}}""").parse_module()
    FusePass().apply(ctx, module)
    TilePass(size_hints=hints).apply(ctx, module)
    assert ("tiled_loop.diagonal" in module_text(module)) == gram


def test_norm_prologue_small_tiles():
    run_chain(["rmsnorm", "matmul", "add"], [(M, K), (K,), (K, N), (M, N)], FP32, grid=SMALL_TILES)
    run_chain(["layernorm", "matmul", "add_bias"], [(M, K), (K,), (K,), (K, N), (N,)], FP32, grid=SMALL_TILES)


# --------------------------------------------------------------------------------------------------------------------
# The seed chains, through the public verify API as well
# --------------------------------------------------------------------------------------------------------------------

SEED_CHAINS = [
    (["matmul", "add_bias", "gelu", "layernorm"], [(M, K), (K, N), (N,), (N,), (N,)]),
    (["matmul", "add_bias", "relu"], [(M, K), (K, N), (N,)]),
    (["matmul", "add", "rmsnorm"], [(M, K), (K, N), (M, N), (N,)]),
]
SEED_IDS = ["bias-gelu-layernorm", "bias-relu", "residual-rmsnorm"]


@dtypes
@pytest.mark.parametrize("ops, shapes", SEED_CHAINS, ids=SEED_IDS)
def test_seed_chains(ops, shapes, dtype):
    kernel, _ = run_chain(ops, shapes, dtype)
    assert set(kernel.ir) >= {"tensor_op", "fused", "tiled_loop", "memory_staged", "triton"}
    assert kernel.ir["fused"].count("tensor_op.fused") == 1
    assert "@triton.jit" in kernel.source
    compile(kernel.source, "<amk kernel>", "exec")


@pytest.mark.parametrize("ops, shapes", SEED_CHAINS, ids=SEED_IDS)
def test_seed_chains_verify_api(ops, shapes):
    kernel = amk.build_fused_kernel(ops, shapes, FP16, verify=True, autotune=False)
    assert kernel.verification.passed
    report = amk.verify(kernel, reference_for(kernel.ops, len(shapes)), dtypes=ALL_DTYPES)
    assert report.passed
    assert [r.dtype for r in report.results] == ALL_DTYPES
    assert all(r.relative_l2_error <= TOLERANCES[r.dtype] for r in report.results)
    assert str(report).count(" ok") == 3


@pytest.mark.parametrize("ops, shapes", SEED_CHAINS, ids=SEED_IDS)
def test_seed_chains_small_tiles(ops, shapes):
    kernel, _ = run_chain(ops, shapes, BF16, grid=SMALL_TILES)
    assert kernel.config["BLOCK_SIZE_K"] == 32 and kernel.config["BLOCK_SIZE_N"] == 32


# --------------------------------------------------------------------------------------------------------------------
# Layouts and shapes: transpose_b, 3-D inputs, size-1 dims
# --------------------------------------------------------------------------------------------------------------------


@dtypes
@pytest.mark.parametrize("ops, extra", [
    ([("matmul", {"transpose_b": True})], []),
    ([("matmul", {"transpose_b": True}), "add_bias", "gelu"], [(N,)]),
    ([("matmul", {"transpose_b": True}), "softmax"], []),
    ([("matmul", {"transpose_b": True}), "add", "rmsnorm"], [(M, N), (N,)]),
], ids=["plain", "bias-gelu", "softmax", "residual-rmsnorm"])
def test_transpose_b(ops, extra, dtype):
    run_chain(ops, [(M, K), (N, K), *extra], dtype)


@dtypes
@pytest.mark.parametrize("ops, extra", [
    (["matmul", "add_bias", "gelu"], [(N,)]),
    (["matmul", "add", "relu"], [(2, 5, N)]),
    (["matmul", "softmax"], []),
    (["matmul", "add_bias", "gelu", "layernorm"], [(N,), (N,), (N,)]),
    (["matmul", "rmsnorm"], [(N,)]),
    ([("matmul", {"transpose_b": True}), "silu"], None),
    (["rmsnorm", "matmul", "add"], None),
    (["matmul", "sum"], []),
], ids=["bias-gelu", "residual-relu", "softmax", "bias-gelu-ln", "rmsnorm", "transpose-silu", "rms-prologue", "sum"])
def test_3d_input(ops, extra, dtype):
    x = (2, 5, K)
    if ops[0] == "rmsnorm":
        shapes = [x, (K,), (K, N), (2, 5, N)]
    elif extra is None:
        shapes = [x, (N, K)]
    else:
        shapes = [x, (K, N), *extra]
    run_chain(ops, shapes, dtype)


@pytest.mark.parametrize("ops", [["relu"], ["softmax"], ["layernorm"], ["gelu", "mul"]], ids="-".join)
def test_3d_standalone(ops):
    shapes = [(2, 5, N)] + ([(2, 5, N)] if "mul" in ops else [])
    run_chain(ops, shapes, FP16)


@pytest.mark.parametrize("dtype", [FP32, FP16], ids=dtype_id)
@pytest.mark.parametrize("ops, shapes", [
    (["matmul", "add_bias", "relu"], [(1, K), (K, N), (N,)]),
    (["matmul", "softmax"], [(1, K), (K, N)]),
    (["matmul", "add", "rmsnorm"], [(1, K), (K, N), (1, N), (N,)]),
    (["matmul", "add_bias", "gelu"], [(M, K), (K, 1), (1,)]),
    (["matmul", "softmax"], [(M, K), (K, 1)]),
    (["matmul", "rmsnorm"], [(M, K), (K, 1)]),
    (["matmul", "add_bias", "silu"], [(M, 1), (1, N), (N,)]),
    (["rmsnorm", "matmul"], [(M, 1), (1, N)]),
    (["matmul", "add_bias"], [(1, 1), (1, 1), (1,)]),
    (["relu"], [(1, N)]),
    (["softmax"], [(M, 1)]),
    (["layernorm"], [(M, 1)]),
    (["gelu"], [(1, 1)]),
], ids=["M1-bias-relu", "M1-softmax", "M1-rmsnorm", "N1-bias-gelu", "N1-softmax", "N1-rmsnorm", "K1-bias-silu",
        "K1-rms-prologue", "all1", "standalone-M1", "standalone-softmax-N1", "standalone-ln-N1", "standalone-1x1"])
def test_size_one_dims(ops, shapes, dtype):
    run_chain(ops, shapes, dtype)


@pytest.mark.parametrize("dtype", [
    FP32,
    FP16,
], ids=dtype_id)
def test_layernorm_after_matmul_size_one_row(dtype):
    """LayerNorm over a single column is exactly beta (here 0): x - mean(x) == 0."""
    ops, shapes = ["matmul", "layernorm"], [(M, K), (K, 1)]
    kernel = amk.build_fused_kernel(ops, shapes, dtype, autotune=False)
    output = kernel(*make_inputs(ops, shapes, dtype))
    assert output.abs().max().item() <= 1e-2, output.flatten()[:8]


def test_bf16_softmax_after_matmul_is_as_accurate_as_eager():
    """Regression: the statistics once came from the fp32 tile while the second sweep re-read the bf16 one."""
    ops, shapes = ["matmul", "softmax"], [(M, K), (K, N)]
    inputs = make_inputs(ops, shapes, BF16, weight_scale=2.0)  # logits with std 2
    kernel = amk.build_fused_kernel(ops, shapes, BF16, autotune=False)
    output = kernel(*inputs)
    expected = eager(ops, [t.double() for t in inputs])
    eager_bf16 = torch.softmax(inputs[0] @ inputs[1], dim=-1)
    assert rel_l2(eager_bf16, expected) <= TOLERANCES[BF16]  # the eager bf16 computation meets the tolerance
    row_sums = output.double().sum(-1)
    assert (row_sums - 1).abs().max().item() <= 1e-2
    assert rel_l2(output, expected) <= TOLERANCES[BF16]


# --------------------------------------------------------------------------------------------------------------------
# Call-time behaviour: re-specialization, non-contiguous inputs
# --------------------------------------------------------------------------------------------------------------------


def check_call(kernel, ops, tensors, dtype=FP32):
    output = kernel(*tensors)
    expected = eager(ops, [t.double() for t in tensors])
    assert rel_l2(output, expected) <= TOLERANCES[dtype]
    return output


def test_respecialize_3d_batch():
    ops = ["matmul", "add_bias", "gelu"]
    kernel = amk.build_fused_kernel(ops, [(2, 5, K), (K, N), (N,)], FP32, autotune=False)
    first_source = kernel.source
    for batch in [(3, 7), (1, 1), (2, 5)]:
        tensors = make_inputs(ops, [(*batch, K), (K, N), (N,)], FP32, seed=sum(batch))
        output = check_call(kernel, ops, tensors)
        assert output.shape == (*batch, N)
    assert kernel.shapes[0] == (2, 5, K)
    assert kernel.source == first_source


@pytest.mark.parametrize("ops, extra", [
    (["matmul", "softmax"], []),
    (["matmul", "add_bias", "relu"], [(N,)]),
    (["rmsnorm", "matmul"], None),
    (["matmul", "add", "rmsnorm"], "residual"),
], ids=["softmax", "bias-relu", "rms-prologue", "residual-rmsnorm"])
def test_respecialize_rows(ops, extra):
    def shapes_for(m):
        if extra is None:
            return [(m, K), (K, N)]
        if extra == "residual":
            return [(m, K), (K, N), (m, N), (N,)]
        return [(m, K), (K, N), *extra]

    kernel = amk.build_fused_kernel(ops, shapes_for(M), FP16, autotune=False)
    for m in [1, 20, 130, M]:
        tensors = make_inputs(ops, shapes_for(m), FP16, seed=m)
        output = check_call(kernel, ops, tensors, FP16)
        assert output.shape == (m, N)
        assert kernel.num_kernels == 1


def test_respecialized_kernel_keeps_ir_of_built_shape():
    ops = ["matmul", "relu"]
    kernel = amk.build_fused_kernel(ops, [(M, K), (K, N)], FP32, autotune=False)
    ir_before = kernel.ir["tensor_op"]
    check_call(kernel, ops, make_inputs(ops, [(64, K), (K, N)], FP32))
    assert kernel.ir["tensor_op"] == ir_before
    assert f"[{M}, {K}]" in ir_before


def test_repeated_calls_take_the_hot_path_and_still_reject_bad_tensors():
    """After a first call, calls with the same shapes, dtype and device skip the detailed checks; anything else
    must still reach them and raise the amk error, and every call returns a fresh output."""
    ops = ["matmul", "add_bias", "relu"]
    kernel = amk.build_fused_kernel(ops, [(M, K), (K, N), (N,)], FP32, autotune=False)
    tensors = make_inputs(ops, [(M, K), (K, N), (N,)], FP32)
    first = check_call(kernel, ops, tensors)
    second = check_call(kernel, ops, tensors)
    assert kernel._hot is not None
    assert second.data_ptr() != first.data_ptr()
    x, w, b = tensors
    with pytest.raises(amk.errors.DTypeError, match="argument 1 has dtype torch.float16"):
        kernel(x, w.half(), b)
    with pytest.raises(amk.errors.ShapeError, match="argument 2 has shape"):
        kernel(x, w, torch.randn(N + 1, device=DEVICE))
    with pytest.raises(amk.errors.InvalidArgumentError, match="takes 3 tensors"):
        kernel(x, w)
    with pytest.raises(amk.errors.InvalidArgumentError, match="must be a torch.Tensor"):
        kernel(x, w, [1.0] * N)
    check_call(kernel, ops, make_inputs(ops, [(5, K), (K, N), (N,)], FP32))  # re-specialized: the hot path moves
    check_call(kernel, ops, tensors)


def test_a_two_kernel_chain_takes_the_hot_path_too():
    ops = ["matmul", "softmax", "matmul"]
    shapes = [(M, K), (K, N), (N, 24)]
    kernel = amk.build_fused_kernel(ops, shapes, FP32, autotune=False)
    assert kernel.num_kernels == 2
    tensors = make_inputs(ops, shapes, FP32)
    first = check_call(kernel, ops, tensors)
    assert kernel._hot is not None
    tensors[0] = tensors[0] * 2  # new values, same shapes: the hot path must compute, not replay
    second = check_call(kernel, ops, tensors)
    assert not torch.equal(first, second)


def test_non_contiguous_inputs():
    ops = ["matmul", "add_bias", "relu"]
    kernel = amk.build_fused_kernel(ops, [(M, K), (K, N), (N,)], FP32, autotune=False)
    generator = torch.Generator().manual_seed(1)
    x_strided = torch.randn(M, 2 * K, generator=generator).to(DEVICE)[:, ::2]       # column stride 2
    x_sliced = torch.randn(M, 3 * K, generator=generator).to(DEVICE)[:, 50:50 + K]  # row stride 300, offset
    w_transposed = (torch.randn(N, K, generator=generator).to(DEVICE) / K ** 0.5).t()  # a transposed view of a weight
    bias_strided = torch.randn(2 * N, generator=generator).to(DEVICE)[::2]
    for x in (x_strided, x_sliced):
        for w in (w_transposed, w_transposed.contiguous()):
            assert not x.is_contiguous()
            check_call(kernel, ops, [x, w, bias_strided])


@pytest.mark.parametrize("ops, shapes", [
    (["matmul", "add", "rmsnorm"], [(M, K), (K, N), (M, N), (N,)]),
    (["rmsnorm", "matmul", "add"], [(M, K), (K,), (K, N), (M, N)]),
    (["matmul", "softmax"], [(M, K), (K, N)]),
    (["layernorm"], [(M, N), (N,), (N,)]),
], ids=["residual-rmsnorm", "rms-prologue", "softmax", "layernorm"])
def test_non_contiguous_row_kernels(ops, shapes):
    kernel = amk.build_fused_kernel(ops, shapes, FP32, autotune=False)
    tensors = make_inputs(ops, shapes, FP32, seed=3)
    strided = []
    for t in tensors:
        if t.dim() == 2:  # same values, transposed storage
            strided.append(t.t().contiguous().t())
        else:
            strided.append(torch.stack([t, torch.zeros_like(t)], dim=-1)[..., 0])
        assert not strided[-1].is_contiguous()
    check_call(kernel, ops, strided)


def test_non_contiguous_3d_input():
    ops = ["matmul", "add_bias", "silu"]
    kernel = amk.build_fused_kernel(ops, [(2, 5, K), (K, N), (N,)], FP32, autotune=False)
    x = torch.randn(5, 2, K, device=DEVICE).transpose(0, 1)
    assert not x.is_contiguous()
    w, b = make_inputs(ops, [(2, 5, K), (K, N), (N,)], FP32)[1:]
    check_call(kernel, ops, [x, w, b])


def test_outputs_are_fresh_tensors():
    ops = ["matmul", "relu"]
    kernel = amk.build_fused_kernel(ops, [(M, K), (K, N)], FP32, autotune=False)
    tensors = make_inputs(ops, [(M, K), (K, N)], FP32)
    first = kernel(*tensors).clone()
    second = kernel(*tensors)
    assert torch.equal(first, second)
    assert second.is_contiguous()


@pytest.mark.parametrize("split_k", [2, 8])
def test_split_k_from_the_configuration_is_the_one_launched(split_k):
    """Regression: amk-stage once ignored SPLIT_K, so the kernel ran with the default while its workspace was sized
    for the configured value."""
    ops, shapes = ["matmul", "add_bias"], [(16, 2048), (2048, 64), (64,)]
    kernel, _ = run_chain(ops, shapes, FP32, grid={"SPLIT_K": [split_k]})
    assert kernel.config["SPLIT_K"] == split_k
    assert f"SPLIT_K={split_k}," in kernel.source


@pytest.mark.parametrize("ops, shapes", [
    (["matmul", "layernorm"], [(6, 8), (8, 127)]),
    (["matmul", "softmax"], [(33, 8), (8, 100)]),
    (["matmul", "add", "rmsnorm"], [(9, 5), (5, 48), (9, 48)]),
], ids=["layernorm-K8", "softmax-K8", "rmsnorm-K5"])
def test_a_contraction_shorter_than_16_loaded_whole(ops, shapes):
    """Regression (GPU): a row reduction after a matmul whose whole K (8) is one tile emitted ``tl.dot`` on a K of 8,
    which Triton compiles for a GPU only from 16 ("K >= 16"); the tile is padded to 16 (masked) now."""
    kernel, _ = run_chain(ops, shapes, FP32)
    assert "tl.arange(0, 8)" not in kernel.source and "tl.arange(0, 4)" not in kernel.source


def test_a_kernel_copies_and_pickles_by_building_again(tmp_path):
    """``copy.deepcopy`` and ``torch.save`` / ``torch.load`` of a kernel, before and after calls (which make its
    hot path): the copy is built from the same arguments, from the cache, and computes the same."""
    import copy

    config = amk.TunerConfig(target_cache_dir=tmp_path / "cache")
    kernel = amk.build_fused_kernel(["matmul", "relu"], [(8, 16), (16, 32)], torch.float32, tuner_config=config,
                                    parameter_grid={"BLOCK_SIZE_M": [16]})
    x, w = (torch.randn(*shape, device=DEVICE) for shape in ((8, 16), (16, 32)))
    expected = torch.relu(x @ w)
    before_a_call = copy.deepcopy(kernel)
    torch.testing.assert_close(kernel(x, w), expected)
    torch.save(kernel, tmp_path / "kernel.pt")
    for copied in (before_a_call, copy.deepcopy(kernel), torch.load(tmp_path / "kernel.pt", weights_only=False)):
        assert copied is not kernel and copied.cache_hit and copied.config == kernel.config
        torch.testing.assert_close(copied(x, w), expected)


@pytest.mark.parametrize(("argument", "dim"), [("even_tiles", "M"), ("use_tma", "M"), ("x", "x_ptr"),
                                               ("x", "stride_x_0")])
def test_argument_and_dimension_names_never_meet_the_emitted_names(argument, dim):
    """An argument named as a launcher local (``even_tiles``: the launcher overwrote the tensor with a bool) or a
    dimension named as a kernel parameter made from an argument's name (``x_ptr``: "duplicate argument") failed the
    kernel; both now get names of their own. Found by a fuzz of hand-written programs."""
    from xdsl.parser import Parser

    from amk.pipeline import compile_module, make_context

    text = f"""builtin.module {{
  func.func @f(%{argument}: !tensor_op.tensor<[{dim}, 24], f32>) -> !tensor_op.tensor<[{dim}, 24], f32> {{
    %0 = tensor_op.relu %{argument} : !tensor_op.tensor<[{dim}, 24], f32>
    func.return %0 : !tensor_op.tensor<[{dim}, 24], f32>
  }}
}}"""
    compiled = compile_module(Parser(make_context(), text).parse_module())
    x = torch.randn(5, 24, device=DEVICE)
    (out,) = compiled.program(x)
    torch.testing.assert_close(out, torch.relu(x))
