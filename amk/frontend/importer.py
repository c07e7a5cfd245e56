"""FX graph → ``tensor_op`` IR: which nodes of a TorchDynamo graph amk can compute, and the IR of a connected run.

**Which graph level.** The front end matches the *torch-level* graph that TorchDynamo hands a backend (``F.linear``,
``F.layer_norm``, ``torch.rms_norm``, ``operator.add``, ``Tensor.pow``...), not the ATen graph of ``aot_autograd``:

- ``F.linear`` on a ``[B, S, K]`` activation stays one node; at the ATen level it becomes ``view → addmm → view``
  (or ``t → mm``), and every Linear would need its views folded before it could fuse with its neighbours.
  ``tensor_op.matmul`` takes batched lhs operands directly, so the torch level needs no view handling at all.
- Norms stay whole (``F.layer_norm``, ``torch.rms_norm``) instead of ``native_layer_norm``'s (out, mean, rstd) triple
  or RMSNorm's decomposition; the hand-written RMSNorm ``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``
  is recognised as a pattern here and becomes one ``tensor_op.rmsnorm``, which fuses as a matmul prologue.
- Autograd needs no joint graph: the fused parts get a backward by recomputation from the very FX nodes they
  replace (see :mod:`amk.frontend.compile`), and everything else is ordinary PyTorch that autograd already handles.

The price is that one op has many spellings (``x + y``, ``torch.add``, ``x.add``); :data:`CONVERTERS` lists each
spelling once, with the argument names needed to read positional and keyword arguments alike.

**Symbolic dims.** Shapes come from the fake tensors in ``node.meta`` (``"example_value"`` at the torch level,
``"val"`` elsewhere). A dim that Dynamo made symbolic is a ``SymInt`` whose sympy expression (``s77``,
``s27*s77``) becomes the ``tensor_op`` dimension, so one module serves every batch and sequence length.

**What is imported.** :func:`analyze` decides, node by node, whether the node has a ``tensor_op`` equivalent (and
records why not); :class:`SubgraphImporter` builds the ``func.func`` of one connected set of supported nodes.
A supported node becomes one or more ``tensor_op`` ops whose results carry the node's name (``%linear``), so the
IR and :func:`amk.explain` can be read against the FX graph.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, StringAttr, f64
from xdsl.ir import Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from amk.dialects import tensor_op
from amk.dialects.tensor_op import TensorType
from amk.dtypes import to_ir
from amk.symbolic import Dim

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """The node has no ``tensor_op`` equivalent (the message says why)."""


# ----------------------------------------------------------------------------------------------------------------------
# Node spellings
# ----------------------------------------------------------------------------------------------------------------------


def spellings(functions: Iterable = (), methods: Iterable[str] = ()) -> frozenset:
    """Keys of :data:`CONVERTERS`: ``("call_function", fn)`` and ``("call_method", name)``."""
    return frozenset([("call_function", f) for f in functions] + [("call_method", m) for m in methods])


def key_of(node: Node):
    if node.op == "call_function":
        return ("call_function", node.target)
    if node.op == "call_method":
        return ("call_method", node.target)
    return None


ADD = spellings([operator.add, torch.add], ["add"])
SUB = spellings([operator.sub, torch.sub, torch.subtract], ["sub", "subtract"])
MUL = spellings([operator.mul, torch.mul, torch.multiply], ["mul", "multiply"])
DIV = spellings([operator.truediv, torch.div, torch.divide, torch.true_divide], ["div", "divide", "true_divide"])
POW = spellings([operator.pow, torch.pow], ["pow"])
SQUARE = spellings([torch.square], ["square"])
MEAN = spellings([torch.mean], ["mean"])
RSQRT = spellings([torch.rsqrt], ["rsqrt"])
SQRT = spellings([torch.sqrt], ["sqrt"])
MATMUL = spellings([operator.matmul, torch.matmul, torch.mm], ["matmul", "mm", "__matmul__"])
ADDMM = spellings([torch.addmm], ["addmm"])


def is_(node: object, family: frozenset) -> bool:
    return isinstance(node, Node) and key_of(node) in family


# ----------------------------------------------------------------------------------------------------------------------
# Reading nodes
# ----------------------------------------------------------------------------------------------------------------------


def meta_value(node: Node):
    """The fake value Dynamo recorded for ``node`` (a FakeTensor, SymInt, ...), or None."""
    value = node.meta.get("val")
    if value is None:
        value = node.meta.get("example_value")
    return value


def fake_tensor(node: Node) -> torch.Tensor:
    value = meta_value(node)
    if not isinstance(value, torch.Tensor):
        raise Unsupported(f"{node.name} is not a tensor" if value is not None else f"{node.name} has no shape metadata")
    return value


def dim_of(size) -> Dim:
    """A ``Dim`` from an int or a SymInt (its sympy expression, e.g. ``s27*s77``)."""
    if isinstance(size, int):
        return Dim(size)
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        if expr.is_Integer:
            return Dim(int(expr))
        try:
            return Dim(str(expr))
        except ValueError as error:
            raise Unsupported(f"symbolic size {expr} is not a dimension expression amk reads ({error})") from None
    raise Unsupported(f"size {size!r} is neither an int nor a SymInt")


def tensor_type_of(fake: torch.Tensor) -> TensorType:
    if fake.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"dtype {fake.dtype} (amk kernels compute float32, float16 and bfloat16)")
    if fake.is_complex() or fake.is_sparse or fake.layout != torch.strided:
        raise Unsupported("only dense strided tensors")
    return TensorType([dim_of(s) for s in fake.shape], to_ir(fake.dtype))


def bind_arguments(node: Node, names: Sequence[str], defaults: dict | None = None) -> dict:
    """The node's arguments by name (``names`` in positional order; ``defaults`` for those left out)."""
    bound = dict(defaults or {})
    if len(node.args) > len(names):
        raise Unsupported(f"{describe_target(node)} called with {len(node.args)} positional arguments")
    bound.update(zip(names, node.args))
    for key, value in node.kwargs.items():
        if key not in names:
            raise Unsupported(f"{describe_target(node)}: argument {key}={value!r} is not supported")
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise Unsupported(f"{describe_target(node)}: missing argument {missing[0]}")
    return bound


