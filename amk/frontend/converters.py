"""The converters: how each family of spellings becomes ``tensor_op`` ops. :data:`CONVERTERS` maps every spelling
(see :mod:`amk.frontend.spellings`) to a :class:`Converter`, whose ``build`` reads the node's arguments by name and
emits its ops through a :class:`~amk.frontend.importer.SubgraphImporter`: elementwise arithmetic with PyTorch's type
promotion, activations, clamps, softmax, last-dim reductions, norms, Linear/matmul/addmm, casts, identities, and the
swap of a tensor's last two dims (read only as a matmul's rhs: a weight's ``w.t()``, the keys'
``k.transpose(-2, -1)``)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch._prims_common import is_contiguous_or_false
from torch.fx import Node
from xdsl.dialects.builtin import FloatAttr, StringAttr, f64
from xdsl.ir import SSAValue

from amk import reference
from amk.dialects import tensor_op
from amk.dtypes import to_ir
from amk.frontend.importer import SubgraphImporter, Transposed
from amk.frontend.nodes import FLOAT_DTYPES, Unsupported, bind_arguments, describe_target, dim_of, fake_tensor
from amk.frontend.spellings import (
    ADD,
    ADDMM,
    BADDBMM,
    BMM,
    DIV,
    LINEAR,
    MATMUL,
    MUL,
    POW,
    SQUARE,
    SUB,
    VAR,
    key_of,
    spellings,
)
from amk.symbolic import provably_equal


@dataclass(frozen=True)
class Converter:
    """How one family of spellings becomes ``tensor_op``: ``build(importer, node) -> SSAValue | Transposed | Node``.

    ``kind``: ``compute`` (emits ops), ``identity`` (the value of an input), ``view`` (a transpose that only a
    matmul reads). ``fragile``: the op's lowering is known to fail in some groups; when a subgraph with it does not
    compile, it is retried without these ops.
    """

    build: Callable
    label: str
    kind: str = "compute"
    fragile: bool = False


CONVERTERS: dict = {}
# Calls amk does not convert whose users usually want one that it does: said with the reason.
_MAX = ("torch.max over a dim or of a whole tensor: amk fuses torch.amax(x, dim=-1) for the maximum over the last dim, "
        "and torch.max(a, b) of two tensors elementwise")
_MIN = ("torch.min over a dim or of a whole tensor: amk fuses -torch.amax(-x, dim=-1) for the minimum over the last "
        "dim, and torch.min(a, b) of two tensors elementwise")
ALTERNATIVES = {"F.scaled_dot_product_attention": "PyTorch's fused attention, as which amk writes softmax(q @ k^T * c "
                                                  "+ mask) @ v: it never stores the probabilities, and a query whose "
                                                  "every key is masked gets 0 there, NaN in eager (amk.frontend."
                                                  "attention)"}


def register(keys: frozenset, label: str, kind: str = "compute", fragile: bool = False):
    def decorate(build):
        converter = Converter(build, label, kind, fragile)
        for key in keys:
            CONVERTERS[key] = converter
        return build

    return decorate


def _result_dtype(node: Node) -> torch.dtype:
    return fake_tensor(node).dtype


def _binary(op_class, scalar_rule, *, alpha: bool = False, rounding: bool = False):
    """Elementwise binary op with PyTorch's type promotion (operands cast to the result dtype) and Python scalars."""
    names = ("input", "other") + (("alpha",) if alpha else ()) + (("rounding_mode",) if rounding else ())

    def build(b: SubgraphImporter, node: Node):
        a = bind_arguments(node, names, {"alpha": 1, "rounding_mode": None})
        if a["rounding_mode"] is not None:
            raise Unsupported(f"division with rounding_mode={a['rounding_mode']!r}")
        dtype = _result_dtype(node)
        lhs, rhs = a["input"], a["other"]
        if a["alpha"] != 1:
            factor = b.scalar(a["alpha"])
            if b.is_tensor(rhs):
                scaled = b.add(tensor_op.ScaleOp(b.tensor(rhs, dtype), factor=FloatAttr(factor, f64)), "alpha")
                return b.add(op_class(b.tensor(lhs, dtype), scaled))
            rhs = b.scalar(rhs) * factor
        lhs_tensor, rhs_tensor = b.is_tensor(lhs), b.is_tensor(rhs)
        if lhs_tensor and rhs_tensor:
            return b.add(op_class(b.tensor(lhs, dtype), b.tensor(rhs, dtype)))
        if lhs_tensor:
            return scalar_rule(b, b.tensor(lhs, dtype), b.scalar(rhs), dtype, False)
        if rhs_tensor:
            return scalar_rule(b, b.tensor(rhs, dtype), b.scalar(lhs), dtype, True)
        raise Unsupported("no tensor operand")

    return build


def _add_scalar(b, x, c, dtype, reflected):
    return b.add(tensor_op.AddOp(x, b.constant(c, dtype)))


