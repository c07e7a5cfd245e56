"""CUDA graphs for a compiled callable, as torch.compile's ``mode="reduce-overhead"`` offers them:
:func:`cuda_graphed`.

A decode step launches a few short kernels, and what bounds it is the host: TorchDynamo's guards, Python, and one
launch per kernel. Replaying a captured CUDA graph costs one launch for the whole call. :class:`CUDAGraphed` keeps one
graph per *signature* of the call (the shapes, strides, dtypes, devices and ``requires_grad`` of the tensor
arguments, the values of the other arguments, the argument structure, the grad, inference and autocast modes, the
autocast dtype, and the wrapped module's ``training`` flag).
The first call of a signature warms the callable up on a side stream (``warmup_calls`` calls on copies of its
tensors: compilation, tuning and first-call checks happen there, never under capture), then captures one call on the
caller's own tensors (where they can stand in for the copies: :func:`_bindable`; else on the copies) and replays it.
Later calls that pass those same tensors (a loop that refills its input buffers in place, or the outputs of another
graph) replay it as it is; the first call with other tensors captures the signature again, after one warm-up call,
on static buffers of the wrapper's own, which every later call of the signature copies its tensors into before the
replay (one ``torch._foreach_copy_``).

The rules (docs/cuda-graphs.md has them in full), as for torch's CUDA-graph trees: outputs are the graph's static
tensors, overwritten by later calls of the same signature; a bound graph holds the first call's tensors; parameters
and buffers are read in place (updating them in place is seen, replacing them is not until :meth:`CUDAGraphed.reset`
or the signature's capture on the wrapper's buffers); a callable that updates an argument in place runs through a
graph only on the tensors it is bound to; a call that would record autograd history, one without CUDA tensors, one
with tensors on several devices or an unhashable argument, and one that cannot be captured run as the plain call
(with one log line per reason, except the CPU case); one wrapper serves one thread at a time.

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

from amk.environment import float32_matmul_precision
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
    # the callable updates an argument in place: a replay on the wrapper's buffers would update those, not the
    # caller's tensors, so calls on other tensors than the bound ones run as the plain call
    updates_inputs: bool = False
    # calls on other tensors run as the plain call: the capture on the wrapper's buffers failed, or the callable
    # updates an argument in place (``updates_inputs``)
    copy_failed: bool = False

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
        signature = _signature(leaves, structure, self.fn)
        try:
            entry = self._graphs.get(signature, _UNSEEN)
        except TypeError:  # an argument that cannot be hashed, so no signature: no graph can be keyed on it
            self._report("a non-tensor argument cannot be hashed")
            return self.fn(*args, **kwargs)
        if entry is _UNSEEN:
            entry = self._capture_once(signature, leaves, structure)
        if entry is None:
            return self.fn(*args, **kwargs)
        tensors = leaves if isinstance(structure, int) else [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if entry.bound:
            if entry.reads(tensors):
                entry.graph.replay()
                return entry.outputs
            entry = self._capture_once(signature, leaves, structure, on_buffers=True)
            if entry.bound:  # the signature cannot copy other tensors in: they run as the plain call
                return self.fn(*args, **kwargs)
        torch._foreach_copy_(entry.static_inputs, tensors)
        entry.graph.replay()
        return entry.outputs

    def _capture_once(self, signature: tuple, leaves, structure, on_buffers: bool = False) -> _Graph | None:
        """The signature's graph: captured here on its first call (bound to the caller's tensors where they can
        be), or, ``on_buffers``, captured again on the wrapper's buffers in place of a bound one, unless another
        thread has meanwhile done so. A bound graph that cannot be captured again stays, marked so."""
        with self._capture_lock:
            entry = self._graphs.get(signature, _UNSEEN)
            if entry is _UNSEEN:
                entry = self._graphs[signature] = self._capture(leaves, structure, True, self.warmup_calls)
            elif on_buffers and entry is not None and entry.bound and not entry.copy_failed:
                if entry.updates_inputs:
                    self._report("it updates an argument in place and a call passes other tensors than the first "
                                 "call's (a replay would update the wrapper's copies, not yours)")
                    entry.copy_failed = True
                else:
                    # One warm-up call on the buffers: whatever changed since the first capture (a replaced
                    # parameter, the matmul precision) compiles there, not under capture.
                    copying = self._capture(leaves, structure, False, 1)
                    if copying is None:
                        entry.copy_failed = True
                    else:
                        entry = self._graphs[signature] = copying
            return entry

    def _capture(self, leaves, structure, bind: bool, warmup_calls: int) -> _Graph | None:
        """Warm up ``warmup_calls`` calls on copies of these arguments, then capture a call on the caller's tensors
        where ``bind`` and they can stand in for the copies (:func:`_bindable`), else on the copies, kept as the
        wrapper's buffers; None (and why, in the log) where it must run plainly."""
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
        # The warm-up runs on copies: a callable that updates an argument in place must not do so to the caller's
        # tensors more often than it is called.
        copies = [torch.empty_like(tensor, memory_format=torch.preserve_format) for tensor in tensors]
        torch._foreach_copy_(copies, tensors)
        bind = bind and _bindable(tensors, copies)
        versions = [copy._version for copy in copies]
        with torch.cuda.device(device):
            outputs = self._warm_up(*_arguments(leaves, structure, copies), calls=warmup_calls)
            if any(isinstance(value, torch.Tensor) and value.requires_grad for value in pytree.tree_leaves(outputs)):
                self._report("its outputs require grad (parameters that require grad, with grad mode on: run it "
                             "under torch.no_grad() or torch.inference_mode())")
                return None
            del outputs
            updates_inputs = any(copy._version != version for copy, version in zip(copies, versions))
            if updates_inputs and not bind:
                self._report("it updates an argument in place and its tensors cannot be bound (a replay would "
                             "update the wrapper's copies, not yours)")
                return None
            static_inputs = tensors if bind else copies
            static_args, static_kwargs = _arguments(leaves, structure, static_inputs)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    outputs = self.fn(*static_args, **static_kwargs)
            except RuntimeError as error:  # an operation that cannot be captured
                end_failed_capture(device)
                self._report(f"it cannot be captured ({str(error).splitlines()[0][:200]})")
                return None
        pointers = tuple(tensor.data_ptr() for tensor in static_inputs) if bind else ()
        return _Graph(graph, static_inputs, outputs, bind, pointers, updates_inputs)

    def _warm_up(self, args, kwargs, calls: int):
        """``calls`` calls on a side stream, as capture requires (lazy initialization, compilation and tuning happen
        here); the last call's outputs."""
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for _ in range(calls):
                outputs = self.fn(*args, **kwargs)
        current.wait_stream(side)
        return outputs

    def _report(self, reason: str) -> None:
        if reason not in self._reported:
            self._reported.add(reason)
            name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
            log.warning("amk: CUDA graphs are not used for calls of %s where %s; those calls run as plain calls",
                        name, reason)


