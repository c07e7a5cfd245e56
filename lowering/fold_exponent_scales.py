"""``amk-fold-exponent-scales``: take a row's exponentials in base 2, each with its scale and shift in one multiply-add.

A softmax (or log-sum-exp) of scaled logits, ``softmax(x * c)`` as attention and workload G write it, lowers to tile
ops that multiply every element by ``c``, take the row maximum of the products, subtract it and call ``exp``, which
the GPU computes as ``ex2(y * log2(e))``: five FP32 instructions an element before the exponential unit's one, on
kernels whose exponentials bound them (``benchmarks/NOTES.md``, the thirty-sixth and thirty-seventh sessions). With
``c > 0`` three rewrites, each exact or a reassociation within rounding, leave one multiply-add:

- ``select(valid, x * c, -inf)`` is ``select(valid, x, -inf) * c`` (a masked element stays ``-inf``);
- ``max(x * c)`` over a row is ``max(x) * c`` (multiplying by a positive number keeps the order; rounding is
  monotonic), and so is ``min``;
- ``exp(x * c - m)``, ``m`` a per-row (or scalar) shift, is ``exp2(x * (c * log2(e)) - m * log2(e))``; the shift's
  multiply runs once a row and the element's multiply and subtraction contract into one FMA (``exp(x - m)`` becomes
  ``exp2(x * log2(e) - m * log2(e))`` the same way).

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
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
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


def _positive_scale(value: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """``(x, c)`` where ``value`` is ``x * c`` with ``c`` a positive finite number, else None."""
    owner = value.owner
    if not (isinstance(owner, tiled_loop.BinaryOp) and owner.fn.data == "mul"):
        return None
    for x, c in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
        number = _scalar(c)
        if number is not None and 0 < number < math.inf and x.type == value.type:
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


@dataclass(frozen=True)
class FoldExponentScalesPass(ModulePass):
    """Rewrite every ``tiled_loop.kernel``'s row exponentials in base 2 with their scales folded (module docstring);
    ops left without a reader are erased."""

    name = "amk-fold-exponent-scales"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in [o for o in op.walk() if isinstance(o, tiled_loop.KernelOp)]:
            PatternRewriteWalker(GreedyRewritePatternApplier(
                [_MaskBeforeScale(), _ExtremumBeforeScale(), _ExponentialInBase2()]),
                apply_recursively=True).rewrite_region(kernel.body)