def _sub_scalar(b, x, c, dtype, reflected):
    const = b.constant(c, dtype)
    return b.add(tensor_op.SubOp(const, x) if reflected else tensor_op.SubOp(x, const))


def _mul_scalar(b, x, c, dtype, reflected):
    return b.add(tensor_op.ScaleOp(x, factor=FloatAttr(c, f64)))


def _div_scalar(b, x, c, dtype, reflected):
    if reflected:
        return b.add(tensor_op.DivOp(b.constant(c, dtype), x))
    if c == 0:
        raise Unsupported("division by the constant 0")
    return b.add(tensor_op.ScaleOp(x, factor=FloatAttr(1.0 / c, f64)))


register(ADD, "add")(_binary(tensor_op.AddOp, _add_scalar, alpha=True))
register(SUB, "sub")(_binary(tensor_op.SubOp, _sub_scalar, alpha=True))
register(MUL, "mul")(_binary(tensor_op.MulOp, _mul_scalar))
register(DIV, "div")(_binary(tensor_op.DivOp, _div_scalar, rounding=True))


def _extremum(op_class, alternative: str):
    """``torch.maximum``/``minimum``, and ``torch.max``/``min`` of two tensors (their elementwise form); ``torch.max``
    over a dim (values and indices) or of a whole tensor is refused with ``alternative``."""

    def build(b: SubgraphImporter, node: Node):
        reduces = node.target in (torch.max, torch.min, "max", "min")  # maybe a reduction: say what amk takes
        try:
            a = bind_arguments(node, ("input", "other"))
        except Unsupported:
            if reduces:
                raise Unsupported(alternative) from None
            raise
        if not b.is_tensor(a["other"]):
            raise Unsupported(alternative if reduces else f"{describe_target(node)} of a tensor and a number")
        dtype = _result_dtype(node)
        return b.add(op_class(b.tensor(a["input"], dtype), b.tensor(a["other"], dtype)))

    return build


register(spellings([torch.maximum, torch.max], ["maximum", "max"]), "maximum")(_extremum(tensor_op.MaximumOp, _MAX))
register(spellings([torch.minimum, torch.min], ["minimum", "min"]), "minimum")(_extremum(tensor_op.MinimumOp, _MIN))


def _fill_number(b, value) -> float:
    """A number that fills a selection: unlike an arithmetic operand, an infinite one is taken
    (``masked_fill(mask, float("-inf"))`` before a softmax); NaN is not (the selection then runs in PyTorch), as no
    number of arithmetic is."""
    if isinstance(value, float) and math.isinf(value):
        return value
    return b.scalar(value)


def _where(b, condition, true_value, false_value, node) -> SSAValue:
    if not b.is_tensor(condition) or fake_tensor(condition).dtype != torch.bool:
        raise Unsupported("a condition that is not a boolean tensor")
    if not (b.is_tensor(true_value) or b.is_tensor(false_value)):
        raise Unsupported("no tensor operand besides the condition")
    dtype = _result_dtype(node)
    if b.is_tensor(false_value) != b.is_tensor(true_value):
        # where(mask, number, x) is x.masked_fill(mask, number), where(mask, x, number) the same filling where the
        # mask is false: the number a literal that passes see, rounded to the result's dtype as PyTorch fills it
        tensor, number = (false_value, true_value) if b.is_tensor(false_value) else (true_value, false_value)
        number = float(torch.tensor(_fill_number(b, number), dtype=dtype))
        return b.add(tensor_op.MaskedFillOp(b.tensor(tensor, dtype), b.tensor(condition), number,
                                            fill_where_false=b.is_tensor(true_value)))
    return b.add(tensor_op.WhereOp(b.tensor(condition), b.tensor(true_value, dtype), b.tensor(false_value, dtype)))


@register(spellings([torch.where], ["where"]), "where")
def _where_call(b, node):
    if node.op == "call_method":  # x.where(condition, y) is torch.where(condition, x, y)
        a = bind_arguments(node, ("input", "condition", "other"))
    else:
        a = bind_arguments(node, ("condition", "input", "other"))
    return _where(b, a["condition"], a["input"], a["other"], node)


@register(spellings([torch.masked_fill], ["masked_fill"]), "masked_fill")
def _masked_fill(b, node):
    a = bind_arguments(node, ("input", "mask", "value"))
    if not b.is_tensor(a["input"]):
        raise Unsupported("masked_fill of a number")
    return _where(b, a["mask"], a["value"], a["input"], node)


# x < 0 and its spellings (operator's, torch's, the methods); a number on the left swaps the predicate (0 < x is x > 0)
_COMPARISONS = {predicate: spellings([getattr(operator, predicate), getattr(torch, predicate)],
                                     [predicate, f"__{predicate}__"])
                for predicate in ("eq", "ne", "lt", "le", "gt", "ge")}
_SWAPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
COMPARISONS = frozenset().union(*_COMPARISONS.values())  # the analysis keeps their masks within the fused ops


def _comparison(predicate: str):
    @register(_COMPARISONS[predicate], predicate)
    def build(b, node):
        a = bind_arguments(node, ("input", "other"))
        x, number, which = a["input"], a["other"], predicate
        if not b.is_tensor(x):
            x, number, which = number, x, _SWAPPED[predicate]
        if not b.is_tensor(x) or b.is_tensor(number):
            operands = "two tensors" if b.is_tensor(x) else "two numbers"
            raise Unsupported(f"{predicate} of {operands} (amk compares a tensor with a number)")
        if not fake_tensor(x).is_floating_point():
            raise Unsupported(f"{predicate} of a {fake_tensor(x).dtype} tensor (amk compares floating-point ones)")
        # PyTorch compares in the tensor's dtype: the number rounded to it first
        value = float(torch.tensor(b.scalar(number), dtype=fake_tensor(x).dtype))
        return b.add(tensor_op.CompareOp(b.tensor(x), which, value))

    return build


for _predicate in _COMPARISONS:
    _comparison(_predicate)


@register(spellings([operator.neg, torch.neg, torch.negative], ["neg", "negative"]), "neg")
def _neg(b, node):
    a = bind_arguments(node, ("input",))
    return b.add(tensor_op.ScaleOp(b.tensor(a["input"]), factor=FloatAttr(-1.0, f64)))


@register(POW | SQUARE, "pow")
def _pow(b, node):
    if key_of(node) in SQUARE:
        x = bind_arguments(node, ("input",))["input"]
        exponent = 2
    else:
        a = bind_arguments(node, ("input", "exponent"))
        x, exponent = a["input"], a["exponent"]
    if not b.is_tensor(x) or isinstance(exponent, Node):
        raise Unsupported("only tensor ** constant")
    if exponent == 1 and _result_dtype(node) == fake_tensor(x).dtype:
        return b.unchanged(node, x)
    value = b.tensor(x, _result_dtype(node))
    if exponent == 1:
        return value
    if exponent == 2:
        return b.add(tensor_op.MulOp(value, value))
    if exponent == 3:
        return b.add(tensor_op.MulOp(b.add(tensor_op.MulOp(value, value), "sq"), value))
    raise Unsupported(f"pow with exponent {exponent!r} (tensor_op has no pow: only x**1, x**2, x**3 are imported)")


def _inplace_unsupported(a: dict) -> None:
    if a.get("inplace"):
        raise Unsupported("in-place variant")


def _unary(op_class, label: str, functions=(), methods=(), extra=(), **fixed):
    @register(spellings(functions, methods), label)
    def build(b, node):
        a = bind_arguments(node, ("input", *extra), {e: False for e in extra})
        _inplace_unsupported(a)
        return b.add(op_class(b.tensor(a["input"]), **fixed))

    return build


_unary(tensor_op.ReluOp, "relu", [torch.relu, F.relu], ["relu"], extra=("inplace",))
_unary(tensor_op.SiluOp, "silu", [F.silu], [], extra=("inplace",))
_unary(tensor_op.SigmoidOp, "sigmoid", [torch.sigmoid, F.sigmoid], ["sigmoid"])
_unary(tensor_op.TanhOp, "tanh", [torch.tanh, F.tanh], ["tanh"])
_unary(tensor_op.ExpOp, "exp", [torch.exp], ["exp"])
_unary(tensor_op.AbsOp, "abs", [torch.abs, torch.absolute], ["abs", "absolute"])
_unary(tensor_op.SqrtOp, "sqrt", [torch.sqrt], ["sqrt"])
_unary(tensor_op.RsqrtOp, "rsqrt", [torch.rsqrt], ["rsqrt"])
_unary(tensor_op.LogOp, "log", [torch.log], ["log"])
_unary(tensor_op.ErfOp, "erf", [torch.erf, torch.special.erf], ["erf"])
_unary(tensor_op.MishOp, "mish", [F.mish], [], extra=("inplace",))
_unary(tensor_op.HardsigmoidOp, "hardsigmoid", [F.hardsigmoid, torch._C._nn.hardsigmoid], [], extra=("inplace",))
_unary(tensor_op.HardswishOp, "hardswish", [F.hardswish, torch._C._nn.hardswish], [], extra=("inplace",))


@register(spellings([reference.rotate_half], []), "rotate_half")
def _rotate_half(b, node):
    """amk's own ``rotate_half`` call (the heads' rotation that :func:`amk.frontend.layouts.fold_heads` writes; Hugging
    Face's slices and ``cat`` are a pattern, :mod:`amk.frontend.patterns`)."""
    a = bind_arguments(node, ("x", "group"), {"group": None})
    x = b.tensor(a["x"])
    problem = tensor_op.RotateHalfOp.shape_problem(x.type.dims, a["group"])
    if problem:
        raise Unsupported(f"rotate_half {problem}")
    return b.add(tensor_op.RotateHalfOp(x, a["group"]))


