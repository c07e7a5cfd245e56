"""amk's one timer, :func:`time_ms`, for the autotuner, the examples and the benchmark suite; :func:`host_us`, the
host time of a call; and :func:`environment`, the GPU, versions and date that results files record.

A leaf module: it imports torch and :mod:`amk.graph_capture`, itself a leaf (``environment`` reads
``amk.__version__`` when called), so the tuner can import it from below.
"""

from __future__ import annotations

import gc
import math
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

    On a GPU each launch is timed by a pair of CUDA events after L2 is flushed, as ``triton.testing.do_bench`` does;
    the launches are queued in batches behind a GPU sleep as long as the host's time to issue them (:func:`_timed`),
    so the events time the device whatever the host's speed. ``runs`` launches are timed, or by default as many as fill
    ``rep_ms`` (estimated from five launches). Warm-up first: up to ``warmup`` launches (by default as many as fill
    ``warmup_ms``), stopping once ``warmup_ms`` has passed.

    - ``give_up_above`` (ms): when the median of the first ``early_stop_runs`` launches is above it, that median is
      returned (a tuner's candidate that clearly lost is not timed further).
    - ``measure_ms``: fewer than ``runs`` launches where they would take longer than this, judged from the first
      ``early_stop_runs`` (:func:`runs_within`).
    - ``graph_below`` (ms): a median below it is measured again as replays of a captured CUDA graph (a decode-sized
      kernel, where the host's launch before each event pair would otherwise weigh in its ranking), each call in the
      graph after an L2 eviction, as a decode step's layer finds its weights (:func:`_graph_ms`); a launch that
      cannot be captured keeps its event timing; the graph holds the launches of about ``graph_rep_ms``.
    - ``cuda_graph=True``: replays of a captured CUDA graph only (as ``triton.testing.do_bench_cudagraph`` times
      them, captured so that other threads' CUDA calls go on: :func:`_graph_ms`), how a decode step runs its kernels.

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
    host_ms = None  # the host's time per launch, once measured: the next batches' sleeps start from it
    if runs is None or warmup is None:
        estimate, host_ms = _timed(fn, flush, 5)
        # A launch takes the host's time where that is the longer: the runs fill rep_ms of the clock either way.
        per_launch = max(statistics.fmean(estimate), host_ms, 1e-6)
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
        times, host_ms = _timed(fn, flush, early_stop_runs, host_ms)
        if give_up_above is not None and statistics.median(times) > give_up_above:
            return statistics.median(times), EVENTS
        runs = runs_within(runs, statistics.median(times), measure_ms, early_stop_runs)
    times += _timed(fn, flush, runs - len(times), host_ms)[0]
    median = statistics.median(times)
    if graph_below is not None and median < graph_below:
        try:
            return _graph_ms(fn, graph_rep_ms, evict_with=flush), GRAPH
        except RuntimeError:  # a launch that cannot be captured (or an implausible difference) keeps its event timing
            pass
    return median, EVENTS


def runs_within(runs: int, per_launch_ms: float, measure_ms: float | None, at_least: int) -> int:
    """``runs``, or fewer where ``runs`` launches of ``per_launch_ms`` each would take over ``measure_ms`` (None: no
    bound), never under ``at_least``: the median of 14 launches of a 7 ms GEMM is as steady as that of 30."""
    if measure_ms is None:
        return runs
    return max(at_least, min(runs, int(measure_ms / max(per_launch_ms, 1e-6))))


# Launches queued behind one GPU sleep (the driver's queue holds about a thousand; each launch takes a few slots: the
# flush, three events and the timed call's kernels; a fuller queue only makes the host wait, which the GPU does not
# see). The first batch of a call is small: its host time is not known yet.
QUEUED_LAUNCHES, FIRST_BATCH = 64, 8
# Before the first batch, the host time per launch assumed (a loaded host's amk.compile call path measured ~120 us).
HOST_US_GUESS = 150.0
# The longest sleep: a batch whose host lag needs more is cut to fewer launches.
MAX_SLEEP_US = 50_000.0
# Clock cycles per microsecond of any GPU amk times at or above its clock (the H200's SMs run at up to 1.98 GHz): a
# sleep of ``us * SLEEP_CYCLES_PER_US`` cycles lasts at least ``us`` microseconds. (A faster clock sleeps shorter:
# the batch is caught up with and issued again behind a longer sleep.)
SLEEP_CYCLES_PER_US = 2000
# Batches issued again when the GPU caught up with the host, each behind a sleep with twice the margin (kept for the
# rest of the call: a host that lagged once will again); after that many, the call's launches are not gated.
RETRIES = 2


def _lag_us(host_us: float, device_us: float, margin: float) -> float:
    """How far the host falls behind the GPU per launch: ``host_us`` to issue one (taken ``margin`` times for its
    jitter) against ``device_us`` to run it (flush included); 0 where the GPU is the slower."""
    return max(margin * host_us - device_us, 0.0)


def sleep_us(launches: int, host_us: float, device_us: float, margin: float = 1.25) -> float:
    """How long the GPU must sleep before ``launches`` launches so that it never waits for the host: the host's lag
    over the whole batch (:func:`_lag_us`), and 20 us for the first launch."""
    return 20.0 + launches * _lag_us(host_us, device_us, margin)


def gated_launches(launches: int, host_us: float, device_us: float, margin: float) -> int:
    """At most ``launches``, as many as one sleep of at most ``MAX_SLEEP_US`` covers (at least one)."""
    return max(1, min(launches, int((MAX_SLEEP_US - 20.0) / max(_lag_us(host_us, device_us, margin), 1e-3))))


def _timed(fn: Callable[[], object], flush: torch.Tensor, count: int,
           host_ms: float | None = None) -> tuple[list[float], float]:
    """``count`` launches of ``fn``, each after an L2 flush and timed by its own CUDA events: their times in ms, and
    the host's time to issue one launch (ms, of the last batch: :func:`_trimmed_mean`; ``host_ms``, that of an
    earlier call, saves the first batch's guess).

    Each batch of launches is queued behind a GPU sleep (:func:`sleep_us`) as long as the host lags behind the GPU
    in issuing them, so that no launch waits for the host: a loaded or slow host cannot enter the times. (Without
    it the flush alone hid about 60 us of host time per launch; a decode-sized program whose call took longer, as on
    a host busy with compile workers, was timed at its host latency: 0.066 ms for a 0.012 ms kernel.) A batch with a
    launch that the GPU had reached before the host finished issuing it is issued again behind a longer sleep. A call
    that waits for the GPU itself (it reads a value back: its first launch has run when it returns) is not gated: it
    would wait out every sleep."""
    times: list[float] = []
    host_us = HOST_US_GUESS if host_ms is None else host_ms * 1e3
    device_us, retries, gated = 0.0, 0, True
    while len(times) < count:
        known = times or retries or host_ms is not None
        launches = min(count - len(times), QUEUED_LAUNCHES if known else FIRST_BATCH)
        if gated:
            margin = 1.25 * 2 ** retries
            launches = gated_launches(launches, host_us, device_us, margin)
            torch.cuda._sleep(int(sleep_us(launches, host_us, device_us, margin) * SLEEP_CYCLES_PER_US))
        # (before the flush, start, end) of each launch: the GPU's own time per launch is flush to end.
        events = [tuple(torch.cuda.Event(enable_timing=True) for _ in range(3)) for _ in range(launches)]
        issued, caught_up = [time.perf_counter()], False
        for before, start, end in events:
            before.record()
            flush.zero_()
            start.record()
            fn()
            # The GPU already past this launch's start when the host has just issued it: it waited for the host.
            caught_up = caught_up or (gated and start.query())
            end.record()
            issued.append(time.perf_counter())
            if gated and len(issued) == 2 and end.query():  # it ran before the sleep could end: fn waited for the GPU
                gated, caught_up = False, False
        host_us = _trimmed_mean([b - a for a, b in zip(issued, issued[1:])]) * 1e6
        torch.cuda.synchronize()
        if not caught_up:  # (else the GPU's times hold its waits for the host)
            device_us = statistics.fmean(before.elapsed_time(end) for before, _, end in events) * 1e3
        elif retries < RETRIES:
            retries += 1
            continue
        else:
            gated = False
        times += [start.elapsed_time(end) for _, start, end in events]
    return times, host_us / 1e3


def _trimmed_mean(gaps: list[float]) -> float:
    """The mean of the host's times between launches, the longest tenth left out: the host's time per launch without
    the one launch that waited for the GPU (a full launch queue frees its first slot only when the sleep ends), which
    would lengthen every later sleep; a host that is often slow (every fourth call) still counts."""
    kept = sorted(gaps)[:max(1, math.ceil(0.9 * len(gaps)))]
    return statistics.fmean(kept)


# Replays of the captured graph timed, as triton.testing.do_bench_cudagraph times them.
GRAPH_REPLAYS = 10


# The bytes read before each call of a graph timed from a cold L2, in multiples of the GPU's L2 (the H100's and
# H200's 50 MB: 100 MB, some 21-33 us a read, subtracted again).
L2_EVICTION_FACTOR = 2
# The graph of evictions alone holds the evictions of this share of the timed graph's ``rep_ms``.
EVICTION_REP_SHARE = 0.25


class ImplausibleTiming(RuntimeError):
    """A cold-L2 time that came out at or below zero: the measurement, not the kernel, is at fault."""


def _graph_ms(fn: Callable[[], object], rep_ms: float, evict_with: torch.Tensor | None = None) -> float:
    """Median ms per call of ``fn`` as replays of one captured CUDA graph of enough calls to fill ``rep_ms``, as
    ``triton.testing.do_bench_cudagraph`` times them (:func:`_replayed_ms`).

    With ``evict_with`` (a CUDA buffer), each call in the graph follows a read of its first ``L2_EVICTION_FACTOR``
    times L2's bytes, and the reads' own time is subtracted, from a graph of reads alone replayed in turn with it:
    the call's time from a cold L2, as a decode step's layer finds its weights, without the host's launch that event
    timings put before each call. A read leaves L2 holding clean lines, where a write's dirty ones would be written
    back during the call, costing some configurations more than others. Warm replays ranked decode GEMVs by L2's
    speed: on an H100, E's kernel at one row ran 9.0 us as replays whose 32 MB of weights stayed in its 50 MB L2 and
    23.1 us from a cold L2, against max-autotune's 20.9. Raises :class:`ImplausibleTiming` where the difference is
    not positive."""
    if evict_with is None:
        return _replayed_ms([(fn, rep_ms)])[0]
    l2_bytes = torch.cuda.get_device_properties(evict_with.device).L2_cache_size
    elements = L2_EVICTION_FACTOR * l2_bytes // evict_with.element_size() if l2_bytes else evict_with.numel()
    evict = evict_with.view(-1)[:elements].sum

    def after_an_eviction():
        evict()
        fn()

    both, evictions = _replayed_ms([(after_an_eviction, rep_ms), (evict, rep_ms * EVICTION_REP_SHARE)])
    if not both > evictions:
        raise ImplausibleTiming(f"a call from a cold L2 timed {both:.5f} ms with its eviction, the eviction alone "
                                f"{evictions:.5f} ms")
    return both - evictions


def _replayed_ms(timed: list[tuple[Callable[[], object], float]]) -> list[float]:
    """For each ``(fn, rep_ms)``, the median ms per call of ``fn`` as replays of one captured CUDA graph of enough
    calls to fill ``rep_ms``, as ``triton.testing.do_bench_cudagraph`` times it; the graphs replayed in turn, so that
    what the GPU does meanwhile weighs on each alike. Captured in PyTorch's "thread_local" mode: Triton's capture
    is in the "global" mode, where another thread's synchronizing CUDA call made meanwhile raises, and amk.compile's
    builds time candidates so while the model's other threads may be running. The garbage collector is off while
    capturing, as there: a Triton kernel it finalized would unload its module, which no capture survives (the switch
    is the process's: two threads timing so at once may turn it back on during the other's capture, as in Triton).
    On a stream of its own, which first waits for the caller's (the calls' operands may have been made there)."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            graphs = []
            for fn, rep_ms in timed:
                fn()
                start.record()
                for _ in range(5):
                    fn()
                end.record()
                end.synchronize()
                estimate_ms = start.elapsed_time(end) / 5
                calls = max(1, int(rep_ms / estimate_ms)) if estimate_ms > 0 else 1000
                graphs.append((_captured(fn, calls), calls))
            times: list[list[float]] = [[] for _ in graphs]
            for _ in range(GRAPH_REPLAYS):
                for (graph, calls), samples in zip(graphs, times):
                    start.record()
                    graph.replay()
                    end.record()
                    end.synchronize()
                    samples.append(start.elapsed_time(end) / calls)
        return [statistics.median(samples) for samples in times]
    except RuntimeError:  # a capture that failed: the process's later random ops must still work
        end_failed_capture()
        raise


def _captured(fn: Callable[[], object], calls: int):
    """A CUDA graph of ``calls`` calls of ``fn``, captured on the current stream (see :func:`_replayed_ms`)."""
    graph = torch.cuda.CUDAGraph()
    collecting = gc.isenabled()
    gc.disable()
    try:
        # On this stream, without torch.cuda.graph's entry: it captures on one stream shared by every thread (a
        # second capture at once fails) and empties the allocator's cache (an internal assert while another thread
        # captures).
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            for _ in range(calls):
                fn()
        finally:
            graph.capture_end()
    finally:
        if collecting:
            gc.enable()
    return graph


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
