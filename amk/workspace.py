"""Memory for kernel launches: each call's new outputs (:func:`output_allocator`), and kernel workspace (partial row
statistics, split-K partial sums, completion counters) that is never shared by two calls in flight.

A kernel's workspace is scratch memory for one call. Allocating it on every call would cost a counter's zeroing
launch each time, so a :class:`Workspace` keeps one set of buffers per thread and per CUDA stream and hands that set
to every call the thread makes on that stream: two threads, or one thread on two streams, never see each other's
buffers, and calls of one thread on one stream run one after the other on the GPU. Counters are zeroed once when the
set is allocated; the kernels leave them zero. A capture of a CUDA graph takes buffers of its own, so that each graph
owns its workspace and replays of different graphs cannot race: scratch from the graph's private memory pool, and
counters from a set zeroed before the capture (by an earlier call outside it, as the warm-up that precedes a capture
is) so that the graph holds no zeroing launch, which would cost each replay about a microsecond. Every call of one
capture on one stream shares that set (they replay one after the other): a graph of a decode step that calls one
kernel in each of its layers, or Triton's ``do_bench_cudagraph`` (which captures many calls), holds no zeroing launch
either. A capture is told from the next by the id CUDA gives it (``cuStreamGetCaptureInfo``, read through the driver
library); where that cannot be read, each call under capture takes buffers of its own.

Triton's interpreter (the CPU path) is not thread-safe: :data:`INTERPRETER_LOCK` serializes the launches that run in it.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence

import torch

from amk.environment import renew_in_forked_children

# Kernels run in Triton's interpreter one at a time: it swaps triton.language's functions while a kernel runs.
INTERPRETER_LOCK = threading.RLock()


def output_allocator(device: torch.device) -> Callable[[tuple, tuple, torch.dtype], torch.Tensor]:
    """``allocate(shape, strides, dtype)``: a call's new output tensor on ``device``. On a GPU it is the allocation
    Inductor's compiled code makes its buffers with (``torch._C._dynamo.guards._empty_strided_cuda``: the caching
    allocator without the dispatcher, on the current device; ``benchmarks/probes/launch_paths.py`` times both)
    whenever the current device is ``device``; ``torch.empty_strided`` otherwise, and where this torch lacks it."""

    def portable(shape: tuple, strides: tuple, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)

    fast = getattr(torch._C._dynamo.guards, "_empty_strided_cuda", None) if device.type == "cuda" else None
    if fast is None:
        return portable
    index = device.index if device.index is not None else torch.cuda.current_device()
    current_device = torch._C._cuda_getDevice

    def allocate(shape: tuple, strides: tuple, dtype: torch.dtype) -> torch.Tensor:
        return fast(shape, strides, dtype) if current_device() == index else portable(shape, strides, dtype)

    return allocate


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def serialized(launch: Callable) -> Callable:
    """``launch`` as kernels run in Triton's interpreter: one at a time (:data:`INTERPRETER_LOCK`), with numpy's
    floating-point reports off. The interpreter computes the padding lanes of partial tiles too, which a GPU computes
    without a word and every store masks out: a row past the end of the rows counts no element, and its statistics
    divide 0 by 0 (numpy would print ``RuntimeWarning: invalid value encountered in divide`` on ordinary inputs)."""
    import numpy

    # (a DataLoader's fork beside a thread running inference: the child's first kernel waited forever)
    renew_in_forked_children(_renew_interpreter_lock)

    def run_alone(*args, **kwargs):
        with INTERPRETER_LOCK, numpy.errstate(all="ignore"):
            return launch(*args, **kwargs)

    return run_alone


def _renew_interpreter_lock() -> None:
    global INTERPRETER_LOCK
    INTERPRETER_LOCK = threading.RLock()


@functools.cache
def _capture_info() -> Callable | None:
    """The driver's ``cuStreamGetCaptureInfo``, or None without a CUDA driver library. Its versions differ only in the
    optional outputs after the capture id (none, three or four): every call passes four null pointers, which a version
    taking fewer never reads."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name in ("cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo"):
        function = getattr(driver, name, None)
        if function is not None:
            return function
    return None


CAPTURE_ACTIVE = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE


def capture_id(stream: int) -> int | None:
    """The id of the CUDA graph capture under way on ``stream`` (a raw ``cudaStream_t``), or None (no capture, or no
    way to ask)."""
    function = _capture_info()
    if function is None:
        return None
    status, ident = ctypes.c_int(), ctypes.c_uint64()
    result = function(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident), None, None, None, None)
    return ident.value if result == 0 and status.value == CAPTURE_ACTIVE else None


class Workspace:
    """The workspace buffers of one kernel launch at fixed shapes: ``specs`` holds each buffer's shape, dtype and
    whether it is a counter (allocated zeroed). Calling it returns the buffers for the caller's thread and stream."""

    def __init__(self, specs: Sequence[tuple[tuple[int, ...], torch.dtype, bool]], device: torch.device):
        self.specs = list(specs)
        self.device = device
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.per_thread = threading.local()
        self.has_counters = any(counter for _, _, counter in self.specs)
        # Zeroed counters waiting for the next capture, and those handed to captured graphs (kept alive with them).
        self.reserved_counters: list[list[torch.Tensor]] = []
        self.graph_counters: list[list[torch.Tensor]] = []
        # Per stream, the capture under way there (its id) and the buffers its calls share.
        self.capturing: dict[int, tuple[int, list[torch.Tensor]]] = {}

    def allocate(self) -> list[torch.Tensor]:
        return [(torch.zeros if counter else torch.empty)(shape, dtype=dtype, device=self.device)
                for shape, dtype, counter in self.specs]

    def _zeroed_counters(self) -> list[torch.Tensor]:
        return [torch.zeros(shape, dtype=dtype, device=self.device) for shape, dtype, counter in self.specs if counter]

    def _for_capture(self, stream: int) -> list[torch.Tensor]:
        ident = capture_id(stream)
        if ident is None:
            return self._capture_buffers()
        current = self.capturing.get(stream)
        if current is None or current[0] != ident:
            current = self.capturing[stream] = (ident, self._capture_buffers())
        return current[1]

    def _capture_buffers(self) -> list[torch.Tensor]:
        try:
            counters = iter(self.reserved_counters.pop())  # list.pop is atomic: one capture gets each set
        except IndexError:  # no call ran before this capture: the graph zeroes its own counters
            return self.allocate()
        buffers = [next(counters) if counter else torch.empty(shape, dtype=dtype, device=self.device)
                   for shape, dtype, counter in self.specs]
        self.graph_counters.append([b for b, (_, _, counter) in zip(buffers, self.specs) if counter])
        return buffers

    def __call__(self) -> list[torch.Tensor]:
        if not self.specs:
            return self.specs
        if self.cuda:
            stream = torch._C._cuda_getCurrentRawStream(self.index)
            if torch._C._cuda_isCurrentStreamCapturing():
                return self._for_capture(stream)
            if self.has_counters and not self.reserved_counters:
                self.reserved_counters.append(self._zeroed_counters())
            # Captures are over (one still under way in another thread takes a new set: correct, one memset more):
            # their scratch may go back to their graphs' memory pools.
            if self.capturing:
                self.capturing.clear()
        else:
            stream = 0
        sets = self.per_thread.__dict__
        buffers = sets.get(stream)
        if buffers is None:
            buffers = sets[stream] = self.allocate()
        return buffers