def describe_target(node: Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        target = node.target
        module = getattr(target, "__module__", None) or ""
        name = getattr(target, "__name__", str(target))
        if module in ("_operator", "operator"):
            return f"operator.{name}"
        if module.startswith("torch._C._nn") or target in (F.linear, F.gelu):
            return f"F.{name}"
        if module.startswith("torch.nn.functional"):
            return f"F.{name}"
        if module.startswith("torch") or module == "":
            return f"torch.{name}"
        return f"{module}.{name}"
    if node.op == "call_module":
        return f"module {node.target}"
    return node.op


# ----------------------------------------------------------------------------------------------------------------------
# Values handed between converters
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transposed:
    """A 2-D tensor's transpose (``w.t()``, ``w.T``): it only exists as a matmul's rhs (``transpose_rhs``)."""

    value: SSAValue


@dataclass
class ArgSource:
    """Where one argument of the imported function comes from: an FX node, or a constant (``+ eps``)."""

    node: Node | None = None
    constant: float | None = None
    dtype: torch.dtype | None = None


@dataclass
class ScalarGuard:
    """A scalar read from the graph at run time (``eps.item()`` when Dynamo does not specialize floats): the kernel
    was built for ``value``, so a call with another value runs the PyTorch graph instead."""

    node: Node
    value: float


ScalarResolver = Callable[[Node], float | None]


class SubgraphImporter:
    """Builds one ``func.func`` from FX nodes. Function arguments are created on first use of an outside value.

    :func:`analyze` uses one per node to try it alone (every operand is then a fresh argument).
    """

    def __init__(self, resolve_scalar: ScalarResolver | None = None, name: str = "subgraph"):
        self.block = Block()
        self.values: dict[Node, SSAValue | Transposed] = {}
        self.sources: list[ArgSource] = []
        self.constants: dict[tuple[float, torch.dtype], SSAValue] = {}
        self.guards: list[ScalarGuard] = []
        self.resolve_scalar = resolve_scalar or (lambda node: None)
        self.name = name
        self.ops_of: dict[Node, list] = {}
        self.names: dict[str, str] = {}  # SSA name hint -> FX node name
        self._current: Node | None = None

    # -- operands -------------------------------------------------------------------------------------------------------
    def _argument(self, node: Node) -> SSAValue:
        arg = self.block.insert_arg(tensor_type_of(fake_tensor(node)), len(self.block.args))
        arg.name_hint = _hint(node.name)
        self.sources.append(ArgSource(node=node))
        self.values[node] = arg
        return arg

    def operand(self, node, *, allow_transposed: bool = False) -> SSAValue | Transposed:
        if not isinstance(node, Node):
            raise Unsupported(f"expected a tensor operand, got {type(node).__name__} {node!r}")
        value = self.values.get(node)
        if value is None:
            value = self._argument(node)
        if isinstance(value, Transposed) and not allow_transposed:
            raise Unsupported(f"{node.name} is a transposed view, which amk only reads as a matmul's rhs")
        return value

    def tensor(self, node, dtype: torch.dtype | None = None) -> SSAValue:
        """The SSA value of a tensor operand, cast to ``dtype`` when given."""
        value = self.operand(node)
        if dtype is not None and value.type.element_type != to_ir(dtype):
            value = self.add(tensor_op.CastOp(value, to_ir(dtype)), "cast")
        return value

    def constant(self, value: float, dtype: torch.dtype) -> SSAValue:
        """A one-element tensor argument holding a constant (broadcasts as a scalar in every kernel)."""
        key = (float(value), dtype)
        if key not in self.constants:
            arg = self.block.insert_arg(TensorType([1], to_ir(dtype)), len(self.block.args))
            arg.name_hint = "cst"
            self.sources.append(ArgSource(constant=float(value), dtype=dtype))
            self.constants[key] = arg
        return self.constants[key]

    def scalar(self, value) -> float:
        """A Python number, or a scalar node whose value at compile time is known (then guarded at run time)."""
        if isinstance(value, bool):
            raise Unsupported(f"boolean scalar {value!r}")
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise Unsupported(f"non-finite scalar {value!r}")
            return float(value)
        if isinstance(value, Node):
            if isinstance(meta_value(value), torch.Tensor):
                raise Unsupported(f"{value.name} is a tensor, not a scalar")
            resolved = self.resolve_scalar(value)
            if resolved is None:
                raise Unsupported(f"scalar {value.name} is only known at run time")
            self.guards.append(ScalarGuard(value, float(resolved)))
            return float(resolved)
        raise Unsupported(f"expected a number, got {type(value).__name__}")

    def is_tensor(self, value) -> bool:
        return isinstance(value, Node) and isinstance(meta_value(value), torch.Tensor)

    # -- building ---------------------------------------------------------------------------------------------------------
    def add(self, op, suffix: str | None = None) -> SSAValue:
        try:
            op.verify()
        except VerifyException as error:
            raise Unsupported(f"{op.name} does not fit its operands: {error}") from None
        self.block.add_op(op)
        node = self._current
        if node is not None:
            hint = _hint(node.name) if suffix is None else f"{_hint(node.name)}_{suffix}"
            op.results[0].name_hint = hint
            self.names[op.results[0].name_hint] = node.name
            self.ops_of.setdefault(node, []).append(op)
        return op.results[0]

    def convert(self, node: Node, converter: Callable) -> None:
        """Run ``converter`` for ``node``; the node's value is the last op's result (or what the converter returns)."""
        self._current = node
        try:
            result = converter(self, node)
        finally:
            self._current = None
        if isinstance(result, SSAValue):
            expected = tensor_type_of(fake_tensor(node))
            have = result.type
            if have.element_type != expected.element_type or have.rank != expected.rank:
                raise Unsupported(f"{node.name}: imported as {have}, but PyTorch computes {expected}")
            for axis, (a, b) in enumerate(zip(have.dims, expected.dims)):
                if a != b and not _provably_equal(a, b):
                    raise Unsupported(f"{node.name}: dimension {axis} imported as {a}, but PyTorch has {b}")
        self.values[node] = result

    def finish(self, outputs: Sequence[Node]) -> ModuleOp:
        results = []
        for node in outputs:
            value = self.values.get(node)
            if not isinstance(value, SSAValue):
                raise Unsupported(f"{node.name} is needed outside the fused subgraph but has no tensor value there")
            results.append(value)
        self.block.add_op(func.ReturnOp(*results))
        function = func.FuncOp(self.name, ([a.type for a in self.block.args], [v.type for v in results]),
                               Region(self.block))
        module = ModuleOp([function])
        module.verify()
        return module


def _provably_equal(a: Dim, b: Dim) -> bool:
    from amk.symbolic import provably_equal

    return provably_equal(a, b)


def _hint(name: str) -> str:
    """The SSA name hint of an FX node name. xDSL drops a ``_<digits>`` suffix from hints (its printer adds such
    suffixes to keep names unique), so ``linear_1`` becomes ``linear1`` rather than collapsing into ``linear``."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    cleaned = re.sub(r"_(\d+)$", r"\1", cleaned)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"v_{cleaned}"


# ----------------------------------------------------------------------------------------------------------------------
# Converters
# ----------------------------------------------------------------------------------------------------------------------


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


@register(spellings([torch.maximum], ["maximum"]), "maximum")
def _maximum(b, node):
    a = bind_arguments(node, ("input", "other"))
    dtype = _result_dtype(node)
    return b.add(tensor_op.MaximumOp(b.tensor(a["input"], dtype), b.tensor(a["other"], dtype)))


@register(spellings([torch.minimum], ["minimum"]), "minimum")
def _minimum(b, node):
    a = bind_arguments(node, ("input", "other"))
    dtype = _result_dtype(node)
    return b.add(tensor_op.MinimumOp(b.tensor(a["input"], dtype), b.tensor(a["other"], dtype)))


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
    dtype = _result_dtype(node)
    value = b.tensor(x, dtype)
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
_unary(tensor_op.MishOp, "mish", [F.mish], [], extra=("inplace",))


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


def _softmax_dim(node: Node, a: dict, rank: int) -> int:
    dim = a.get("dim")
    if dim is None:
        raise Unsupported("softmax without an explicit dim")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise Unsupported(f"softmax dim {dim!r}")
    if dim % rank != rank - 1:
        raise Unsupported(f"softmax over dim {dim} (amk kernels reduce the last dim)")
    return -1


@register(spellings([torch.softmax, F.softmax, torch._C._nn.softmax] if hasattr(torch._C._nn, "softmax")
                    else [torch.softmax, F.softmax], ["softmax"]), "softmax")
def _softmax(b, node):
    names = ("input", "dim", "_stacklevel", "dtype") if node.target is F.softmax else ("input", "dim", "dtype")
    a = bind_arguments(node, names, {"dim": None, "dtype": None, "_stacklevel": 3})
    x = b.tensor(a["input"], a["dtype"])
    return b.add(tensor_op.SoftmaxOp(x, _softmax_dim(node, a, x.type.rank)))


def _reduction(op_class, label, functions, methods):
    @register(spellings(functions, methods), label, fragile=True)
    def build(b, node):
        a = bind_arguments(node, ("input", "dim", "keepdim", "dtype"), {"keepdim": False, "dtype": None})
        if a["dtype"] is not None:
            raise Unsupported(f"{label} with dtype=")
        dim = a["dim"]
        if isinstance(dim, list | tuple):
            if len(dim) != 1:
                raise Unsupported(f"{label} over several dims")
            dim = dim[0]
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise Unsupported(f"{label} over dim {dim!r}")
        x = b.tensor(a["input"])
        if dim % x.type.rank != x.type.rank - 1:
            raise Unsupported(f"{label} over dim {dim} (amk kernels reduce the last dim)")
        return b.add(op_class(x, -1, bool(a["keepdim"])))

    return build


_reduction(tensor_op.ReduceSumOp, "sum", [torch.sum], ["sum"])
_reduction(tensor_op.ReduceMeanOp, "mean", [torch.mean], ["mean"])
_reduction(tensor_op.ReduceMaxOp, "amax", [torch.amax], ["amax"])
_reduction(tensor_op.LogSumExpOp, "logsumexp", [torch.logsumexp], ["logsumexp"])


def _norm_vector(b, node, role: str, dtype: torch.dtype) -> SSAValue | None:
    if node is None:
        return None
    if not b.is_tensor(node):
        raise Unsupported(f"{role} must be a tensor")
    value = b.tensor(node)
    if value.type.element_type != to_ir(dtype):
        raise Unsupported(f"{role} dtype {fake_tensor(node).dtype} differs from the input's {dtype}")
    return value


def _normalized_shape(shape, x: SSAValue) -> None:
    if isinstance(shape, int | torch.SymInt):
        shape = [shape]
    if not isinstance(shape, list | tuple | torch.Size) or len(shape) != 1:
        raise Unsupported(f"normalized_shape {shape!r} (amk normalizes the last dim only)")
    if isinstance(shape[0], Node):
        raise Unsupported("normalized_shape computed at run time")
    if not _provably_equal(dim_of(shape[0]), x.type.dims[-1]):
        raise Unsupported(f"normalized_shape {tuple(shape)} is not the last dim {x.type.dims[-1]}")


@register(spellings([F.layer_norm, torch.layer_norm], ["layer_norm"]), "layer_norm")
def _layer_norm(b, node):
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    if node.target is torch.layer_norm:
        names = (*names, "cudnn_enable")
    a = bind_arguments(node, names, {"weight": None, "bias": None, "eps": 1e-5, "cudnn_enable": True})
    x = b.tensor(a["input"])
    _normalized_shape(a["normalized_shape"], x)
    dtype = fake_tensor(a["input"]).dtype
    weight = _norm_vector(b, a["weight"], "weight", dtype)
    bias = _norm_vector(b, a["bias"], "bias", dtype)
    return b.add(tensor_op.LayerNormOp(x, weight, bias, b.scalar(a["eps"])))


@register(spellings([torch.rms_norm, F.rms_norm], ["rms_norm"]), "rms_norm")
def _rms_norm(b, node):
    a = bind_arguments(node, ("input", "normalized_shape", "weight", "eps"), {"weight": None, "eps": None})
    x = b.tensor(a["input"])
    _normalized_shape(a["normalized_shape"], x)
    dtype = fake_tensor(a["input"]).dtype
    weight = _norm_vector(b, a["weight"], "weight", dtype)
    eps = torch.finfo(dtype).eps if a["eps"] is None else b.scalar(a["eps"])
    return b.add(tensor_op.RMSNormOp(x, weight, eps))


def _check_matmul_ranks(lhs: SSAValue, rhs, what: str) -> None:
    rank = rhs.value.type.rank if isinstance(rhs, Transposed) else rhs.type.rank
    if lhs.type.rank < 2:
        raise Unsupported(f"{what} with a rank-{lhs.type.rank} lhs")
    if rank != 2:
        raise Unsupported(f"{what} with a rank-{rank} rhs (amk matmuls take a 2-D rhs, e.g. a weight)")


def _matmul_value(b, lhs_node, rhs_node, what: str) -> SSAValue:
    for operand in (lhs_node, rhs_node):
        if not b.is_tensor(operand):
            raise Unsupported(f"{what} of a non-tensor")
    lhs = b.tensor(lhs_node)
    rhs = b.operand(rhs_node, allow_transposed=True)
    _check_matmul_ranks(lhs, rhs, what)
    if isinstance(rhs, Transposed):
        return b.add(tensor_op.MatmulOp(lhs, rhs.value, transpose_rhs=True), "mm" if what != "matmul" else None)
    return b.add(tensor_op.MatmulOp(lhs, rhs), "mm" if what != "matmul" else None)


@register(spellings([F.linear, torch._C._nn.linear], []), "linear")
def _linear(b, node):
    a = bind_arguments(node, ("input", "weight", "bias"), {"bias": None})
    x, weight = b.tensor(a["input"]), b.tensor(a["weight"])
    if x.type.rank < 2:
        raise Unsupported(f"linear on a rank-{x.type.rank} input")
    if weight.type.rank != 2:
        raise Unsupported(f"linear with a rank-{weight.type.rank} weight")
    y = b.add(tensor_op.MatmulOp(x, weight, transpose_rhs=True), "mm" if a["bias"] is not None else None)
    if a["bias"] is None:
        return y
    bias = b.tensor(a["bias"])
    return b.add(tensor_op.AddOp(y, bias))


@register(MATMUL, "matmul")
def _matmul(b, node):
    a = bind_arguments(node, ("input", "other"))
    if node.target is torch.mm or node.target == "mm":
        if fake_tensor(a["input"]).dim() != 2:
            raise Unsupported("torch.mm of a non 2-D lhs")
    return _matmul_value(b, a["input"], a["other"], "matmul")


@register(ADDMM, "addmm")
def _addmm(b, node):
    a = bind_arguments(node, ("input", "mat1", "mat2", "beta", "alpha"), {"beta": 1, "alpha": 1})
    y = _matmul_value(b, a["mat1"], a["mat2"], "addmm")
    alpha, beta = b.scalar(a["alpha"]), b.scalar(a["beta"])
    if alpha != 1:
        y = b.add(tensor_op.ScaleOp(y, factor=FloatAttr(alpha, f64)), "alpha")
    if beta == 0:
        return y
    bias = b.tensor(a["input"], _result_dtype(node))
    if beta != 1:
        bias = b.add(tensor_op.ScaleOp(bias, factor=FloatAttr(beta, f64)), "beta")
    return b.add(tensor_op.AddOp(y, bias))


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
        if extra or node.kwargs.get("copy") or node.kwargs.get("memory_format") not in (None, torch.preserve_format):
            raise Unsupported(f"Tensor.to with {sorted(node.kwargs)}")
    if node.target == "type" and len(node.args) < 2 and "dtype" not in node.kwargs:
        raise Unsupported("Tensor.type() without a dtype returns a string")
    value = b.tensor(source)
    if before.dtype == after.dtype:
        return value
    if after.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"cast to {after.dtype}")
    return b.add(tensor_op.CastOp(value, to_ir(after.dtype)))


@register(spellings([], ["contiguous"]), "contiguous", kind="identity")
def _contiguous(b, node):
    a = bind_arguments(node, ("input", "memory_format"), {"memory_format": torch.contiguous_format})
    if a["memory_format"] not in (torch.contiguous_format, torch.preserve_format):
        raise Unsupported(f"contiguous({a['memory_format']})")
    return b.tensor(a["input"])


@register(spellings([F.dropout, torch.dropout], []), "dropout", kind="identity")
def _dropout(b, node):
    names = ("input", "p", "training", "inplace") if node.target is F.dropout else ("input", "p", "train")
    a = bind_arguments(node, names, {"p": 0.5, "training": True, "inplace": False})
    training = a.get("training", a.get("train"))
    if training and a["p"] != 0:
        raise Unsupported("dropout in training mode")
    _inplace_unsupported(a)
    return b.tensor(a["input"])


TRANSPOSES = spellings([torch.t, torch.transpose, torch.permute, getattr], ["t", "transpose", "permute"])


@register(TRANSPOSES, "transpose", kind="view")
def _transpose(b, node):
    source = node.args[0] if node.args else None
    if not b.is_tensor(source) or fake_tensor(source).dim() != 2:
        raise Unsupported(f"{describe_target(node)} has no tensor_op equivalent (only a 2-D weight's transpose is "
                          "read, as a matmul's rhs)")
    rest = list(node.args[1:])
    if node.target is getattr:
        if rest not in (["T"], ["mT"]):
            raise Unsupported(f"getattr {rest}")
    elif node.target in (torch.t, "t"):
        if rest:
            raise Unsupported("t() with arguments")
    elif node.target in (torch.transpose, "transpose"):
        if len(rest) != 2 or sorted(d % 2 for d in rest) != [0, 1]:
            raise Unsupported(f"transpose{tuple(rest)}")
    else:
        dims = rest[0] if len(rest) == 1 and isinstance(rest[0], list | tuple) else rest
        if [d % 2 for d in dims] != [1, 0]:
            raise Unsupported(f"permute{tuple(dims)}")
    if node.kwargs:
        raise Unsupported(f"{describe_target(node)} with keyword arguments")
    return Transposed(b.tensor(source))


def _matmul_rhs_users_only(node: Node) -> bool:
    """Whether every user of a transpose node reads it as a matmul's rhs."""
    for user in node.users:
        if is_(user, MATMUL):
            operands = list(user.args) + [user.kwargs.get("other")]
            if operands[0] is node or node not in operands[1:]:
                return False
        elif is_(user, ADDMM):
            operands = list(user.args) + [user.kwargs.get("mat2")]
            if node in operands[:2] or user.kwargs.get("mat1") is node or user.kwargs.get("input") is node:
                return False
        else:
            return False
    return bool(node.users)


# ----------------------------------------------------------------------------------------------------------------------
# Patterns: the hand-written RMSNorm
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class Pattern:
    """Several FX nodes imported as one op: ``root``'s value; ``absorbed`` nodes get no value of their own."""

    root: Node
    absorbed: list[Node]
    label: str
    build: Callable


def _single_user(node: Node, user: Node) -> bool:
    return isinstance(node, Node) and list(node.users) == [user]


def _is_square_of(node, x) -> bool:
    if is_(node, POW):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] == 2 and not node.kwargs
    if is_(node, SQUARE):
        return len(node.args) == 1 and node.args[0] is x
    if is_(node, MUL):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] is x
    return False


