"""The op-list front end: ``ops=["matmul", "add_bias", "gelu", "layernorm"]`` plus input shapes → ``tensor_op`` IR.

Operands bind to ops in list order: ``matmul`` takes A and B (``A @ B``, B shaped [K, N], or [N, K] with
``{"transpose_b": True}``); ``add_bias`` a [N] vector; ``add``/``sub``/``mul``/``div``/``maximum``/``minimum`` a tensor
that broadcasts against the running value; ``layernorm`` takes gamma then beta when shapes are left for them;
``rmsnorm`` a weight when one is left. Everything else takes only the running value.
"""

from __future__ import annotations

import reprlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

import torch

from amk.errors import DTypeError, InvalidArgumentError, ShapeError, UnsupportedOpError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import FloatAttr, ModuleOp

    from amk.dialects import tensor_op

# The builders import the IR when they run: validating an op list (all a warm start from the cache does here) needs
# neither xDSL nor sympy.


def _op(name: str) -> type[tensor_op.TensorOp]:
    """The ``tensor_op`` op class ``name``."""
    from amk.dialects import tensor_op

    return getattr(tensor_op, name)


def _fits_a_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _f64(value) -> FloatAttr:
    from xdsl.dialects.builtin import FloatAttr, f64

    return FloatAttr(float(value), f64)


@dataclass(frozen=True)
class OpSpec:
    """How an op-list entry builds IR: required and optional tensor operands, accepted parameters, the builder."""

    required: int
    optional: int
    params: dict[str, type | tuple[type, ...]]
    build: Callable[..., tensor_op.TensorOp]
    doc: str
    operand_names: tuple[str, ...] = ("operand",)


_NUMBER = (int, float)


def _float_props(params: dict, names: dict[str, str]) -> dict:
    return {prop: _f64(params[key]) for key, prop in names.items() if key in params}


def _axis(params: dict) -> int:
    return int(params.get("dim", params.get("axis", -1)))


def _matmul(x, operands, params):
    return _op("MatmulOp")(x, operands[0], transpose_rhs=bool(params.get("transpose_b", False)))


def _binary(op_name: str):
    return lambda x, operands, params: _op(op_name)(x, operands[0])


def _unary(op_name: str):
    return lambda x, operands, params: _op(op_name)(x)


def _rotate_half(x, operands, params):
    group = params.get("group")
    problem = _op("RotateHalfOp").shape_problem(x.type.dims, group)
    if problem:
        raise UnsupportedOpError(f"rotate_half {problem}")
    return _op("RotateHalfOp")(x, group)


def _gelu(x, operands, params):
    from xdsl.dialects.builtin import StringAttr

    gelu = _op("GeluOp")
    approximate = params.get("approximate", "none")
    if approximate not in gelu.APPROXIMATIONS:
        raise UnsupportedOpError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return gelu(x, **({"approximate": StringAttr("tanh")} if approximate == "tanh" else {}))


def _leaky(x, operands, params):
    return _op("LeakyReluOp")(x, **_float_props(params, {"negative_slope": "negative_slope"}))


def _softplus(x, operands, params):
    return _op("SoftplusOp")(x, **_float_props(params, {"beta": "beta", "threshold": "threshold"}))


def _clamp(x, operands, params):
    props = _float_props(params, {"min": "min", "max": "max"})
    if not props:
        raise InvalidArgumentError("clamp needs 'min' and/or 'max'")
    if "min" in params and "max" in params and params["min"] > params["max"]:
        raise InvalidArgumentError(f"clamp: min ({params['min']}) must not exceed max ({params['max']})")
    return _op("ClampOp")(x, **props)


def _hardtanh(x, operands, params):
    low, high = params.get("min_val", -1.0), params.get("max_val", 1.0)
    if low > high:
        raise InvalidArgumentError(f"hardtanh: min_val ({low}) must not exceed max_val ({high})")
    return _op("ClampOp")(x, min=_f64(low), max=_f64(high))


def _scale(x, operands, params):
    if "factor" not in params:
        raise InvalidArgumentError("scale needs a 'factor' parameter, e.g. ('scale', {'factor': 0.125})")
    return _op("ScaleOp")(x, factor=_f64(params["factor"]))


def _cast(x, operands, params):
    if "dtype" not in params:
        raise InvalidArgumentError("cast needs a 'dtype' parameter, e.g. ('cast', {'dtype': torch.float32})")
    from amk.dtypes import to_ir

    return _op("CastOp")(x, to_ir(params["dtype"]))


def _reduction(op_name: str):
    return lambda x, operands, params: _op(op_name)(x, _axis(params), bool(params.get("keepdim", False)))


