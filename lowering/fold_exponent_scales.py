"""``amk-fold-exponent-scales``: take a row's exponentials in base 2, each with its scale and shift in one multiply-add.

A softmax (or log-sum-exp) of scaled logits, ``softmax(x * c)`` as attention and workload G write it, lowers to tile
ops that multiply every element by ``c``, take the row maximum of the products, subtract it and call ``exp``, which
the GPU computes as ``ex2(y * log2(e))``: four FP32 instructions an element besides the exponential unit's one, on
kernels whose exponentials bound them (``benchmarks/NOTES.md``, the thirty-sixth and thirty-seventh sessions). With
``c`` positive (and ``c`` and ``c * log2(e)`` positive and finite in fp32) three rewrites leave one multiply-add:

- ``select(valid, x * c, -inf)`` is ``select(valid, x, -inf) * c`` (a masked element stays ``-inf``): exact;
- ``max(x * c)`` over a row is ``max(x) * c`` (multiplying by a positive number keeps the order; rounding is
  monotonic), and so is ``min``: exact. The product then feeds only the subtraction, which the GPU contracts with it
  into one FMA (``x * c - m`` rounded once);
- ``exp(x * c - m)``, ``m`` a per-row (or scalar) shift, is ``exp2(x * (c * log2(e)) - m * log2(e))``: the shift's
  multiply runs once a row and the element's is the FMA's (``exp(x - m)`` becomes ``exp2(x * log2(e) - m *
  log2(e))`` the same way). Not exact: the exponent carries the rounding of ``m * log2(e)`` (and, without an FMA, of
  ``x * c * log2(e)``), about ``|m| * 2^-24`` absolute, where ``x * c - m`` is exact near the maximum: a relative error
  of 6e-5 in the probabilities at logits of 1000 (a helper's review measured 2.4e-5 in Triton's interpreter), under
  a 16-bit output's own rounding (2^-11) for logits up to about 2^10, but not within fp32's 1e-5. So it is done only
  in kernels whose outputs are all fp16 or bf16; fp32 kernels keep ``exp`` (with the first two rewrites).
  Logits beyond about 2.4e38 / c would overflow ``x * c * log2(e)`` to infinity (NaN after the subtraction).

Input (a tile of scaled logits, its maximum, its exponentials)::

    %c = tiled_loop.full 0.125 : !tiled_loop.tile<[1, 1], f32>
    %s = tiled_loop.binary "mul" %acc, %c : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %m = tiled_loop.reduce "max" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    %d = tiled_loop.binary "sub" %s, %m : (...) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    %e = tiled_loop.unary "exp" %d : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>

Output::

    %r = tiled_loop.reduce "max" %acc : ... -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    %m = tiled_loop.binary "mul" %r, %c : ...
    %c2 = tiled_loop.full 0.18033688011112042 : !tiled_loop.tile<[1, 1], f32>
    %x2 = tiled_loop.binary "mul" %acc, %c2 : ...
    %l = tiled_loop.full 1.4426950408889634 : !tiled_loop.tile<[1, 1], f32>
    %m2 = tiled_loop.binary "mul" %m, %l : ...
    %d = tiled_loop.binary "sub" %x2, %m2 : ...
    %e = tiled_loop.unary "exp2" %d : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>

Runs on ``tiled_loop`` IR, after ``amk-tile`` (lit test: ``tests/filecheck/passes/amk-fold-exponent-scales/``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, bf16, f16
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

LOG2_E = math.log2(math.e)


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
    """``(x, c)`` where ``value`` is ``x * c`` with ``c`` and ``c * log2(e)`` positive and finite in fp32 (a scale
    that rounds to 0 would turn a masked -inf into NaN), else None."""
    owner = value.owner
    if not (isinstance(owner, tiled_loop.BinaryOp) and owner.fn.data == "mul"):
        return None
    for x, c in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
        number = _scalar(c)
        if (number is not None and x.type == value.type
                and all(0 < _as_float32(n) < math.inf for n in (number, number * LOG2_E))):
            return x, c
    return None


def _with_origin(old: Operation, new: Operation) -> Operation:
    """``new``, carrying the ``origin`` (the op of the model it comes from) of the op it replaces."""
    if "origin" in old.attributes:
        new.attributes["origin"] = old.attributes["origin"]
    return new


def _insert(rewriter: PatternRewriter, before: Operation, op: Operation) -> SSAValue:
    """``op`` inserted before ``before``, carrying its ``origin``; its result."""
    rewriter.insert_op(_with_origin(before, op), InsertPoint.before(before))
    return op.results[0]


class _MaskBeforeScale(RewritePattern):
    """``select(valid, x * c, -inf)`` -> ``select(valid, x, -inf) * c`` (``c > 0``, the product read only here)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.SelectOp, rewriter: PatternRewriter, /):
        scaled = _positive_scale(op.true_value)
        if scaled is None or _scalar(op.false_value) != -math.inf or len(list(op.true_value.uses)) != 1:
            return
        x, c = scaled
        masked = _insert(rewriter, op, tiled_loop.SelectOp(op.cond, x, op.false_value))
        rewriter.replace_op(op, _with_origin(op, tiled_loop.BinaryOp("mul", masked, c)))