def _mean_of_square(node, x) -> Node | None:
    """``mean(sq(x), dim=-1, keepdim=True)``: returns the square node."""
    if not is_(node, MEAN):
        return None
    args = list(node.args)
    kwargs = dict(node.kwargs)
    source = args.pop(0) if args else kwargs.pop("input", None)
    dim = args.pop(0) if args else kwargs.pop("dim", None)
    keepdim = args.pop(0) if args else kwargs.pop("keepdim", False)
    if args or kwargs.pop("dtype", None) is not None or kwargs:
        return None
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    rank = fake_tensor(x).dim() if isinstance(meta_value(x), torch.Tensor) else 0
    if not isinstance(dim, int) or rank == 0 or dim % rank != rank - 1 or keepdim is not True:
        return None
    if not _single_user(source, node) or not _is_square_of(source, x):
        return None
    return source


def _match_rms_core(root: Node):
    """``x * rsqrt(mean(x²) + eps)`` (either order) or ``x / sqrt(mean(x²) + eps)`` → (x, eps, absorbed)."""
    if is_(root, MUL) and len(root.args) == 2 and not root.kwargs:
        candidates = [(root.args[0], root.args[1]), (root.args[1], root.args[0])]
        inverse = RSQRT
    elif is_(root, DIV) and len(root.args) == 2 and not root.kwargs:
        candidates = [(root.args[0], root.args[1])]
        inverse = SQRT
    else:
        return None
    for x, r in candidates:
        if not isinstance(x, Node) or not is_(r, inverse) or not _single_user(r, root) or len(r.args) != 1:
            continue
        total = r.args[0]
        if not is_(total, ADD) or not _single_user(total, r) or len(total.args) != 2 or total.kwargs:
            continue
        for mean, eps in [(total.args[0], total.args[1]), (total.args[1], total.args[0])]:
            if isinstance(eps, Node) and isinstance(meta_value(eps), torch.Tensor):
                continue
            if not isinstance(mean, Node) or not _single_user(mean, total):
                continue
            square = _mean_of_square(mean, x)
            if square is not None:
                return x, eps, [square, mean, total, r]
    return None