@register(spellings([reference.repeat_columns], []), "repeat_columns")
def _repeat_columns(b, node):
    """amk's own ``repeat_columns`` call (a rotary table over the heads, written by
    :func:`amk.frontend.layouts.fold_heads`)."""
    a = bind_arguments(node, ("x", "times"), {})
    x = b.tensor(a["x"])
    if not x.type.rank or not x.type.dims[-1].is_static:
        raise Unsupported("repeat_columns of a last dim of unknown size")
    return b.add(tensor_op.RepeatColumnsOp(x, a["times"]))


@register(spellings([F.softplus], []), "softplus")
def _softplus(b, node):
    a = bind_arguments(node, ("input", "beta", "threshold"), {"beta": 1.0, "threshold": 20.0})
    return b.add(tensor_op.SoftplusOp(b.tensor(a["input"]), beta=FloatAttr(b.scalar(a["beta"]), f64),
                                      threshold=FloatAttr(b.scalar(a["threshold"]), f64)))


@register(spellings([F.gelu, torch._C._nn.gelu], ["gelu"]), "gelu")
def _gelu(b, node):
    a = bind_arguments(node, ("input", "approximate"), {"approximate": "none"})
    if a["approximate"] not in tensor_op.GeluOp.APPROXIMATIONS:
        raise Unsupported(f"gelu approximate={a['approximate']!r}")
    props = {"approximate": StringAttr("tanh")} if a["approximate"] == "tanh" else {}
    return b.add(tensor_op.GeluOp(b.tensor(a["input"]), **props))


@register(spellings([F.leaky_relu], []), "leaky_relu")
def _leaky_relu(b, node):
    a = bind_arguments(node, ("input", "negative_slope", "inplace"), {"negative_slope": 0.01, "inplace": False})
    _inplace_unsupported(a)
    slope = FloatAttr(b.scalar(a["negative_slope"]), f64)
    return b.add(tensor_op.LeakyReluOp(b.tensor(a["input"]), negative_slope=slope))


def _clamp_op(b, x, low, high):
    props = {}
    if low is not None:
        props["min"] = FloatAttr(b.scalar(low), f64)
    if high is not None:
        props["max"] = FloatAttr(b.scalar(high), f64)
    if not props:
        return x
    return b.add(tensor_op.ClampOp(x, **props))


@register(spellings([torch.clamp, torch.clip], ["clamp", "clip"]), "clamp")
def _clamp(b, node):
    a = bind_arguments(node, ("input", "min", "max"), {"min": None, "max": None})
    for bound in ("min", "max"):
        if b.is_tensor(a[bound]):
            raise Unsupported(f"clamp with a tensor {bound}")
    return _clamp_op(b, b.tensor(a["input"]), a["min"], a["max"])


def _one_sided_clamp(bound: str):
    """``clamp_min`` or ``clamp_max``: a clamp with its one bound."""
    label = f"clamp_{bound}"

    @register(spellings([getattr(torch, label)], [label]), label)
    def build(b, node):
        a = bind_arguments(node, ("input", bound))
        if b.is_tensor(a[bound]):
            raise Unsupported(f"{label} with a tensor bound")
        return _clamp_op(b, b.tensor(a["input"]), a.get("min"), a.get("max"))

    return build


_one_sided_clamp("min")
_one_sided_clamp("max")


@register(spellings([F.hardtanh], []), "hardtanh")
def _hardtanh(b, node):
    a = bind_arguments(node, ("input", "min_val", "max_val", "inplace"),
                       {"min_val": -1.0, "max_val": 1.0, "inplace": False})
    _inplace_unsupported(a)
    return _clamp_op(b, b.tensor(a["input"]), a["min_val"], a["max_val"])


@register(spellings([F.relu6], []), "relu6")
def _relu6(b, node):
    a = bind_arguments(node, ("input", "inplace"), {"inplace": False})
    _inplace_unsupported(a)
    return _clamp_op(b, b.tensor(a["input"]), 0.0, 6.0)


def _rowwise(op_class, label, functions, functional, methods):
    """softmax and log_softmax over an explicit last dim; the ``torch.nn.functional`` spelling takes ``_stacklevel``."""

    @register(spellings([*functions, functional], methods), label)
    def build(b, node):
        names = ("input", "dim", "_stacklevel", "dtype") if node.target is functional else ("input", "dim", "dtype")
        a = bind_arguments(node, names, {"dim": None, "dtype": None, "_stacklevel": 3})
        x = b.tensor(a["input"], _result_dtype(node))  # its dtype= (the input cast first), or fp32 under autocast
        if a["dim"] is None:
            raise Unsupported(f"{label} without an explicit dim")
        _check_last_dim(label, a["dim"], x)
        return b.add(op_class(x, -1))

    return build


