"""The reports ``amk.explain`` shows: per FX graph, its fused subgraphs with their kernels (prologue, matmul,
epilogue, labelled ``tensor_op kind(FX node)``), the ops left unfused inside a subgraph, the nodes left to PyTorch
with the reason, and per size bucket of a subgraph (:mod:`amk.frontend.buckets`) what runs: the bucket's kernels
(strategy and configuration) or the subgraph's PyTorch ops, and the times that decided it (:func:`decide`).
:func:`kernel_reports` describes the kernels of one imported subgraph by running the fusion passes on a copy of its
module and planning each group."""

from __future__ import annotations

import functools
import logging
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from amk.dialects import tensor_op
from amk.lowering.configs import SWITCHES

log = logging.getLogger("amk.frontend")


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


AMK, PYTORCH = "amk", "pytorch"  # what runs for a size bucket: its fused kernels, or the subgraph's PyTorch ops


def decide(amk_ms: float, pytorch_ms: float) -> str:
    """What a size bucket runs, given its kernels' time and its PyTorch ops' time on the same inputs: the faster
    (the kernels on a tie: timing noise is no reason to leave them)."""
    return PYTORCH if pytorch_ms < amk_ms else AMK


@dataclass
class BucketReport:
    """One size bucket of a subgraph: ``sizes`` (which row counts it serves), ``hints`` (the sizes it was built
    for), its ``kernels`` (name, strategy, configuration), whether its program came from the cache, what ``runs``
    (:data:`AMK` or :data:`PYTORCH`), the two times that decided it (ms; None when not timed), ``note``: how it
    was decided (timed, not timed and why, failed verification, did not compile), ``build_phases``: the seconds
    its build took, per phase and in all (``total``; empty when it did not compile), and ``build_times``: the whole
    programs its build timed on random inputs, ms (``pytorch_ops``: the subgraph's ops as PyTorch runs them, which a
    kernel slower than it is not refined against; ``vendor_gemm`` and ``fused`` where the build raced those)."""

    sizes: str
    hints: dict[str, int]
    kernels: list[str] = field(default_factory=list)
    cached: bool = False
    runs: str = AMK
    amk_ms: float | None = None
    pytorch_ms: float | None = None
    note: str = "not called yet: checked on the first call of these sizes"
    build_phases: dict[str, float] = field(default_factory=dict)
    build_times: dict[str, float] = field(default_factory=dict)
    # Whether its program has a kernel (a pipeline that fuses nothing leaves every op to PyTorch, in the program)
    fused: bool = True
    not_searched: str = ""  # why its build kept the kernels' heuristic configurations without a search, or ""

    def timed(self, amk_ms: float, pytorch_ms: float, when: str = "on its first call") -> None:
        """Record the times of the bucket's program and PyTorch ops (``when`` they were timed) and run the faster
        from then on."""
        self.amk_ms, self.pytorch_ms, self.runs = amk_ms, pytorch_ms, decide(amk_ms, pytorch_ms)
        self.note = (f"timed {when}: amk {amk_ms:.4f} ms, PyTorch {pytorch_ms:.4f} ms: "
                     f"{('the kernels are' if self.fused else 'its program is') if self.runs == AMK else 'PyTorch is'} "
                     "faster")

    def leave_to_pytorch(self, reason: str) -> None:
        self.runs, self.note = PYTORCH, reason

    def __str__(self) -> str:
        """``sizes (built for s0=16): runs ...; note``, then the bucket's kernels, one a line."""
        built_for = ", ".join(f"{symbol}={value}" for symbol, value in self.hints.items())
        program = "its kernels" if self.fused else "its program, with no kernel (every op in PyTorch)"
        runs = program + (" (from the cache)" if self.cached else "") if self.runs == AMK else "PyTorch"
        head = f"{self.sizes}" + (f" (built for {built_for})" if built_for else "") + f": runs {runs}; {self.note}"
        if self.not_searched:
            head += f"; kernels not searched: {self.not_searched}"
        if self.build_phases and not self.cached:
            phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.build_phases.items()
                               if name != "total" and seconds >= 0.05)
            head += f"; built in {self.build_phases['total']:.1f} s" + (f" ({phases})" if phases else "")
            if self.build_times:
                head += "; programs timed while building: " + ", ".join(
                    f"{name} {ms:.4f} ms" for name, ms in self.build_times.items())
        return "\n".join([head, *(f"  {kernel}" for kernel in self.kernels)])