def _var(x, operands, params):
    return _op("ReduceVarOp")(x, _axis(params), bool(params.get("keepdim", False)),
                              float(params.get("correction", 1.0)))


def _rowwise(op_name: str):
    return lambda x, operands, params: _op(op_name)(x, _axis(params))


def _layernorm(x, operands, params):
    weight, bias = (list(operands) + [None, None])[:2]
    return _op("LayerNormOp")(x, weight, bias, float(params.get("eps", _op("NormOp").DEFAULT_EPS)))


def _rmsnorm(x, operands, params):
    weight = operands[0] if operands else None
    return _op("RMSNormOp")(x, weight, float(params.get("eps", _op("NormOp").DEFAULT_EPS)))


REDUCTION_PARAMS = {"dim": int, "axis": int, "keepdim": bool}
ROWWISE_PARAMS = {"dim": int, "axis": int}

OPS: dict[str, OpSpec] = {
    "matmul": OpSpec(1, 0, {"transpose_b": bool}, _matmul, "A @ B; takes B ([K, N], or [N, K] with transpose_b)",
                     ("w",)),
    "add_bias": OpSpec(1, 0, {}, _binary("AddOp"), "+ bias; takes a [N] vector", ("bias",)),
    "add": OpSpec(1, 0, {}, _binary("AddOp"), "+ tensor (residual); takes a broadcastable tensor",
                  ("residual",)),
    "sub": OpSpec(1, 0, {}, _binary("SubOp"), "- tensor"),
    "mul": OpSpec(1, 0, {}, _binary("MulOp"), "* tensor"),
    "div": OpSpec(1, 0, {}, _binary("DivOp"), "/ tensor"),
    "maximum": OpSpec(1, 0, {}, _binary("MaximumOp"), "elementwise maximum with a tensor"),
    "minimum": OpSpec(1, 0, {}, _binary("MinimumOp"), "elementwise minimum with a tensor"),
    "relu": OpSpec(0, 0, {}, _unary("ReluOp"), "max(x, 0)"),
    "gelu": OpSpec(0, 0, {"approximate": str}, _gelu, "GELU; approximate='none' (erf) or 'tanh'"),
    "silu": OpSpec(0, 0, {}, _unary("SiluOp"), "x * sigmoid(x)"),
    "sigmoid": OpSpec(0, 0, {}, _unary("SigmoidOp"), "sigmoid"),
    "tanh": OpSpec(0, 0, {}, _unary("TanhOp"), "tanh"),
    "exp": OpSpec(0, 0, {}, _unary("ExpOp"), "exp"),
    "abs": OpSpec(0, 0, {}, _unary("AbsOp"), "|x|"),
    "sqrt": OpSpec(0, 0, {}, _unary("SqrtOp"), "sqrt"),
    "rsqrt": OpSpec(0, 0, {}, _unary("RsqrtOp"), "1 / sqrt"),
    "log": OpSpec(0, 0, {}, _unary("LogOp"), "natural logarithm"),
    "erf": OpSpec(0, 0, {}, _unary("ErfOp"), "error function"),
    "mish": OpSpec(0, 0, {}, _unary("MishOp"), "x * tanh(softplus(x))"),
    "softplus": OpSpec(0, 0, {"beta": _NUMBER, "threshold": _NUMBER}, _softplus,
                       "log(1 + exp(beta * x)) / beta, x above threshold (beta 1, threshold 20)"),
    "hardsigmoid": OpSpec(0, 0, {}, _unary("HardsigmoidOp"), "min(max(x + 3, 0), 6) / 6"),
    "hardswish": OpSpec(0, 0, {}, _unary("HardswishOp"), "x * min(max(x + 3, 0), 6) / 6"),
    "rotate_half": OpSpec(0, 0, {"group": int}, _rotate_half, "cat(-x[..., D/2:], x[..., :D/2]) over the last dim D "
                          "(rotary embeddings' rotate_half), or over each group of D = group columns (heads side by "
                          "side); computed in registers from a tile spanning whole groups"),
    "leaky_relu": OpSpec(0, 0, {"negative_slope": _NUMBER}, _leaky, "leaky ReLU (negative_slope, default 0.01)"),
    "clamp": OpSpec(0, 0, {"min": _NUMBER, "max": _NUMBER}, _clamp, "clamp to [min, max]"),
    "hardtanh": OpSpec(0, 0, {"min_val": _NUMBER, "max_val": _NUMBER}, _hardtanh, "clamp to [-1, 1] by default"),
    "scale": OpSpec(0, 0, {"factor": _NUMBER}, _scale, "* a constant factor"),
    "cast": OpSpec(0, 0, {"dtype": torch.dtype}, _cast, "convert to dtype"),
    "sum": OpSpec(0, 0, REDUCTION_PARAMS, _reduction("ReduceSumOp"), "sum over dim (default -1)"),
    "mean": OpSpec(0, 0, REDUCTION_PARAMS, _reduction("ReduceMeanOp"), "mean over dim"),
    "max": OpSpec(0, 0, REDUCTION_PARAMS, _reduction("ReduceMaxOp"), "max over dim"),
    "logsumexp": OpSpec(0, 0, REDUCTION_PARAMS, _reduction("LogSumExpOp"), "logsumexp over dim"),
    "var": OpSpec(0, 0, REDUCTION_PARAMS | {"correction": _NUMBER}, _var,
                  "variance over dim; correction 1 (Bessel's, default) or 0 (the population variance)"),
    "softmax": OpSpec(0, 0, ROWWISE_PARAMS, _rowwise("SoftmaxOp"), "softmax over dim (default -1)"),
    "log_softmax": OpSpec(0, 0, ROWWISE_PARAMS, _rowwise("LogSoftmaxOp"), "log-softmax over dim (default -1)"),
    "layernorm": OpSpec(0, 2, {"eps": _NUMBER}, _layernorm, "LayerNorm over the last dim; takes gamma, beta",
                       ("gamma", "beta")),
    "rmsnorm": OpSpec(0, 1, {"eps": _NUMBER}, _rmsnorm, "RMSNorm over the last dim; takes a weight",
                     ("rms_weight",)),
}

