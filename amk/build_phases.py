"""Where a build's time goes: seconds spent emitting (passes and Triton source), compiling (waiting for the compile
workers), at candidates' first launches in the building process (``compile_here``: Triton compiles there what no
worker compiled, or what its cache did not find under the worker's key, and loads each kernel), preparing
candidates for timing (drawing the random inputs, loading each candidate's module, allocating its outputs), timing
candidates and verifying, for the tuner's progress bar and ``FusedKernel.build_phases``.

A build opens a :func:`recording` (``Built.build_phases``, which ``FusedKernel.build_phases`` and ``amk.explain``'s
size buckets show); the code doing each kind of work wraps it in :func:`phase`. Phases nest (a candidate's first
launch compiles inside the timing loop): the inner phase's time is not counted in the outer one's, so the phases add
up to at most the build's wall time. Recordings nest too (a build inside ``build_fused_kernel``'s): the inner one
has a clock of its own, whose seconds go to the enclosing clock when it ends. Outside a recording, :func:`phase` only
runs its body.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

PHASES = ("emit", "compile", "compile_here", "prepare", "time", "verify")


class PhaseClock:
    """Seconds per phase of one build, each counted exclusively of the phases nested in it."""

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.open: list[str] = []
        self.since = 0.0

    def enter(self, name: str) -> None:
        now = time.perf_counter()
        if self.open:
            self.seconds[self.open[-1]] += now - self.since
        self.open.append(name)
        self.since = now

    def leave(self) -> None:
        now = time.perf_counter()
        self.seconds[self.open.pop()] += now - self.since
        self.since = now

    def pause(self) -> None:
        """A nested recording starts: the open phase's time so far is counted, the nested clock counts from here."""
        now = time.perf_counter()
        if self.open:
            self.seconds[self.open[-1]] += now - self.since
        self.since = now

    def resume(self, nested: PhaseClock) -> None:
        """A nested recording ended: its seconds are this clock's too, and the open phase counts on from now."""
        for name, seconds in nested.seconds.items():
            self.seconds[name] += seconds
        self.since = time.perf_counter()

    def summary(self) -> str:
        return ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.seconds.items() if seconds >= 0.05)


_CLOCK: ContextVar[PhaseClock | None] = ContextVar("amk_build_phases", default=None)


@contextmanager
def recording() -> Iterator[PhaseClock]:
    """Time the phases of the build run inside (a nested recording's seconds add to the enclosing one's)."""
    enclosing = _CLOCK.get()
    if enclosing is not None:
        enclosing.pause()
    clock = PhaseClock()
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)
        if enclosing is not None:
            enclosing.resume(clock)


@contextmanager
def phase(name: str) -> Iterator[None]:
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    clock.enter(name)
    try:
        yield
    finally:
        clock.leave()


def current() -> PhaseClock | None:
    """The recording in progress, if any (for the progress bar)."""
    return _CLOCK.get()
