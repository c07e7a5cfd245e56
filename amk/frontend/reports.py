"""The reports ``amk.explain`` shows: per FX graph, its fused subgraphs with their kernels (prologue, matmul,
epilogue, labelled ``tensor_op kind(FX node)``), the ops left unfused inside a subgraph, and the nodes left to PyTorch
with the reason. :func:`kernel_reports` describes the kernels of one imported subgraph by running the fusion passes on
a copy of its module and planning each group."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from amk.dialects import tensor_op


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