def _bindable(tensors: list[torch.Tensor], copies: list[torch.Tensor]) -> bool:
    """Whether a graph may be captured on the caller's ``tensors`` after a warm-up on their ``copies``: TorchDynamo
    and the kernels must see the same arguments (nothing may compile under capture), so plain tensors that do not
    require grad, with the copies' strides, 16-byte aligned (Triton specializes on it), each the whole of its own
    memory (a view would hold its base's, and two arguments sharing memory are traced as aliases)."""
    storages = {tensor.untyped_storage().data_ptr() for tensor in tensors}
    return len(storages) == len(tensors) and all(
        type(tensor) is torch.Tensor and not tensor.requires_grad and tensor.stride() == copy.stride()
        and tensor.data_ptr() % 16 == 0 and tensor.untyped_storage().nbytes() == copy.untyped_storage().nbytes()
        for tensor, copy in zip(tensors, copies))


def _arguments(leaves, structure, tensors: list[torch.Tensor]) -> tuple[tuple, dict]:
    """The call's positional and keyword arguments with its tensors replaced, in order, by ``tensors``."""
    replacements = iter(tensors)
    replaced = [next(replacements) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    if isinstance(structure, int):
        return tuple(replaced), {}
    return pytree.tree_unflatten(replaced, structure)


def _signature(leaves, structure, fn) -> tuple:
    """What selects a graph: each tensor's shape, strides, dtype, device and requires_grad, each other value with its
    type (``1``, ``1.0`` and ``True`` are equal keys otherwise), the arguments' structure, the global modes that
    change what a call computes (grad, inference, autocast and its dtype, the float32 matmul precision), the wrapped
    module's ``training`` flag (dropout, batch-norm statistics) and, with grad mode on, whether a parameter of it
    requires grad (a module frozen at capture and unfrozen since would replay outputs without a grad history): a
    replay skips the guards TorchDynamo would check."""
    autocast = torch.is_autocast_enabled("cuda")
    grad = torch.is_grad_enabled()
    parts: list = [structure, grad, torch.is_inference_mode_enabled(), autocast, getattr(fn, "training", None),
                   float32_matmul_precision()]
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "module", None)  # amk.compile's caller's
    if grad and isinstance(module, torch.nn.Module):
        parts.append(any(parameter.requires_grad for parameter in module.parameters()))
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
    replayed afterwards. Outputs are the graph's static tensors, overwritten by later calls of the same signature;
    the rules are in :mod:`amk.frontend.graphs`. Without CUDA it calls ``fn`` through."""
    if not callable(fn):
        raise InvalidArgumentError(f"cuda_graphed needs a callable (a compiled module, a FusedKernel, a function), "
                                   f"got {type(fn).__name__}")
    if isinstance(warmup_calls, bool) or not isinstance(warmup_calls, int) or warmup_calls < 1:
        raise InvalidArgumentError(f"warmup_calls must be an int of at least 1 (calls before capture, where "
                                   f"compilation and lazy initialization happen), got {warmup_calls!r}")
    return CUDAGraphed(fn, warmup_calls)
