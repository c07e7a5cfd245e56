"""The ``"amk"`` TorchDynamo backend: :func:`amk_backend` (``torch.compile(model, backend="amk")``) and
:func:`compile_graph` hand one FX graph to the graph compiler, which analyzes it, partitions the supported nodes into
connected runs (split at barriers), imports and builds each run through :func:`amk.build.build` (retrying without
fragile ops when a run does not compile), replaces each compiled run by a call to a
:class:`~amk.frontend.subgraph.FusedSubgraph`, and reports what it did. :func:`register_backend` registers the name
``"amk"`` with TorchDynamo."""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch._prims_common import is_contiguous_or_false
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from amk.build import BuildRequest, build
from amk.environment import default_device, initialize, interpreting
from amk.errors import InvalidArgumentError
from amk.frontend.activations import recognize_activations
from amk.frontend.analysis import Analysis, analyze
from amk.frontend.attention import fuse_attention
from amk.frontend.buckets import SizeBuckets
from amk.frontend.importer import ImportedSubgraph, import_subgraph
from amk.frontend.inplace import out_of_place_temporaries
from amk.frontend.layouts import chunks_as_slices, compute_in_memory_order, fold_heads
from amk.frontend.nodes import (
    Unsupported,
    computes_on_sizes,
    describe_target,
    dim_of,
    fake_tensor,
    meta_value,
    traced_value,
)
from amk.frontend.reports import GraphReport, PyTorchNode, SubgraphReport, kernel_reports
from amk.frontend.settings import Settings, make_settings
from amk.frontend.spellings import MATMUL, key_of
from amk.frontend.stats import STATS
from amk.frontend.subgraph import FusedSubgraph, SymbolSource
from amk.ir_dump import IRDumper
from amk.lowering.tile import size_hints_option
from amk.passes.bind_sizes import BindSizesPass
from amk.symbolic import emptied
from amk.tuner import TunerConfig

log = logging.getLogger("amk.frontend")

BACKEND_NAME = "amk"


def _scalar_resolver(gm: GraphModule, example_inputs: Sequence) -> Callable[[Node], float | None]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    position = {n: i for i, n in enumerate(placeholders)}

    def resolve(node: Node) -> float | None:
        value = meta_value(node)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, torch.SymInt | torch.SymFloat):
            hint = getattr(value.node, "hint", None)
            if hint is not None:
                return float(hint)
        if node.op == "placeholder" and position.get(node, len(example_inputs)) < len(example_inputs):
            real = example_inputs[position[node]]
            if isinstance(real, int | float) and not isinstance(real, bool):
                return float(real)
        if node.op == "call_method" and node.target == "item" and len(node.args) == 1:
            source = node.args[0]
            if isinstance(source, Node) and source.op == "placeholder" and position[source] < len(example_inputs):
                real = example_inputs[position[source]]
                if isinstance(real, torch.Tensor) and real.numel() == 1 and not real.is_meta:
                    with contextlib.suppress(Exception):
                        return float(real.item())
        return None

    return resolve


def _index(value, index):
    """``operator.getitem`` under a name that torch's partitioner does not take for a tuple projection."""
    return value[index]


@contextlib.contextmanager
def _renamed_getitems(nodes: list[Node]):
    """``nodes`` (``operator.getitem`` nodes) call :func:`_index` for as long as the context lasts. After merging,
    torch's partitioner moves every getitem user of a node whose users are all getitems into that node's partition,
    until nothing moves: a getitem with two such producers in different partitions never settles (``linear(x)[:, -k:]``
    with a SymInt ``k`` reads ``linear`` and the node ``-k``)."""
    for node in nodes:
        node.target = _index
    try:
        yield
    finally:
        for node in nodes:
            node.target = operator.getitem


def _partition(gm: GraphModule, analysis: Analysis) -> list[list[Node]]:
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    supported = analysis.supported()

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node: Node) -> bool:
            return node in supported

    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    # Tensor indexing (x[:, 0], x[:, -k:]) stays in PyTorch: the partitioner, which would move such getitems into
    # their producers' partitions as if they took tuples apart, and might never stop doing so, does not see them.
    getitems = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.getitem
                and n not in supported]
    with _renamed_getitems(getitems):
        proposed = partitioner.propose_partitions()
    partitions = []
    for partition in proposed:
        # A subgraph runs where its last node was: split it at mutations and grad-mode/autocast changes.
        by_epoch: dict[int, list[Node]] = {}
        for node in sorted((n for n in partition.nodes if n in supported), key=order.__getitem__):
            by_epoch.setdefault(analysis.epochs.get(node, 0), []).append(node)
        for nodes in by_epoch.values():
            if any(analysis.infos[n].kind == "compute" for n in nodes):
                partitions.append(nodes)
    partitions.sort(key=lambda nodes: order[nodes[0]])
    _join_their_producers(partitions, order, analysis)
    # A transpose of a tensor from outside (a weight) read by matmuls of several subgraphs (``wt = W.t()`` hoisted out
    # of a loop) runs in PyTorch, a view and free, each subgraph reading it as an argument: its own subgraph could not
    # hand it to the others. (A transpose of its subgraph's own value stays: read back, it would make a cycle.)
    owner = {node: index for index, nodes in enumerate(partitions) for node in nodes}

    def shared_transpose(node: Node) -> bool:
        return (analysis.infos[node].kind == "view" and owner.get(node.args[0]) != owner[node]
                and any(owner.get(user) != owner[node] for user in node.users))

    return [kept for kept in ([node for node in nodes if not shared_transpose(node)] for nodes in partitions) if kept]