_rowwise(tensor_op.SoftmaxOp, "softmax", [torch.softmax], F.softmax, ["softmax"])
_rowwise(tensor_op.LogSoftmaxOp, "log_softmax", [torch.log_softmax], F.log_softmax, ["log_softmax"])


def _check_last_dim(label: str, dim, x: SSAValue) -> None:
    """A reduction's ``dim`` (an int or a list of one) must be ``x``'s last: amk kernels reduce rows."""
    if x.type.rank == 0:
        raise Unsupported(f"{label} of a 0-d tensor")
    if isinstance(dim, list | tuple) and not dim:  # dim=() reduces every element, as dim=None does
        dim = None
    if dim is None:
        raise Unsupported(f"{label} over every element (amk kernels reduce the last dim: {label}(x, dim=-1))")
    if isinstance(dim, list | tuple):
        if len(dim) != 1:
            raise Unsupported(f"{label} over several dims")
        dim = dim[0]
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise Unsupported(f"{label} over dim {dim!r}")
    if dim % x.type.rank != x.type.rank - 1:
        raise Unsupported(f"{label} over dim {dim} (amk kernels reduce the last dim)")


def _reduction(op_class, label, functions, methods):
    @register(spellings(functions, methods), label, fragile=True)
    def build(b, node):
        a = bind_arguments(node, ("input", "dim", "keepdim", "dtype"), {"dim": None, "keepdim": False, "dtype": None})
        if a["dtype"] is not None:
            raise Unsupported(f"{label} with dtype=")
        x = b.tensor(a["input"])
        _check_last_dim(label, a["dim"], x)
        return b.add(op_class(x, -1, bool(a["keepdim"])))

    return build


_reduction(tensor_op.ReduceSumOp, "sum", [torch.sum], ["sum"])
_reduction(tensor_op.ReduceMeanOp, "mean", [torch.mean], ["mean"])
_reduction(tensor_op.ReduceMaxOp, "amax", [torch.amax], ["amax"])
_reduction(tensor_op.LogSumExpOp, "logsumexp", [torch.logsumexp], ["logsumexp"])


def _variance(b, node, label: str) -> SSAValue:
    """``var`` over the last dim: ``tensor_op.reduce_var`` with the correction asked for (1 by default, Bessel's;
    ``unbiased=False`` or ``correction=0``: 0)."""
    a = bind_arguments(node, ("input", "dim", "unbiased", "keepdim", "correction"),
                       {"dim": None, "unbiased": None, "keepdim": False, "correction": None})
    x = b.tensor(a["input"])
    if isinstance(a["dim"], bool):  # torch.var(x, unbiased): over every element
        a["dim"] = None
    _check_last_dim(label, a["dim"], x)
    if a["unbiased"] is not None and a["correction"] is not None:
        raise Unsupported(f"{label} with both unbiased= and correction=")
    correction = (1.0 if a["unbiased"] is None else float(a["unbiased"])) if a["correction"] is None \
        else b.scalar(a["correction"])
    return b.add(tensor_op.ReduceVarOp(x, -1, bool(a["keepdim"]), correction))


@register(VAR, "var", fragile=True)
def _var(b, node):
    return _variance(b, node, "var")


@register(spellings([torch.std], ["std"]), "std", fragile=True)
def _std(b, node):
    return b.add(tensor_op.SqrtOp(_variance(b, node, "std")))


@register(spellings([F.normalize], []), "normalize")
def _normalize(b, node):
    """``F.normalize``'s L2 form over the last dim: ``x / clamp_min(sqrt(sum(x * x)), eps)``, as PyTorch computes it
    (CLIP's and SimCLR's embeddings, cosine-similarity heads)."""
    a = bind_arguments(node, ("input", "p", "dim", "eps", "out"), {"p": 2.0, "dim": 1, "eps": 1e-12, "out": None})
    if a["out"] is not None:
        raise Unsupported("normalize with out=")
    x = b.tensor(a["input"])
    norm = _clamp_op(b, _l2_norm(b, x, "normalize", a["p"], a["dim"], keepdim=True), a["eps"], None)
    return b.add(tensor_op.DivOp(x, norm))


def _l2_norm(b, x: SSAValue, label: str, p, dim, keepdim: bool) -> SSAValue:
    """The L2 norm of ``x``'s rows, ``sqrt(sum(x * x))`` over the last dim (``p`` 2, or ``"fro"``, the same for one
    dim)."""
    if p != "fro" and (not isinstance(p, int | float) or isinstance(p, bool) or p != 2):
        raise Unsupported(f"{label} with p={p!r} (amk takes the L2 norm, p=2)")
    _check_last_dim(label, dim, x)
    return b.add(tensor_op.SqrtOp(b.add(tensor_op.ReduceSumOp(b.add(tensor_op.MulOp(x, x)), -1, keepdim))))


