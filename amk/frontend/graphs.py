"""CUDA graphs for a compiled callable, as torch.compile's ``mode="reduce-overhead"`` offers them:
:func:`cuda_graphed`.

A decode step launches a few short kernels, and what bounds it is the host: TorchDynamo's guards, Python, and one
launch per kernel. Replaying a captured CUDA graph costs one launch for the whole call. :class:`CUDAGraphed` keeps one
graph per *signature* of the call (the shapes, strides, dtypes, devices and ``requires_grad`` of the tensor
arguments, the values of the other arguments, the argument structure, the grad, inference and autocast modes, the
autocast dtype, and the wrapped module's ``training`` flag).
The first call of a signature warms the callable up on a side stream (``warmup_calls`` calls: compilation, tuning
and first-call checks happen there, never under capture), captures one call into a graph with static input buffers
of its own, and replays it; later calls copy their tensors into those buffers and replay.

The rules (docs/cuda-graphs.md has them in full), as for torch's CUDA-graph trees: outputs are the graph's static
tensors, overwritten by the next call of the same signature; parameters and buffers are read in place (updating
them in place is seen, replacing them is not until :meth:`CUDAGraphed.reset`); a call that would record autograd
history, one without CUDA tensors, one with tensors on several devices or an unhashable argument, and one that
cannot be captured run as the plain call (with one log line per reason, except the CPU case); one wrapper serves
one thread at a time.

amk's kernels are safe to capture: under capture they take fresh workspace from the graph's pool
(:mod:`amk.workspace`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree

from amk.errors import InvalidArgumentError
from amk.graph_capture import end_failed_capture

log = logging.getLogger("amk.frontend")

__all__ = ["CUDAGraphed", "cuda_graphed"]


_UNSEEN = object()  # a signature not called before (``None`` marks one that runs as the plain call)


@dataclass
class _Graph:
    """One signature's captured call: the graph, the buffers its inputs are copied into, and its static outputs."""

    graph: torch.cuda.CUDAGraph
    static_inputs: list[torch.Tensor]
    outputs: object