def _rms_weight(root: Node):
    """``norm * w`` / ``w * norm`` right after the core, with ``w`` a vector over the last dim."""
    users = list(root.users)
    if len(users) != 1:
        return None
    user = users[0]
    if not is_(user, MUL) or len(user.args) != 2 or user.kwargs:
        return None
    weight = user.args[1] if user.args[0] is root else user.args[0]
    if weight is root or not isinstance(weight, Node) or not isinstance(meta_value(weight), torch.Tensor):
        return None
    w, y = fake_tensor(weight), fake_tensor(root)
    if w.dim() != 1 or w.dtype != y.dtype or fake_tensor(user).dtype != y.dtype:
        return None
    return user, weight


def match_patterns(gm: GraphModule) -> list[Pattern]:
    patterns = []
    taken: set[Node] = set()
    for node in gm.graph.nodes:
        if node in taken or node.op not in ("call_function", "call_method"):
            continue
        core = _match_rms_core(node)
        if core is None:
            continue
        x, eps, absorbed = core
        if not isinstance(meta_value(x), torch.Tensor) or fake_tensor(node).dtype != fake_tensor(x).dtype:
            continue
        weighted = _rms_weight(node)
        root, weight = (weighted[0], weighted[1]) if weighted else (node, None)
        if weighted:
            absorbed = absorbed + [node]

        def build(b, _node, x=x, eps=eps, weight=weight):
            value = b.tensor(x)
            w = b.tensor(weight) if weight is not None else None
            return b.add(tensor_op.RMSNormOp(value, w, b.scalar(eps)))

        patterns.append(Pattern(root, absorbed, "rmsnorm (x * rsqrt(mean(x**2) + eps) * w)", build))
        taken.update(absorbed)
        taken.add(root)
    return patterns


