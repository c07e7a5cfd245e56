"""``amk.compile``, the ``"amk"`` TorchDynamo backend, and ``amk.explain``.

How a model runs::

    amk.compile(model)  ──TorchDynamo──►  FX graph (torch level)  ──amk_backend──►  GraphModule
                                              │ analyze: which nodes have a tensor_op equivalent (and why not)
                                              │ partition: connected runs of supported nodes (no cycles)
                                              │ import each run → func.func of tensor_op → amk pipeline → kernels
                                              ▼
                        each run replaced by a call to a FusedSubgraph module; the rest stays PyTorch

A :class:`FusedSubgraph` runs its compiled :class:`~amk.runtime.Program` (one or more Triton kernels, plus any
tensor_op ops that did not fuse, evaluated by PyTorch). It keeps the FX nodes it replaced as a small GraphModule,
which serves three purposes: the backward pass (autograd recomputes the subgraph from those nodes and
differentiates them, see :class:`_Recompute`), the one-time check of the kernels' outputs (``verify=True``), and a
fallback whenever a call does not match what the kernels were built for (another device, a guarded scalar with
another value, a failed verification).

Dynamic shapes: ``amk.compile`` marks every leading dim of the tensor arguments dynamic (``maybe_mark_dynamic``)
and traces with ``backed_size_oblivious`` so that a size of 1 is not specialized; the imported IR then has
symbolic dims (``s77``), so one kernel serves every batch and sequence size. ``STATS`` counts graphs and compiles.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
from torch.fx import GraphModule, Node
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from amk.build import BuildRequest, build
from amk.dialects import tensor_op
from amk.environment import initialize, interpreting
from amk.errors import InvalidArgumentError
from amk.frontend.importer import (
    Analysis,
    ImportedSubgraph,
    Unsupported,
    analyze,
    describe_target,
    import_subgraph,
    meta_value,
)
from amk.ir_dump import IRDumper

log = logging.getLogger("amk.frontend")

BACKEND_NAME = "amk"
DEFAULT_PIPELINE = "amk-duplicate-norm-prologues,amk-fuse"
LOWERING_PASSES = ("amk-tile", "amk-stage", "amk-emit-triton")




# ----------------------------------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class CompileStats:
    """Counters over the whole process (``reset()`` clears them).

    ``graphs``: FX graphs TorchDynamo handed to the backend (one per (re)compilation of a frame);
    ``subgraphs``: fused subgraphs imported; ``pipeline_runs``: runs of the amk pipeline (cache misses);
    ``cache_hits``: subgraphs that reused an identical compiled program; ``kernels``: Triton kernels emitted;
    ``kernel_calls``: calls that ran compiled kernels; ``fallbacks``: calls that ran a subgraph's PyTorch code instead;
    ``backward_recomputes``: backward passes through fused subgraphs; ``verification_failures``: subgraphs whose
    kernels disagreed with PyTorch (they run PyTorch from then on).
    """

    graphs: int = 0
    subgraphs: int = 0
    pipeline_runs: int = 0
    cache_hits: int = 0
    kernels: int = 0
    kernel_calls: int = 0
    fallbacks: int = 0
    backward_recomputes: int = 0
    verification_failures: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


STATS = CompileStats()


def clear_cache(cache_dir=None) -> None:
    """Remove the compiled programs of the cache directory (``cache_dir``, else ``AMK_CACHE_DIR`` or the user cache
    directory), as ``amk cache clear`` does: the next compilation of each subgraph runs the passes again. Kernels
    already in use keep working; tuned configurations and timings stay."""
    from amk import cache

    cache.store_for(cache_dir).clear()


# ----------------------------------------------------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    autotune: bool = True
    tuner_config: object | None = None
    dump_ir: str | None = None
    verify: bool = True
    pipeline: str | None = None
    report: Callable | None = None

    @property
    def fusion_pipeline(self) -> str:
        return self.pipeline if self.pipeline else DEFAULT_PIPELINE

    @property
    def dump_directory(self) -> str | None:
        return self.dump_ir if self.dump_ir is not None else (os.environ.get("AMK_DUMP_IR") or None)

    @property
    def cache_directory(self):
        """``tuner_config.target_cache_dir``: where the emitted sources go (None: the default cache directory)."""
        return getattr(self.tuner_config, "target_cache_dir", None)


def _check_pipeline(pipeline) -> None:
    if pipeline is None:
        return
    if not isinstance(pipeline, str) or not pipeline.strip():
        raise InvalidArgumentError(f"pipeline must be a pass pipeline string such as {DEFAULT_PIPELINE!r}, "
                                   f"got {pipeline!r}")
    from amk.opt import AMK_PASSES
    from amk.pipeline import fusion_passes

    try:
        passes = fusion_passes(pipeline)
    except Exception as error:  # xDSL raises ValueError or its own parse errors
        raise InvalidArgumentError(f"pipeline {pipeline!r} is not valid: {error}; available passes: "
                                   f"{', '.join(sorted(AMK_PASSES))}") from None
    lowering = [p.name for p in passes if p.name in LOWERING_PASSES]
    if lowering:
        raise InvalidArgumentError(f"pipeline {pipeline!r} names {', '.join(lowering)}: the pipeline holds the "
                                   "tensor_op passes only (amk-tile, amk-stage and amk-emit-triton always run after it)")


def make_settings(autotune=True, tuner_config=None, dump_ir=None, verify=True, pipeline=None, report=None) -> Settings:
    """Validated settings; bad values raise :class:`amk.errors.InvalidArgumentError`."""
    from amk.tuner import TunerConfig

    if not isinstance(autotune, bool):
        raise InvalidArgumentError(f"autotune must be True or False, got {autotune!r}")
    if not isinstance(verify, bool):
        raise InvalidArgumentError(f"verify must be True or False, got {verify!r}")
    if tuner_config is not None and not isinstance(tuner_config, TunerConfig):
        raise InvalidArgumentError(f"tuner_config must be an amk.TunerConfig, got {type(tuner_config).__name__}")
    if dump_ir is not None:
        if isinstance(dump_ir, bool) or not isinstance(dump_ir, str | os.PathLike):
            raise InvalidArgumentError(f"dump_ir must be a directory path (str or os.PathLike), got {dump_ir!r}")
        dump_ir = os.fspath(dump_ir)
        if os.path.exists(dump_ir) and not os.path.isdir(dump_ir):
            raise InvalidArgumentError(f"dump_ir {dump_ir!r} exists and is not a directory")
    _check_pipeline(pipeline)
    if report is not None and not callable(report):
        raise InvalidArgumentError("report must be callable")
    return Settings(autotune, tuner_config, dump_ir, verify, pipeline, report)


def _tuning(settings: Settings) -> bool:
    """Whether kernels are autotuned (asked for, and a GPU to time them on)."""
    return settings.autotune and torch.cuda.is_available() and not interpreting()


# ----------------------------------------------------------------------------------------------------------------------
# Reports (what explain shows)
# ----------------------------------------------------------------------------------------------------------------------


def _op_label(op: Operation, names: dict[str, str]) -> str:
    """``kind(FX node)``, e.g. ``layernorm(layer_norm)``."""
    kind = op.name.removeprefix("tensor_op.")
    hint = op.results[0].name_hint if op.results else None
    node = names.get(hint, hint) if hint else None
    return f"{kind}({node})" if node else kind


@dataclass
class KernelReport:
    """One fused kernel: its ops by role (labels are ``tensor_op kind(FX node)``)."""

    strategy: str
    prologue: list[str] = field(default_factory=list)
    matmul: str | None = None
    epilogue: list[str] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return self.prologue + ([self.matmul] if self.matmul else []) + self.epilogue

    def __str__(self) -> str:
        if self.matmul is None:
            return f"[{self.strategy}] " + " -> ".join(self.epilogue)
        parts = []
        if self.prologue:
            parts.append("prologue " + ", ".join(self.prologue))
        parts.append("matmul " + self.matmul)
        if self.epilogue:
            parts.append("epilogue " + ", ".join(self.epilogue))
        return f"[{self.strategy}] " + " -> ".join(parts)


@dataclass
class SubgraphReport:
    name: str
    nodes: list[str]
    kernels: list[KernelReport] = field(default_factory=list)
    unfused: list[tuple[str, str]] = field(default_factory=list)
    compiled: bool = True
    failure: str | None = None
    cached: bool = False


@dataclass
class PyTorchNode:
    name: str
    target: str
    reason: str


@dataclass
class GraphReport:
    graph: int
    subgraphs: list[SubgraphReport] = field(default_factory=list)
    pytorch: list[PyTorchNode] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"graph {self.graph}:"]
        for sub in self.subgraphs:
            if not sub.compiled:
                continue
            lines.append(f"  fused subgraph {sub.name} ({len(sub.nodes)} FX nodes: {', '.join(sub.nodes)})"
                         + (" [reused an identical compiled program]" if sub.cached else ""))
            for index, kernel in enumerate(sub.kernels):
                lines.append(f"    kernel {index}: {kernel}")
            for op, reason in sub.unfused:
                lines.append(f"    not fused (runs in PyTorch inside the subgraph): {op}: {reason}")
        if self.pytorch:
            lines.append("  left to PyTorch:")
            for node in self.pytorch:
                lines.append(f"    {node.name} ({node.target}): {node.reason}")
        return "\n".join(lines)


@dataclass
class ExplainReport:
    """What :func:`explain` found: one :class:`GraphReport` per FX graph TorchDynamo captured."""

    graphs: list[GraphReport] = field(default_factory=list)

    @property
    def kernels(self) -> list[KernelReport]:
        return [k for g in self.graphs for s in g.subgraphs if s.compiled for k in s.kernels]

    @property
    def pytorch(self) -> list[PyTorchNode]:
        return [n for g in self.graphs for n in g.pytorch]

    def __str__(self) -> str:
        head = (f"amk.explain: {len(self.graphs)} graph(s), {len(self.kernels)} fused kernel(s), "
                f"{len(self.pytorch)} op(s) left to PyTorch")
        return "\n".join([head] + [str(g) for g in self.graphs])


def kernel_reports(module: ModuleOp, pipeline: str, names: dict[str, str] | None = None) -> tuple[list[KernelReport], list[tuple[str, str]]]:
    """Run the fusion passes on a copy of ``module`` and describe the groups (and the ops left outside them)."""
    from amk.lowering import rules
    from amk.lowering.plan import NotFusable, plan_group
    from amk.lowering.strategies import auto_strategy
    from amk.pipeline import fusion_passes, make_context

    names = names or {}
    label = functools.partial(_op_label, names=names)
    clone = module.clone()
    ctx = make_context()
    for pass_ in fusion_passes(pipeline):
        pass_.apply(ctx, clone)
    kernels, unfused = [], []
    function = next(op for op in clone.walk() if isinstance(op, func.FuncOp))
    for op in function.body.block.ops:
        if isinstance(op, tensor_op.FusedOp):
            ops = [o for o in op.body.block.ops if not isinstance(o, tensor_op.YieldOp)]
            outputs = list(op.body.block.last_op.operands)
            try:
                plan = plan_group(ops, outputs)
                prologue = [label(o) for o in plan.prologue.ops] if plan.prologue else []
                matmul = " + ".join(label(m) for m in plan.matmuls) if plan.matmuls else None
                epilogue = [label(o) for o in plan.main.ops]
                kernels.append(KernelReport(auto_strategy(plan).name, prologue, matmul, epilogue))
            except NotFusable as error:
                kernels.append(KernelReport(f"unplanned: {error}", [], None, [label(o) for o in ops]))
        elif isinstance(op, func.ReturnOp):
            continue
        else:
            if rules.kind_of(op) is None:
                reason = f"{op.name} has no lowering rule"
            else:
                try:
                    plan_group([op], [op.results[0]])
                    reason = "fusable alone, but left out by the fusion pipeline"
                except NotFusable as error:
                    reason = str(error)
            unfused.append((label(op), reason))
    return kernels, unfused


# ----------------------------------------------------------------------------------------------------------------------
# Running a fused subgraph
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SymbolSource:
    """Where a symbol that no argument carries as a whole dim is read: a SymInt argument or a tensor's size."""

    symbol: str
    arg: int
    dim: int | None