def _join_their_producers(partitions: list[list[Node]], order: dict[Node, int], analysis: Analysis) -> None:
    """Move into an earlier subgraph each node of a later one that reads the earlier one's values, whose other inputs
    come from outside every subgraph before the earlier one's last node, and that nothing of the later one reads: the
    node moves in the graph to just after that last node, where the earlier subgraph will run (in place, in
    ``partitions``, ``order`` and the graph).

    Why: the partitioner merges greedily. Hugging Face's Llama projects q, k and v from one norm, each split into
    heads right away; v's projection, which no rotation reads, joined the later subgraph of the rotary embeddings
    (q's and k's could not: their views feed the rotations), so the norm's output went through memory to it and k
    and v were no longer one dual GEMM."""
    owner = {node: index for index, nodes in enumerate(partitions) for node in nodes}
    for later, nodes in enumerate(partitions):
        for node in list(nodes):
            sources = {owner.get(argument) for argument in node.all_input_nodes} - {None}
            earlier = sources.pop() if len(sources) == 1 else None
            if earlier is None or earlier >= later or any(owner.get(user) == later for user in node.users) \
                    or analysis.epochs.get(node) != analysis.epochs.get(partitions[earlier][0]):
                continue
            last = max(partitions[earlier], key=order.__getitem__)
            if any(owner.get(argument) is None and order[argument] > order[last] for argument in node.all_input_nodes):
                continue
            last.append(node)  # FX moves the node to just after ``last``
            order[node] = order[last] + 0.5
            nodes.remove(node)
            partitions[earlier].append(node)
            owner[node] = earlier
    partitions[:] = [nodes for nodes in partitions
                     if any(analysis.infos[node].kind == "compute" for node in nodes)]
    for nodes in partitions:
        nodes.sort(key=order.__getitem__)


def _function_dims(imported: ImportedSubgraph) -> list[list]:
    """The dims of the imported function's arguments (one list of :class:`~amk.symbolic.Dim` per argument)."""
    return [list(arg.type.dims) for arg in imported.function.body.block.args]


def _empty_at_example(dims: list[list], built: _Built) -> bool:
    """Whether an argument or result of the subgraph has a dim of size 0 at its example sizes, one that its builds
    keep exact."""
    example = {symbol: size for (symbol, _, _), size in zip(built.symbols, built.example)}
    empty = {symbol for symbol, size in example.items() if size == 0 and symbol in built.sizes.exact_symbols}
    return bool(empty) and bool(emptied((dim for each in dims for dim in each), example, empty))


def _result_dims(imported: ImportedSubgraph) -> list[list]:
    """The dims of the imported function's results (one list of :class:`~amk.symbolic.Dim` per result)."""
    return [list(result.dims) for result in imported.function.function_type.outputs]


def _common_dtype(imported: ImportedSubgraph) -> torch.dtype | None:
    """The element type all the imported function's arguments share, or None for a subgraph of mixed types (the
    build reads each argument's from the module: its key and its alternative programs need no common one)."""
    from amk.dtypes import to_torch

    types = {arg.type.element_type for arg in imported.function.body.block.args}
    return to_torch(types.pop()) if len(types) == 1 else None


def _symbol_sources(symbols: Sequence[str], gm: GraphModule) -> list[tuple[str, Node, int | None]]:
    """Where each of ``symbols`` is read at a call: a graph input that carries it, as a SymInt or as a tensor's
    size."""
    sources = []
    for symbol in symbols:
        found = None
        for node in gm.graph.nodes:
            if node.op != "placeholder":
                continue
            value = meta_value(node)
            if isinstance(value, torch.SymInt) and str(value.node.expr) == symbol:
                found = (symbol, node, None)
            elif isinstance(value, torch.Tensor):
                for axis, size in enumerate(value.shape):
                    if isinstance(size, torch.SymInt) and str(size.node.expr) == symbol:
                        found = (symbol, node, axis)
                        break
            if found:
                break
        if found is None:
            raise Unsupported(f"the size symbol {symbol} appears only inside expressions and no graph input carries it")
        sources.append(found)
    return sources


def _forget_graph_args(graph: torch.fx.Graph) -> None:
    """Drops TorchDynamo's record of each input (``meta["grapharg"]``, weak references to the parameters and inputs
    it traced) from a graph amk keeps, as TorchDynamo drops it from its own after the compile: a parameter with a
    weak reference cannot be swapped (``torch.utils.swap_tensors``, ``load_state_dict`` or ``.to()`` under
    ``torch.__future__.set_swap_module_params_on_conversion``, tensor-subclass parameters)."""
    for node in graph.find_nodes(op="placeholder"):
        node.meta.pop("grapharg", None)


def _strided_outputs(outputs: Sequence[Node], analysis: Analysis) -> list[tuple[Node, str]]:
    """The outputs whose traced result is not row-major (an elementwise op keeps a transposed or channels-last
    input's layout), each with the reason to leave it to PyTorch: amk's kernels write row-major results, and the code
    after the subgraph was traced on PyTorch's strides (a ``.view`` of them raises on others). An identity's output
    is its argument itself, laid out as PyTorch lays it."""
    strided = []
    for node in outputs:
        value = fake_tensor(node)
        if analysis.infos[node].kind != "identity" and not (is_contiguous_or_false(value) or _row_major(value)):
            strided.append((node, f"PyTorch lays its result out with strides {tuple(value.stride())}, not row-major as "
                                  "amk's kernels write results, and the ops after it are traced on PyTorch's layout"))
    return strided


