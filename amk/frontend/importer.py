"""FX graph → ``tensor_op`` IR: which nodes of a TorchDynamo graph amk can compute, and the IR of a connected run.

**Which graph level.** The front end matches the *torch-level* graph that TorchDynamo hands a backend (``F.linear``,
``F.layer_norm``, ``torch.rms_norm``, ``operator.add``, ``Tensor.pow``...), not the ATen graph of ``aot_autograd``:

- ``F.linear`` on a ``[B, S, K]`` activation stays one node; at the ATen level it becomes ``view → addmm → view``
  (or ``t → mm``), and every Linear would need its views folded before it could fuse with its neighbours.
  ``tensor_op.matmul`` takes batched lhs operands directly, so the torch level needs no view handling at all.
- Norms stay whole (``F.layer_norm``, ``torch.rms_norm``) instead of ``native_layer_norm``'s (out, mean, rstd) triple
  or RMSNorm's decomposition; the hand-written RMSNorm ``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``
  is recognised as a pattern (:mod:`amk.frontend.patterns`) and becomes one ``tensor_op.rmsnorm``, which fuses as a
  matmul prologue.
- Autograd needs no joint graph: the fused parts get a backward by recomputation from the very FX nodes they
  replace (see :mod:`amk.frontend.subgraph`), and everything else is ordinary PyTorch that autograd already handles.

The price is that one op has many spellings (``x + y``, ``torch.add``, ``x.add``; see :mod:`amk.frontend.spellings`):
:data:`amk.frontend.converters.CONVERTERS` lists each spelling once, with the argument names needed to read positional
and keyword arguments alike.

**Symbolic dims.** Shapes come from the fake tensors in ``node.meta`` (``"example_value"`` at the torch level,
``"val"`` elsewhere). A dim that Dynamo made symbolic is a ``SymInt`` whose sympy expression (``s77``,
``s27*s77``) becomes the ``tensor_op`` dimension, so one module serves every batch and sequence length.

**What is imported.** :func:`amk.frontend.analysis.analyze` decides, node by node, whether the node has a
``tensor_op`` equivalent (and records why not); this module's :class:`SubgraphImporter` builds the ``func.func`` of
one connected set of supported nodes, and :func:`import_subgraph` the module of such a set (with where its arguments
come from). A supported node becomes one or more ``tensor_op`` ops whose results carry the node's name
(``%linear``), so the IR and :func:`amk.explain` can be read against the FX graph.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.fx import Node
from torch.multiprocessing.reductions import StorageWeakRef
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, f64
from xdsl.ir import Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from amk.dialects import tensor_op
from amk.dialects.tensor_op import TensorType
from amk.dtypes import to_ir
from amk.frontend.nodes import Unsupported, fake_tensor, meta_value, tensor_type_of
from amk.symbolic import provably_equal

if TYPE_CHECKING:
    from amk.frontend.analysis import Analysis


# ----------------------------------------------------------------------------------------------------------------------
# Values handed between converters
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transposed:
    """A tensor with its last two dims swapped (``w.t()``, ``k.transpose(-2, -1)``): it only exists as a matmul's rhs
    (``transpose_rhs``)."""

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
        fake = fake_tensor(node)
        if fake.is_neg():  # TorchDynamo guards the bit, so another call's tensor has it too
            raise Unsupported(f"{node.name} has PyTorch's negative bit (a view such as z.conj().imag): its memory "
                              "holds the negated values, which a kernel would read")
        arg = self.block.insert_arg(tensor_type_of(fake), len(self.block.args))
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
        return self.cast(self.operand(node), dtype)

    def cast(self, value: SSAValue, dtype: torch.dtype | None) -> SSAValue:
        """``value`` cast to ``dtype`` (as it is where it has that dtype, or ``dtype`` is None)."""
        if dtype is not None and value.type.element_type != to_ir(dtype):
            value = self.add(tensor_op.CastOp(value, to_ir(dtype)), "cast")
        return value

    def unchanged(self, node: Node, operand: Node) -> SSAValue:
        """``operand``'s value as the result of ``node``, an op that computes it unchanged (``x.float()`` of a float
        tensor, ``x ** 1``): ``operand``'s own value where PyTorch hands back its operand, else a copy (``x ** 1``,
        ``x.to(x.dtype, copy=True)``), so that an in-place op on one of the two does not change the other."""
        value = self.tensor(operand)
        if StorageWeakRef(fake_tensor(node).untyped_storage()) == StorageWeakRef(fake_tensor(operand).untyped_storage()):
            return value
        return self.add(tensor_op.ScaleOp(value, factor=FloatAttr(1.0, f64)), "copy")

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
                if a != b and not provably_equal(a, b):
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


def _hint(name: str) -> str:
    """The SSA name hint of an FX node name. xDSL drops a ``_<digits>`` suffix from hints (its printer adds such
    suffixes to keep names unique), so ``linear_1`` becomes ``linear1`` rather than collapsing into ``linear``."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    cleaned = re.sub(r"_(\d+)$", r"\1", cleaned)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"v_{cleaned}"


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

    @property
    def function(self) -> func.FuncOp:
        """The module's one ``func.func``."""
        return next(op for op in self.module.walk() if isinstance(op, func.FuncOp))


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