class _Recompute(torch.autograd.Function):
    """Forward: the kernels. Backward: the replaced FX nodes re-run in PyTorch and differentiated."""

    @staticmethod
    def forward(ctx, runner: FusedSubgraph, *args):
        ctx.runner = runner
        ctx.positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.others = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        ctx.count = len(args)
        ctx.save_for_backward(*[args[i] for i in ctx.positions])
        outputs = runner.launch(args)
        inputs = {id(args[i]) for i in ctx.positions}
        return tuple(o.clone() if id(o) in inputs else o for o in outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        runner: FusedSubgraph = ctx.runner
        STATS.backward_recomputes += 1
        args = [None] * ctx.count
        wanted = []
        for position, tensor in zip(ctx.positions, ctx.saved_tensors):
            needs = ctx.needs_input_grad[position + 1]
            args[position] = tensor.detach().requires_grad_(needs) if needs else tensor.detach()
            if needs:
                wanted.append(position)
        for position, value in ctx.others.items():
            args[position] = value
        with torch.enable_grad():
            outputs = runner.fallback(*args[:runner.fallback_arity])
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        result: list = [None] * ctx.count
        if pairs and wanted:
            computed = torch.autograd.grad([o for o, _ in pairs], [args[i] for i in wanted], [g for _, g in pairs],
                                           allow_unused=True)
            for position, grad in zip(wanted, computed):
                result[position] = grad
        return (None, *result)



class FusedSubgraph(torch.nn.Module):
    """Stands in for a run of FX nodes: runs their compiled kernels, or ``fallback`` (the nodes themselves)."""

    def __init__(self, name: str, compiled, fallback: GraphModule, fallback_arity: int, program_args: list,
                 constants: list[torch.Tensor], guards: list[tuple[int, float]], symbols: list[SymbolSource],
                 verify: bool, report: SubgraphReport):
        super().__init__()
        self.name = name
        self.compiled = compiled
        self.fallback = fallback
        self.fallback_arity = fallback_arity
        self.program_args = program_args
        for index, constant in enumerate(constants):
            self.register_buffer(f"constant_{index}", constant, persistent=False)
        self.constant_count = len(constants)
        self.guards = guards
        self.symbols = symbols
        self.verify_pending = verify
        self.disabled: str | None = None
        self.report = report

    @property
    def ir(self) -> dict[str, str]:
        return self.compiled.ir

    @property
    def source(self) -> str:
        return self.compiled.source

    def _fallback_reason(self, args) -> str | None:
        from amk.runtime import default_device

        if self.disabled:
            return self.disabled
        for position, value in self.guards:
            if float(args[position]) != value:
                return f"scalar argument {position} is {float(args[position])}, the kernels were built for {value}"
        device = default_device().type
        for index in self.program_args:
            if isinstance(index, int):
                tensor = args[index]
                if tensor.device.type != device:
                    return f"a tensor is on {tensor.device}; the kernels run on {device}"
                if tensor.numel() == 0:
                    return "an input is empty"
        return None

    def forward(self, *args):
        reason = self._fallback_reason(args)
        if reason is not None:
            STATS.fallbacks += 1
            log.debug("%s runs in PyTorch: %s", self.name, reason)
            return tuple(self.fallback(*args[:self.fallback_arity]))
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return _Recompute.apply(self, *args)
        return self.launch(args)

    def _tensors(self, args) -> list[torch.Tensor]:
        device = None
        tensors = []
        for index in self.program_args:
            if isinstance(index, int):
                tensors.append(args[index])
                device = device or args[index].device
            else:
                tensors.append(None)
        for position, index in enumerate(self.program_args):
            if not isinstance(index, int):
                constant = getattr(self, f"constant_{index[1]}")
                tensors[position] = constant if device is None else constant.to(device)
        return tensors

    def _bindings(self, args) -> dict[str, int]:
        return {s.symbol: int(args[s.arg] if s.dim is None else args[s.arg].shape[s.dim]) for s in self.symbols}

    def launch(self, args) -> tuple:
        with torch.no_grad():
            tensors = [t.detach() for t in self._tensors(args)]
            program = self.compiled.program
            outputs = program(*tensors, bindings=self._bindings(args) if self.symbols else None)
            STATS.kernel_calls += 1
            if self.verify_pending:
                self.verify_pending = False
                outputs = self._verify(args, outputs)
        return tuple(outputs)

    def _verify(self, args, outputs):
        from amk.verification import compare

        expected = self.fallback(*[a.detach() if isinstance(a, torch.Tensor) else a
                                   for a in args[:self.fallback_arity]])
        for index, (have, want) in enumerate(zip(outputs, expected)):
            result = compare(have, want, want.dtype)
            if not result.passed:
                STATS.verification_failures += 1
                self.disabled = (f"verification failed: output {index} differs from PyTorch (relative L2 error "
                                 f"{result.relative_l2_error:.2e} > {result.tolerance:.0e})")
                self.report.failure = self.disabled
                log.warning("amk: %s: %s; this subgraph runs in PyTorch from now on", self.name, self.disabled)
                return list(expected)
        return outputs

    def extra_repr(self) -> str:
        return f"name={self.name!r}, kernels={list(self.compiled.kernels)}"


# ----------------------------------------------------------------------------------------------------------------------
# The backend
# ----------------------------------------------------------------------------------------------------------------------


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


def _partition(gm: GraphModule, analysis: Analysis) -> list[list[Node]]:
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    supported = analysis.supported()

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node: Node) -> bool:
            return node in supported

    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    partitions = []
    for partition in partitioner.propose_partitions():
        # A subgraph runs where its last node was: split it at mutations and grad-mode/autocast changes.
        by_epoch: dict[int, list[Node]] = {}
        for node in sorted(partition.nodes, key=order.__getitem__):
            by_epoch.setdefault(analysis.epochs.get(node, 0), []).append(node)
        for nodes in by_epoch.values():
            if any(analysis.infos[n].kind == "compute" for n in nodes):
                partitions.append(nodes)
    partitions.sort(key=lambda nodes: order[nodes[0]])
    return partitions


