"""amk's timer on a simulated GPU: event timings of launches that the host issues more slowly than the GPU runs them
must still be the kernels' own times (the launches are queued behind a GPU sleep), and a call that waits for the GPU
itself must still be timed, without sleeping ever longer."""

from __future__ import annotations

import collections
import contextlib
from types import SimpleNamespace

import pytest
import torch

import amk.benchmarking as benchmarking

FLUSH_US = 55.0  # an L2 flush of 256 MB on the H200


class SimulatedGPU:
    """One stream: the host's clock (``host``, microseconds) advances with what the host does, the GPU's (``busy``)
    with the work queued; a queued item starts when both the GPU is free and the host has issued it. The launch queue
    holds ``capacity`` items: the host waits for a free slot."""

    def __init__(self, capacity: int = 1024):
        self.host = 0.0
        self.busy = 0.0
        self.slept_us: list[float] = []
        self.capacity = capacity
        self.pending: collections.deque[float] = collections.deque()  # completion times of the queued items

    def enqueue(self, duration_us: float) -> float:
        while self.pending and self.pending[0] <= self.host:
            self.pending.popleft()
        if len(self.pending) >= self.capacity:
            self.host = self.pending.popleft()
        self.busy = max(self.busy, self.host) + duration_us
        self.pending.append(self.busy)
        return self.busy

    def install(self, monkeypatch) -> None:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False):
                self.at: float | None = None

            def record(self):
                self.at = gpu.enqueue(0.0)

            def query(self) -> bool:
                return self.at is not None and self.at <= gpu.host

            def elapsed_time(self, end: Event) -> float:
                return (end.at - self.at) / 1e3

            def synchronize(self) -> None:
                gpu.host = max(gpu.host, self.at)

        def sleep(cycles: int) -> None:
            gpu.slept_us.append(cycles / benchmarking.SLEEP_CYCLES_PER_US)
            gpu.enqueue(cycles / benchmarking.SLEEP_CYCLES_PER_US)

        def synchronize() -> None:
            gpu.host = max(gpu.host, gpu.busy)

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "_sleep", sleep)
        monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
        monkeypatch.setattr(benchmarking.time, "perf_counter", lambda: gpu.host / 1e6)


class Flush:
    def __init__(self, gpu: SimulatedGPU):
        self.gpu = gpu

    def zero_(self) -> None:
        self.gpu.host += 5.0
        self.gpu.enqueue(FLUSH_US)


def launch(gpu: SimulatedGPU, host_us: float, kernel_us: float, waits: bool = False, kernels: int = 1):
    def fn():
        gpu.host += host_us
        for _ in range(kernels):
            gpu.enqueue(kernel_us / kernels)
        if waits:  # reads a value back, as a PyTorch fallback with .item() would
            gpu.host = max(gpu.host, gpu.busy)

    return fn


@pytest.mark.parametrize("host_us,batches", [(10.0, 4), (120.0, 4), (400.0, 5)])
def test_a_slow_host_does_not_enter_the_times(monkeypatch, host_us, batches):
    """200 launches: a first batch of 8, then batches of 64; only a host slower than the first guess has its first
    batch issued again."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times, host_ms = benchmarking._timed(launch(gpu, host_us, kernel_us=12.0), Flush(gpu), 200)
    assert len(times) == 200
    assert max(times) == pytest.approx(0.012)
    assert host_ms * 1e3 == pytest.approx(host_us + 5.0)  # the call and the flush
    assert len(gpu.slept_us) == batches


def test_without_the_sleep_the_host_would_have_been_timed(monkeypatch):
    """The simulation itself: with no sleep, a 120 us call path times a 12 us kernel at its host latency."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    monkeypatch.setattr(benchmarking, "sleep_us", lambda *args: 0.0)
    monkeypatch.setattr(benchmarking, "RETRIES", 0)
    times, _ = benchmarking._timed(launch(gpu, 120.0, kernel_us=12.0), Flush(gpu), 50)
    assert max(times) > 0.05


def test_a_call_that_waits_for_the_gpu_is_timed_without_ever_longer_sleeps(monkeypatch):
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times, _ = benchmarking._timed(launch(gpu, 30.0, kernel_us=12.0, waits=True), Flush(gpu), 300)
    assert len(times) == 300
    assert max(times) == pytest.approx(0.012)
    assert len(gpu.slept_us) == 1 and sum(gpu.slept_us) < 2000  # its first launch ran at once: no more sleeps


def test_a_full_launch_queue_does_not_lengthen_the_sleeps(monkeypatch):
    """30 kernels a call: 64 calls overflow a queue of 1024 items, and the host waits for slots during the sleep;
    that wait is not host time per launch, so the sleeps stay as long as the lag needs."""
    gpu = SimulatedGPU(capacity=1024)
    gpu.install(monkeypatch)
    times, host_ms = benchmarking._timed(launch(gpu, 300.0, kernel_us=150.0, kernels=30), Flush(gpu), 1500)
    assert max(times) == pytest.approx(0.150)
    assert max(gpu.slept_us) < 64 * 1.25 * 2 * 305
    assert gpu.host < 2 * 1500 * 305  # the whole call: about as long as the host takes to issue the launches


def test_a_sleep_is_never_longer_than_its_cap(monkeypatch):
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times, _ = benchmarking._timed(launch(gpu, 2000.0, kernel_us=12.0), Flush(gpu), 100)
    assert max(times) == pytest.approx(0.012)
    assert max(gpu.slept_us) <= benchmarking.MAX_SLEEP_US