@dataclass(kw_only=True)
class CallFallbacks:
    """Calls that ran PyTorch's ops because their arguments were not what the kernels were built for (a scalar of
    another value, such as a temperature TorchDynamo made symbolic; a tensor laid out otherwise than the trace's
    outputs assume; an empty input), and the last such call's reason."""

    call_fallbacks: int = 0
    call_fallback: str | None = None

    def ran_pytorch_for_a_call(self, reason: str) -> None:
        self.call_fallbacks += 1
        self.call_fallback = reason


@dataclass
class SubgraphReport(CallFallbacks):
    """One fused subgraph: its FX nodes, whether it compiled (else ``failure``), whether its first build came from
    the cache, its size buckets, and (computed when first asked for, from ``describe``: see :func:`kernel_reports`)
    its ``kernels`` and the ops left ``unfused`` inside it."""

    name: str
    nodes: list[str]
    compiled: bool = True
    failure: str | None = None
    cached: bool = False
    buckets: list[BucketReport] = field(default_factory=list)
    describe: Callable[[], tuple[list[KernelReport], list[tuple[str, str]]]] | None = field(default=None, repr=False)

    @functools.cached_property
    def _description(self) -> tuple[list[KernelReport], list[tuple[str, str]]]:
        if self.describe is None:
            return [], []
        try:
            return self.describe()
        except Exception as error:  # the report is informative; compiling decides
            log.debug("could not describe %s: %s", self.name, error)
            return [], []

    @property
    def kernels(self) -> list[KernelReport]:
        return self._description[0]

    @property
    def unfused(self) -> list[tuple[str, str]]:
        return self._description[1]


# Targets (as describe_target names them) whose result is a view of their input: PyTorch makes them without copying
# or launching anything, so a model's ops left to PyTorch are counted apart from them.
VIEWS = frozenset({"Tensor.view", "Tensor.transpose", "Tensor.permute", "Tensor.unsqueeze", "Tensor.squeeze",
                   "Tensor.expand", "Tensor.t", "Tensor.select", "Tensor.unflatten", "torch.transpose", "torch.permute",
                   "torch.unsqueeze", "torch.squeeze", "torch.t", "torch.select", "torch.unflatten"})


@dataclass
class PyTorchNode:
    """A node of the FX graph left to PyTorch, and why. ``on_sizes``: it computes on numbers, not tensors (a size read,
    a comparison of sizes, a runtime assert of the trace: :func:`amk.frontend.nodes.computes_on_sizes`), so it launches
    nothing; reports list such nodes apart from the ops."""

    name: str
    target: str
    reason: str
    on_sizes: bool = False

    @property
    def is_view(self) -> bool:
        return self.target in VIEWS


@dataclass
class GraphReport(CallFallbacks):
    """One FX graph: its fused subgraphs and the nodes left to PyTorch (tensor ops, and steps on sizes).
    ``call_fallbacks``: calls that ran the whole graph as traced, in PyTorch (a squeeze kept a dim of size 1 that
    PyTorch drops: see ``amk.frontend.backend``)."""

    graph: int
    subgraphs: list[SubgraphReport] = field(default_factory=list)
    left_to_pytorch: list[PyTorchNode] = field(default_factory=list)

    @property
    def pytorch(self) -> list[PyTorchNode]:
        """The tensor ops left to PyTorch."""
        return [node for node in self.left_to_pytorch if not node.on_sizes]

    @property
    def on_sizes(self) -> list[PyTorchNode]:
        """The nodes left to PyTorch that compute on sizes, not tensors."""
        return [node for node in self.left_to_pytorch if node.on_sizes]

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
            for bucket in sub.buckets:
                lines.extend(f"    {line}" for line in str(bucket).splitlines())
            if sub.call_fallbacks:
                lines.append(f"    {sub.call_fallbacks} call(s) ran the subgraph's PyTorch ops, the last as "
                             f"{sub.call_fallback}")
        if self.call_fallbacks:
            lines.append(f"  {self.call_fallbacks} call(s) ran the whole graph in PyTorch, the last as "
                         f"{self.call_fallback}")
        if self.pytorch:
            lines.append("  left to PyTorch:")
            for node in self.pytorch:
                lines.append(f"    {node.name} ({node.target}): {node.reason}")
        if self.on_sizes:
            lines.append("  on sizes, not tensors (nothing to fuse; they launch nothing): "
                         + ", ".join(node.name for node in self.on_sizes))
        return "\n".join(lines)