def _norm(keys: frozenset, label: str, names: tuple[str, ...], default_order):
    """A norm call (``x.norm(p=2, dim=-1, keepdim=True)``: CLIP's embeddings divided by their norm) with its
    parameters in the order ``names`` (the input, the norm's order, dim, keepdim, then dtype and out in either
    order), the order defaulting to ``default_order``."""

    @register(keys, label, fragile=True)
    def build(b, node):
        a = bind_arguments(node, names, {names[1]: default_order, "dim": None, "keepdim": False, "out": None,
                                         "dtype": None})
        if a["out"] is not None or a["dtype"] is not None:
            raise Unsupported(f"{label} with out= or dtype=")
        return _l2_norm(b, b.tensor(a["input"]), label, a[names[1]], a["dim"], bool(a["keepdim"]))

    return build


_norm(spellings([torch.norm], ["norm"]), "norm", ("input", "p", "dim", "keepdim", "out", "dtype"), "fro")
_norm(spellings([torch.linalg.vector_norm], []), "vector_norm", ("input", "ord", "dim", "keepdim", "dtype", "out"), 2)


def _norm_vector(b, node, role: str, dtype: torch.dtype, input_node) -> SSAValue | None:
    """A norm's weight or bias, which must have the dtype it computes in, ``dtype``."""
    if node is None:
        return None
    if not b.is_tensor(node):
        raise Unsupported(f"{role} must be a tensor")
    value = b.tensor(node)
    if value.type.element_type != to_ir(dtype):
        raise Unsupported(f"{role} dtype {fake_tensor(node).dtype} with a {fake_tensor(input_node).dtype} input "
                          "(accepted: parameters of the input's dtype, or all float32 with a float16 or bfloat16 "
                          "input)")
    return value


def _norm_compute_dtype(result: torch.dtype, *parameters) -> torch.dtype:
    """The dtype a norm computes in: its result's, or float32 where a half-precision input has float32 parameters
    (bf16 activations beside fp32 norm weights, as under CPU autocast or a model that keeps its norms in fp32), which
    PyTorch normalizes and scales in fp32 before rounding to the input's dtype."""
    if result in (torch.float16, torch.bfloat16) and any(
            isinstance(node, Node) and fake_tensor(node).dtype == torch.float32
            for node in parameters):
        return torch.float32
    return result


def _normalized_shape(shape, x: SSAValue) -> None:
    if isinstance(shape, int | torch.SymInt):
        shape = [shape]
    if not isinstance(shape, list | tuple | torch.Size) or len(shape) != 1:
        raise Unsupported(f"normalized_shape {shape!r} (amk normalizes the last dim only)")
    if isinstance(shape[0], Node):
        raise Unsupported("normalized_shape computed at run time")
    if not provably_equal(dim_of(shape[0]), x.type.dims[-1]):
        raise Unsupported(f"normalized_shape {tuple(shape)} is not the last dim {x.type.dims[-1]}")


@register(spellings([F.layer_norm, torch.layer_norm], ["layer_norm"]), "layer_norm")
def _layer_norm(b, node):
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    if node.target is torch.layer_norm:
        names = (*names, "cudnn_enable")
    a = bind_arguments(node, names, {"weight": None, "bias": None, "eps": 1e-5, "cudnn_enable": True})
    result = _result_dtype(node)  # fp32 under CUDA autocast (see _matmul_value)
    dtype = _norm_compute_dtype(result, a["weight"], a["bias"])
    x = b.tensor(a["input"], dtype)
    _normalized_shape(a["normalized_shape"], x)
    weight = _norm_vector(b, a["weight"], "weight", dtype, a["input"])
    bias = _norm_vector(b, a["bias"], "bias", dtype, a["input"])
    return b.cast(b.add(tensor_op.LayerNormOp(x, weight, bias, b.scalar(a["eps"]))), result)


@register(spellings([torch.rms_norm, F.rms_norm], ["rms_norm"]), "rms_norm")
def _rms_norm(b, node):
    a = bind_arguments(node, ("input", "normalized_shape", "weight", "eps"), {"weight": None, "eps": None})
    result = _result_dtype(node)  # fp32 under CUDA autocast (see _matmul_value)
    dtype = _norm_compute_dtype(result, a["weight"])
    x = b.tensor(a["input"], dtype)
    _normalized_shape(a["normalized_shape"], x)
    weight = _norm_vector(b, a["weight"], "weight", dtype, a["input"])
    # PyTorch's default is the machine epsilon of the type it computes in: fp32 for fp16 and bf16 inputs (1.2e-7, not
    # bf16's 7.8e-3, which changed a bf16 nn.RMSNorm's outputs by 1% and failed every bucket's check).
    eps = torch.finfo(torch.promote_types(dtype, torch.float32)).eps if a["eps"] is None else b.scalar(a["eps"])
    return b.cast(b.add(tensor_op.RMSNormOp(x, weight, eps)), result)