def _row_major(value: torch.Tensor) -> bool:
    """Whether ``value``'s strides are, as expressions of its sizes, row-major: each the product of the sizes after
    it, or its dim of size 1. ``is_contiguous_or_false`` says False for some of those, (s1**2, s1, 1) where the
    shape environment specializes s1 to 1 (a trace made again with size-1 dims static)."""
    expected = 1
    for size, stride in reversed(list(zip(value.shape, value.stride(), strict=True))):
        if not (statically_known_true(sym_eq(stride, expected)) or statically_known_true(sym_eq(size, 1))):
            return False
        expected = expected * size
    return True


def _returned_arguments(imported: ImportedSubgraph) -> tuple[list[tuple[int, Node]], list[Node]]:
    """The outputs that are arguments returned unchanged (a no-op ``.to``), each as (its position among the outputs,
    the argument's graph node); and those of the arguments that nothing else reads."""
    from xdsl.dialects import func

    function = imported.function
    returned = next(op for op in function.body.block.ops if isinstance(op, func.ReturnOp))
    arguments = {argument: source.node for argument, source in zip(function.body.block.args, imported.sources)}
    outputs = [(position, arguments[value]) for position, value in enumerate(returned.operands)
               if arguments.get(value) is not None]
    only_returned = [arguments[value] for value in dict.fromkeys(returned.operands)
                     if arguments.get(value) is not None and all(use.operation is returned for use in value.uses)]
    return outputs, only_returned


def _outputs_laid_out_by(imported: ImportedSubgraph) -> list[Node]:
    """The subgraph's inputs from which an output is computed other than through a matmul: PyTorch may lay that
    output out as the input (an elementwise op's result, a hand-written norm's, of a transposed input is transposed),
    amk's kernels row-major. A matmul's result is row-major in PyTorch too."""
    from xdsl.dialects import func

    from amk.lowering import rules

    function = imported.function
    returned = set(next(op for op in function.body.block.ops if isinstance(op, func.ReturnOp)).operands)
    laying_out = []
    for argument, source in zip(function.body.block.args, imported.sources, strict=True):
        frontier, seen = [argument], set()
        while frontier and source.node is not None:
            value = frontier.pop()
            if value in returned:
                laying_out.append(source.node)
                break
            for use in value.uses:
                if not rules.is_matmul(use.operation) and use.operation not in seen:
                    seen.add(use.operation)
                    frontier.extend(use.operation.results)
    return laying_out


def _strides_traced_free(value) -> bool:
    """Whether TorchDynamo traced tensor ``value`` with stride symbols of their own (after a call with other strides,
    or a strided first call): it then guards no stride order, and may have traced an elementwise result of it
    row-major that a call passing a transposed tensor gets laid out as that tensor."""
    if not isinstance(value, torch.Tensor):
        return False
    size_symbols = set().union(*(size.node.expr.free_symbols for size in value.shape if isinstance(size, torch.SymInt)))
    return any(isinstance(stride, torch.SymInt) and not stride.node.expr.free_symbols <= size_symbols
               for stride in value.stride())


def _example_size(node: Node, axis: int | None) -> int:
    """The value TorchDynamo traced a symbol with (a SymInt input, or a tensor input's size ``axis``)."""
    value = meta_value(node)
    size = value if axis is None else value.shape[axis]
    hint = traced_value(size)
    if hint is None:
        raise Unsupported(f"no example value for the size {size} of {node.name}")
    return hint


def _untimed_reason(settings: Settings) -> str | None:
    """Why the kernels of a size bucket are not timed against PyTorch, or None when they are."""
    if not settings.autotune:
        return "autotune is off"
    if interpreting() or not torch.cuda.is_available():
        return "no GPU (the kernels run in Triton's interpreter)"
    return None


def _off_device_reason(example_inputs: Sequence) -> str | None:
    """Why none of the graph's kernels could run on its tensors (a model left on the CPU of a machine whose kernels run
    on CUDA), or None. A graph with some tensors on the kernels' device is compiled; each call checks its own."""
    device = default_device()
    tensors = [value for value in example_inputs if isinstance(value, torch.Tensor) and value.dim() > 0]
    if not tensors or any(tensor.device.type == device.type for tensor in tensors):
        return None
    where = tensors[0].device
    hint = (" (Triton's interpreter runs them on the CPU: set TRITON_INTERPRET=1 before importing triton)"
            if where.type == "cpu" else "")
    return f"its tensors are on {where} and amk's kernels run on {device.type}{hint}"


@dataclass
class _Built:
    """A run of nodes as far as the graph compiler got: imported, its dynamic sizes read (where and with what values
    the example was traced), its example's size bucket built (``first``: key and build), or the failure."""

    nodes: list[Node]
    imported: ImportedSubgraph | None = None
    sizes: SizeBuckets | None = None
    symbols: list = field(default_factory=list)
    example: tuple[int, ...] = ()
    build_bucket: Callable | None = None
    first: tuple | None = None
    report: SubgraphReport | None = None
    failure: str | None = None
    retry_without: list[tuple[Node, str]] = field(default_factory=list)  # nodes to leave to PyTorch, and why


