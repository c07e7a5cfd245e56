"""Lowering rules: how each ``tensor_op`` op is computed on tiles.

The tiling pass knows no op by name. It asks this registry what kind an op is and calls its rule:

- an **elementwise rule** ``(builder, op, *operand_tiles) -> tile`` composes ``tiled_loop`` primitives (``gelu`` is
  ``0.5 * x * (1 + erf(x / sqrt(2)))``);
- a **row reduction** (sums, maxima, norms, softmax over the last axis) describes running statistics
  (:class:`RowReduction`): the ``init`` state, the ``tile_state`` of one column tile, how states ``combine`` and how
  many ``merge_states`` at once, ``finalize`` into statistics, and ``apply`` to produce the op's value (a reduction's
  ``[rows, 1]`` tile, or, where ``keeps_shape``, a norm's or softmax's full tile).

Registering a rule for a new ``tensor_op`` op (see :func:`register_elementwise`) is all it takes for that op to fuse
into matmul epilogues and standalone kernels: the passes and the Triton emitter need no change.
All tile values handled by rules are fp32.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr, f32
from xdsl.ir import Attribute, Block, Operation, SSAValue

from amk.dialects import tensor_op, tiled_loop
from amk.dialects.tiled_loop import TileType
from amk.registration import callable_name, check_registration
from amk.symbolic import Dim


class TileBuilder:
    """Appends ``tiled_loop`` ops to a block; each op records the fused op it implements (``origin``) and results
    get readable names (they become the variable names of the emitted Triton code)."""

    def __init__(self, block: Block):
        self.block = block
        self.origin: str | None = None

    def add(self, op: Operation, name: str | None = None) -> SSAValue | None:
        if self.origin is not None:
            op.attributes["origin"] = StringAttr(self.origin)
        self.block.add_op(op)
        if not op.results:
            return None
        if name is not None:
            op.results[0].name_hint = name
        return op.results[0]

    # -- constants and arithmetic ------------------------------------------------------------------------------------
    def const(self, value: float, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.FullOp(value, TileType([1, 1], f32)), name)

    def full(self, value: float, shape: Sequence, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.FullOp(value, TileType(shape, f32)), name)

    def _operand(self, value: SSAValue | float) -> SSAValue:
        return value if isinstance(value, SSAValue) else self.const(float(value))

    def binary(self, fn: str, lhs: SSAValue | float, rhs: SSAValue | float, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.BinaryOp(fn, self._operand(lhs), self._operand(rhs)), name)

    def add_(self, a, b, name=None):
        return self.binary("add", a, b, name)

    def sub(self, a, b, name=None):
        return self.binary("sub", a, b, name)

    def mul(self, a, b, name=None):
        return self.binary("mul", a, b, name)

    def div(self, a, b, name=None):
        return self.binary("div", a, b, name)

    def maximum(self, a, b, name=None):
        return self.binary("max", a, b, name)

    def minimum(self, a, b, name=None):
        return self.binary("min", a, b, name)

    def unary(self, fn: str, x: SSAValue, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.UnaryOp(fn, x), name)

    def select(self, cond: SSAValue, a: SSAValue | float, b: SSAValue | float, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.SelectOp(cond, self._operand(a), self._operand(b)), name)

    def reduce(self, fn: str, x: SSAValue, name: str | None = None) -> SSAValue:
        return self.add(tiled_loop.ReduceOp(fn, x), name)

    def cast(self, x: SSAValue, element_type: Attribute, name: str | None = None) -> SSAValue:
        if x.type.element_type == element_type:
            return x
        return self.add(tiled_loop.CastOp(x, element_type), name)

    def tanh(self, x: SSAValue) -> SSAValue:
        """tanh(x) = 2 * sigmoid(2x) - 1: stable at both ends and free of libdevice (works in the interpreter). Near 0
        that difference cancels (its error is ~1e-7 absolute in fp32: tanh(1e-6) came out 12% off, tanh(1e-8) as 0), so
        below |x| = 1/8 the odd Taylor polynomial x - x^3/3 + 2x^5/15 - 17x^7/315 is used (relative error < 1e-8)."""
        large = self.sub(self.mul(self.unary("sigmoid", self.mul(x, 2.0)), 2.0), 1.0)
        x2 = self.mul(x, x)
        series = self.add_(self.mul(self.add_(self.mul(self.add_(self.mul(x2, -17.0 / 315.0), 2.0 / 15.0), x2),
                                              -1.0 / 3.0), x2), 1.0)
        return self.select(self.binary("lt", self.unary("abs", x), 0.125), self.mul(x, series), large)

    def widen_rows(self, x: SSAValue, rows) -> SSAValue:
        """``x`` broadcast to ``rows`` rows when it has one (a statistic that is the same for every row, such as a
        column count), so that it can be stored as a per-row tile."""
        return self.add_(x, self.full(0.0, [rows, 1])) if x.type.dims[0] == Dim(1) else x

    def masked(self, x: SSAValue, valid: SSAValue | None, fill: float) -> SSAValue:
        """``x`` where ``valid`` (an i1 tile), else ``fill``; no-op without a mask."""
        return x if valid is None else self.select(valid, x, fill)


# --------------------------------------------------------------------------------------------------------------------
# Elementwise rules
# --------------------------------------------------------------------------------------------------------------------

ElementwiseRule = Callable[..., SSAValue]
ELEMENTWISE_RULES: dict[type[Operation], ElementwiseRule] = {}


def register_elementwise(op_class: type[Operation]) -> Callable[[ElementwiseRule], ElementwiseRule]:
    """Decorator: ``@register_elementwise(MyOp) def rule(builder, op, x, ...) -> tile``."""
    check_registration("register_elementwise", op_class)

    def decorate(rule: ElementwiseRule) -> ElementwiseRule:
        check_registration("register_elementwise", op_class, rule)
        replaced = ELEMENTWISE_RULES.get(op_class)
        if replaced is not None and replaced is not rule:
            warnings.warn(f"register_elementwise: {callable_name(rule)} replaces {callable_name(replaced)} as the "
                          f"lowering rule of {op_class.name}", stacklevel=2)
        ELEMENTWISE_RULES[op_class] = rule
        return rule

    return decorate


def _binary(fn: str) -> ElementwiseRule:
    return lambda b, op, x, y: b.binary(fn, x, y)


for _op_class, _fn in [(tensor_op.AddOp, "add"), (tensor_op.SubOp, "sub"), (tensor_op.MulOp, "mul"),
                       (tensor_op.DivOp, "div"), (tensor_op.MaximumOp, "max"), (tensor_op.MinimumOp, "min")]:
    register_elementwise(_op_class)(_binary(_fn))


@register_elementwise(tensor_op.WhereOp)
def _where(b: TileBuilder, op, cond, x, y):
    return b.select(b.binary("ne", cond, 0.0), x, y)  # the mask's tile arrives as fp32, as every loaded tile


@register_elementwise(tensor_op.MaskedFillOp)
def _masked_fill(b: TileBuilder, op: tensor_op.MaskedFillOp, x, mask):
    if op.fill_where_false is not None:
        return b.select(b.binary("ne", mask, 0.0), x, op.number)
    return b.select(b.binary("ne", mask, 0.0), op.number, x)


@register_elementwise(tensor_op.CompareOp)
def _compare(b: TileBuilder, op: tensor_op.CompareOp, x):
    # x rounded to its dtype, as PyTorch holds one op's result (the cast rule's rounding; a loaded x is exact; the ops
    # before it keep fp32 between them, as in every fused chain), then 1.0 where the comparison holds, as a mask's
    # loaded tile holds it (a where or masked_fill compares it with 0)
    rounded = b.cast(b.cast(x, tensor_op.tensor_type(op.input).element_type), f32)
    return b.select(b.binary(op.predicate.data, rounded, op.number), 1.0, 0.0)


@register_elementwise(tensor_op.ReluOp)
def _relu(b: TileBuilder, op, x):
    return b.maximum(x, 0.0)


@register_elementwise(tensor_op.GeluOp)
def _gelu(b: TileBuilder, op: tensor_op.GeluOp, x):
    if op.uses_tanh:
        inner = b.mul(b.add_(x, b.mul(b.mul(b.mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return b.mul(b.mul(x, 0.5), b.add_(b.tanh(inner), 1.0))
    return b.mul(b.mul(x, 0.5), b.add_(b.unary("erf", b.mul(x, 1.0 / math.sqrt(2.0))), 1.0))


@register_elementwise(tensor_op.SiluOp)
def _silu(b: TileBuilder, op, x):
    return b.mul(x, b.unary("sigmoid", x))


@register_elementwise(tensor_op.TanhOp)
def _tanh(b: TileBuilder, op, x):
    return b.tanh(x)


@register_elementwise(tensor_op.SigmoidOp)
@register_elementwise(tensor_op.ExpOp)
@register_elementwise(tensor_op.AbsOp)
@register_elementwise(tensor_op.SqrtOp)
@register_elementwise(tensor_op.RsqrtOp)
@register_elementwise(tensor_op.LogOp)
@register_elementwise(tensor_op.ErfOp)
def _math_function(b: TileBuilder, op, x):
    """The op as the ``tiled_loop.unary`` function of its name."""
    return b.unary(op.name.removeprefix("tensor_op."), x)


def _softplus_of(b: TileBuilder, x):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)) never overflows. log1p(u) = log(1 + u) * u / ((1 + u) - 1) (u
    # when 1 + u rounds to 1): log(1 + u) alone loses u's low bits, and mish(-9) came out 2e-4 off, mish(-20) as 0.
    u = b.unary("exp", b.unary("neg", b.unary("abs", x)))
    w = b.add_(u, 1.0)
    log1p = b.select(b.binary("eq", w, 1.0), u, b.mul(b.unary("log", w), b.div(u, b.sub(w, 1.0))))
    return b.add_(b.maximum(x, 0.0), log1p)


@register_elementwise(tensor_op.MishOp)
def _mish(b: TileBuilder, op, x):
    return b.mul(x, b.tanh(_softplus_of(b, x)))


@register_elementwise(tensor_op.SoftplusOp)
def _softplus(b: TileBuilder, op: tensor_op.SoftplusOp, x):
    beta = op.beta_value
    scaled = x if beta == 1.0 else b.mul(x, beta)
    softplus = _softplus_of(b, scaled)
    softplus = softplus if beta == 1.0 else b.div(softplus, beta)
    return b.select(b.binary("gt", scaled, op.threshold_value), x, softplus)  # PyTorch's linear regime, as it is


def _relu6_of_x_plus_3(b: TileBuilder, x):
    return b.minimum(b.maximum(b.add_(x, 3.0), 0.0), 6.0)


@register_elementwise(tensor_op.HardsigmoidOp)
def _hardsigmoid(b: TileBuilder, op, x):
    return b.div(_relu6_of_x_plus_3(b, x), 6.0)


@register_elementwise(tensor_op.HardswishOp)
def _hardswish(b: TileBuilder, op, x):
    return b.div(b.mul(x, _relu6_of_x_plus_3(b, x)), 6.0)  # PyTorch's order: the product, then the division


@register_elementwise(tensor_op.LeakyReluOp)
def _leaky_relu(b: TileBuilder, op: tensor_op.LeakyReluOp, x):
    return b.select(b.binary("ge", x, 0.0), x, b.mul(x, op.slope))


@functools.cache
def _clamp_takes_a_nan_bound() -> bool:
    """Whether the installed PyTorch's clamp gives NaN everywhere for a NaN bound, as 2.13 does; 2.11 ignores such a
    bound, on the CPU and the GPU (found on the H100: its float64 reference and eager's fp16 kept x). PyTorch is
    imported here, for the rare NaN bound: the passes and ``amk-opt`` load without it."""
    import torch

    return bool(torch.clamp(torch.zeros(1), min=math.nan).isnan())


@register_elementwise(tensor_op.ClampOp)
def _clamp(b: TileBuilder, op: tensor_op.ClampOp, x):
    bounds = {"min": op.min, "max": op.max}
    if any(bound is not None and math.isnan(bound.value.data) for bound in bounds.values()):
        if _clamp_takes_a_nan_bound():
            return b.add_(x, math.nan)
        bounds = {side: bound for side, bound in bounds.items() if bound is None or not math.isnan(bound.value.data)}
    if bounds.get("min") is not None:
        x = b.maximum(x, bounds["min"].value.data)
    if bounds.get("max") is not None:
        x = b.minimum(x, bounds["max"].value.data)
    return x


@register_elementwise(tensor_op.ScaleOp)
def _scale(b: TileBuilder, op: tensor_op.ScaleOp, x):
    return b.mul(x, op.factor.value.data)


@register_elementwise(tensor_op.CastOp)
def _cast(b: TileBuilder, op: tensor_op.CastOp, x):
    # Values stay fp32 in registers; rounding through the target type reproduces the cast's precision loss.
    return b.cast(b.cast(x, op.output.type.element_type), f32)


# --------------------------------------------------------------------------------------------------------------------
# Row reductions
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColumnSum:
    """A state component (``name``) that is the row sum of per-element terms (RMSNorm: the column count, the sum of
    squares). ``term(b, x, valid)`` gives one column tile's terms: ``[1, cols]`` when ``per_row`` is False (the same in every
    row, as a count), else ``[rows, cols]``. A K loop adds the terms element-wise and sums each row once after the
    loop, instead of reducing across threads in every iteration. ``squares``: the terms are ``x * x``, so over a
    16-bit tile the loop may take the sums as the diagonal of ``x @ x^T`` instead, on the tensor cores (each product
    of two 16-bit values is exact in fp32). Measured on the H200 (``benchmarks/decode_stats_probe.py``): D's
    statistics cost 1.9 µs of an 11.4 µs kernel element-wise and nothing as a Gram diagonal."""

    name: str
    term: Callable
    per_row: bool = True
    squares: bool = False


@dataclass(frozen=True)
class RowReduction:
    """Running statistics over the columns of a row.

    ``init(b, rows)`` gives the empty state; ``tile_state(b, x, valid)`` the state of one column tile ``x``
    (``valid`` marks real columns, or None); ``combine(b, a, c)`` merges two states (so tiles may be folded in a loop
    or computed by different programs and merged later); ``merge_states(b, states, valid)`` merges many states at
    once, given as ``[rows, n]`` tiles (one column per state; ``valid`` marks the real ones);
    ``finalize(b, state, op)`` turns a state into statistics;
    ``apply(b, op, stats, x, operands)`` gives the op's value: a ``[rows, 1]`` tile for reductions, a full tile for
    norms and softmax (``x`` is then the input tile and ``operands`` the per-column operand tiles, e.g. the weight).
    ``unscaled(b, op, x, operands)``, for a norm whose value is a per-row scale (its first statistic) times a tile
    that needs no statistics (RMSNorm: ``rstd * (x * weight)``), gives that tile: a matmul reading the norm can then
    scale its accumulator's rows instead of waiting for the statistics; ``unscaled_within_input(op)`` says whether
    that tile's values are the input's (RMSNorm without a weight; by default not): times a weight they may exceed
    fp16's range where PyTorch, which rounds only the scaled value, stays finite, so an fp16 matmul operand cannot
    hold them and an fp16 kernel gathers the statistics first.
    ``column_sums``, for
    states made of row sums (one :class:`ColumnSum` per component), lets a loop defer the row reductions to its end.
    """

    init: Callable
    tile_state: Callable
    combine: Callable
    merge_states: Callable
    finalize: Callable
    apply: Callable
    keeps_shape: bool
    unscaled: Callable | None = None
    unscaled_within_input: Callable[[Operation], bool] = lambda op: False
    column_sums: tuple[ColumnSum, ...] | None = None

    def update(self, b: TileBuilder, state: list[SSAValue], x: SSAValue, valid: SSAValue | None) -> list[SSAValue]:
        return self.combine(b, state, self.tile_state(b, x, valid))


ROW_REDUCTIONS: dict[type[Operation], RowReduction] = {}


def _count(b: TileBuilder, valid, x) -> SSAValue:
    """Number of real columns in this tile, as a [1, 1] tile."""
    if valid is None:
        return b.const(float(x.type.dims[1].value))
    return b.reduce("sum", b.select(valid, 1.0, 0.0))


def _add_states(b, a, c):
    return [b.add_(u, v) for u, v in zip(a, c)]


def _sum_states(b, states, valid):
    """States that are sums (counts, sums, sums of squares) merge by summing each component."""
    return [b.reduce("sum", b.masked(component, valid, 0.0)) for component in states]


def _sum_init(b, rows):
    return [b.full(0.0, [rows, 1], "count"), b.full(0.0, [rows, 1], "row_sum")]


def _sum_tile(b, x, valid):
    return [_count(b, valid, x), b.reduce("sum", b.masked(x, valid, 0.0))]


def _max_tile(b, x, valid):
    """The tile's maximum; NaN when the tile holds a NaN, as ``torch.amax`` (Triton's ``tl.max`` skips NaN)."""
    x = b.masked(x, valid, -math.inf)
    nan_sum = b.reduce("sum", b.select(b.binary("ne", x, x), x, 0.0))  # NaN if any lane is NaN, else 0
    return [b.add_(b.reduce("max", x), nan_sum)]


def _max_combine(b, a, c):
    return [b.maximum(a[0], c[0])]


def _max_states(b, states, valid):
    return _max_tile(b, states[0], valid)


def _lse_init(b, rows):
    return [b.full(-math.inf, [rows, 1], "row_max"), b.full(0.0, [rows, 1], "row_sumexp")]


def _exp_shift(b, row_max):
    """What exponentials are taken around: the maximum, or 0 where it is -inf (not exp(-inf - -inf) = NaN)."""
    return b.select(b.binary("eq", row_max, -math.inf), 0.0, row_max)


def _lse_tile(b, x, valid):
    """``[tile max, sum(exp(x - tile max))]``; a tile of only -inf gives ``[-inf, 0]`` (not exp(-inf - -inf) = NaN),
    so that it merges with the other tiles of its row (rows masked with -inf, as in attention)."""
    x = b.masked(x, valid, -math.inf)
    tile_max = b.reduce("max", x)
    return [tile_max, b.reduce("sum", b.unary("exp", b.sub(x, _exp_shift(b, tile_max))))]


def _logsumexp_tile(b, x, valid):
    """As :func:`_lse_tile`, but a tile holding +inf is summed around 0 (giving +inf, or NaN with a NaN), as
    ``torch.logsumexp`` does; softmax keeps ``exp(inf - inf) = NaN`` over such rows, as ``torch.softmax`` does."""
    x = b.masked(x, valid, -math.inf)
    tile_max = b.reduce("max", x)
    shift = b.select(b.binary("eq", b.unary("abs", tile_max), math.inf), 0.0, tile_max)
    return [b.select(b.binary("eq", tile_max, math.inf), 0.0, tile_max),
            b.reduce("sum", b.unary("exp", b.sub(x, shift)))]


def _rescale(b, value, old_max, new_max):
    """``value * exp(old_max - new_max)``, exactly ``value`` when the maximum did not move (also at -inf)."""
    return b.mul(value, b.select(b.binary("eq", old_max, new_max), 1.0, b.unary("exp", b.sub(old_max, new_max))))


def _lse_combine(b, a, c):
    """Online log-sum-exp: both sums are rescaled to the larger maximum."""
    new_max = b.maximum(a[0], c[0])
    return [new_max, b.add_(_rescale(b, a[1], a[0], new_max), _rescale(b, c[1], c[0], new_max))]


def _lse_states(b, states, valid):
    """Every partial sum rescaled to the largest maximum (NaN maxima propagate, as in :func:`_lse_combine`)."""
    maxima = b.masked(states[0], valid, -math.inf)
    new_max = _max_tile(b, maxima, None)[0]
    return [new_max, b.reduce("sum", b.masked(_rescale(b, states[1], maxima, new_max), valid, 0.0))]


def _moments_init(b, rows):
    return [b.full(0.0, [rows, 1], "count"), b.full(0.0, [rows, 1], "row_pivot"), b.full(0.0, [rows, 1], "row_offset"),
            b.full(0.0, [rows, 1], "row_m2")]


# LayerNorm's state is (count, pivot, offset, M2): the mean is pivot + offset, kept apart, as a double-fp32 number. A
# row's pivot starts at its first tile's mean; each merge moves the small offset, rounding at its ulp, not at the
# mean's, then carries what the pivot can hold into it (:func:`_two_sum`). A single mean
# folded tile by tile rounded at ulp(mean) in every merge: over 16400 columns of 100 + randn (129 tiles) the error
# random-walked to 1.7e-5 rel L2 after normalizing, against eager's 1.7e-6. The output is (x - pivot) - offset: x -
# pivot is exact for x within a factor of 2 of it (Sterbenz), so even a single rounded mean's ulp(100) is avoided.


def _moments_tile(b, x, valid):
    """(count, pivot, offset, M2) of a tile by the corrected two-pass algorithm: the pivot is the plain mean, the
    offset the mean of the residuals ``x - pivot``, which corrects the rounding of the first sum (at |x| ~ 1e4 in fp32
    ~5e-4, times rstd = 1/sqrt(eps) in LayerNorm's output). On a row of equal values v the residuals are all v - pivot
    exactly (Sterbenz), so the offset is exactly v - pivot and the LayerNorm exactly 0."""
    count = _count(b, valid, x)
    pivot = b.div(b.reduce("sum", b.masked(x, valid, 0.0)), count)
    centered = b.masked(b.sub(x, pivot), valid, 0.0)
    offset = b.div(b.reduce("sum", centered), count)
    m2 = b.sub(b.reduce("sum", b.mul(centered, centered)), b.mul(b.mul(offset, offset), count))
    return [count, pivot, offset, b.maximum(m2, 0.0)]


def _moments_combine(b, a, c):
    """Chan's parallel merge, exact for rows with a large mean unlike E[x^2] - E[x]^2, on offsets from ``a``'s pivot
    (``c``'s when ``a`` is empty): ``c``'s offset from it is ``(pivot_c - pivot) + offset_c``, the pivots' difference
    exact when they are within a factor of 2. The offset moves by ``delta * (count_c / count)``, not ``delta *
    count_c / count``: merged into an empty state (a weight of exactly 1, a delta of exactly ``offset_c``) or with an
    equal mean (a delta of 0), a part comes back exactly, as a row of equal values needs for a LayerNorm of exactly 0
    (``fl(fl(delta * count_c) / count)`` may be an ulp off ``delta``); an empty ``c`` (weight 0) changes nothing."""
    (count_a, pivot_a, offset_a, m2_a), (count_c, pivot_c, offset_c, m2_c) = a, c
    count = b.add_(count_a, count_c)
    weight = b.div(count_c, count)
    pivot = b.select(b.binary("gt", count_a, 0.0), pivot_a, pivot_c)
    delta = b.sub(b.add_(b.sub(pivot_c, pivot), offset_c), offset_a)
    offset = b.add_(offset_a, b.mul(delta, weight))
    correction = b.mul(b.mul(delta, delta), b.mul(count_a, weight))
    return [count, *_two_sum(b, pivot, offset), b.add_(b.add_(m2_a, m2_c), correction)]


def _two_sum(b, a, c):
    """``(s, e)``: ``s = fl(a + c)`` and ``s + e = a + c`` exactly (Knuth's TwoSum, whatever the magnitudes). A merged
    state's pivot moves to its mean and the offset keeps only what fp32 cannot hold: a pivot left at the first tile's
    mean let the offset grow to the distance of the row's mean from it, and every merge rounded it at that scale (a
    ramp over 16400 columns in 16-wide tiles: 1.3e-5 rel L2 against eager's 6.8e-8)."""
    total = b.add_(a, c)
    c_part = b.sub(total, a)
    a_part = b.sub(total, c_part)
    return [total, b.add_(b.sub(a, a_part), b.sub(c, c_part))]


def _moments_states(b, states, valid):
    """Chan's merge of many states at once around the largest pivot of a non-empty part: each part's mean as an
    offset from it (``(pivot - largest) + offset``), their count-weighted mean, then each part's M2 plus its count
    times its offset's squared distance to that mean. Parts of a row of equal values have equal offsets from it, which
    merge to exactly that offset (a LayerNorm of exactly 0)."""
    counts, pivots, offsets, m2s = (b.masked(component, valid, 0.0) for component in states)
    pivot = b.reduce("max", b.select(b.binary("gt", counts, 0.0), pivots, -math.inf))
    count = b.reduce("sum", counts)
    relative = b.add_(b.sub(pivots, pivot), offsets)
    offset = b.div(b.reduce("sum", b.mul(counts, relative)), count)
    delta = b.sub(relative, offset)
    return [count, pivot, offset, b.reduce("sum", b.add_(m2s, b.mul(counts, b.mul(delta, delta))))]


def _eps(op) -> float:
    return op.eps.value.data


def _layernorm_finalize(b, state, op):
    count, pivot, offset, m2 = state
    return [pivot, offset, b.unary("rsqrt", b.add_(b.div(m2, count), _eps(op)), "rstd")]


def _variance_finalize(b, state, op: tensor_op.ReduceVarOp):
    """As in PyTorch, M2 over max(N - correction, 0): NaN or inf without degrees of freedom."""
    count, m2 = state[0], state[3]
    if op.correction_value == 0.0:
        return [b.div(m2, count)]
    return [b.div(m2, b.maximum(b.sub(count, op.correction_value), 0.0))]


def _layernorm_apply(b, op: tensor_op.LayerNormOp, stats, x, operands):
    pivot, offset, rstd = stats
    y = b.mul(b.sub(b.sub(x, pivot), offset), rstd)
    weight_and_bias = iter(operands)
    if op.weight is not None:
        y = b.mul(y, next(weight_and_bias))
    if op.bias is not None:
        y = b.add_(y, next(weight_and_bias))
    return y


def _rms_init(b, rows):
    return [b.full(0.0, [rows, 1], "count"), b.full(0.0, [rows, 1], "row_sumsq")]


def _rms_tile(b, x, valid):
    x = b.masked(x, valid, 0.0)
    return [_count(b, valid, x), b.reduce("sum", b.mul(x, x))]


def _column_count(b, x, valid):
    return b.full(1.0, [1, x.type.dims[1]]) if valid is None else b.select(valid, 1.0, 0.0)


def _squares(b, x, valid):
    x = b.masked(x, valid, 0.0)
    return b.mul(x, x)


def _rms_finalize(b, state, op):
    count, sumsq = state
    return [b.unary("rsqrt", b.add_(b.div(sumsq, count), _eps(op)), "rstd")]


def _rms_unscaled(b, op: tensor_op.RMSNormOp, x, operands):
    return b.mul(x, operands[0]) if op.weight is not None else x


def _rms_apply(b, op: tensor_op.RMSNormOp, stats, x, operands):
    return b.mul(_rms_unscaled(b, op, x, operands), stats[0])


def _stats_value(b, op, stats, x, operands):
    return stats[0]


ROW_REDUCTIONS[tensor_op.ReduceSumOp] = RowReduction(
    _sum_init, _sum_tile, _add_states, _sum_states, lambda b, s, op: [s[1]], _stats_value, keeps_shape=False)
ROW_REDUCTIONS[tensor_op.ReduceMeanOp] = RowReduction(
    _sum_init, _sum_tile, _add_states, _sum_states, lambda b, s, op: [b.div(s[1], s[0])], _stats_value,
    keeps_shape=False)
# The variance keeps LayerNorm's moments: Chan's merge, exactly 0 on a row of equal values, as torch.var's Welford.
ROW_REDUCTIONS[tensor_op.ReduceVarOp] = RowReduction(
    _moments_init, _moments_tile, _moments_combine, _moments_states, _variance_finalize, _stats_value,
    keeps_shape=False)
ROW_REDUCTIONS[tensor_op.ReduceMaxOp] = RowReduction(
    lambda b, rows: [b.full(-math.inf, [rows, 1], "row_max")], _max_tile, _max_combine, _max_states,
    lambda b, s, op: s, _stats_value, keeps_shape=False)
ROW_REDUCTIONS[tensor_op.LogSumExpOp] = RowReduction(
    _lse_init, _logsumexp_tile, _lse_combine, _lse_states, lambda b, s, op: [b.add_(s[0], b.unary("log", s[1]))],
    _stats_value, keeps_shape=False)
# Softmax's statistics are the row maximum and the reciprocal of the row's sum: one division per row, then a
# multiplication per element (a per-element division would double the special-function work of the exponentials).
# The maximum is the tile statistics' shift (0 for a row of only -inf, whose output is NaN either way, as PyTorch's):
# where one tile holds the whole row (row_resident) the output's exponentials are then the same expressions as the
# sum's, which the compiler may compute once.
ROW_REDUCTIONS[tensor_op.SoftmaxOp] = RowReduction(
    _lse_init, _lse_tile, _lse_combine, _lse_states,
    lambda b, s, op: [_exp_shift(b, s[0]), b.div(1.0, s[1], "inv_sumexp")],
    lambda b, op, stats, x, operands: b.mul(b.unary("exp", b.sub(x, stats[0])), stats[1]), keeps_shape=True)
# Log-softmax: the softmax's statistics, finalized as the shift and the log of the row's sum, applied as
# (x - shift) - log(sum), as PyTorch computes it: x - (shift + log(sum)) would lose log(sum) against a large shift (a
# row masked whole with -1e9 gave 0 instead of -log(N)). A row holding +inf is NaN throughout (inf - inf), one of only
# -inf is NaN, as PyTorch's are.
ROW_REDUCTIONS[tensor_op.LogSoftmaxOp] = RowReduction(
    _lse_init, _lse_tile, _lse_combine, _lse_states,
    lambda b, s, op: [_exp_shift(b, s[0]), b.unary("log", s[1], "log_sumexp")],
    lambda b, op, stats, x, operands: b.sub(b.sub(x, stats[0]), stats[1]), keeps_shape=True)
ROW_REDUCTIONS[tensor_op.LayerNormOp] = RowReduction(
    _moments_init, _moments_tile, _moments_combine, _moments_states, _layernorm_finalize, _layernorm_apply,
    keeps_shape=True)
ROW_REDUCTIONS[tensor_op.RMSNormOp] = RowReduction(
    _rms_init, _rms_tile, _add_states, _sum_states, _rms_finalize, _rms_apply, keeps_shape=True, unscaled=_rms_unscaled,
    unscaled_within_input=lambda op: op.weight is None,
    column_sums=(ColumnSum("count", _column_count, per_row=False), ColumnSum("sumsq", _squares, squares=True)))


# amk's own rules, as this module registers them: what a build's cache key need not name (amk.build's
# extensions_fingerprint names every entry that differs, an amk function registered for another op included).
BUILT_IN_ELEMENTWISE_RULES = dict(ELEMENTWISE_RULES)
BUILT_IN_ROW_REDUCTIONS = dict(ROW_REDUCTIONS)


def reduction_input(op: Operation) -> SSAValue:
    """The operand a row reduction reduces."""
    return op.input


def reduction_extras(op: Operation) -> list[SSAValue]:
    """The per-column operands of a row reduction, in the order ``apply`` takes them (a norm's weight, then bias)."""
    return [v for v in (getattr(op, "weight", None), getattr(op, "bias", None)) if v is not None]


def reduced_axis(op: Operation) -> int:
    """The axis a row reduction works on (norms: the last)."""
    if isinstance(op, tensor_op.AxisOp):
        return op.normalized_axis
    return op.input.type.rank - 1


def is_matmul(op: Operation) -> bool:
    return isinstance(op, tensor_op.MatmulOp)


# Ops that a kernel computes by reading their operand from memory in another order, with the properties of
# ``tiled_loop.load`` that read it so: rotate_half of a kernel input at the rotated columns (of a tile computed in
# registers, by permuting its registers: ``tiled_loop.rotate_half``), repeat_columns at the columns modulo the table's
# (only of a kernel input).
PERMUTED_READS: dict[type[Operation], Callable[[Operation], dict[str, int]]] = {
    tensor_op.RotateHalfOp: lambda op: {"rotate_half": op.group_size},
    tensor_op.RepeatColumnsOp: lambda op: {"column_period": op.period},
}


def kind_of(op: Operation) -> str | None:
    """``"matmul"``, ``"elementwise"``, ``"reduction"`` or None (not fusable)."""
    if is_matmul(op):
        return "matmul"
    if type(op) in ELEMENTWISE_RULES or type(op) in PERMUTED_READS:
        return "elementwise"
    if type(op) in ROW_REDUCTIONS:
        return "reduction"
    return None