def _check_matmul_ranks(lhs: SSAValue, rhs, what: str) -> None:
    rhs_type = rhs.value.type if isinstance(rhs, Transposed) else rhs.type
    if lhs.type.rank < 2:
        raise Unsupported(f"{what} with a rank-{lhs.type.rank} lhs")
    if rhs_type.rank == 2:
        return
    if rhs_type.rank != lhs.type.rank:
        raise Unsupported(f"{what} with a rank-{rhs_type.rank} rhs and a rank-{lhs.type.rank} lhs (amk matmuls take "
                          "a 2-D rhs, e.g. a weight, or one batched like the lhs)")
    if not all(provably_equal(x, y) for x, y in zip(lhs.type.dims[:-2], rhs_type.dims[:-2])):
        raise Unsupported(f"{what} whose operands' batch dims differ or broadcast")


# Under torch.autocast a matmul computes in the autocast dtype (its operands cast to it, bf16 or fp16) and a norm (on
# CUDA softmax too) in fp32: the node's result dtype, which PyTorch's trace records. Outside autocast the operands already have it (a
# matmul refuses mixed dtypes; a norm's result has its input's), and the casts below are no ops.


def _matmul_value(b, lhs_node, rhs_node, what: str, dtype: torch.dtype) -> SSAValue:
    """``lhs @ rhs`` computed in ``dtype`` (the node's result dtype: see above)."""
    for operand in (lhs_node, rhs_node):
        if not b.is_tensor(operand):
            raise Unsupported(f"{what} of a non-tensor")
    lhs = b.tensor(lhs_node, dtype)
    rhs = b.operand(rhs_node, allow_transposed=True)
    rhs = Transposed(b.cast(rhs.value, dtype)) if isinstance(rhs, Transposed) else b.cast(rhs, dtype)
    _check_matmul_ranks(lhs, rhs, what)
    if isinstance(rhs, Transposed):
        return b.add(tensor_op.MatmulOp(lhs, rhs.value, transpose_rhs=True), "mm" if what != "matmul" else None)
    return b.add(tensor_op.MatmulOp(lhs, rhs), "mm" if what != "matmul" else None)


@register(LINEAR, "linear")
def _linear(b, node):
    a = bind_arguments(node, ("input", "weight", "bias"), {"bias": None})
    dtype = _result_dtype(node)  # the autocast dtype under autocast (see _matmul_value)
    x, weight = b.tensor(a["input"], dtype), b.tensor(a["weight"], dtype)
    if x.type.rank < 2:
        raise Unsupported(f"linear on a rank-{x.type.rank} input")
    if weight.type.rank != 2:
        raise Unsupported(f"linear with a rank-{weight.type.rank} weight")
    y = b.add(tensor_op.MatmulOp(x, weight, transpose_rhs=True), "mm" if a["bias"] is not None else None)
    if a["bias"] is None:
        return y
    bias = b.tensor(a["bias"], dtype)
    return b.add(tensor_op.AddOp(y, bias))


@register(MATMUL, "matmul")
def _matmul(b, node):
    a = bind_arguments(node, ("input", "other"))
    if node.target is torch.mm or node.target == "mm":
        if fake_tensor(a["input"]).dim() != 2:
            raise Unsupported("torch.mm of a non 2-D lhs")
    return _matmul_value(b, a["input"], a["other"], "matmul", _result_dtype(node))


@register(BMM, "bmm")
def _bmm(b, node):
    """``torch.bmm``: a batched matmul (OPT's and BLOOM's attention scores over ``[B * H, S, D]``; its operands are
    3-D, which PyTorch's trace checked)."""
    a = bind_arguments(node, ("input", "mat2"))
    return _matmul_value(b, a["input"], a["mat2"], "bmm", _result_dtype(node))


def _product_plus_input(b, node, lhs: str, rhs: str, what: str) -> SSAValue:
    """``beta * input + alpha * (lhs @ rhs)``: ``torch.addmm`` and ``torch.baddbmm``."""
    a = bind_arguments(node, ("input", lhs, rhs, "beta", "alpha"), {"beta": 1, "alpha": 1})
    y = _matmul_value(b, a[lhs], a[rhs], what, _result_dtype(node))
    alpha, beta = b.scalar(a["alpha"]), b.scalar(a["beta"])
    if alpha != 1:
        y = b.add(tensor_op.ScaleOp(y, factor=FloatAttr(alpha, f64)), "alpha")
    if beta == 0:
        return y
    bias = b.tensor(a["input"], _result_dtype(node))
    if beta != 1:
        bias = b.add(tensor_op.ScaleOp(bias, factor=FloatAttr(beta, f64)), "beta")
    return b.add(tensor_op.AddOp(y, bias))