class _GraphCompiler:
    def __init__(self, gm: GraphModule, example_inputs: Sequence, settings: Settings):
        STATS.graphs += 1
        self.graph_id = STATS.graphs
        self.gm = gm
        self.settings = settings
        self.resolve = _scalar_resolver(gm, example_inputs)
        self.analysis = analyze(gm, self.resolve)
        self.off_device = _off_device_reason(example_inputs)
        self.counter = 0
        self.replaced: dict[Node, Node] = {}  # outputs of rewritten subgraphs -> the getitem nodes that replace them

    def run(self) -> tuple[GraphModule, GraphReport]:
        built: dict[frozenset, _Built] = {}
        while True:
            partitions = _partition(self.gm, self.analysis)
            retry = False
            for nodes in partitions:
                key = frozenset(nodes)
                if key in built:
                    continue
                result = built[key] = self._build(nodes)
                if result.failure is not None and self.off_device is None:
                    rejected = result.retry_without or [
                        (node, f"the subgraph with it did not compile ({result.failure}); retried without it")
                        for node in nodes if self.analysis.infos[node].fragile]
                    for node, reason in rejected:
                        self.analysis.reject(node, reason)
                    retry = retry or bool(rejected)
            if not retry:
                break
        results = [built[frozenset(nodes)] for nodes in partitions]
        for result in results:
            if result.failure is not None and result.imported is not None:
                log.warning("amk: subgraph %s (%s) runs in PyTorch: it did not compile: %s", result.report.name,
                            ", ".join(n.name for n in result.nodes), result.failure)
        report = GraphReport(self.graph_id)
        replaced: set[Node] = set()
        for result in results:
            report.subgraphs.append(result.report)
            if result.failure is None:
                replaced.update(result.nodes)
        for node, info in self.analysis.infos.items():
            if node in replaced:
                continue
            if info.supported:
                failed = next((r for r in results if node in r.nodes and r.failure), None)
                reason = (f"its subgraph did not compile: {failed.failure}" if failed
                          else "an identity or view with nothing to fuse around it, or a transpose that matmuls "
                               "of several subgraphs read")
            else:
                reason = info.reason or "not supported"
            report.left_to_pytorch.append(
                PyTorchNode(node.name, describe_target(node), reason, computes_on_sizes(node)))
        for result in results:
            if result.failure is None:
                self._rewrite(result)
        if any(r.failure is None for r in results):
            from torch.fx.passes.tools_common import stable_topological_sort

            stable_topological_sort(self.gm)  # a new graph, whose placeholders TorchDynamo's cleanup does not reach
            _forget_graph_args(self.gm.graph)
            self.gm.graph.lint()
            self.gm.recompile()
        return self.gm, report

    def _build(self, nodes: list[Node]) -> _Built:
        name = f"fused_{self.counter}"
        self.counter += 1
        result = _Built(nodes, report=SubgraphReport(name, [n.name for n in nodes]))
        if self.off_device is not None:  # nothing to build or tune: its kernels could not run on these tensors
            return self._fail(result, self.off_device)
        try:
            imported = import_subgraph(nodes, self.analysis, self.resolve)
            result.retry_without = _strided_outputs(imported.outputs, self.analysis)
            if result.retry_without:
                return self._fail(result, "an output PyTorch lays out other than row-major")
            argument_dims = _function_dims(imported)
            result.sizes = SizeBuckets.of(argument_dims, _result_dims(imported))
            result.symbols = _symbol_sources(result.sizes.symbols, self.gm)
            result.example = tuple(_example_size(node, axis) for _, node, axis in result.symbols)
        except Unsupported as error:
            return self._fail(result, str(error))
        if _empty_at_example(argument_dims + _result_dims(imported), result):
            # TorchDynamo traces empty tensors in a graph of their own (their strides differ): nothing to compute. A
            # size 0 inside an expression does not count: an empty cache's length s where the keys are s + T long.
            return self._fail(result, "its example has an empty dim (size 0) that its builds keep exact")
        STATS.subgraphs += 1
        result.imported = imported
        settings = self.settings

        def pipeline_for(key: Hashable) -> str:
            """The tensor-level passes of the build of bucket ``key``: the sizes it keeps exact are numbers in it (a
            build per value), written into the types first by amk-bind-sizes."""
            exact = result.sizes.bound_sizes(key)
            if not exact:
                return settings.fusion_pipeline
            return f'{BindSizesPass.name}{{sizes="{size_hints_option(exact)}"}},{settings.fusion_pipeline}'

        key = result.sizes.key(result.example)
        example_hints = result.sizes.hints(key, result.example)
        result.report.describe = functools.partial(kernel_reports, imported.module, pipeline_for(key),
                                                   imported.names, example_hints)
        directory = self.settings.dump_directory
        dumper = None
        if directory is not None:
            target = Path(directory) / f"graph{self.graph_id:02d}_{name}"
            try:
                if target.exists():
                    for old in target.iterdir():
                        if old.is_file():
                            old.unlink()
                dumper = IRDumper(directory=target)
                (target / "fx_nodes.txt").write_text("\n".join(n.format_node() for n in nodes) + "\n")
            except OSError as error:  # a debugging aid never stops the model from compiling
                log.warning("amk: no IR dumps for subgraph %s, its directory %s cannot be written: %s", name, target,
                            error)
                directory, dumper = None, None
        shapes = [tuple(d.text for d in dims) for dims in argument_dims]
        dtype = _common_dtype(imported)

        def build_bucket(key: Hashable, size_hints: dict[str, int], dumper: IRDumper | None = None):
            """The program of the size bucket ``key``, through the build service (cache, passes, tuning at the
            hints)."""
            built = build(BuildRequest(imported.module.clone, shapes, dtype, autotune=settings.autotune,
                                       tuner_config=settings.tuner_config, pipeline=pipeline_for(key),
                                       dumper=dumper, size_hints=tuple(sorted(size_hints.items())),
                                       bucket=result.sizes.label(key), raced_against_pytorch=True))
            if built.cache_hit:  # an identical subgraph (another layer, an earlier run) was compiled before
                STATS.cache_hits += 1
            else:
                STATS.pipeline_runs += 1
                STATS.kernels += len(built.compiled.kernels)
            return built

        try:  # the example's bucket now (dumped, when asked): a subgraph that does not compile is left to PyTorch
            built = build_bucket(key, example_hints, dumper)
        except Exception as error:  # a lowering failure leaves the subgraph to PyTorch (reported, never wrong)
            log.info("subgraph %s (%s) did not compile: %s: %s", name, ", ".join(n.name for n in nodes),
                     type(error).__name__, error)
            return self._fail(result, f"{type(error).__name__}: {error}")
        result.report.cached = built.cache_hit
        if directory is not None:
            for kernel_name, kernel in built.compiled.kernels.items():
                (target / f"{kernel_name}.py").write_text(kernel.source)
        result.build_bucket, result.first = build_bucket, (key, built, example_hints)
        return result

    @staticmethod
    def _fail(result: _Built, reason: str) -> _Built:
        result.failure = reason
        result.report.compiled = False
        result.report.failure = reason
        return result

    def _rewrite(self, result: _Built) -> None:
        from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule

        gm, nodes, imported = self.gm, result.nodes, result.imported
        name = result.report.name
        fallback, inputs, outputs = fuse_as_graphmodule(gm, nodes, f"{name}_reference", dict.fromkeys(nodes),
                                                        always_return_tuple=True)
        _forget_graph_args(fallback.graph)
        if list(outputs) != imported.outputs:
            raise AssertionError(f"{name}: outputs {outputs} differ from the imported {imported.outputs}")
        arguments = list(inputs)
        position = {node: i for i, node in enumerate(arguments)}

        def index_of(node: Node) -> int:
            node = self.replaced.get(node, node)  # a subgraph rewritten earlier may produce this input now
            if node not in position:
                position[node] = len(arguments)
                arguments.append(node)
            return position[node]

        program_args: list = []
        constants: list[torch.Tensor] = []
        for source in imported.sources:
            if source.node is not None:
                program_args.append(index_of(source.node))
            else:
                program_args.append(("constant", len(constants)))
                constants.append(torch.full((1,), source.constant, dtype=source.dtype))
        guards = [(index_of(g.node), g.value) for g in imported.guards]
        symbols = [SymbolSource(symbol, index_of(node), dim) for symbol, node, dim in result.symbols]
        untimed = _untimed_reason(self.settings)
        # Outputs that PyTorch computes without a grad history (a frozen backbone's features, a mask's): TorchDynamo
        # guards the grad mode and the inputs' requires_grad, so the traced values say it for every call of the graph.
        non_differentiable = tuple(i for i, node in enumerate(outputs)
                                   if not getattr(meta_value(node), "requires_grad", True))
        row_major_inputs = tuple(index_of(node) for node in _outputs_laid_out_by(imported)
                                 if _strides_traced_free(meta_value(node)))
        returned, only_returned = _returned_arguments(imported)
        returned_arguments = tuple((position, index_of(node)) for position, node in returned)
        runner = FusedSubgraph(name, result.build_bucket, result.first, fallback, len(inputs), program_args, constants,
                               guards, symbols, result.sizes, self.settings.verify,
                               None if untimed else self.settings.tuner_config or TunerConfig(), untimed or "",
                               result.report, non_differentiable, row_major_inputs, returned_arguments,
                               tuple(index_of(node) for node in only_returned))
        if result.sizes.row_symbols:
            for rows in self.settings.tune_sizes:  # the buckets asked for, built ahead of their first call
                runner.bucket_for_rows(rows, result.example)
        elif self.settings.tune_sizes:
            log.info("%s has no dynamic row count: tune_sizes does not apply to it", name)
        gm.add_submodule(name, runner)
        # Also an instance attribute, which the graph's ``self.<name>`` finds before nn.Module.__getattr__ looks in
        # _modules: 1.5 us less on every call (2-core CPU).
        gm.__dict__[name] = runner
        with gm.graph.inserting_after(nodes[-1]):
            call = gm.graph.call_module(name, tuple(arguments))
        call.meta["val"] = tuple(meta_value(o) for o in outputs)
        previous = call
        for index, output in enumerate(outputs):
            with gm.graph.inserting_after(previous):
                item = gm.graph.call_function(operator.getitem, (call, index))
            item.meta = dict(output.meta)
            output.replace_all_uses_with(item)
            self.replaced[output] = item
            previous = item
        for node in reversed(nodes):
            gm.graph.erase_node(node)


