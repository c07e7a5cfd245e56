"""amk's one timer, :func:`time_ms`, for the autotuner, the examples and the benchmark suite; :func:`host_us`, the
host time of a call; and :func:`environment`, the GPU, versions and date that results files record.

A leaf module: it imports torch, and Triton only to replay CUDA graphs, nothing of amk (``environment`` reads
``amk.__version__`` when called), so the tuner can import it from below.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from amk.graph_capture import end_failed_capture

# Zeroed before each timed launch so that no launch finds its inputs in L2 (the H200's is 50 MB), as
# ``triton.testing.do_bench`` does.
L2_FLUSH_BYTES = 256 * 1024 * 1024


# How a time was measured (:func:`timed_by`): one captured CUDA graph's replays, CUDA events around flushed launches,
# or the host's clock (no GPU).
GRAPH, EVENTS, WALL_CLOCK = "graph replays", "events", "wall clock"


def time_ms(fn: Callable[[], object], **options) -> float:
    """Median time of ``fn`` in milliseconds (:func:`timed_by`, which says how it was measured, takes the same
    options)."""
    return timed_by(fn, **options)[0]


def timed_by(fn: Callable[[], object], *, runs: int | None = None, rep_ms: float = 100.0, warmup: int | None = None,
             warmup_ms: float = 25.0, cuda_graph: bool = False, give_up_above: float | None = None,
             early_stop_runs: int = 5, graph_below: float | None = None, measure_ms: float | None = None,
             graph_rep_ms: float = 20.0) -> tuple[float, str]:
    """Median time of ``fn`` in milliseconds, and how it was measured (:data:`GRAPH`, :data:`EVENTS` or
    :data:`WALL_CLOCK`).

    On a GPU each launch is timed by a pair of CUDA events after L2 is flushed; the launches are queued behind their
    flushes (no synchronization between them), so the host's launch latency hides behind the flush and the events
    time the device, as ``triton.testing.do_bench`` does. ``runs`` launches are timed, or by default as many as fill
    ``rep_ms`` (estimated from five launches). Warm-up first: up to ``warmup`` launches (by default as many as fill
    ``warmup_ms``), stopping once ``warmup_ms`` has passed.

    - ``give_up_above`` (ms): when the median of the first ``early_stop_runs`` launches is above it, that median is
      returned (a tuner's candidate that clearly lost is not timed further).
    - ``measure_ms``: fewer than ``runs`` launches where they would take longer than this, judged from the first
      ``early_stop_runs`` (:func:`runs_within`).
    - ``graph_below`` (ms): a median below it is measured again as replays of a captured CUDA graph (a decode-sized
      kernel, where launch latency and the cold L2 would otherwise rank configurations by what they do not control);
      a launch that cannot be captured keeps its event timing; the graph holds the launches of about
      ``graph_rep_ms``.
    - ``cuda_graph=True``: replays of a captured CUDA graph only (``triton.testing.do_bench_cudagraph``), how a
      decode step runs its kernels.

    Without a GPU: the wall clock of three calls after one (interpreter timings say nothing about GPU speed; they
    are reported for completeness).
    """
    if not torch.cuda.is_available():
        fn()
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples), WALL_CLOCK
    if cuda_graph:
        return _graph_ms(fn, rep_ms), GRAPH
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    if runs is None or warmup is None:
        estimate = _timed(fn, flush, 5)
        per_launch = max(statistics.fmean(estimate), 1e-6)
        runs = runs if runs is not None else max(1, int(rep_ms / per_launch))
        warmup = warmup if warmup is not None else max(1, int(warmup_ms / per_launch))
    started = time.perf_counter()
    for _ in range(warmup):
        fn()
        torch.cuda.synchronize()
        if (time.perf_counter() - started) * 1e3 > warmup_ms:
            break
    times: list[float] = []
    if (give_up_above is not None or measure_ms is not None) and runs > early_stop_runs:
        times = _timed(fn, flush, early_stop_runs)
        if give_up_above is not None and statistics.median(times) > give_up_above:
            return statistics.median(times), EVENTS
        runs = runs_within(runs, statistics.median(times), measure_ms, early_stop_runs)
    times += _timed(fn, flush, runs - len(times))
    median = statistics.median(times)
    if graph_below is not None and median < graph_below:
        try:
            return _graph_ms(fn, graph_rep_ms), GRAPH
        except RuntimeError:  # a launch that cannot be captured keeps its event timing
            pass
    return median, EVENTS


def runs_within(runs: int, per_launch_ms: float, measure_ms: float | None, at_least: int) -> int:
    """``runs``, or fewer where ``runs`` launches of ``per_launch_ms`` each would take over ``measure_ms`` (None: no
    bound), never under ``at_least``: the median of 14 launches of a 7 ms GEMM is as steady as that of 30."""
    if measure_ms is None:
        return runs
    return max(at_least, min(runs, int(measure_ms / max(per_launch_ms, 1e-6))))


def _timed(fn: Callable[[], object], flush: torch.Tensor, count: int) -> list[float]:
    """``count`` launches of ``fn``, each after an L2 flush between its own pair of events; their times in ms."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _graph_ms(fn: Callable[[], object], rep_ms: float) -> float:
    import triton.testing

    try:
        return triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")
    except RuntimeError:  # a capture that failed: the process's later random ops must still work
        end_failed_capture()
        raise


def host_us(fn: Callable[[], object], *, calls: int, repeats: int = 1, warmup: int = 0,
            wait_for_device: bool = False) -> float:
    """Per-call host time in microseconds: after ``warmup`` calls and a synchronize, ``calls`` back-to-back calls
    timed on the host clock; the median over ``repeats`` repetitions. The clock stops when the last call returns
    (what issuing a call costs the host while the GPU works through its queue), or with ``wait_for_device`` once the
    GPU has run them too (a launch-bound call's whole cost)."""
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if wait_for_device:
            synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    synchronize()
    return statistics.median(samples)


def environment() -> dict[str, str]:
    """GPU, versions and date for results files."""
    import datetime
    import platform

    import triton

    import amk

    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU, Triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "amk": amk.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