@dataclass
class ExplainReport:
    """What :func:`explain` found: one :class:`GraphReport` per FX graph TorchDynamo captured. ``traced_code``: the
    code of the frame TorchDynamo compiles at each call (a module class's ``forward``), whose compiled variants
    TorchDynamo caps (:func:`recompile_limit_note`), or None."""

    graphs: list[GraphReport] = field(default_factory=list)
    traced_code: types.CodeType | None = None

    @property
    def kernels(self) -> list[KernelReport]:
        return [k for g in self.graphs for s in g.subgraphs if s.compiled for k in s.kernels]

    @property
    def pytorch(self) -> list[PyTorchNode]:
        """The tensor ops left to PyTorch, in every graph (not the nodes that compute on sizes)."""
        return [n for g in self.graphs for n in g.pytorch]

    def __str__(self) -> str:
        views = sum(node.is_view for node in self.pytorch)
        on_sizes = sum(len(g.on_sizes) for g in self.graphs)
        head = (f"amk.explain: {len(self.graphs)} graph(s) (numbered as amk compiled them in this process, like "
                f"dump_ir's folders), {len(self.kernels)} fused kernel(s), {len(self.pytorch)} op(s) left to PyTorch"
                + (f" ({views} of them views, which copy nothing)" if views else "")
                + (f"; {on_sizes} step(s) on sizes, which launch nothing" if on_sizes else ""))
        note = recompile_limit_note(self.traced_code) if self.traced_code is not None else None
        return "\n".join([head] + [str(g) for g in self.graphs] + ([note] if note else []))


def recompile_limit_note(code: types.CodeType) -> str | None:
    """What to say where TorchDynamo holds as many compiled variants of ``code`` as its ``recompile_limit`` allows:
    a call that fits none of them (another dtype, grad mode, or a new compile of the same module class, which shares
    the class's ``forward``) then runs eagerly, none of amk's kernels in it. None below the limit."""
    import torch._dynamo
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    config = torch._dynamo.config
    limit = getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", None)
    variants = len(_debug_get_cache_entry_list(code))
    if limit is None or variants < limit:
        return None
    name = getattr(code, "co_qualname", code.co_name)  # (Python 3.11 on)
    return (f"TorchDynamo holds {variants} compiled variants of {name} ({code.co_filename}:"
            f"{code.co_firstlineno}), its recompile_limit ({limit}; every compile of the same module class shares "
            "them): a call that fits none of them runs in eager PyTorch, without amk's kernels. "
            "torch._dynamo.reset() drops them; torch._dynamo.config.recompile_limit allows more.")


_KERNEL_HEADER = re.compile(r'tiled_loop\.kernel @(\w+) attributes \{.*?strategy = "(\w+)", tile_params = \[([^\]]*)\]')


def kernel_descriptions(compiled) -> list[str]:
    """Each kernel of a compiled program as ``name [strategy] parameter=value ...``: the tile sizes it has, its warps
    and stages, and the switches it turns on; then each op the program leaves to PyTorch (the vendor GEMM) as
    ``tensor_op.matmul [PyTorch]``, a Linear with its epilogue as ``tensor_op.linear activation=gelu_tanh
    [PyTorch]``."""
    headers = {name: (strategy, re.findall(r"\w+", params))
               for name, strategy, params in _KERNEL_HEADER.findall(compiled.ir.get("tiled_loop", ""))}
    described = []
    for name, kernel in compiled.kernels.items():
        strategy, params = headers.get(name, ("?", []))
        config = kernel.config.as_dict()
        shown = [*params, "num_warps", "num_stages", *(switch for switch in SWITCHES if config[switch])]
        described.append(f"{name} [{strategy}] " + " ".join(f"{key}={config[key]}" for key in shown))
    described += [_pytorch_step(step.operation()) for step in compiled.program.steps if step.kind == "op"]
    return described


def _pytorch_step(op) -> str:
    activation = getattr(op, "activation_name", None)
    return f"{op.name}{f' activation={activation}' if activation else ''} [PyTorch]"


def kernel_reports(module: ModuleOp, pipeline: str, names: dict[str, str] | None = None,
                   size_hints: dict[str, int] | None = None) -> tuple[list[KernelReport], list[tuple[str, str]]]:
    """Run the fusion passes on a copy of ``module`` and describe the groups (and the ops left outside them); each
    group's strategy is the one chosen for the sizes ``size_hints`` give the symbols (the example's size bucket)."""
    from amk.lowering import rules
    from amk.lowering.plan import NotFusable, plan_group
    from amk.lowering.strategies import AUTO, choose_strategy
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
                strategy = choose_strategy(plan, AUTO, size_hints)  # as amk-tile chooses: ``instead`` followed
                kernels.append(KernelReport(strategy.name, prologue, matmul, epilogue))
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
