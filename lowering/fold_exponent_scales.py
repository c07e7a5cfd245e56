"""``amk-fold-exponent-scales``: take the row maximum of a positively scaled tile before its scale, and its
exponential in base 2 where the output is 16-bit.

A softmax (or log-sum-exp) of scaled logits, ``softmax(x * c)`` as attention and workload G write it, lowers to tile
ops that multiply every element by ``c``, take the row maximum of the products, subtract it and call ``exp`` (which
the GPU computes as ``ex2(y * log2(e))``). The scaled tile is read twice, by the maximum and by the subtraction, so
its multiply stays an instruction of its own. With ``c`` positive (and finite and non-zero in fp32) two exact
rewrites leave the product one reader, the subtraction, which the GPU contracts with it into one FMA (``x * c - m``
rounded once): an FP32 instruction an element less, on kernels whose exponentials bound them
(``benchmarks/NOTES.md``, the thirty-sixth and thirty-seventh sessions):

- ``select(valid, x * c, -inf)`` is ``select(valid, x, -inf) * c`` (a masked element stays ``-inf``), and so is
  ``select(masked, -inf, x * c)``, a ``masked_fill`` of -inf;
- ``max(x * c)`` over a row is ``max(x) * c`` (multiplying by a positive number keeps the order; rounding is
  monotonic), and so is ``min``.

- in a kernel whose outputs are fp16 or bf16, ``exp(x * c - m)`` is ``exp2(x * (c * log2(e)) - m * log2(e))``
  (FlashAttention's form), which saves the multiply by log2(e) that ``exp`` does before ``ex2``: the exponent is one
  FMA. Only where ``c * log2(e) <= 1``, so that neither product can overflow (``m`` is a row maximum of the scaled
  tile, at most ``c`` times the largest fp32 in magnitude), and only where ``x`` is a matmul's tile (scores). The
  exponent at a row's maximum is then the rounding of ``m * log2(e)`` against that of ``x * c * log2(e)``, about
  1e-7 of the logit: 6e-5 of the result at logits of 1000, within a 16-bit output's tolerance (not fp32's 1e-5: fp32
  kernels keep ``exp``), but larger than 128 at logits beyond about 1e9, where the row becomes inf / inf. Scores do
  not reach that (nor does FlashAttention, which computes them so); a mask's lowest value added before the scale
  (``(s + finfo(bfloat16).min) * c``, a row masked whole) does, so a tile that is not a matmul's keeps ``exp`` (a
  helper's hunt; without the condition on ``c``, an unscaled mask times log2(e) overflowed to -inf and made whole
  rows NaN).

- the GPU contracts ``x * c - m`` into one FMA, which at a row's maximum gives the rounding of ``x * c`` instead of
  0: about 1e-7 of a score, but 1e31 at ``(s + finfo(bfloat16).min) * c``, whose ``exp`` overflows (a row masked
  whole came out NaN on the H100; the interpreter has no FMA). A kernel that takes the extremum of a scaled tile that
  is not a matmul's gets ``exact_products``: its launches pass ``enable_fp_fusion=False``, so the product is rounded
  once and the maximum's own term is exactly 0.

Input (a tile of scaled logits, its maximum and their exponentials)::

    %c = tiled_loop.full 0.125 : !tiled_loop.tile<[1, 1], f32>
    %s = tiled_loop.binary "mul" %acc, %c : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %m = tiled_loop.reduce "max" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    %d = tiled_loop.binary "sub" %s, %m : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %e = tiled_loop.unary "exp" %d : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>

Output (``%s`` read by the subtraction only; in a kernel with 32-bit outputs ``%e`` stays ``exp(%s - %m)``)::

    %r = tiled_loop.reduce "max" %acc : ... -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    %m = tiled_loop.binary "mul" %r, %c : ...
    %cl = tiled_loop.full 0.18033687770366669 : !tiled_loop.tile<[1, 1], f32>
    %l = tiled_loop.full 1.4426950408889634 : !tiled_loop.tile<[1, 1], f32>
    %s = tiled_loop.binary "mul" %acc, %cl : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %ml = tiled_loop.binary "mul" %m, %l : ...
    %d = tiled_loop.binary "sub" %s, %ml : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %e = tiled_loop.unary "exp2" %d : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>

Runs on ``tiled_loop`` IR, after ``amk-tile`` (lit test: ``tests/filecheck/passes/amk-fold-exponent-scales/``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from amk.dialects import tiled_loop
from amk.symbolic import Dim


def _scalar(value: SSAValue) -> float | None:
    """The number a ``[1, 1]`` ``tiled_loop.full`` holds, or None."""
    owner = value.owner
    if isinstance(owner, tiled_loop.FullOp) and owner.result.type.dims == (Dim(1), Dim(1)):
        return owner.number
    return None


def _as_float32(number: float) -> float:
    """``number`` rounded to fp32 (the kernels' arithmetic), infinite where it overflows."""
    try:
        return struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError:
        return math.copysign(math.inf, number)


def _positive_scale(value: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """``(x, c)`` where ``value`` is ``x * c`` with ``c`` positive and finite in fp32 (a scale that rounds to 0 would
    turn a masked -inf into NaN), else None."""
    owner = value.owner
    if not (isinstance(owner, tiled_loop.BinaryOp) and owner.fn.data == "mul"):
        return None
    for x, c in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
        number = _scalar(c)
        if (number is not None and x.type == value.type
                and 0 < _as_float32(number) < math.inf):
            return x, c
    return None


def _with_origin(old: Operation, new: Operation) -> Operation:
    """``new``, carrying the ``origin`` (the op of the model it comes from) of the op it replaces."""
    if "origin" in old.attributes:
        new.attributes["origin"] = old.attributes["origin"]
    return new


def _insert(rewriter: PatternRewriter, before: Operation, op: Operation) -> SSAValue:
    """``op`` inserted before ``before``, carrying its ``origin``; its result."""
    rewriter.insert(_with_origin(before, op), InsertPoint.before(before))
    return op.results[0]


def _minus_infinity_branch(op: tiled_loop.SelectOp) -> int | None:
    """Which of ``op``'s branches (0: true, 1: false) is a literal -inf, or None."""
    for index, branch in enumerate((op.true_value, op.false_value)):
        if _scalar(branch) == -math.inf:
            return index
    return None


class _MaskBeforeScale(RewritePattern):
    """``select(valid, x * c, -inf)`` -> ``select(valid, x, -inf) * c``, and ``select(masked, -inf, x * c)`` (a
    ``masked_fill``) -> ``select(masked, -inf, x) * c`` (``c > 0``, the product read only here)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.SelectOp, rewriter: PatternRewriter, /):
        filled = _minus_infinity_branch(op)
        if filled is None:
            return
        branches = [op.true_value, op.false_value]
        scaled = _positive_scale(branches[1 - filled])
        if scaled is None or len(list(branches[1 - filled].uses)) != 1:
            return
        x, c = scaled
        branches[1 - filled] = x
        masked = _insert(rewriter, op, tiled_loop.SelectOp(op.cond, *branches))
        rewriter.replace(op, _with_origin(op, tiled_loop.BinaryOp("mul", masked, c)))


class _ExtremumBeforeScale(RewritePattern):
    """``max(x * c)`` / ``min(x * c)`` over a row -> ``max(x) * c`` / ``min(x) * c`` (``c > 0``); a kernel where ``x``
    is not a matmul's tile gets ``exact_products`` (module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.ReduceOp, rewriter: PatternRewriter, /):
        scaled = _positive_scale(op.input)
        if op.fn.data not in ("max", "min") or scaled is None:
            return
        x, c = scaled
        if not _is_product(x):
            kernel = next(parent for parent in tiled_loop.ancestors(op) if isinstance(parent, tiled_loop.KernelOp))
            kernel.exact_products = UnitAttr()
        extremum = _insert(rewriter, op, tiled_loop.ReduceOp(op.fn.data, x))
        rewriter.replace(op, _with_origin(op, tiled_loop.BinaryOp("mul", extremum, c)))


# exp(y) = exp2(y * log2(e))
_LOG2_E = 1.4426950408889634


class _ExponentInBaseTwo(RewritePattern):
    """``exp(x * c - m)`` -> ``exp2(x * (c log2 e) - m * log2 e)`` (``0 < c log2 e <= 1``, ``x`` a matmul's tile,
    the product read only here); applied to kernels whose outputs are 16-bit (module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.UnaryOp, rewriter: PatternRewriter, /):
        shifted = op.input.owner
        if op.fn.data != "exp" or not (isinstance(shifted, tiled_loop.BinaryOp) and shifted.fn.data == "sub"):
            return
        scaled = _positive_scale(shifted.lhs)
        if scaled is None or len(list(shifted.lhs.uses)) != 1 or len(list(op.input.uses)) != 1:
            return
        x, c = scaled
        folded = _as_float32(_scalar(c) * _LOG2_E)
        if folded > 1 or not _is_product(x):
            return
        row = shifted.rhs
        scale = _insert(rewriter, op, tiled_loop.FullOp(folded, c.type))
        log2_e = _insert(rewriter, op, tiled_loop.FullOp(_LOG2_E, c.type))
        exponent = _insert(rewriter, op, tiled_loop.BinaryOp("sub", _insert(rewriter, op, tiled_loop.BinaryOp(
            "mul", x, scale)), _insert(rewriter, op, tiled_loop.BinaryOp("mul", row, log2_e))))
        rewriter.replace(op, _with_origin(op, tiled_loop.UnaryOp("exp2", exponent)))


def _is_product(value: SSAValue) -> bool:
    """Whether ``value`` is a matmul's tile, or that tile with elements set to -inf (out-of-bounds columns, a
    ``masked_fill``): scores, not a tile that may hold a mask's lowest value (see the module docstring)."""
    owner = value.owner
    while isinstance(owner, tiled_loop.SelectOp) and (filled := _minus_infinity_branch(owner)) is not None:
        owner = (owner.false_value if filled == 0 else owner.true_value).owner
    return isinstance(owner, tiled_loop.DotOp)


def _has_16_bit_outputs(kernel: tiled_loop.KernelOp) -> bool:
    return bool(kernel.outputs) and all(getattr(output.type.element_type, "bitwidth", 32) == 16
                                        for output in kernel.outputs)


@dataclass(frozen=True)
class FoldExponentScalesPass(ModulePass):
    """Take every ``tiled_loop.kernel``'s row maxima (and minima) of positively scaled tiles before the scale, and
    their exponentials in base 2 where its outputs are 16-bit (module docstring); ops left without a reader are
    erased."""

    name = "amk-fold-exponent-scales"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [o for o in op.walk() if isinstance(o, tiled_loop.KernelOp)]:
            # the exponent's pattern applies once the extrema are taken before their scales (the scaled tile then
            # has one reader)
            patterns = [_MaskBeforeScale(), _ExtremumBeforeScale()]
            if _has_16_bit_outputs(kernel):
                patterns.append(_ExponentInBaseTwo())
            PatternRewriteWalker(GreedyRewritePatternApplier(patterns), apply_recursively=True).rewrite_region(
                kernel.body)