def _symbol_sources(imported: ImportedSubgraph, gm: GraphModule) -> list[tuple[str, Node, int | None]]:
    """Symbols of the function's argument dims that no argument carries as a whole dim, with where to read them."""
    from amk.symbolic import Dim

    function = next(op for op in imported.module.walk() if isinstance(op, func.FuncOp))
    dims: list[Dim] = [d for arg in function.body.block.args for d in arg.type.dims]
    symbols = {s for d in dims for s in d.free_symbols}
    plain = {d.text for d in dims if not d.is_static and d.text in d.free_symbols}
    sources = []
    for symbol in sorted(symbols - plain):
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


@dataclass
class _Built:
    nodes: list[Node]
    imported: ImportedSubgraph | None = None
    compiled: object | None = None
    symbols: list = field(default_factory=list)
    report: SubgraphReport | None = None
    failure: str | None = None


class _GraphCompiler:
    def __init__(self, gm: GraphModule, example_inputs: Sequence, settings: Settings):
        STATS.graphs += 1
        self.graph_id = STATS.graphs
        self.gm = gm
        self.settings = settings
        self.resolve = _scalar_resolver(gm, example_inputs)
        self.analysis = analyze(gm, self.resolve)
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
                if result.failure is not None:
                    fragile = [n for n in nodes if self.analysis.infos[n].fragile]
                    for node in fragile:
                        self.analysis.reject(node, f"the subgraph with it did not compile ({result.failure}); "
                                                   "retried without it")
                    retry = retry or bool(fragile)
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
                          else "an identity or view with nothing to fuse around it")
            else:
                reason = info.reason or "not supported"
            report.pytorch.append(PyTorchNode(node.name, describe_target(node), reason))
        for result in results:
            if result.failure is None:
                self._rewrite(result)
        if any(r.failure is None for r in results):
            from torch.fx.passes.tools_common import stable_topological_sort

            stable_topological_sort(self.gm)
            self.gm.graph.lint()
            self.gm.recompile()
        return self.gm, report

    def _build(self, nodes: list[Node]) -> _Built:
        name = f"fused_{self.counter}"
        self.counter += 1
        result = _Built(nodes, report=SubgraphReport(name, [n.name for n in nodes]))
        try:
            imported = import_subgraph(nodes, self.analysis, self.resolve)
            result.symbols = _symbol_sources(imported, self.gm)
        except Unsupported as error:
            return self._fail(result, str(error))
        STATS.subgraphs += 1
        result.imported = imported
        if self.settings.report is not None or log.isEnabledFor(logging.INFO):
            try:
                result.report.kernels, result.report.unfused = kernel_reports(
                    imported.module, self.settings.fusion_pipeline, imported.names)
            except Exception as error:  # the report is informative; compiling decides
                log.debug("could not describe %s: %s", name, error)
        directory = self.settings.dump_directory
        dumper = None
        if directory is not None:
            target = Path(directory) / f"graph{self.graph_id:02d}_{name}"
            if target.exists():
                for old in target.iterdir():
                    if old.is_file():
                        old.unlink()
            dumper = IRDumper(directory=target)
            (target / "fx_nodes.txt").write_text("\n".join(n.format_node() for n in nodes) + "\n")
        function = next(op for op in imported.module.walk() if isinstance(op, func.FuncOp))
        request = BuildRequest(imported.module.clone, [tuple(d.text for d in arg.type.dims)
                                                       for arg in function.body.block.args],
                               autotune=self.settings.autotune, tuner_config=self.settings.tuner_config,
                               pipeline=self.settings.fusion_pipeline, dumper=dumper)
        try:
            built = build(request)
        except Exception as error:  # a lowering failure leaves the subgraph to PyTorch (reported, never wrong)
            log.info("subgraph %s (%s) did not compile: %s: %s", name, ", ".join(n.name for n in nodes),
                     type(error).__name__, error)
            return self._fail(result, f"{type(error).__name__}: {error}")
        if built.cache_hit:  # an identical subgraph (another layer, an earlier run) was compiled before
            STATS.cache_hits += 1
            result.report.cached = True
        else:
            STATS.pipeline_runs += 1
            STATS.kernels += len(built.compiled.kernels)
        if directory is not None:
            for kernel_name, kernel in built.compiled.kernels.items():
                (target / f"{kernel_name}.py").write_text(kernel.source)
        result.compiled = built.compiled
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
        runner = FusedSubgraph(name, result.compiled, fallback, len(inputs), program_args, constants, guards, symbols,
                               self.settings.verify, result.report)
        gm.add_submodule(name, runner)
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


