"""CUDA graphs for a compiled callable, as torch.compile's ``mode="reduce-overhead"`` offers them:
:func:`cuda_graphed`.

A decode step launches a few short kernels, and what bounds it is the host: TorchDynamo's guards, Python, and one
launch per kernel. Replaying a captured CUDA graph costs one launch for the whole call. :class:`CUDAGraphed` keeps one
graph per *signature* of the call (the shapes, strides, dtypes, devices and ``requires_grad`` of the tensor
arguments, the values of the other arguments, the argument structure, the grad, inference and autocast modes, the
autocast dtype, and the wrapped module's ``training`` flag).
The first call of a signature warms the callable up on a side stream (``warmup_calls`` calls on copies of its
tensors: compilation, tuning and first-call checks happen there, never under capture), then captures one call on the
caller's own tensors and replays it. Later calls that pass those same tensors (a loop that refills its input buffers
in place, or the outputs of another graph) replay it as it is; the first call with other tensors captures the
signature again on static buffers of the wrapper's own, which every later call of the signature copies its tensors
into before the replay (one ``torch._foreach_copy_``).

The rules (docs/cuda-graphs.md has them in full), as for torch's CUDA-graph trees: outputs are the graph's static
tensors, overwritten by later calls of the same signature; a signature's first call's tensors are held while its graph
reads them; parameters and buffers are read in place (updating
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
    """One signature's captured call: the graph, the tensors it reads its inputs from, and its static outputs.
    ``bound``: those tensors are the capturing call's own (held here), so only a call passing them again may replay
    without copying; otherwise they are the wrapper's buffers, which each call copies its tensors into."""

    graph: torch.cuda.CUDAGraph
    static_inputs: list[torch.Tensor]
    outputs: object
    bound: bool
    # the bound tensors' data pointers at capture: a tensor whose storage was swapped since (``set_``, ``.data =``) is
    # the same Python object but no longer the memory the graph reads
    pointers: tuple[int, ...] = ()

    def reads(self, tensors) -> bool:
        """Whether a call passing ``tensors`` may replay this bound graph as it is."""
        return (len(tensors) == len(self.static_inputs)
                and all(given is held for given, held in zip(tensors, self.static_inputs))
                and tuple(tensor.data_ptr() for tensor in tensors) == self.pointers)


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
            entry = self._capture_once(signature, leaves, structure, bound=True)
        if entry is None:
            return self.fn(*args, **kwargs)
        tensors = leaves if isinstance(structure, int) else [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if entry.bound:
            if entry.reads(tensors):
                entry.graph.replay()
                return entry.outputs
            entry = self._capture_once(signature, leaves, structure, bound=False)
            if entry is None:
                return self.fn(*args, **kwargs)
        torch._foreach_copy_(entry.static_inputs, tensors)
        entry.graph.replay()
        return entry.outputs

    def _capture_once(self, signature: tuple, leaves, structure, bound: bool) -> _Graph | None:
        """The signature's graph, captured here unless another thread has meanwhile captured it as asked (``bound``
        on the first call; a graph on the wrapper's buffers replaces a bound one)."""
        with self._capture_lock:
            entry = self._graphs.get(signature, _UNSEEN)
            if entry is _UNSEEN or (not bound and entry is not None and entry.bound):
                self._graphs[signature] = self._capture(leaves, structure, bound, warm=entry is _UNSEEN)
            return self._graphs[signature]

    def _capture(self, leaves, structure, bound: bool, warm: bool) -> _Graph | None:
        """Capture a call on these arguments (``bound``: on the caller's tensors, else on buffers of the wrapper's
        own), after ``warmup_calls`` calls on copies where ``warm``; None (and why, in the log) where it must run
        plainly."""
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
        # The warm-up runs on copies: a callable that updates an input in place must not do so to the caller's
        # tensors more often than it is called.
        copies = [torch.empty_like(tensor, memory_format=torch.preserve_format) for tensor in tensors]
        torch._foreach_copy_(copies, tensors)
        static_inputs = tensors if bound else copies
        with torch.cuda.device(device):
            if warm:
                outputs = self._warm_up(*_arguments(leaves, structure, copies))
                if any(isinstance(value, torch.Tensor) and value.requires_grad
                       for value in pytree.tree_leaves(outputs)):
                    self._report("its outputs require grad (parameters that require grad, with grad mode on: run it "
                                 "under torch.no_grad() or torch.inference_mode())")
                    return None
                del outputs
            static_args, static_kwargs = _arguments(leaves, structure, static_inputs)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    outputs = self.fn(*static_args, **static_kwargs)
            except RuntimeError as error:  # an operation that cannot be captured
                end_failed_capture(device)
                self._report(f"it cannot be captured ({str(error).splitlines()[0][:200]})")
                return None
        pointers = tuple(tensor.data_ptr() for tensor in static_inputs) if bound else ()
        return _Graph(graph, static_inputs, outputs, bound, pointers)

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


def _arguments(leaves, structure, tensors: list[torch.Tensor]) -> tuple[tuple, dict]:
    """The call's positional and keyword arguments with its tensors replaced, in order, by ``tensors``."""
    replacements = iter(tensors)
    replaced = [next(replacements) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    if isinstance(structure, int):
        return tuple(replaced), {}
    return pytree.tree_unflatten(replaced, structure)


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