def test_a_jittery_host_does_not_enter_the_times(monkeypatch):
    """Host time per call 60 us, every tenth 1000 (a collector's pause, a guard that misses), the GPU's 67 us a
    launch: the trimmed host time misses the pauses, the GPU catches up with the batch, and it is issued again behind
    a sleep with a wider margin."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    calls = []

    def fn():
        calls.append(None)
        gpu.host += 1000.0 if len(calls) % 10 == 0 else 60.0
        gpu.enqueue(12.0)

    times, _ = benchmarking._timed(fn, Flush(gpu), 300)
    assert max(times) == pytest.approx(0.012)


def test_the_sleep_covers_the_hosts_lag_over_the_batch():
    assert benchmarking.sleep_us(64, host_us=100.0, device_us=60.0) == pytest.approx(20.0 + 64 * (125.0 - 60.0))
    assert benchmarking.sleep_us(64, host_us=30.0, device_us=60.0) == 20.0  # the GPU is the slower: no lag
    assert benchmarking.sleep_us(8, host_us=100.0, device_us=60.0, margin=2.5) == pytest.approx(20.0 + 8 * 190.0)


def test_a_host_time_measured_before_saves_the_first_small_batch(monkeypatch):
    """timed_by passes the host time its first launches measured to the next: 128 launches in two full batches,
    where a first call needs three (a first batch of 8 behind a guessed sleep)."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times, host_ms = benchmarking._timed(launch(gpu, 120.0, kernel_us=12.0), Flush(gpu), 128)
    assert len(gpu.slept_us) == 3
    gpu.slept_us.clear()
    times, _ = benchmarking._timed(launch(gpu, 120.0, kernel_us=12.0), Flush(gpu), 128, host_ms)
    assert len(gpu.slept_us) == 2 and max(times) == pytest.approx(0.012)


EVICTION_US = 30.0  # 100 MB read on the H100


class GraphedGPU(SimulatedGPU):
    """A :class:`SimulatedGPU` with CUDA graphs (a capture records the work its calls queue, a replay queues it again)
    and an L2 that holds the last buffer read or written: work is a function of that state, run when queued.
    ``eviction_us(previous)``: an eviction's time after ``previous`` held L2."""

    def __init__(self, eviction_us=lambda previous: EVICTION_US):
        super().__init__()
        self.capturing: list | None = None
        self.captures = 0
        self.in_l2: str | None = None
        self.eviction_us = eviction_us

    def run(self, work) -> None:
        if self.capturing is not None:
            self.capturing.append(work)
        else:
            self.enqueue(work())

    def evict(self) -> float:
        previous, self.in_l2 = self.in_l2, "eviction buffer"
        return self.eviction_us(previous)

    def install(self, monkeypatch) -> None:
        super().install(monkeypatch)
        gpu = self

        class Graph:
            def capture_begin(self, capture_error_mode: str = "global"):
                gpu.capturing, gpu.captures = [], gpu.captures + 1

            def capture_end(self):
                self.work, gpu.capturing = gpu.capturing, None

            def replay(self):
                for work in self.work:
                    gpu.enqueue(work())

        class Buffer:
            device = "cuda:0"

            def zero_(self):
                gpu.host += 5.0
                gpu.run(gpu.evict)

            def sum(self):
                gpu.host += 5.0
                gpu.run(gpu.evict)

            def view(self, *shape):
                return self

            def __getitem__(self, index):
                return self

            def element_size(self) -> int:
                return 4

        class Stream:
            def wait_stream(self, other):
                pass

        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(L2_cache_size=50 << 20))
        monkeypatch.setattr(torch, "empty", lambda *args, **kwargs: Buffer())


def one_row_gemv(gpu: GraphedGPU):
    """E's kernel at one row on an H100: its 32 MB of weights read in 9 us from L2, 23 us from memory."""
    def work() -> float:
        duration = 9.0 if gpu.in_l2 == "weights" else 23.0
        gpu.in_l2 = "weights"
        return duration

    def fn():
        gpu.host += 20.0
        gpu.run(work)

    return fn


def test_decode_kernels_are_timed_as_replays_from_a_cold_l2(monkeypatch):
    """Warm replays time a GEMV whose weights fit in L2 at L2's speed; the tuner's replays (``graph_below``) time it
    from a cold L2, as a decode step's layer runs it, without the evictions' own time, which a graph of evictions
    alone, replayed in turn with it, measures at each timing."""
    gpu = GraphedGPU()
    gpu.install(monkeypatch)
    assert benchmarking._graph_ms(one_row_gemv(gpu), rep_ms=5.0) == pytest.approx(0.009)
    assert gpu.captures == 1
    assert benchmarking._graph_ms(one_row_gemv(gpu), rep_ms=5.0, evict_with=torch.empty(1)) == pytest.approx(0.023)
    assert gpu.captures == 3
    ms, how = benchmarking.timed_by(one_row_gemv(gpu), runs=50, warmup=5, graph_below=0.05)
    assert how == benchmarking.GRAPH and ms == pytest.approx(0.023)


def test_an_implausible_cold_time_keeps_the_event_timing(monkeypatch):
    """Evictions that run slower back to back than after a kernel would make a short kernel's cold time come out at
    or below zero: the graph timing refuses it, and ``timed_by`` keeps the event timing."""
    gpu = GraphedGPU(eviction_us=lambda previous: 60.0 if previous == "eviction buffer" else EVICTION_US)
    gpu.install(monkeypatch)
    with pytest.raises(benchmarking.ImplausibleTiming):
        benchmarking._graph_ms(one_row_gemv(gpu), rep_ms=5.0, evict_with=torch.empty(1))
    ms, how = benchmarking.timed_by(one_row_gemv(gpu), runs=50, warmup=5, graph_below=0.05)
    assert how == benchmarking.EVENTS and ms == pytest.approx(0.023)