def amk_backend(gm: GraphModule, example_inputs: Sequence, options: dict | None = None, **kwargs) -> Callable:
    """The TorchDynamo backend: ``torch.compile(model, backend="amk")`` (options: ``autotune``, ``tuner_config``,
    ``dump_ir``, ``verify``, ``pipeline``, as for :func:`compile`; pass them as ``options={...}``)."""
    merged = dict(options or {})
    merged.update(kwargs)
    unknown = set(merged) - {"autotune", "tuner_config", "dump_ir", "verify", "pipeline", "report"}
    if unknown:
        raise InvalidArgumentError(f"unknown amk backend option(s) {sorted(unknown)}; accepted: autotune, "
                                   "tuner_config, dump_ir, verify, pipeline")
    settings = make_settings(**merged)
    return compile_graph(gm, example_inputs, settings)


def compile_graph(gm: GraphModule, example_inputs: Sequence, settings: Settings) -> Callable:
    initialize()
    compiled, report = _GraphCompiler(gm, example_inputs, settings).run()
    if settings.report is not None:
        settings.report(report)
    if log.isEnabledFor(logging.INFO):
        log.info("%s", report)
    return compiled.forward


def register_backend() -> None:
    """Register ``"amk"`` with TorchDynamo unless it is registered, or about to be loaded from our entry point (an
    installed amk registers it through the ``torch_dynamo_backends`` entry point; :func:`compile` calls this for a
    source tree on ``sys.path``)."""
    from torch._dynamo.backends import registry

    if BACKEND_NAME in registry._COMPILER_FNS or registry._BACKENDS.get(BACKEND_NAME) is not None:
        return
    with contextlib.suppress(AssertionError):
        registry.register_backend(amk_backend, name=BACKEND_NAME)