# ----------------------------------------------------------------------------------------------------------------------
# Analysis of a whole graph
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class NodeInfo:
    """What amk makes of one FX node."""

    node: Node
    supported: bool
    label: str
    kind: str = "compute"  # compute | identity | view | absorbed
    reason: str | None = None
    fragile: bool = False
    build: Callable | None = None
    root: Node | None = None  # for absorbed nodes: the pattern's root


@dataclass
class Analysis:
    infos: dict[Node, NodeInfo] = field(default_factory=dict)
    patterns: list[Pattern] = field(default_factory=list)
    epochs: dict[Node, int] = field(default_factory=dict)  # barriers (mutations, grad mode, autocast) seen before

    def supported(self) -> set[Node]:
        return {n for n, info in self.infos.items() if info.supported}

    def reject(self, node: Node, reason: str) -> None:
        info = self.infos[node]
        info.supported = False
        info.reason = reason
        if info.kind != "absorbed":
            for other in self.infos.values():
                if other.root is node and other.supported:
                    self.reject(other.node, f"part of {info.label}, which is left to PyTorch")


COMPUTE_OPS = ("call_function", "call_method")

_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                      operator.imod, operator.ipow, operator.imatmul, operator.iand, operator.ior, operator.ixor,
                      operator.ilshift, operator.irshift, operator.setitem, operator.delitem}
