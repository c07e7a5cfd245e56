"""Launching a specialized kernel again without Triton's per-call launch path.

``kernel[grid](...)`` (``JITFunction.run``) binds every argument, computes the specialization key (the type, the
16-byte alignment of each pointer, whether each integer is 1 or a multiple of 16) and looks the compiled kernel up,
on every call: 30-45 µs of host time per launch on the H200's host, more than a whole decode step runs on the GPU.
Once a call's shapes are fixed (amk's hot path), everything but the tensors' addresses is known. :class:`LaunchReplay`
runs the emitted launcher once through Triton, records what it launched (the compiled kernel, its grid and its
argument list) and afterwards launches that compiled kernel directly with the new tensors put in. What else Triton
specializes on, the strides and the 16-byte alignment of the tensors, keys the recordings: each such layout is
recorded once (when nothing can be recorded, the emitted launcher runs as before).
"""

from __future__ import annotations

import logging
import threading
import types
from collections.abc import Callable, Sequence

import torch

log = logging.getLogger("amk")

# Triton specializes a pointer argument on this alignment (bytes).
_ALIGNMENT = 16


class _Recorder:
    """Stands in for one ``@triton.jit`` kernel while an emitted launcher runs once: it launches through Triton and
    records the compiled kernel, the grid and the bound arguments (constexprs included, in signature order, as
    Triton's compiled-kernel launcher takes them)."""

    def __init__(self, jit, launches: list):
        self.jit = jit
        self.launches = launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            compiled = self.jit[grid](*args, **kwargs)
            parameters = self.jit.signature.parameters
            bound = self.jit.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in parameters})
            bound.apply_defaults()
            self.launches.append((compiled, tuple(grid), list(bound.arguments.values())))
            return compiled

        return launch


def record(launch: Callable, views: Sequence[torch.Tensor]) -> list[tuple]:
    """Run the emitted ``launch`` on ``views`` through Triton; return ``(compiled kernel, grid, arguments)`` for every
    kernel it launched. The launcher runs as a copy whose globals name recorders instead of its module's jit kernels,
    so that the module, which other calls may be running, is left as it is."""
    from triton.runtime.jit import JITFunction

    launches: list[tuple] = []
    recorders = {name: _Recorder(value, launches) for name, value in launch.__globals__.items()
                 if isinstance(value, JITFunction)}
    recording = types.FunctionType(launch.__code__, {**launch.__globals__, **recorders}, launch.__name__,
                                   launch.__defaults__, launch.__closure__)
    recording(*views)
    return launches


class LaunchReplay:
    """An emitted launcher that launches the compiled kernels it recorded directly, one recording per layout.

    The caller (amk's hot path) guarantees that every call has the shapes and dtypes of the first; what Triton
    specializes on beyond them, the strides and 16-byte alignment of the caller's tensors, keys the recordings: the
    first call with a layout runs the emitted launcher through Triton and records it, later calls with that layout
    replay it. ``checked`` is how many leading views come from the caller; the views after them (fresh outputs,
    workspace) are allocated by amk with the same layout on every call. Beyond ``MAX_LAYOUTS`` layouts, calls go
    through Triton.
    """

    MAX_LAYOUTS = 4

    def __init__(self, launch: Callable, checked: int):
        self.launch = launch
        self.checked = checked
        self.replays: dict[tuple, Callable | None] = {}  # None: recorded, but not replayable
        self.lock = threading.Lock()

    def __call__(self, *views: torch.Tensor) -> None:
        layout = tuple((view.stride(), view.data_ptr() % _ALIGNMENT == 0) for view in views[:self.checked])
        replay = self.replays.get(layout)
        if replay is not None:
            replay(views)
            return
        with self.lock:
            if layout in self.replays or len(self.replays) >= self.MAX_LAYOUTS:
                self.launch(*views)
                return
            self.replays[layout] = self._record(views)

    def _record(self, views: Sequence[torch.Tensor]) -> Callable | None:
        """Launch ``views`` through Triton, recording; the replay of what was launched, or None."""
        launches = record(self.launch, views)
        if not launches or any(compiled is None for compiled, _, _ in launches):
            return None  # Triton's interpreter returns no compiled kernel
        if any(getattr(compiled.metadata, "global_scratch_size", 0) for compiled, _, _ in launches):
            # Device-side tensor descriptors need the allocator the emitted launcher installs on every call.
            return None
        count = len(views)
        if any(len(arguments) < count or any(a is not v for a, v in zip(arguments, views))
               for _, _, arguments in launches):
            # The emitted launchers pass their tensors first and in order; a launch that does not is left to Triton.
            return None
        runs = []
        for compiled, grid, arguments in launches:
            # The first ``count`` arguments are refilled on every call (and the first call's tensors not kept alive).
            runs.append((compiled[grid + (1,) * (3 - len(grid))], arguments[count:]))
        log.debug("launching %s directly from now on", ", ".join(c.name for c, _, _ in launches))

        def replay(views: Sequence[torch.Tensor]) -> None:
            for runner, rest in runs:
                runner(*views, *rest)

        return replay