# ----------------------------------------------------------------------------------------------------------------------
# amk.compile
# ----------------------------------------------------------------------------------------------------------------------


def _size_oblivious():
    """Trace without specializing sizes 0 and 1, so that a batch of 1 gets the same symbolic kernel."""
    config = getattr(torch.fx.experimental, "_config", None)
    if config is None or not hasattr(config, "backed_size_oblivious"):
        return contextlib.nullcontext()
    return config.patch(backed_size_oblivious=True)


def _mark_leading_dims(values) -> None:
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and not isinstance(value, torch.nn.Parameter):
            for axis in range(value.dim() - 1):
                torch._dynamo.maybe_mark_dynamic(value, axis)
        elif isinstance(value, list | tuple):
            _mark_leading_dims(value)
        elif isinstance(value, dict):
            _mark_leading_dims(value.values())


class _Caller:
    """Calls the Dynamo-compiled callable with amk's dynamic-shape treatment of the arguments."""

    def __init__(self, compiled: Callable, dynamic: bool | None):
        self.compiled = compiled
        self.dynamic = dynamic

    def __call__(self, *args, **kwargs):
        if self.dynamic is False:
            return self.compiled(*args, **kwargs)
        if self.dynamic is None:
            _mark_leading_dims(args)
            _mark_leading_dims(kwargs.values())
        with _size_oblivious():
            return self.compiled(*args, **kwargs)


