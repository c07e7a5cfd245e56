"""Analysis of a whole FX graph: :func:`analyze` decides, node by node, whether amk imports the node (a pattern, a
converter that builds it on fresh operands) and records why not; it also numbers the stretches between barriers
(mutations, grad-mode and autocast changes) that a fused subgraph may not span, and keeps a weight's transpose only
where every user reads it as the rhs of a supported matmul. The :class:`Analysis` it returns drives the partitioning
and :func:`~amk.frontend.importer.import_subgraph`."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

from torch.fx import GraphModule, Node
from torch.fx.operator_schemas import normalize_function
from xdsl.utils.exceptions import VerifyException

from amk.frontend.converters import ALTERNATIVES, COMPARISONS, CONVERTERS
from amk.frontend.importer import ScalarResolver, SubgraphImporter
from amk.frontend.nodes import Unsupported, describe_target
from amk.frontend.patterns import Pattern, match_patterns
from amk.frontend.spellings import ADDMM, BADDBMM, BMM, MATMUL, is_, key_of


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
    # the operator module's ``and_``, ``or_``, ``not_`` are named so beside the keywords, not for writing in place
    # (Bloom combines its masks with ``|``); its in-place ones are listed above
    if name.endswith("_") and not name.endswith("__") and getattr(target, "__module__", None) != "_operator":
        return True
    return (any(word in name for word in _STATE_WORDS) or _schema_writes(target)
            or _writes_into_an_argument(node))


def mutated_between(first: Node, last: Node) -> bool:
    """Whether a node between ``first`` and ``last`` changes a tensor in place or global state (:func:`is_barrier`):
    a call put at ``last`` in place of ops from ``first`` on would read their operands as changed, or run in another
    grad or autocast mode."""
    node = first.next
    while node is not last:
        if is_barrier(node):
            return True
        node = node.next
    return False


def _schema_writes(target) -> bool:
    """An operator whose schema says it writes into an argument: an overload (``torch.ops.aten.add_.Tensor``, named
    ``add_.Tensor``) or a custom op declared with ``mutates_args``, whose names need not end in ``_``."""
    schema = getattr(target, "_schema", None)
    return schema is not None and any(argument.alias_info is not None and argument.alias_info.is_write
                                      for argument in schema.arguments)


def _writes_into_an_argument(node: Node) -> bool:
    """A call whose arguments, not its name, say that it writes into a tensor it is given: ``F.relu(h, inplace=True)``
    (``nn.ReLU(inplace=True)`` as TorchDynamo inlines it), ``F.dropout(..., inplace=True)``, batch or instance norm
    updating its running statistics, ``F.embedding`` renormalizing its weight's rows (``max_norm``). An argument
    that is not a constant (a node) counts as set."""
    try:
        bound = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    except (TypeError, ValueError, RuntimeError):  # no readable signature, or overloads it cannot tell apart
        bound = None
    arguments = bound.kwargs if bound is not None else node.kwargs

    def is_set(flag: str) -> bool:
        value = arguments.get(flag)
        return isinstance(value, Node) or (isinstance(value, (bool, int)) and bool(value))

    updates_statistics = (is_set("training") or is_set("use_input_stats")) and arguments.get("running_mean") is not None
    return is_set("inplace") or updates_statistics or arguments.get("max_norm") is not None


def epochs_of(gm: GraphModule) -> dict[Node, int]:
    epochs, epoch = {}, 0
    for node in gm.graph.nodes:
        epochs[node] = epoch
        if is_barrier(node):
            epoch += 1
            epochs[node] = -epoch  # a barrier belongs to no subgraph
    return epochs


# The matmul families, each with its arguments' names in order: the last is the rhs.
_PRODUCT_ARGUMENTS = ((MATMUL, ("input", "other")), (BMM, ("input", "mat2")), (ADDMM, ("input", "mat1", "mat2")),
                      (BADDBMM, ("input", "batch1", "batch2")))


def _matmul_rhs_users_only(node: Node) -> bool:
    """Whether every user of a transpose node reads it as a matmul's rhs (and as nothing else)."""
    for user in node.users:
        names = next((names for family, names in _PRODUCT_ARGUMENTS if is_(user, family)), None)
        if names is None:
            return False
        bound = dict(zip(names, user.args)) | {name: user.kwargs[name] for name in names if name in user.kwargs}
        if bound.get(names[-1]) is not node or any(bound.get(name) is node for name in names[:-1]):
            return False
    return bool(node.users)


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
            if label in ALTERNATIVES:
                reason += f" ({ALTERNATIVES[label]})"
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
            elif info.supported and key_of(node) in COMPARISONS and not all(
                    analysis.infos.get(u) is not None and analysis.infos[u].supported for u in node.users):
                analysis.reject(node, "its mask is read outside the fused ops, and kernels write no masks (a "
                                      "comparison fuses where a where or masked_fill reads it)")
                changed = True
    return analysis