BACKEND_OPTIONS = ("autotune", "tuner_config", "dump_ir", "verify", "pipeline", "tune_sizes", "report",
                   "sdpa_attention")


def amk_backend(gm: GraphModule, example_inputs: Sequence, options: dict | None = None, **kwargs) -> Callable:
    """The TorchDynamo backend: ``torch.compile(model, backend="amk")`` (options: ``autotune``, ``tuner_config``,
    ``dump_ir``, ``verify``, ``pipeline``, ``tune_sizes``, as for :func:`compile`, and ``report``, a callable given
    each compiled graph's :class:`~amk.frontend.reports.GraphReport`; pass them as ``options={...}``)."""
    if options is not None and not isinstance(options, Mapping):
        raise InvalidArgumentError(f"options must be a dict of amk backend options ({', '.join(BACKEND_OPTIONS)}); "
                                   f"got {type(options).__name__} {options!r}")
    merged = dict(options or {})
    merged.update(kwargs)
    unknown = set(merged) - set(BACKEND_OPTIONS)
    if unknown:
        hints = []
        if "mode" in unknown:
            hints.append("torch.compile's mode is Inductor's: amk tunes its kernels with autotune=True")
        if unknown & {"mode", "cuda_graphs"}:
            hints.append("CUDA graphs run with amk.compile(model, cuda_graphs=True)")
        raise InvalidArgumentError(f"unknown amk backend option(s) {sorted(unknown, key=repr)}; accepted: "
                                   f"{', '.join(BACKEND_OPTIONS)}" + (f" ({'; '.join(hints)})" if hints else ""))
    settings = make_settings(**merged)
    return compile_graph(gm, example_inputs, settings)


