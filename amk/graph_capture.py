"""What a CUDA graph capture that failed leaves behind, undone.

A capture that fails (an operation that cannot be captured, such as reading a value on the host) ends without the
epilogue of PyTorch's CUDA random generator: up to torch 2.12 the device's default generator then stays in its capture
mode, and every later random op on that device, ``torch.randn(..., device="cuda")`` included, raises "Offset increment
outside graph capture encountered unexpectedly" (torch 2.13 keys that state by capture and has no such mode). amk
captures user code (``cuda_graphed``) and candidate kernels (timing under graphs), and carries on after a failed
capture, so it ends that mode itself: one capture that succeeds runs the generator's prologue and epilogue again.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger("amk")


def end_failed_capture(device: torch.device | int | None = None) -> None:
    """Leave the CUDA random generator of ``device`` (the current device by default) out of capture mode after a
    capture on it failed, by capturing (and dropping) a graph of one fill. Never raises: the caller's own error (or
    its plain call) matters more; a reset that fails is logged."""
    try:
        with torch.cuda.device(device):
            scratch = torch.empty(1, device="cuda")
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads' CUDA calls go on
                scratch.fill_(0.0)
    except RuntimeError as error:
        log.warning("amk: after a failed CUDA graph capture, resetting the random generator's capture state failed "
                    "(later random ops on the device may fail): %s", str(error).splitlines()[0][:200])