_STATE_WORDS = ("grad_enabled", "autocast", "_enter", "_exit", "inference_mode", "manual_seed", "set_")


def is_barrier(node: Node) -> bool:
    """A node that mutates a tensor or changes global state (grad mode, autocast): a fused subgraph may not span
    it, because the subgraph runs at the position of its last node."""
    if node.op not in COMPUTE_OPS:
        return False
    if "out" in node.kwargs:
        return True
    if node.op == "call_method":
        name = str(node.target)
        return name.endswith("_") and not name.endswith("__")
    target = node.target
    if target in _INPLACE_OPERATORS:
        return True
    name = getattr(target, "__name__", "") or ""
    if name.endswith("_") and not name.endswith("__"):
        return True
    return any(word in name for word in _STATE_WORDS)


def epochs_of(gm: GraphModule) -> dict[Node, int]:
    epochs, epoch = {}, 0
    for node in gm.graph.nodes:
        epochs[node] = epoch
        if is_barrier(node):
            epoch += 1
            epochs[node] = -epoch  # a barrier belongs to no subgraph
    return epochs


def _probe(build: Callable, node: Node, resolve_scalar: ScalarResolver | None) -> str | None:
    """None if ``build`` imports ``node`` on fresh operands, else the reason it does not."""
    importer = SubgraphImporter(resolve_scalar)
    try:
        importer.convert(node, build)
    except Unsupported as error:
        return str(error)
    except (VerifyException, ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def analyze(gm: GraphModule, resolve_scalar: ScalarResolver | None = None) -> Analysis:
    """Decide for every call node of ``gm`` whether amk imports it, and why not. ``resolve_scalar(node)`` gives the
    compile-time value of a scalar node (``eps.item()``), or None when it is only known at run time."""
    analysis = Analysis(epochs=epochs_of(gm))
    patterns = match_patterns(gm)
    pattern_of = {}
    for pattern in patterns:
        if len({analysis.epochs[n] for n in [pattern.root, *pattern.absorbed]}) > 1:
            continue  # a mutation or a grad-mode change between its nodes
        reason = _probe(pattern.build, pattern.root, resolve_scalar)
        if reason is not None:
            continue  # the nodes are tried one by one below
        analysis.patterns.append(pattern)
        pattern_of[pattern.root] = pattern
        for node in pattern.absorbed:
            pattern_of[node] = pattern
    for node in gm.graph.nodes:
        if node.op not in COMPUTE_OPS:
            if node.op == "call_module":
                analysis.infos[node] = NodeInfo(
                    node, False, describe_target(node),
                    reason="module calls are not inlined (torch._dynamo.config.inline_inbuilt_nn_modules)")
            continue
        pattern = pattern_of.get(node)
        if pattern is not None:
            if node is pattern.root:
                analysis.infos[node] = NodeInfo(node, True, pattern.label, build=pattern.build)
            else:
                analysis.infos[node] = NodeInfo(node, True, f"part of {pattern.root.name}", kind="absorbed",
                                                root=pattern.root)
            continue
        converter = CONVERTERS.get(key_of(node))
        label = describe_target(node)
        if converter is None:
            reason = f"{label} has no tensor_op equivalent"
            if is_barrier(node):
                reason += " (it mutates a tensor or changes grad mode or autocast: fused subgraphs end here)"
            analysis.infos[node] = NodeInfo(node, False, label, reason=reason)
            continue
        reason = _probe(converter.build, node, resolve_scalar)
        analysis.infos[node] = NodeInfo(node, reason is None, label, kind=converter.kind, reason=reason,
                                        fragile=converter.fragile, build=converter.build)
    # Transposes exist only as a matmul's rhs.
    changed = True
    while changed:
        changed = False
        for node, info in analysis.infos.items():
            if info.supported and info.kind == "view":
                if not _matmul_rhs_users_only(node) or not all(
                        analysis.infos.get(u) is not None and analysis.infos[u].supported for u in node.users):
                    analysis.reject(node, f"{describe_target(node)} has no tensor_op equivalent (a weight's "
                                          "transpose is only read as the rhs of a fused matmul)")
                    changed = True
    return analysis


# ----------------------------------------------------------------------------------------------------------------------
# Building the module of one subgraph
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class ImportedSubgraph:
    module: ModuleOp
    sources: list[ArgSource]
    guards: list[ScalarGuard]
    outputs: list[Node]
    ops_of: dict[Node, list]
    names: dict[str, str]


def outputs_of(nodes: Sequence[Node]) -> list[Node]:
    """Nodes of the subgraph whose values are used outside it, in graph order."""
    members = set(nodes)
    return [n for n in nodes if any(u not in members for u in n.users)]


def import_subgraph(nodes: Sequence[Node], analysis: Analysis, resolve_scalar: ScalarResolver | None = None,
                    name: str = "subgraph") -> ImportedSubgraph:
    """The ``tensor_op`` module of ``nodes`` (in topological order); raises :class:`Unsupported`."""
    importer = SubgraphImporter(resolve_scalar, name)
    for node in nodes:
        info = analysis.infos[node]
        if info.kind == "absorbed":
            continue
        importer.convert(node, info.build)
    outputs = outputs_of(nodes)
    module = importer.finish(outputs)
    return ImportedSubgraph(module, importer.sources, importer.guards, outputs, importer.ops_of, importer.names)
