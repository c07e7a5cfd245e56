"""Running a fused subgraph. A :class:`FusedSubgraph` stands in for the FX nodes it replaced: it runs their compiled
:class:`~amk.runtime.Program` (one or more Triton kernels, plus any tensor_op ops that did not fuse, evaluated by
PyTorch). It keeps those nodes as a small GraphModule, which serves three purposes: the backward pass (autograd
recomputes the subgraph from those nodes and differentiates them, see :class:`_Recompute`), the one-time check of
the kernels' outputs (``verify=True``), and a fallback whenever a call does not match what the kernels were built for
(another device, a guarded scalar with another value, a failed verification)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.fx import GraphModule

from amk.autograd import recomputed_gradients
from amk.frontend.reports import SubgraphReport
from amk.frontend.stats import STATS

log = logging.getLogger("amk.frontend")


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
        dtypes = [a.dtype if isinstance(a, torch.Tensor) else None for a in args]
        return (None, *recomputed_gradients(outputs, grads, args, wanted, dtypes))



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