class CUDAGraphed:
    """``fn`` called through one captured CUDA graph per call signature (see the module's docstring for the rules).
    Made by :func:`cuda_graphed`."""

    def __init__(self, fn: Callable, warmup_calls: int):
        self.fn = fn
        self.warmup_calls = warmup_calls
        self.cuda = torch.cuda.is_available()
        # signature -> its graph, or None where calls of that signature run as the plain call
        self._graphs: dict[tuple, _Graph | None] = {}
        self._reported: set[str] = set()
        self._capture_lock = threading.Lock()

    @property
    def graph_count(self) -> int:
        """How many graphs are held (one per signature that was captured)."""
        return sum(entry is not None for entry in self._graphs.values())

    def reset(self) -> None:
        """Drop every graph (their memory returns to PyTorch's allocator once their outputs are no longer held); the
        next call of each signature captures again."""
        with self._capture_lock:
            self._graphs.clear()

    def __call__(self, *args, **kwargs):
        if not self.cuda:
            return self.fn(*args, **kwargs)
        # Tensors only, positionally, is the common call; it needs no pytree walk (tens of microseconds).
        if kwargs or not all(isinstance(arg, torch.Tensor) for arg in args):
            leaves, structure = pytree.tree_flatten((args, kwargs))
        else:
            leaves, structure = args, len(args)
        signature = _signature(leaves, structure, getattr(self.fn, "training", None))
        try:
            entry = self._graphs.get(signature, _UNSEEN)
        except TypeError:  # an argument that cannot be hashed, so no signature: no graph can be keyed on it
            self._report("a non-tensor argument cannot be hashed")
            return self.fn(*args, **kwargs)
        if entry is _UNSEEN:
            entry = self._first_call(signature, leaves, structure)
        if entry is None:
            return self.fn(*args, **kwargs)
        tensors = leaves if isinstance(structure, int) else [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        torch._foreach_copy_(entry.static_inputs, tensors)
        entry.graph.replay()
        return entry.outputs

    def _first_call(self, signature: tuple, leaves, structure) -> _Graph | None:
        with self._capture_lock:
            if signature not in self._graphs:
                self._graphs[signature] = self._capture(leaves, structure)
            return self._graphs[signature]

    def _capture(self, leaves, structure) -> _Graph | None:
        """Warm up and capture a call on these arguments, or None (and why, in the log) where it must run plainly."""
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        devices = {tensor.device for tensor in tensors}
        if not any(device.type == "cuda" for device in devices):
            return None
        if len(devices) > 1:
            self._report("its tensors are on several devices")
            return None
        if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors):
            self._report("an input requires grad (under torch.no_grad() or torch.inference_mode() it would not)")
            return None
        (device,) = devices
        static_inputs = [torch.empty_like(tensor, memory_format=torch.preserve_format) for tensor in tensors]
        torch._foreach_copy_(static_inputs, tensors)
        buffers = iter(static_inputs)
        static_leaves = [next(buffers) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        if isinstance(structure, int):
            static_args, static_kwargs = tuple(static_leaves), {}
        else:
            static_args, static_kwargs = pytree.tree_unflatten(static_leaves, structure)
        with torch.cuda.device(device):
            outputs = self._warm_up(static_args, static_kwargs)
            if any(isinstance(value, torch.Tensor) and value.requires_grad for value in pytree.tree_leaves(outputs)):
                self._report("its outputs require grad (parameters that require grad, with grad mode on: run it under "
                             "torch.no_grad() or torch.inference_mode())")
                return None
            del outputs
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    outputs = self.fn(*static_args, **static_kwargs)
            except RuntimeError as error:  # an operation that cannot be captured
                end_failed_capture(device)
                self._report(f"it cannot be captured ({str(error).splitlines()[0][:200]})")
                return None
        return _Graph(graph, static_inputs, outputs)

    def _warm_up(self, args, kwargs):
        """``warmup_calls`` calls on a side stream, as capture requires (lazy initialization, compilation and
        tuning happen here); the last call's outputs."""
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(self.warmup_calls):
                outputs = self.fn(*args, **kwargs)
        current.wait_stream(side)
        return outputs

    def _report(self, reason: str) -> None:
        if reason not in self._reported:
            self._reported.add(reason)
            name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
            log.warning("amk: CUDA graphs are not used for calls of %s where %s; those calls run as plain calls",
                        name, reason)


def _signature(leaves, structure, training: bool | None) -> tuple:
    """What selects a graph: each tensor's shape, strides, dtype, device and requires_grad, each other value with its
    type (``1``, ``1.0`` and ``True`` are equal keys otherwise), the arguments' structure, the global modes that
    change what a call computes (grad, inference, autocast and its dtype) and the wrapped module's ``training`` flag
    (dropout, batch-norm statistics): a replay skips the guards TorchDynamo would check."""
    autocast = torch.is_autocast_enabled("cuda")
    parts: list = [structure, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), autocast, training]
    if autocast:
        parts.append(torch.get_autocast_dtype("cuda"))
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            parts.append((leaf.shape, leaf.stride(), leaf.dtype, leaf.device, leaf.requires_grad))
        else:
            parts.append((type(leaf), leaf))
    return tuple(parts)


def cuda_graphed(fn: Callable, *, warmup_calls: int = 3) -> CUDAGraphed:
    """``fn`` (a module compiled by ``amk.compile``, a ``FusedKernel``, any callable) run through CUDA graphs: one
    graph per call signature, captured on that signature's first call after ``warmup_calls`` calls on a side stream,
    replayed afterwards. Outputs are the graph's static tensors, overwritten by the next call of the same signature;
    the rules are in :mod:`amk.frontend.graphs`. Without CUDA it calls ``fn`` through."""
    if not callable(fn):
        raise InvalidArgumentError(f"cuda_graphed needs a callable (a compiled module, a FusedKernel, a function), "
                                   f"got {type(fn).__name__}")
    if isinstance(warmup_calls, bool) or not isinstance(warmup_calls, int) or warmup_calls < 1:
        raise InvalidArgumentError(f"warmup_calls must be an int of at least 1 (calls before capture, where "
                                   f"compilation and lazy initialization happen), got {warmup_calls!r}")
    return CUDAGraphed(fn, warmup_calls)