class CompiledModule(torch.nn.Module):
    """An ``nn.Module`` compiled by :func:`compile`: parameters are the original module's (``_orig_mod``)."""

    def __init__(self, module: torch.nn.Module, caller: _Caller):
        super().__init__()
        self._orig_mod = module
        object.__setattr__(self, "_amk_caller", caller)

    def forward(self, *args, **kwargs):
        return self._amk_caller(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_orig_mod"), name)  # compiled.fc is the model's fc


def compile(model_or_fn, example_inputs=None, *, autotune: bool = True, tuner_config=None, dump_ir=None,
            verify: bool = True, dynamic: bool | None = None, pipeline: str | None = None):
    """Compile a model or function with TorchDynamo and the amk backend.

    Returns a callable with the same signature (an ``nn.Module`` sharing the parameters when given one). Supported
    runs of ops (Linear/matmul, norms, activations, residual adds, scaling, casts, softmax) become fused Triton
    kernels; everything else runs as PyTorch. ``dynamic=None`` (default) makes every leading dim of the tensor
    arguments symbolic, so that changing the batch or sequence length does not recompile; ``True`` makes every dim
    symbolic, ``False`` none. ``example_inputs`` (a tuple of arguments, or one tensor) compiles right away by calling
    the model once on them. ``dump_ir=DIR`` (or ``AMK_DUMP_IR=DIR``) writes each fused subgraph's IR after import and
    after every pass, and its Triton source. ``verify=True`` checks each subgraph's kernels against PyTorch on their
    first call. ``pipeline`` replaces the tensor-level passes (default ``"amk-duplicate-norm-prologues,amk-fuse"``).
    ``tuner_config.target_cache_dir``, when given, is where the emitted Triton sources are written (``sources/``).
    """
    if not callable(model_or_fn):
        raise InvalidArgumentError(f"amk.compile needs an nn.Module or a callable, got {type(model_or_fn).__name__}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise InvalidArgumentError(f"dynamic must be None, True or False, got {dynamic!r}")
    if example_inputs is not None and not isinstance(example_inputs, torch.Tensor | tuple | list):
        raise InvalidArgumentError("example_inputs must be a tuple (or list) of arguments or a single tensor, got "
                                   f"{type(example_inputs).__name__}")
    initialize()  # before TorchDynamo imports triton: without CUDA, kernels run in its interpreter
    register_backend()
    return _compile(model_or_fn, example_inputs, make_settings(autotune, tuner_config, dump_ir, verify, pipeline),
                    dynamic)


def _compile(model_or_fn, example_inputs, settings: Settings, dynamic: bool | None):
    backend = functools.partial(compile_graph, settings=settings)
    compiled = torch.compile(model_or_fn, backend=backend, dynamic=dynamic)
    caller = _Caller(compiled, dynamic)
    if isinstance(model_or_fn, torch.nn.Module):
        result = CompiledModule(model_or_fn, caller)
    else:
        @functools.wraps(model_or_fn)
        def result(*args, **kwargs):
            return caller(*args, **kwargs)

    if example_inputs is not None:
        args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        result(*args)
    return result


def explain(model_or_fn, example_inputs, *, dynamic: bool | None = None, pipeline: str | None = None,
            print_report: bool = True) -> ExplainReport:
    """Show what amk fuses in ``model_or_fn`` on ``example_inputs``: the fused kernels of every subgraph (prologue,
    matmul, epilogue), the ops left to PyTorch and why. Prints the report and returns it (``str(report)``)."""
    if not callable(model_or_fn):
        raise InvalidArgumentError(f"amk.explain needs an nn.Module or a callable, got {type(model_or_fn).__name__}")
    if example_inputs is None or not isinstance(example_inputs, torch.Tensor | tuple | list):
        raise InvalidArgumentError("example_inputs must be a tuple (or list) of arguments or a single tensor")
    report = ExplainReport()
    settings = make_settings(autotune=False, verify=False, pipeline=pipeline, report=report.graphs.append)
    target = model_or_fn
    if isinstance(model_or_fn, torch.nn.Module):
        # A fresh code object would be ideal; a wrapper function gets its own Dynamo cache entry.
        def target(*args, **kwargs):
            return model_or_fn(*args, **kwargs)

    compiled = _compile(target, None, settings, dynamic)
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    compiled(*args)  # in the caller's grad mode: Dynamo's graph (and so the fusion) depends on it
    if print_report:
        print(report)
    return report
