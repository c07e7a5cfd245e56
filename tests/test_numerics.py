"""Numerics: NaN and Inf propagate as in PyTorch; norms and softmax stay accurate on hard rows; bf16 rounding
matches PyTorch's; buffers of 2^31 elements or more are addressed with 64-bit offsets.

NaN/Inf: inputs hold NaN, +Inf and -Inf in chosen places (a NaN in a row, +Inf, -Inf, a row of only -Inf, a whole
column tile of -Inf as an attention mask makes), and the NaN / +Inf / -Inf positions of the output must be those of
the float64 PyTorch evaluation (``amk.verification.reference_for``); the finite values must agree within the dtype's
tolerance. Triton's ``tl.maximum`` / ``tl.minimum`` / ``tl.max`` drop NaN where ``torch.relu`` / ``torch.clamp`` /
``torch.maximum`` / ``torch.amax`` keep it; the lowering asks for NaN propagation (lowering/emit_triton.py) and the max
reduction detects NaN itself (lowering/rules.py). Signs of zero are not compared (``relu(-0.0)`` may give +0.0).

Large indices: a GPU is needed to run tensors of 2^31 elements (benchmarks/large_index.py does, recording its
results); here the IR and the emitted code are checked for 64-bit offsets, and kernels with a symbolic row count
(which always take the 64-bit path) are run on small tensors in the interpreter.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from conftest import DEVICE, INTERPRETER_WARNINGS, eager
from xdsl.parser import Parser

import amk
from amk.dialects import memory_staged, tiled_loop
from amk.lowering.configs import KernelConfig
from amk.lowering.stage import INDEX_LIMIT
from amk.oplist import build_module, normalize_ops
from amk.pipeline import compile_module
from amk.verification import TOLERANCES, reference_for

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
ALL_DTYPES = [FP32, FP16, BF16]
NAN, INF = math.nan, math.inf
SMALL_N = {"BLOCK_SIZE_N": [16]}  # several column tiles per row: running statistics merge across tiles

pytestmark = INTERPRETER_WARNINGS


def dtype_id(dtype):
    return str(dtype).removeprefix("torch.")


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    import os

    previous = os.environ.get("AMK_CACHE_DIR")
    os.environ["AMK_CACHE_DIR"] = str(tmp_path_factory.mktemp("amk-numerics-cache"))
    yield
    if previous is None:
        os.environ.pop("AMK_CACHE_DIR", None)
    else:
        os.environ["AMK_CACHE_DIR"] = previous


def rel_l2(out, ref):
    out, ref = out.double(), ref.double()
    return (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30)).item()


# ----------------------------------------------------------------------------------------------------------------------
# NaN and Inf
# ----------------------------------------------------------------------------------------------------------------------

M, K, N = 9, 40, 48  # N = 3 column tiles of 16 with SMALL_N


def special_x(shape, seed=0):
    """Standard normal values with special rows: NaN in row 0, +Inf in row 1, -Inf in row 2, a row of only -Inf
    (row 3), +Inf and -Inf together (row 4), -Inf over the first column tile (row 5), NaN and Inf (row 6)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    rows, cols = x.shape[-2], x.shape[-1]
    flat = x.view(-1, cols)
    specials = [(0, 3, NAN), (1, cols - 1, INF), (2, 0, -INF), (4, 1, INF), (4, cols // 2, -INF), (6, 2, NAN),
                (6, 5 % cols, INF)]
    for row, col, value in specials:
        if row < rows:
            flat[row, col] = value
    if rows > 3:
        flat[3] = -INF
    if rows > 5:
        flat[5, :16] = -INF
    return x


def check_special(ops, shapes, dtype, inputs, grid=None):
    kernel = amk.build_fused_kernel(ops, shapes, dtype, autotune=False, parameter_grid=grid)
    tensors = [t.to(DEVICE, dtype) for t in inputs]
    result = kernel(*tensors)
    # The float64 references run on the CPU. On CUDA, PyTorch's float64 RMSNorm is its Welford kernel (rstd =
    # rsqrt(M2 + mean^2 + eps)), whose M2 turns NaN once a row holds an Inf: the whole row comes out NaN. Its CPU
    # kernels, and its CUDA kernel for fp32/fp16/bf16 rows, sum the squares as the definition does (x / inf = 0; NaN
    # only where x is +-Inf), and so do amk's kernels.
    out = result.double().cpu()
    wide = [t.double().cpu() for t in tensors]
    ref = reference_for(kernel.ops, len(shapes))(*wide).double()
    independent = eager(ops, wide)
    assert torch.equal(torch.isnan(ref), torch.isnan(independent)), "the references disagree"
    rounded = ref.to(result.dtype).double()  # where the reference overflows the output dtype
    for name, mask in (("NaN", torch.isnan), ("+Inf", lambda t: t == INF), ("-Inf", lambda t: t == -INF)):
        have, want = mask(out), mask(rounded)
        assert torch.equal(have, want), (f"{ops} {dtype}: {name} at {have.nonzero().tolist()} in the kernel's output, "
                                         f"at {want.nonzero().tolist()} in PyTorch's")
    finite = torch.isfinite(rounded)
    assert rel_l2(out[finite], ref[finite]) <= TOLERANCES[dtype], f"{ops} {dtype}: finite values differ"
    return kernel, out


STANDALONE = [
    ["relu"], ["gelu"], [("gelu", {"approximate": "tanh"})], ["silu"], ["sigmoid"], ["tanh"], ["exp"], ["mish"],
    ["leaky_relu"], [("clamp", {"min": -0.5, "max": 0.5})], [("clamp", {"min": 0.0})], ["hardtanh"],
    [("scale", {"factor": -2.0})], ["add"], ["sub"], ["mul"], ["maximum"], ["minimum"],
    ["sum"], ["mean"], ["max"], ["logsumexp"], [("max", {"keepdim": True})], ["softmax"], ["layernorm"], ["rmsnorm"],
    ["relu", "softmax"], ["gelu", "layernorm", "relu"], ["add", "max", "exp"],
    # constants that are not finite numbers (the kernel source spells them as float("nan") and float("inf"))
    [("scale", {"factor": NAN}), "softmax"], [("clamp", {"min": NAN})], [("scale", {"factor": INF})],
]


def op_ids(ops):
    return "-".join(op if isinstance(op, str) else op[0] + "".join(f"_{k}{v}" for k, v in op[1].items()) for op in ops)


def operands_for(ops, x):
    """x, then for a binary op an operand holding specials of its own (NaN meets -Inf, etc.)."""
    if any(op in ("add", "sub", "mul", "maximum", "minimum") for op in ops):
        other = torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
        other[0, 0], other[1, 3], other[2, -1], other[7, 0] = -INF, NAN, INF, NAN
        return [x, other]
    return [x]


# Every op in fp16; the ops built on max/min, reductions and norms in all three dtypes.
KEY_OPS = [["relu"], ["gelu"], ["add"], ["maximum"], [("clamp", {"min": -0.5, "max": 0.5})], ["max"], ["logsumexp"],
           ["softmax"], ["layernorm"], ["rmsnorm"]]
STANDALONE_CASES = ([(ops, FP16) for ops in STANDALONE]
                    + [(ops, dtype) for dtype in (FP32, BF16) for ops in KEY_OPS])


@pytest.mark.parametrize("ops, dtype", STANDALONE_CASES,
                         ids=[f"{op_ids(ops)}-{dtype_id(dtype)}" for ops, dtype in STANDALONE_CASES])
def test_nan_inf_standalone(ops, dtype):
    inputs = operands_for(ops, special_x((M, N)))
    check_special(ops, [tuple(t.shape) for t in inputs], dtype, inputs, grid=SMALL_N)


AFTER_MATMUL = [
    (["matmul", "relu"], []), (["matmul", "add_bias", "gelu"], [(N,)]), (["matmul", "add", "layernorm"], [(M, N)]),
    (["matmul", "softmax"], []), (["matmul", "max"], []), (["matmul", "logsumexp"], []),
    (["matmul", "add", "rmsnorm"], [(M, N)]), (["matmul", ("clamp", {"min": -1.0, "max": 1.0}), "sum"], []),
    (["rmsnorm", "matmul", "relu"], None), (["layernorm", "matmul", "add_bias"], None),
]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("ops, extra", AFTER_MATMUL, ids=[op_ids(ops) for ops, _ in AFTER_MATMUL])
def test_nan_inf_after_matmul(ops, extra, dtype):
    """NaN/Inf in the matmul's A (whole output rows become NaN / Inf as in torch) and in the epilogue operands."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(M, K, generator=generator)
    x[0, 5], x[1, 7], x[2, 0] = NAN, INF, -INF
    w = torch.randn(K, N, generator=generator) / K ** 0.5  # row 1 of x @ w: ±Inf; row 0: NaN; row 2: ±Inf
    if extra is None:  # a prologue norm: x, then no weights
        shapes, inputs = [(M, K), (K, N)] + ([(N,)] if "add_bias" in ops else []), [x, w]
        if "add_bias" in ops:
            inputs.append(torch.randn(N, generator=generator))
    else:
        others = [torch.randn(s, generator=generator) for s in extra]
        for other in others:
            other.view(-1)[3] = NAN
            other.view(-1)[-1] = -INF
        shapes, inputs = [(M, K), (K, N), *extra], [x, w, *others]
    grids = [None, {"BLOCK_SIZE_N": [16], "BLOCK_SIZE_K": [16]}] if dtype != BF16 else [None]
    for grid in grids:
        check_special(ops, shapes, dtype, inputs, grid=grid)


@pytest.mark.parametrize("dtype", [FP32, FP16], ids=dtype_id)
@pytest.mark.parametrize("grid", [None, SMALL_N], ids=["one-tile", "three-tiles"])
def test_masked_attention_rows(dtype, grid):
    """Scores + a causal mask of -Inf, then softmax: rows whose first column tiles are all masked must not turn into
    NaN (the online softmax used to compute exp(-inf - -inf) for such a tile), and a fully masked row is NaN as in
    PyTorch."""
    rows, head, cols = 12, 32, 48
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(rows, head, generator=generator)
    k = torch.randn(head, cols, generator=generator) / head ** 0.5
    mask = torch.zeros(rows, cols)
    for row in range(rows):
        mask[row, :cols - 4 * row - 1] = -INF  # row r sees its last 4r+1 columns; row 11 sees 45
    mask[0] = -INF  # nothing visible: NaN in PyTorch too
    ops = ["matmul", ("scale", {"factor": 0.5}), "add", "softmax"]
    kernel, out = check_special(ops, [(rows, head), (head, cols), (rows, cols)], dtype, [q, k, mask], grid=grid)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1:]).all()
    assert torch.allclose(out[1:].sum(-1), torch.ones(rows - 1, dtype=torch.float64, device=out.device), atol=5e-3)
    check_special(["add", "softmax"], [(rows, cols), (rows, cols)], dtype, [q @ k, mask], grid=grid)
    check_special(["add", "logsumexp"], [(rows, cols), (rows, cols)], dtype, [q @ k, mask], grid=grid)


@pytest.mark.parametrize("scale", [96 ** -0.5, 0.69])
def test_a_row_masked_whole_before_the_scale_stays_uniform(scale):
    """softmax((q @ k + mask) * c) in bf16 with Hugging Face's finfo.min padding mask and a query row masked whole:
    uniform, as eager's. The exponent in base 2 (amk-fold-exponent-scales) rounds x * c * log2(e) and the row
    maximum's own product apart by more than 128 at such values, which made the row inf / inf = NaN; it is kept to
    matmul tiles (scores), so this tile, a mask added to them, keeps exp (a helper's hunt)."""
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, 32, generator=generator), torch.randn(32, 64, generator=generator)
    mask = torch.zeros(16, 64)
    mask[3, :] = torch.finfo(BF16).min
    mask[5, 10:] = torch.finfo(BF16).min
    ops = ["matmul", "add", ("scale", {"factor": scale}), "softmax"]
    kernel = amk.build_fused_kernel(ops, [(16, 32), (32, 64), (16, 64)], BF16, autotune=False)
    out = kernel(*(t.to(BF16).to(kernel.device) for t in (q, k, mask))).double().cpu()
    reference = torch.softmax((q.to(BF16).double() @ k.to(BF16).double() + mask.to(BF16).double()) * scale, dim=-1)
    assert out.isfinite().all() and torch.allclose(out[3], torch.full((64,), 1 / 64, dtype=torch.float64))
    assert rel_l2(out, reference) <= TOLERANCES[BF16]


@pytest.mark.parametrize("op", ["relu", "maximum", "clamp", "max"])
def test_triton_max_alone_would_drop_nan(op):
    """The emitted code asks Triton for NaN propagation (its default, PropagateNan.NONE, gives relu(NaN) = 0)."""
    ops = {"clamp": [("clamp", {"min": 0.0, "max": 1.0})]}.get(op, [op])
    shapes = [(4, 8), (4, 8)] if op == "maximum" else [(4, 8)]
    kernel = amk.build_fused_kernel(ops, shapes, FP32, autotune=False)
    if op == "max":
        assert "!= " in kernel.source, "the max reduction no longer checks for NaN"
    else:
        assert "propagate_nan=tl.PropagateNan.ALL" in kernel.source
    x = torch.ones(4, 8, device=DEVICE)
    x[1, 2] = NAN
    out = kernel(*([x] * len(shapes)))
    assert torch.isnan(out[1, 2] if op != "max" else out[1])


# ----------------------------------------------------------------------------------------------------------------------
# Hard rows for norms and softmax in fp16
# ----------------------------------------------------------------------------------------------------------------------

ROWS, COLS = 6, 200  # 200 columns: two column tiles by default, 13 with SMALL_N


def hard_rows(kind: str, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(ROWS, COLS, generator=generator)
    if kind == "constant":
        return torch.tensor([0.0, 1.0, -2.4718, 1e4 + 0.7, -6e4, 0.1]).repeat_interleave(COLS).view(ROWS, COLS)
    if kind == "large_mean":  # |x| ~ 1e4 with a spread of ~10: a naive E[x^2] - E[x]^2 cancels catastrophically
        return 1e4 * torch.tensor([1, -1, 1, 2, -2, 3.0]).view(ROWS, 1) + 10 * noise
    if kind == "large_spread":  # magnitudes up to ~4e4 (fp16's maximum is 65504)
        return 1e4 * noise
    raise ValueError(kind)


NORM_CASES = [
    ("layernorm", [(COLS,), (COLS,)]), ("layernorm", []), ("rmsnorm", [(COLS,)]), ("rmsnorm", []), ("softmax", []),
    ("logsumexp", []),
]


@pytest.mark.parametrize("grid", [None, SMALL_N], ids=["default-tiles", "small-tiles"])
@pytest.mark.parametrize("kind", ["constant", "large_mean", "large_spread"])
@pytest.mark.parametrize("op, extra", NORM_CASES, ids=[f"{op}{len(e)}" for op, e in NORM_CASES])
def test_hard_rows_fp16(op, extra, kind, grid):
    x = hard_rows(kind).to(DEVICE, FP16)
    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(s, generator=generator).to(DEVICE, FP16) for s in extra]
    kernel = amk.build_fused_kernel([op], [(ROWS, COLS), *extra], FP16, autotune=False, parameter_grid=grid)
    out = kernel(x, *weights)
    ref = reference_for(kernel.ops, 1 + len(extra))(x.double(), *[w.double() for w in weights])
    assert torch.isfinite(out).all(), f"{op} on {kind} rows: non-finite output"
    if op == "layernorm" and kind == "constant" and not extra:
        # x - mean(x) is exactly 0: the output must be exactly 0 (the reference's norm is 0, so no relative error)
        assert out.abs().max().item() == 0.0
        return
    error = rel_l2(out, ref)
    assert error <= TOLERANCES[FP16], f"{op} on {kind} rows: rel L2 {error:.2e} > {TOLERANCES[FP16]:.0e}"


@pytest.mark.parametrize("grid", [None, SMALL_N], ids=["default-tiles", "small-tiles"])
@pytest.mark.parametrize("dtype", [FP32, FP16], ids=dtype_id)
def test_layernorm_of_constant_rows_is_exactly_beta(dtype, grid):
    """x - mean(x) is exactly 0 on a row of equal values, whatever the value: the mean of 127 copies of 10000.7 used to
    come out ~5e-4 off in fp32 (the rounding of the sum), and LayerNorm multiplies that by 1/sqrt(eps): 0.3 instead of
    0. The corrected two-pass moments (lowering/rules.py) give the value back exactly."""
    values = torch.tensor([10000.7, -12345.678, -2.4718, 0.1, 1 / 3, 7.0], device=DEVICE)
    x = values.repeat_interleave(127).view(6, 127).to(dtype)
    beta = torch.randn(127, generator=torch.Generator().manual_seed(0)).to(DEVICE, dtype)
    gamma = torch.ones(127, dtype=dtype, device=DEVICE)
    kernel = amk.build_fused_kernel(["layernorm"], [(6, 127), (127,), (127,)], dtype, autotune=False,
                                    parameter_grid=grid)
    assert torch.equal(kernel(x, gamma, beta), beta.expand(6, 127))
    bare = amk.build_fused_kernel(["layernorm"], [(6, 127)], dtype, autotune=False, parameter_grid=grid)
    assert bare(x).abs().max().item() == 0.0
    # and after a matmul whose rows come out equal (W's columns all alike). Integers below 128 times 2047/2048 (exact
    # in fp16) and their sums of 8 are exact in fp32, so each row's columns are the same number in whatever order a
    # dot sums (Triton's interpreter runs dots in numpy, whose BLAS summed edge columns differently on an AMD EPYC);
    # a row's plain mean, a sum of 127 copies over 127, is not exact for five rows of six: the case to get right.
    w = torch.full((8, 127), 2047 / 2048).to(DEVICE, dtype)
    a = torch.randint(-127, 128, (6, 8), generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    fused = amk.build_fused_kernel(["matmul", "layernorm"], [(6, 8), (8, 127)], dtype, autotune=False,
                                   parameter_grid=grid)
    assert fused(a, w).abs().max().item() == 0.0
    # rows of values v with fl(fl(127 v) / 127) != v in fp32: the statistics merges must not scale a mean up and down
    exact = torch.tensor([200.23926, 8.661926, -100.35596, -34.69214, 97.60498, -84.36767578125])
    assert dtype != FP32 or ((exact * 127) / 127 != exact).all()
    a = torch.zeros(6, 8)
    a[:, 0] = exact  # a @ ones: row i holds exact[i] in every column
    assert fused(a.to(DEVICE, dtype), torch.ones(8, 127, dtype=dtype, device=DEVICE)).abs().max().item() == 0.0


def test_divisions_round_as_pytorchs_do():
    """Triton's fp32 ``/`` is div.full.f32 on NVIDIA GPUs (up to 2 ulp off); PyTorch's kernels divide with IEEE
    rounding, and so do amk's (the GPU gave LayerNorms of constant rows a mean one ulp off): every division in the
    emitted kernels is ``tl.math.div_rn``."""
    kernel = amk.build_fused_kernel(["div", "layernorm"], [(6, 100), (6, 100)], FP16, autotune=False)
    kernels = kernel.source.split("\ndef launch(")[0]
    assert "tl.math.div_rn(" in kernels and " / " not in kernels


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm", "softmax"])
def test_hard_rows_after_matmul_fp16(op):
    """A residual of magnitude 1e4 added to a matmul output, then the norm (the statistics see large-mean rows)."""
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(ROWS, 64, generator=generator).to(DEVICE, FP16)
    w = (torch.randn(64, COLS, generator=generator) / 8).to(DEVICE, FP16)
    residual = hard_rows("large_mean").to(DEVICE, FP16)
    for grid in (None, SMALL_N):
        kernel = amk.build_fused_kernel(["matmul", "add", op], [(ROWS, 64), (64, COLS), (ROWS, COLS)], FP16,
                                        autotune=False, parameter_grid=grid)
        out = kernel(x, w, residual)
        ref = reference_for(kernel.ops, 3)(x.double(), w.double(), residual.double())
        # The fp16 rounding of the pre-norm value (spacing 8 at 1e4) is part of the problem eager fp16 has too.
        eager_fp16 = reference_for(kernel.ops, 3)(x, w, residual)
        limit = max(TOLERANCES[FP16], 2 * rel_l2(eager_fp16, ref))
        assert rel_l2(out, ref) <= limit, f"{op}: rel L2 {rel_l2(out, ref):.2e} > {limit:.1e}"


# ----------------------------------------------------------------------------------------------------------------------
# fp32 LayerNorm of wide rows far from zero
# ----------------------------------------------------------------------------------------------------------------------

WIDE = 16400  # past row_resident's 16384 columns: a row is ~129 column tiles of 128 whose statistics merge


def wide_rows_far_from_zero(rows=4, seed=0) -> torch.Tensor:
    return 100 + torch.randn(rows, WIDE, generator=torch.Generator().manual_seed(seed))


def assert_as_accurate_as_eager(out, ref, eager_fp32, what):
    """Within fp32's bar and at most twice eager fp32's error (PyTorch rounds the mean once, at ulp(100))."""
    error, eager_error = rel_l2(out, ref), rel_l2(eager_fp32, ref)
    limit = min(TOLERANCES[FP32], 2 * eager_error)
    assert error <= limit, f"{what}: rel L2 {error:.2e} > {limit:.1e} (eager fp32 {eager_error:.1e})"


def test_layernorm_of_wide_rows_far_from_zero_fp32():
    """Folding ~129 tiles' (count, mean, M2) one at a time rounded the running mean at ulp(100) in every merge: the
    error random-walked into the mean, and LayerNorm's output carries it times rstd (rel L2 1.7e-5, eager 1.7e-6 on
    the CPU). The statistics keep the mean as a per-row pivot plus a small offset (lowering/rules.py)."""
    x = wide_rows_far_from_zero().to(DEVICE)
    kernel = amk.build_fused_kernel(["layernorm"], [tuple(x.shape)], FP32, autotune=False)
    assert 'strategy = "row_strip"' in kernel.ir["tiled_loop"]
    ref = torch.nn.functional.layer_norm(x.double(), (WIDE,))
    assert_as_accurate_as_eager(kernel(x), ref, torch.nn.functional.layer_norm(x, (WIDE,)), "layernorm")


def test_layernorm_of_a_row_whose_first_tile_is_far_from_its_mean_fp32():
    """A ramp from -3 to 3 in 16-wide tiles: the first tile's mean (the row's pivot) is 3 from the row's. With the
    pivot left there, the offset grew to 3 and every one of the 1025 merges rounded it at that scale (rel L2 1.3e-5,
    eager 6.8e-8); the merged pivot now follows the mean (TwoSum), leaving the sequential sum of the M2s (~2e-7)."""
    x = torch.linspace(-3, 3, WIDE, device=DEVICE).view(1, WIDE)
    kernel = amk.build_fused_kernel(["layernorm"], [(1, WIDE)], FP32, autotune=False,
                                    parameter_grid={"BLOCK_SIZE_N": [16]})
    assert 'strategy = "row_strip"' in kernel.ir["tiled_loop"]
    error = rel_l2(kernel(x), torch.nn.functional.layer_norm(x.double(), (WIDE,)))
    assert error <= 1e-6, f"rel L2 {error:.2e}"


@pytest.mark.parametrize("strategy,merge_chunk", [("row_strip", 1), ("strip_finish", 1), ("chunk_recompute", 1),
                                                  ("tile_recompute", 64)])
def test_layernorm_of_wide_rows_far_from_zero_after_matmul_fp32(strategy, merge_chunk):
    """The same rows as a residual added to a matmul's output, through the strategies that merge the tiles'
    statistics one at a time (row_strip's sweep, strip_finish's merge), by chunk (chunk_recompute) and many at once
    (tile_recompute: the 129 tiles' states in three loads). The matmul's operands are small integers (quarters), so
    that its products and sums are exact in fp32 and TF32 alike, on a GPU as in the interpreter: the error measured is
    the LayerNorm's (a GPU's fp32 dot, 3xTF32 or IEEE, otherwise rounds differently from cuBLAS's)."""
    ops, shapes = ["matmul", "add", "layernorm"], [(4, 16), (16, WIDE), (4, WIDE)]
    config = KernelConfig(BLOCK_M=16, BLOCK_N=128, BLOCK_K=16, SPLIT_N=4, num_warps=4, num_stages=2)
    compiled = compile_module(build_module(ops, shapes, FP32), lambda kernel: config, reduction_strategy=strategy,
                              merge_chunk=merge_chunk)
    assert f'strategy = "{strategy}"' in compiled.ir["tiled_loop"]
    generator = torch.Generator().manual_seed(1)
    a = torch.randint(-4, 5, (4, 16), generator=generator) / 4
    w = torch.randint(-4, 5, (16, WIDE), generator=generator).float()
    inputs = [t.to(DEVICE) for t in (a, w, wide_rows_far_from_zero())]
    reference = reference_for(normalize_ops(ops), len(shapes))
    out = compiled.program(*inputs)[0]
    assert_as_accurate_as_eager(out, reference(*[t.double() for t in inputs]), reference(*inputs), strategy)


# ----------------------------------------------------------------------------------------------------------------------
# Relative precision of tanh-based ops near zero
# ----------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["tanh", "mish", "silu", "sigmoid", "softplus", "hardswish"])
def test_small_values_keep_relative_precision_fp32(op):
    """tanh is 2 * sigmoid(2x) - 1 in the lowering, which cancels near 0 (tanh(1e-6) came out 12% off, tanh(1e-8)
    as exactly 0, so tanh(x) * inf gave NaN instead of ±inf); mish's log(1 + exp(-|x|)) lost the small term (mish(-20)
    came out 0). Each op must be within 1e-5 relative of float64 PyTorch on every element, 1e-30 to 30 in magnitude.
    (GELU's tail below x ~ -5, where 1 + erf(x/sqrt(2)) cancels, is 0 in amk as in PyTorch's own float32.)"""
    magnitudes = torch.logspace(-30, math.log10(30), 181, dtype=torch.float64)
    x = torch.cat([magnitudes, -magnitudes, torch.zeros(1)]).view(1, -1).to(DEVICE, FP32)
    ops = [op]
    kernel = amk.build_fused_kernel(ops, [tuple(x.shape)], FP32, autotune=False)
    out = kernel(x).double()
    expected = eager(ops, [x.double()])
    nonzero = expected != 0
    relative = (out - expected).abs()[nonzero] / expected.abs()[nonzero]
    worst = relative.argmax()
    assert relative.max().item() <= 1e-5, (f"{op}: relative error {relative.max().item():.2e} at "
                                            f"x = {x.double()[nonzero][worst].item():.3e}")
    assert torch.equal(out == 0, expected == 0)


# ----------------------------------------------------------------------------------------------------------------------
# bf16 rounding
# ----------------------------------------------------------------------------------------------------------------------

def test_bf16_stores_round_to_nearest_even():
    """fp32 -> bf16 in a kernel gives PyTorch's bits (round to nearest, ties to even), also in the interpreter, whose
    own conversion truncates (lowering/emit_triton.py rounds first there). Subnormals are left out: the
    interpreter's conversion mishandles them either way."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 96, generator=generator) * 10.0 ** torch.randint(-20, 20, (64, 96), generator=generator)
    x[0, :8] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-7 - 2**-12), 3.3895e38, NAN, INF, -INF, -0.0])
    x = x.to(DEVICE)
    kernel = amk.build_fused_kernel([("cast", {"dtype": BF16})], [tuple(x.shape)], FP32, autotune=False)
    out = kernel(x)
    want = x.to(BF16)
    assert out.dtype == BF16
    same = (out.view(torch.int16) == want.view(torch.int16)) | (out.isnan() & want.isnan())
    assert same.all(), f"{int((~same).sum())} of {x.numel()} values rounded differently, e.g. {x[~same][:4].tolist()}"
    # A matmul's fp32 accumulator stored as bf16: as close to the exact product as eager bf16 (round to nearest).
    a = torch.randn(33, 70, generator=generator).to(DEVICE, BF16)
    b = (torch.randn(70, 20, generator=generator) / 8).to(DEVICE, BF16)
    product = amk.build_fused_kernel(["matmul"], [(33, 70), (70, 20)], BF16, autotune=False)(a, b)
    exact = a.double() @ b.double()
    assert rel_l2(product, exact) <= 1.25 * rel_l2((a.float() @ b.float()).to(BF16), exact)


# ----------------------------------------------------------------------------------------------------------------------
# Large indices (64-bit offsets)
# ----------------------------------------------------------------------------------------------------------------------

def staged_kernels(ops, shapes, dtype=FP16):
    """The memory_staged kernels (and their Triton sources) of a chain, built without allocating any tensor."""
    from amk.oplist import build_module
    from amk.pipeline import compile_module

    compiled = compile_module(build_module(ops, shapes, dtype))
    return compiled


def access_bits(compiled) -> dict[str, set[int]]:
    """index_bits of every global access, by buffer argument name."""
    from amk.pipeline import make_context

    module = Parser(make_context(), compiled.ir["memory_staged"]).parse_module()
    bits: dict[str, set[int]] = {}
    for op in module.walk():
        if isinstance(op, memory_staged.GlobalAccessOp):
            buffer = op.source if hasattr(op, "source") else op.dest
            bits.setdefault(buffer.name_hint, set()).add(op.index_bits.value.data)
    return bits


BIG = 2**16 + 1  # rows; with 2^15 columns: 2^31 + 2^15 elements


@pytest.mark.parametrize("ops, shapes, wide, narrow", [
    (["gelu"], [(BIG, 2**15)], {"x", "out0"}, set()),
    (["add_bias", "relu"], [(BIG, 2**15), (2**15,)], {"x", "out0"}, {"bias"}),
    (["softmax"], [(BIG, 2**15)], {"x", "out0"}, set()),
    (["layernorm"], [(BIG, 2**15), (2**15,), (2**15,)], {"x", "out0"}, {"gamma", "beta"}),
    (["matmul", "add_bias", "gelu"], [(2**17 + 1, 64), (64, 2**14), (2**14,)], {"out0"}, {"x", "w", "bias"}),
    (["matmul", "softmax"], [(2**17 + 1, 64), (64, 2**14)], {"out0"}, {"x", "w"}),
    (["rmsnorm", "matmul"], [(2**17, 2**14 + 1), (2**14 + 1, 64)], {"x"}, {"w", "out0"}),
    # exactly 2^31 elements: 64-bit; one row fewer: 32-bit
    (["relu"], [(2**16, 2**15)], {"x", "out0"}, set()),
    (["relu"], [(2**16 - 1, 2**15)], set(), {"x", "out0"}),
], ids=["gelu", "bias-relu", "softmax", "layernorm", "matmul-bias-gelu", "matmul-softmax", "rms-prologue",
        "exactly-2^31", "just-below"])
def test_large_buffers_get_64_bit_offsets(ops, shapes, wide, narrow):
    compiled = staged_kernels(ops, shapes)
    bits = access_bits(compiled)
    for name in wide:
        assert bits[name] == {64}, f"{name}: index_bits {bits[name]}"
    for name in narrow:
        assert bits[name] == {32}, f"{name}: index_bits {bits[name]}"
    source = compiled.ir["triton"]
    if wide:
        assert ".to(tl.int64)" in source
        for name in wide:  # every pointer into a wide buffer is offset with int64 indices
            for line in source.splitlines():
                if f"{name}_ptr +" in line:
                    assert line.count(".to(tl.int64)") >= 1, line.strip()
    else:
        assert ".to(tl.int64)" not in source
    for line in source.splitlines():
        for name in narrow:
            if f"tl.load({name}_ptr +" in line:
                assert ".to(tl.int64)" not in line, line.strip()
    assert 2**16 * 2**15 == INDEX_LIMIT


PLACEHOLDER = 7919  # a static row count spelled out in the IR text, then replaced by the symbol M


def compiled_with_symbolic_rows(ops):
    """``ops`` on x [M, 64], w [64, 40] (and a bias [40]), compiled with the symbol M for the row count."""
    from amk.ir_dump import module_text
    from amk.oplist import build_module
    from amk.pipeline import compile_module, make_context

    text = module_text(build_module(ops, [(PLACEHOLDER, 64), (64, 40), (40,)], FP16))
    assert text.count(str(PLACEHOLDER)) >= 3
    return compile_module(Parser(make_context(), text.replace(str(PLACEHOLDER), "M")).parse_module())


def assert_runs_at_rows(compiled, ops, row_counts) -> None:
    """``compiled`` matches the fp64 reference of ``ops`` at each row count, on fresh random inputs."""
    for rows in row_counts:
        generator = torch.Generator().manual_seed(rows)
        x = torch.randn(rows, 64, generator=generator).to(DEVICE, FP16)
        w = (torch.randn(64, 40, generator=generator) / 8).to(DEVICE, FP16)
        b = torch.randn(40, generator=generator).to(DEVICE, FP16)
        out = compiled.program(x, w, b)[0]
        assert out.shape == (rows, 40)
        assert rel_l2(out, eager(ops, [x.double(), w.double(), b.double()])) <= TOLERANCES[FP16], rows


@pytest.mark.parametrize("op", ["gelu", "softmax", "layernorm"])
def test_symbolic_rows_run_with_64_bit_offsets(op):
    """A symbolic row count may exceed 2^31 elements, so its buffers take the 64-bit path; run it on small M."""
    ops = ["matmul", "add_bias", op]
    compiled = compiled_with_symbolic_rows(ops)
    assert access_bits(compiled)["x"] == {64}
    assert ".to(tl.int64)" in compiled.ir["triton"]
    assert_runs_at_rows(compiled, ops, (1, 37, 130))


@pytest.mark.parametrize("op", ["gelu", "softmax"])
def test_symbolic_rows_are_masked_only_at_uneven_launches(op):
    """Rows of a symbolic count are masked at launches where the count is not a multiple of the row tile (the
    launcher's EVEN_TILES check), and unmasked where it is; both run right."""
    ops = ["matmul", "add_bias", op]
    compiled = compiled_with_symbolic_rows(ops)
    source = compiled.ir["triton"]
    (block_m,) = {int(b) for b in re.findall(r"even_tiles = M % (\d+) == 0", source)}
    assert "EVEN_TILES: tl.constexpr" in source
    assert re.search(r"tl\.store\(out0_ptr .*, mask=\(out0_cols\[None, :\] < 40\) if EVEN_TILES else", source)
    assert_runs_at_rows(compiled, ops, (block_m, 3 * block_m, block_m + 3, 1))


def test_tile_level_kernel_has_no_index_width():
    """index_bits is decided by amk-stage, per buffer, from the buffer's size alone (not by the tile pass)."""
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass
    from amk.pipeline import make_context

    module = build_module(["gelu"], [(BIG, 2**15)], FP16)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    assert any(isinstance(op, tiled_loop.KernelOp) for op in module.walk())
    assert "index_bits" not in str(module)


def test_outputs_agree_where_both_are_infinite_or_nan_alike():
    """One rule for the tuner's check of a candidate, the build's of the vendor-GEMM program and verification: the
    reference's non-finite values must be the output's (a -inf fill before a log_softmax leaves -inf in every
    program's output, and -inf - -inf is NaN: the whole output's relative error was NaN and every candidate was
    taken for wrong), the relative error is over the rest."""
    from amk.numerics import relative_error
    from amk.verification import compare

    want = torch.tensor([1.0, -math.inf, math.nan, 2.0])
    assert relative_error(want.clone(), want) == 0.0
    assert relative_error(torch.tensor([1.001, -math.inf, math.nan, 2.0]), want) == pytest.approx(1e-3 / 5 ** 0.5, rel=1e-4)
    for other in ([1.0, math.inf, math.nan, 2.0], [1.0, -math.inf, 0.0, 2.0], [1.0, -math.inf, math.nan, math.nan]):
        assert relative_error(torch.tensor(other), want) == math.inf
        assert not compare(torch.tensor(other), want, torch.float32).passed
    assert compare(want.clone(), want, torch.float32).passed
    assert relative_error(torch.tensor([]), torch.tensor([])) == 0.0
