"""Launching a specialized kernel again without Triton's per-call launch path.

``kernel[grid](...)`` (``JITFunction.run``) binds every argument, computes the specialization key (the type, the
16-byte alignment of each pointer, whether each integer is 1 or a multiple of 16) and looks the compiled kernel up,
on every call: 30-45 µs of host time per launch on the H200's host, more than a whole decode step runs on the GPU.
Once a call's shapes are fixed (amk's hot path), everything but the tensors' addresses is known. :class:`LaunchReplay`
runs the emitted launcher once through Triton, records what it launched (the compiled kernel, its grid and its
argument list) and afterwards launches that compiled kernel directly with the new tensors put in, as long as the
tensors it is given keep the strides and the alignment the recorded launch was specialized for (else, and when
nothing can be recorded, the emitted launcher runs as before).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import torch

log = logging.getLogger("amk")

# Triton specializes a pointer argument on this alignment (bytes).
_ALIGNMENT = 16


class _Recorder:
    """Stands in for one ``@triton.jit`` kernel of an emitted module while its launcher runs once: it launches through
    Triton and records the compiled kernel, the grid and the bound arguments (constexprs included, in signature
    order, as Triton's compiled-kernel launcher takes them)."""

    def __init__(self, jit, launches: list, thread: int):
        self.jit = jit
        self.launches = launches
        self.thread = thread

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            compiled = self.jit[grid](*args, **kwargs)
            if threading.get_ident() == self.thread:
                parameters = self.jit.signature.parameters
                bound = self.jit.signature.bind(*args, **{k: v for k, v in kwargs.items() if k in parameters})
                bound.apply_defaults()
                self.launches.append((compiled, tuple(grid), list(bound.arguments.values())))
            return compiled

        return launch


def record(launch: Callable, views: Sequence[torch.Tensor]) -> list[tuple]:
    """Run the emitted ``launch`` on ``views`` through Triton; return ``(compiled kernel, grid, arguments)`` for every
    kernel it launched."""
    from triton.runtime.jit import JITFunction

    module_globals = launch.__globals__
    kernels = {name: value for name, value in module_globals.items() if isinstance(value, JITFunction)}
    launches: list[tuple] = []
    module_globals.update({name: _Recorder(jit, launches, threading.get_ident()) for name, jit in kernels.items()})
    try:
        launch(*views)
    finally:
        module_globals.update(kernels)
    return launches


class LaunchReplay:
    """An emitted launcher that, after its first call, launches the compiled kernels it recorded directly.

    ``checked`` is how many leading views come from the caller (they may have any strides and alignment); the views
    after them (fresh outputs, workspace) are allocated by amk with the same layout on every call.
    """

    def __init__(self, launch: Callable, checked: int):
        self.launch = launch
        self.checked = checked
        self.replay: Callable[[Sequence[torch.Tensor]], None] | None = None
        self.recorded = False

    def __call__(self, *views: torch.Tensor) -> None:
        if self.replay is not None and self._same_layout(views):
            self.replay(views)
        elif self.recorded:
            self.launch(*views)
        else:
            self.recorded = True
            self.replay = self._record(views)

    def _same_layout(self, views: Sequence[torch.Tensor]) -> bool:
        for view, (strides, aligned) in zip(views, self.layouts):
            if view.stride() != strides or (aligned and view.data_ptr() % _ALIGNMENT):
                return False
        return True

    def _record(self, views: Sequence[torch.Tensor]) -> Callable | None:
        launches = record(self.launch, views)
        if not launches or any(compiled is None for compiled, _, _ in launches):
            return None  # Triton's interpreter returns no compiled kernel
        if any(getattr(compiled.metadata, "global_scratch_size", 0) for compiled, _, _ in launches):
            # Device-side tensor descriptors need the allocator the emitted launcher installs on every call.
            return None
        self.layouts = [(view.stride(), view.data_ptr() % _ALIGNMENT == 0) for view in views[:self.checked]]
        positions = {id(view): index for index, view in enumerate(views)}
        runs = []
        for compiled, grid, arguments in launches:
            runner = compiled[grid + (1,) * (3 - len(grid))]
            slots = [(position, positions[id(argument)]) for position, argument in enumerate(arguments)
                     if isinstance(argument, torch.Tensor) and id(argument) in positions]
            template = list(arguments)
            for position, _ in slots:
                template[position] = None  # filled on every call; the first call's tensors are not kept alive
            runs.append((runner, template, slots))
        log.debug("launching %s directly from now on", ", ".join(c.name for c, _, _ in launches))

        def replay(views: Sequence[torch.Tensor]) -> None:
            for runner, template, slots in runs:
                arguments = template.copy()
                for position, index in slots:
                    arguments[position] = views[index]
                runner(*arguments)

        return replay