# The entries amk defines, each name with its own spec (any other entry, or another spec under one of these names,
# was put there by a user: its builder is part of the cache key, see amk.build).
BUILT_IN_OPS: Mapping[str, OpSpec] = MappingProxyType(dict(OPS))


def normalize_ops(ops: Sequence) -> list[tuple[str, dict]]:
    """``["gelu", ("layernorm", {"eps": 1e-6})]`` → ``[("gelu", {}), ("layernorm", {"eps": 1e-6})]``, validated."""
    if isinstance(ops, str | bytes) or not isinstance(ops, Sequence) or len(ops) == 0:
        raise InvalidArgumentError(f"ops must be a non-empty list of op names, got {ops!r}")
    result = []
    for index, entry in enumerate(ops):
        if isinstance(entry, str):
            name, params = entry, {}
        elif isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], dict):
            name, params = entry
        else:
            raise InvalidArgumentError(
                f"ops[{index}] must be a name or a (name, params) pair such as ('layernorm', {{'eps': 1e-6}}), got {entry!r}")
        if name not in OPS:
            raise UnsupportedOpError(f"ops[{index}]: unknown op {name!r}; supported ops: {', '.join(OPS)}")
        spec = OPS[name]
        for key, value in params.items():
            if key not in spec.params:
                accepted = ", ".join(spec.params) or "none"
                raise InvalidArgumentError(f"ops[{index}] ({name}): unknown parameter {key!r}; accepted: {accepted}")
            expected = spec.params[key]
            if not isinstance(value, expected) or (expected in (int, _NUMBER) and isinstance(value, bool)):
                accepted = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
                raise InvalidArgumentError(f"ops[{index}] ({name}): parameter {key!r} must be {accepted}, "
                                           f"got {type(value).__name__} {value!r}")
            if key in ("dim", "axis") and not -2**63 <= value < 2**63:  # (the IR's i64 wrapped it, or refused it)
                raise ShapeError(f"ops[{index}] ({name}): {key}={value} is out of range for every tensor (a dim "
                                 "counts from -rank to rank - 1)")
            if expected is _NUMBER and isinstance(value, int) and not _fits_a_float(value):
                raise InvalidArgumentError(f"ops[{index}] ({name}): parameter {key!r} must fit a float64 (at most "
                                           f"{sys.float_info.max:.4g} in magnitude), got {value}")
        if "dim" in params and "axis" in params and params["dim"] != params["axis"]:  # (NumPy's name for dim)
            raise InvalidArgumentError(f"ops[{index}] ({name}): dim={params['dim']} and axis={params['axis']} name "
                                       "two dims; give one of them")
        result.append((name, dict(params)))
    return result


def _given(value) -> str:
    """``value`` as a message names it, on one line: an array by its type and shape (a tensor passed where its shape
    goes; its repr runs to dozens of lines), anything else by a repr cut short."""
    if hasattr(value, "shape") and not isinstance(value, torch.Size | tuple | list):
        return f"a {type(value).__module__.split('.')[0]}.{type(value).__name__} of shape {tuple(value.shape)} (pass its .shape)"
    return reprlib.repr(value)