@register(ADDMM, "addmm")
def _addmm(b, node):
    return _product_plus_input(b, node, "mat1", "mat2", "addmm")


@register(BADDBMM, "baddbmm")
def _baddbmm(b, node):
    """``torch.baddbmm`` (GPT-NeoX's attention scores into zeros, BLOOM's onto its ALiBi biases)."""
    return _product_plus_input(b, node, "batch1", "batch2", "baddbmm")


# -- casts and identities -----------------------------------------------------------------------------------------------

CASTS = spellings([], ["to", "type", "type_as", "float", "half", "bfloat16", "double"])


@register(CASTS, "cast")
def _cast(b, node):
    source = node.args[0] if node.args else None
    if not b.is_tensor(source):
        raise Unsupported("cast of a non-tensor")
    before, after = fake_tensor(source), fake_tensor(node)
    if before.device != after.device:
        raise Unsupported(f"a copy to another device ({after.device})")
    if node.target == "to":
        extra = set(node.kwargs) - {"dtype", "copy", "non_blocking", "device", "memory_format"}
        if extra or node.kwargs.get("memory_format") not in (None, torch.preserve_format):
            raise Unsupported(f"Tensor.to with {sorted(node.kwargs)}")
    if node.target == "type" and len(node.args) < 2 and "dtype" not in node.kwargs:
        raise Unsupported("Tensor.type() without a dtype returns a string")
    if before.dtype == after.dtype:
        return b.unchanged(node, source)  # a copy where PyTorch makes one (copy=True)
    if after.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"cast to {after.dtype}")
    return b.add(tensor_op.CastOp(b.tensor(source), to_ir(after.dtype)))


@register(spellings([], ["contiguous"]), "contiguous", kind="identity")
def _contiguous(b, node):
    a = bind_arguments(node, ("input", "memory_format"), {"memory_format": torch.contiguous_format})
    if a["memory_format"] not in (torch.contiguous_format, torch.preserve_format):
        raise Unsupported(f"contiguous({a['memory_format']})")
    if isinstance(a["input"], Node) and not is_contiguous_or_false(fake_tensor(a["input"])):
        # A copy in PyTorch, which the model may view (.view() needs it); as an identity a subgraph that returns it
        # would hand back its strided argument.
        raise Unsupported("contiguous() of a tensor that may not be contiguous copies it")
    return b.tensor(a["input"])


@register(spellings([F.dropout, torch.dropout], []), "dropout", kind="identity")
def _dropout(b, node):
    if node.target is F.dropout:
        a = bind_arguments(node, ("input", "p", "training", "inplace"), {"p": 0.5, "training": True, "inplace": False})
    else:  # torch.dropout(input, p, train), all three required
        a = bind_arguments(node, ("input", "p", "train"))
        a["training"] = a["train"]
    if a["training"] and a["p"] != 0:
        raise Unsupported("dropout in training mode")
    _inplace_unsupported(a)
    return b.tensor(a["input"])


TRANSPOSES = spellings([torch.t, torch.transpose, torch.permute, getattr], ["t", "transpose", "permute"])


@register(TRANSPOSES, "transpose", kind="view")
def _transpose(b, node):
    """A swap of the last two dims: a 2-D weight's (``w.t()``), or a batched matmul's rhs (``k.transpose(-2, -1)``)."""
    source = node.args[0] if node.args else None
    rank = fake_tensor(source).dim() if b.is_tensor(source) else 0
    if rank < 2:
        raise Unsupported(f"{describe_target(node)} has no tensor_op equivalent (only the swap of a tensor's last two "
                          "dims is read, as a matmul's rhs)")
    rest = list(node.args[1:])
    last_two = [rank - 2, rank - 1]
    if node.target is getattr:
        if rest not in (["T"], ["mT"]) or (rest == ["T"] and rank != 2):
            raise Unsupported(f"getattr {rest}")
    elif node.target in (torch.t, "t"):
        if rest or rank != 2:
            raise Unsupported("t() with arguments")
    elif node.target in (torch.transpose, "transpose"):
        if len(rest) != 2 or not all(isinstance(d, int) for d in rest) or sorted(d % rank for d in rest) != last_two:
            raise Unsupported(f"transpose{tuple(rest)} of a rank-{rank} tensor (only its last two dims swap)")
    else:
        dims = rest[0] if len(rest) == 1 and isinstance(rest[0], list | tuple) else rest
        if [d % rank for d in dims] != [*range(rank - 2), rank - 1, rank - 2]:
            raise Unsupported(f"permute{tuple(dims)} of a rank-{rank} tensor (only its last two dims swap)")
    if node.kwargs:
        raise Unsupported(f"{describe_target(node)} with keyword arguments")
    return Transposed(b.tensor(source))