# Set by amk.compile while TorchDynamo may trace one of its calls: whether the graph compiled now is of the call's
# first frame with nothing of the call run yet, so that the call can be traced again.
TRACE_AGAIN_POSSIBLE: ContextVar[Callable[[], bool] | None] = ContextVar("amk_trace_again_possible", default=None)


class SizeOneKeptSymbolic(Exception):
    """This call's trace kept a dim of size 1 symbolic (``backed_size_oblivious``) where a static 1 matters: one that
    the model squeezes, or a matmul's batch dim against the other operand's static 1 (PyTorch broadcasts; amk's
    kernels take batch dims that are equal); amk.compile traces the call again with that dim static."""


def compile_graph(gm: GraphModule, example_inputs: Sequence, settings: Settings) -> Callable:
    initialize()
    dynamic_outputs = _symbolic_output_dims(gm)  # read before the graph compiler rewrites gm
    squeezed = _squeezed_sizes(gm)
    _guard_squeezed_sizes(squeezed)  # the sizes that are symbols: this graph never runs a call where one is 1
    _trace_broadcast_batches_of_one_again(gm)
    out_of_place_temporaries(gm)
    recognize_activations(gm)
    if settings.sdpa_attention:
        fuse_attention(gm)
    chunks_as_slices(gm)
    compute_in_memory_order(gm)
    fold_heads(gm)
    kept_ones = [node for node, size in squeezed if size is None]  # wrong on every call of this graph
    eager = _eager_copy(gm) if kept_ones else None
    compiled, report = _GraphCompiler(gm, example_inputs, settings).run()
    _run_checks_in_python(compiled)
    _mark_outputs_dynamic(compiled, dynamic_outputs)
    if settings.report is not None:
        settings.report(report)
    if log.isEnabledFor(logging.INFO):
        log.info("%s", report)
    # A squeeze whose result reaches only PyTorch's ops runs as traced either way.
    kept_ones = [node.name for node in kept_ones if _feeds_a_fused_subgraph(node)]
    if kept_ones:
        log.info("amk: graph %d runs in PyTorch: a squeeze (%s) kept a dim of size 1", report.graph,
                 ", ".join(kept_ones))
        return _RunsAsTraced(eager, report, f"a squeeze ({', '.join(kept_ones)}) kept a dim of size 1 that PyTorch "
                                            "drops, and the kernels were built with it")
    return compiled.forward


def _squeeze_operands(node: Node) -> tuple[Node, list[int] | None] | None:
    """For a squeeze (a method, ``torch.squeeze`` or aten's, in place or not): its tensor and the dims it names
    (None: every dim); None for any other node."""
    target = node.target
    if node.op == "call_method":
        if target not in ("squeeze", "squeeze_"):
            return None
    elif node.op != "call_function" or not (
            target in (torch.squeeze, torch.Tensor.squeeze, torch.Tensor.squeeze_)
            or getattr(target, "overloadpacket", None) in (torch.ops.aten.squeeze, torch.ops.aten.squeeze_)):
        return None
    source = node.args[0] if node.args else node.kwargs.get("input", node.kwargs.get("self"))
    named = [*node.args[1:], *([node.kwargs["dim"]] if "dim" in node.kwargs else [])]
    dims = [dim for entry in named for dim in (entry if isinstance(entry, list | tuple) else [entry])]
    return (source, dims if named else None) if isinstance(source, Node) else None


def _can_trace_again() -> bool:
    """Whether amk.compile can trace again the call whose graph compiles now (:data:`TRACE_AGAIN_POSSIBLE`)."""
    possible = TRACE_AGAIN_POSSIBLE.get()
    return possible is not None and possible()