def normalize_shapes(input_shapes: Sequence) -> list[tuple[int, ...]]:
    if not isinstance(input_shapes, Sequence) or isinstance(input_shapes, str) or not input_shapes:
        raise InvalidArgumentError(f"input_shapes must be a non-empty list of shapes, got {_given(input_shapes)}")
    shapes = []
    for index, shape in enumerate(input_shapes):
        if isinstance(shape, torch.Size | tuple | list) and all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            if any(d < 0 for d in shape):
                raise ShapeError(f"input_shapes[{index}] = {tuple(shape)} has a negative dimension")
            if any(d == 0 for d in shape):
                raise ShapeError(f"input_shapes[{index}] = {tuple(shape)} is empty (a zero-sized dimension); "
                                 "amk builds kernels for non-empty tensors")
            shapes.append(tuple(shape))
        else:
            raise InvalidArgumentError(f"input_shapes[{index}] must be a tuple of ints, got {_given(shape)}")
    return shapes


def bind_operands(ops: list[tuple[str, dict]], shape_count: int) -> list[int]:
    """How many tensor operands each op takes (the first op also takes the chain's input)."""
    remaining = shape_count - 1
    counts = []
    for index, (name, _) in enumerate(ops):
        spec = OPS[name]
        later = sum(OPS[n].required for n, _ in ops[index + 1:])
        take = spec.required + max(0, min(spec.optional, remaining - spec.required - later))
        counts.append(take)
        remaining -= take
    if remaining != 0:
        needed = 1 + sum(OPS[n].required for n, _ in ops)
        most = needed + sum(OPS[n].optional for n, _ in ops)
        expected = f"{needed}" if needed == most else f"between {needed} and {most}"
        raise ShapeError(f"{shape_count} input shapes given, but the op chain ({', '.join(n for n, _ in ops)}) "
                         f"takes {expected}")
    return counts


def _names(spec: OpSpec, count: int) -> list[str]:
    names = list(spec.operand_names)
    return (names + names[-1:] * count)[:count]


def build_module(ops: Sequence, input_shapes: Sequence, dtype: torch.dtype) -> ModuleOp:
    """A module with ``func.func @fused_chain`` computing the chain; raises amk errors for bad input."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Operation, Region, SSAValue
    from xdsl.utils.exceptions import VerifyException

    from amk.dialects.tensor_op import TensorType
    from amk.dtypes import to_ir, to_torch

    op_list = normalize_ops(ops)
    shapes = normalize_shapes(input_shapes)
    element = to_ir(dtype)
    counts = bind_operands(op_list, len(shapes))
    block = Block(arg_types=[TensorType(s, element) for s in shapes])
    names = ["x"] + [name for (op, _), count in zip(op_list, counts) for name in _names(OPS[op], count)]
    for arg, name in zip(block.args, names):
        arg.name_hint = name
    value: SSAValue = block.args[0]
    position = 1
    for index, ((name, params), count) in enumerate(zip(op_list, counts)):
        operands = list(block.args[position:position + count])
        position += count
        if operands and value.type.element_type != element:
            chain = to_torch(value.type.element_type)
            raise DTypeError(f"ops[{index}] ({name}) takes operands in the chain's dtype {dtype}, but its input is "
                             f"{chain} after a cast: cast after the ops that take operands, or build the chain in "
                             f"{chain}")
        try:
            op = OPS[name].build(value, operands, params)
            if not (isinstance(op, Operation) and len(op.results) == 1):
                # (a contributor's OpSpec: its builder's mistake named here, not as an AttributeError further on)
                raise InvalidArgumentError(f"OPS[{name!r}].build returned {op!r}; it must return one new op (an xDSL "
                                           "Operation with one result, such as tensor_op.ReluOp(x))")
            op.verify()
        except VerifyException as error:
            optional = count > OPS[name].required
            hint = (f" (shapes bind to operands in list order, optional ones included: {name} took "
                    f"{count - OPS[name].required} optional operand(s))" if optional else "")
            raise ShapeError(f"ops[{index}] ({name}) does not fit its inputs: {error}; operand shapes: "
                             f"{[tuple(str(d) for d in v.type.dims) for v in [value, *operands]]}{hint}") from None
        block.add_op(op)
        value = op.results[0]
    block.add_op(func.ReturnOp(value))
    function = func.FuncOp("fused_chain", ([a.type for a in block.args], [value.type]), Region(block))
    return ModuleOp([function])