class _ExtremumBeforeScale(RewritePattern):
    """``max(x * c)`` / ``min(x * c)`` over a row -> ``max(x) * c`` / ``min(x) * c`` (``c > 0``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.ReduceOp, rewriter: PatternRewriter, /):
        scaled = _positive_scale(op.input)
        if op.fn.data not in ("max", "min") or scaled is None:
            return
        x, c = scaled
        extremum = _insert(rewriter, op, tiled_loop.ReduceOp(op.fn.data, x))
        rewriter.replace_op(op, _with_origin(op, tiled_loop.BinaryOp("mul", extremum, c)))


class _ExponentialInBase2(RewritePattern):
    """``exp(a - m)``, ``m`` broadcast along an axis of ``a`` (a row's shift) -> ``exp2(a' * f - m * log2(e))`` with
    ``a = a' * c`` folded (``f = c * log2(e)``) or ``a' = a`` (``f = log2(e)``)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.UnaryOp, rewriter: PatternRewriter, /):
        shifted = op.input.owner
        if op.fn.data != "exp" or not (isinstance(shifted, tiled_loop.BinaryOp) and shifted.fn.data == "sub"):
            return
        a, shift = shifted.lhs, shifted.rhs
        if a.type != op.result.type or shift.type.dims == a.type.dims:
            return  # not a tile and its row's shift (a vector's own exponentials gain nothing)
        scaled = _positive_scale(a)
        x, factor = (scaled[0], _scalar(scaled[1]) * LOG2_E) if scaled else (a, LOG2_E)
        unit = tiled_loop.TileType([Dim(1), Dim(1)], a.type.element_type)
        exponent = _insert(rewriter, op, tiled_loop.BinaryOp(
            "mul", x, _insert(rewriter, op, tiled_loop.FullOp(factor, unit))))
        base2_shift = _insert(rewriter, op, tiled_loop.BinaryOp(
            "mul", shift, _insert(rewriter, op, tiled_loop.FullOp(LOG2_E, unit))))
        difference = _insert(rewriter, op, tiled_loop.BinaryOp("sub", exponent, base2_shift))
        rewriter.replace_op(op, _with_origin(op, tiled_loop.UnaryOp("exp2", difference)))


# The outputs whose rounding covers the base-2 exponent's (module docstring).
_SIXTEEN_BIT = (f16, bf16)


@dataclass(frozen=True)
class FoldExponentScalesPass(ModulePass):
    """Rewrite every ``tiled_loop.kernel``'s row maxima of positively scaled tiles and, in kernels whose outputs are
    all fp16 or bf16, its row exponentials in base 2 with their scales folded (module docstring); ops left without a
    reader are erased."""

    name = "amk-fold-exponent-scales"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [o for o in op.walk() if isinstance(o, tiled_loop.KernelOp)]:
            patterns: list[RewritePattern] = [_MaskBeforeScale(), _ExtremumBeforeScale()]
            if all(output.type.element_type in _SIXTEEN_BIT for output in kernel.outputs):
                patterns.append(_ExponentialInBase2())
            PatternRewriteWalker(GreedyRewritePatternApplier(patterns),
                                 apply_recursively=True).rewrite_region(kernel.body)