def _backed_symbol(size) -> bool:
    """Whether a traced size is a symbol with a value in this call: not a number, nor data-dependent (unbacked, from
    ``.item()``), which torch.compile itself takes for not 1, as Inductor does."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, is_concrete_int

    return not is_concrete_int(size) and not free_unbacked_symbols(size)


def _squeezed_sizes(gm: GraphModule) -> list[tuple[Node, torch.SymInt | None]]:
    """The sizes of 1 that a squeeze in ``gm`` may have kept where PyTorch drops them, each with the squeeze:
    amk.compile traces with ``backed_size_oblivious`` (a batch of 1 then shares the graph of every batch), under
    which TorchDynamo takes a dim that is a symbol for not 1, keeps it and guards nothing; and a size the trace found
    equal to 1 only after the squeeze (a guard of a later op) was kept as well (None: the graph keeps it on every
    call)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    squeezed: list[tuple[Node, torch.SymInt | None]] = []
    for node in gm.graph.nodes:
        operands = _squeeze_operands(node)
        if operands is None:
            continue
        source, dims = operands
        value, result = meta_value(source), meta_value(node)
        # (a 0-d tensor has no dim to drop; an in-place squeeze's operand is traced already squeezed)
        if not isinstance(value, torch.Tensor) or not isinstance(result, torch.Tensor) or value.dim() == 0 \
                or value is result:
            continue
        named = range(value.dim()) if dims is None else sorted({dim % value.dim() for dim in dims})
        sizes = [value.shape[dim] for dim in named]
        ones = sum(is_concrete_int(size) and size == 1 for size in sizes)
        if value.dim() - result.dim() < ones:
            squeezed.append((node, None))
        squeezed += [(node, size) for size in sizes if _backed_symbol(size)]
    return squeezed


def _guard_squeezed_sizes(squeezed: list[tuple[Node, torch.SymInt | None]]) -> None:
    """Make TorchDynamo trace again a call where a squeezed size is 1, rather than run this graph, whose trace kept
    that dim (and in which what the model's Python code read of the squeezed tensor, its rank or a size, was read
    with the dim kept): each symbolic size gets the guard "not 1" where this call's is not 1. Where this call's is 1,
    amk.compile traces it again with the dim static (:class:`SizeOneKeptSymbolic`), where it can: in its first frame,
    before anything of the call ran; elsewhere (a frame resumed after a graph break) TorchDynamo is asked to skip the
    frame, which then runs as PyTorch runs it, on every call from then on (logged as a warning). A graph whose
    squeeze kept a size of 1 that is a number runs as traced, in PyTorch (:class:`_RunsAsTraced`)."""
    from torch.fx.experimental.symbolic_shapes import guard_bool

    for node, size in squeezed:
        if size is None:
            continue
        text = str(size.node.expr)
        if size.node.hint != 1:
            guard_bool(size != 1)
            continue
        if _can_trace_again():
            raise SizeOneKeptSymbolic(f"{node.name} squeezes a dim of size 1 ({text}) that the trace kept")
        # Part of the call ran: this frame runs as PyTorch runs it, untraced, on every call from now on.
        log.warning("amk: %s squeezes a dim of size 1 (%s) in a frame that amk.compile cannot trace again (one "
                    "TorchDynamo resumed after a graph break, or any under its suppress_errors): that frame runs in "
                    "PyTorch, untraced, from now on", node.name, text)
        raise torch._dynamo.exc.SkipFrame(f"amk: {node.name} squeezes a dim of size 1 ({text}) that the trace kept")


def _trace_broadcast_batches_of_one_again(gm: GraphModule) -> None:
    """Have amk.compile trace this call again (:meth:`~amk.frontend.compile._Caller._call_again`: with the first
    argument's size-1 dims static, or else without ``backed_size_oblivious``) where a matmul's batch dim is a symbol
    of size 1 in this call against the other operand's static 1 (a query batch of 1, marked dynamic, against keys
    made from a cache passed in with its batch of 1): the kernels take equal batch dims only, so that matmul would be
    left to PyTorch; traced static, the two are equal. Nothing where the call cannot be traced again: the matmul runs
    in PyTorch, right for every batch."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    for node in gm.graph.nodes:
        if key_of(node) not in MATMUL or len(node.args) < 2:
            continue
        lhs, rhs = (meta_value(operand) if isinstance(operand, Node) else None for operand in node.args[:2])
        if not isinstance(lhs, torch.Tensor) or not isinstance(rhs, torch.Tensor) or not lhs.dim() == rhs.dim() > 2:
            continue
        for pair in zip(lhs.shape[:-2], rhs.shape[:-2]):
            for size, other in (pair, pair[::-1]):
                # (a symbol that the trace's guards pinned to 1 is a static 1 to the importer already)
                if (is_concrete_int(other) and other == 1 and _backed_symbol(size) and not dim_of(size).is_static
                        and size.node.hint == 1 and _can_trace_again()):
                    raise SizeOneKeptSymbolic(f"{node.name}'s batch dim {size.node.expr} of size 1 meets a static 1")


def _feeds_a_fused_subgraph(node: Node) -> bool:
    """Whether ``node``'s result reaches, through PyTorch's ops, the arguments of a fused subgraph's kernels."""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        for user in current.users:
            if user.op == "call_module" and isinstance(getattr(current.graph.owning_module, user.target, None),
                                                       FusedSubgraph):
                return True
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return False


def _eager_copy(gm: GraphModule) -> GraphModule:
    """A copy of ``gm`` that the graph compiler leaves as traced (its parameters shared)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    _forget_graph_args(graph)
    return GraphModule(gm, graph)


class _RunsAsTraced:
    """A compiled graph's forward that runs the graph as traced, in PyTorch, on every call (counted in explain, with
    ``reason``): its kernels were built with a dim that PyTorch's ops drop."""

    def __init__(self, eager: GraphModule, report: GraphReport, reason: str):
        self.eager, self.report, self.reason = eager.forward, report, reason

    def __call__(self, *args):
        self.report.ran_pytorch_for_a_call(self.reason)
        return self.eager(*args)


def _output_leaves(gm: GraphModule) -> list:
    return torch.utils._pytree.tree_leaves(gm.graph.output_node().args[0])


def _symbolic_output_dims(gm: GraphModule) -> list[set[int]]:
    """For each output of ``gm`` (in order), the dims of its size that are symbols, not numbers."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    dims = []
    for leaf in _output_leaves(gm):
        value = meta_value(leaf) if isinstance(leaf, Node) else None
        dims.append({i for i, size in enumerate(value.shape) if not is_concrete_int(size)}
                    if isinstance(value, torch.Tensor) else set())
    return dims


def _run_checks_in_python(gm: GraphModule) -> None:
    """Run ``gm``'s runtime asserts and size reads as plain Python, as Inductor's generated code runs them (``if not
    (...): raise``): through PyTorch's dispatcher, ``aten._assert_scalar`` and ``aten.sym_size.int`` took 0.9 us a
    call each in a ``timeit`` on a 2-core CPU, ``Tensor.size`` 0.17, and under torch 2.11 nanoGPT's causal slice of
    its mask buffer makes six asserts and two size reads of every call (eight op calls a call in
    2026-12-06-h100-host-profile-53.log)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten._assert_scalar.default:
            node.target, changed = check_scalar, True
        elif node.target is torch.ops.aten.sym_size.int and not node.kwargs:
            node.op, node.target, changed = "call_method", "size", True
    if changed:
        gm.recompile()


def check_scalar(condition, message: str) -> None:
    """``aten._assert_scalar`` without the dispatcher: a runtime assert of the trace, which raises as it does."""
    if not condition:
        raise RuntimeError(message)


def _mark_outputs_dynamic(gm: GraphModule, dims: list[set[int]]) -> None:
    """Make ``gm`` mark each output it computes with the dims that are symbols in its graph, as AOTAutograd marks
    Inductor's: a frame that TorchDynamo resumes after a graph break takes them as arguments, and is then traced with
    those dims dynamic from its first call, where the tensors amk.compile marks are only the model's own arguments.
    Feature dims, numbers in the graph, stay static."""
    marked = [(leaf, leaf_dims) for leaf, leaf_dims in zip(_output_leaves(gm), dims, strict=True)
              if leaf_dims and isinstance(leaf, Node) and leaf.op != "placeholder"]
    if not marked:
        return
    mark = _dynamic_dims_marker()
    with gm.graph.inserting_before(gm.graph.output_node()):
        for leaf, leaf_dims in marked:
            gm.graph.call_function(mark, (leaf, leaf_dims))
    gm.recompile()


@functools.cache
def _dynamic_dims_marker() -> Callable[[torch.Tensor, set[int]], None]:
    """``mark(tensor, dims)``: the mark TorchDynamo reads as weakly dynamic when the tensor is a frame's argument."""
    # AOTAutograd's module first: its runtime wrappers imported alone meet a circular import, which would pass for
    # a torch without the mark.
    import torch._functorch.aot_autograd  # noqa: F401
    from torch._functorch._aot_autograd import runtime_wrappers

    # torch 2.13+: an attribute of its own, on which TorchDynamo installs no guard; before, AOTAutograd's own helper
    return (getattr(runtime_wrappers, "mark_dynamo_propagated_dynamic_indices", None)
            or getattr(runtime_wrappers, "maybe_mark_dynamic_helper", None) or _mark_weakly_dynamic)


def _mark_weakly_dynamic(tensor: torch.Tensor, dims: set[int]) -> None:
    """maybe_mark_dynamic's attribute, set as AOTAutograd sets it on outputs: torch.compile's own mark, without
    maybe_mark_dynamic's TorchDynamo-disabled wrapper on every call (three a call cost BERT's scores 11 µs of host
    time in a profile, 2026-12-06-h100-host-profile-50c.log)."""
    if hasattr(tensor, "_dynamo_weak_dynamic_indices"):
        tensor._dynamo_weak_dynamic_indices |= dims
    else:
        tensor._dynamo_weak_dynamic_indices = set(dims)


def register_backend() -> None:
    """Register ``"amk"`` with TorchDynamo unless it is registered, or about to be loaded from our entry point (an
    installed amk registers it through the ``torch_dynamo_backends`` entry point; :func:`compile` calls this for a
    source tree on ``sys.path``)."""
    from torch._dynamo.backends import registry

    if BACKEND_NAME in registry._COMPILER_FNS or registry._BACKENDS.get(BACKEND_NAME) is not None:
        return
    with contextlib.suppress(AssertionError):
        registry.register_backend(amk_backend, name=BACKEND_NAME)
