"""amk's timer on a simulated GPU: event timings of launches that the host issues more slowly than the GPU runs them
must still be the kernels' own times (the launches are queued behind a GPU sleep), and a call that waits for the GPU
itself must still be timed, without sleeping ever longer."""

from __future__ import annotations

import pytest
import torch

import amk.benchmarking as benchmarking

FLUSH_US = 55.0  # an L2 flush of 256 MB on the H200


class SimulatedGPU:
    """One stream: the host's clock (``host``, microseconds) advances with what the host does, the GPU's (``busy``)
    with the work queued; a queued item starts when both the GPU is free and the host has issued it."""

    def __init__(self):
        self.host = 0.0
        self.busy = 0.0
        self.slept_us: list[float] = []

    def enqueue(self, duration_us: float) -> float:
        self.busy = max(self.busy, self.host) + duration_us
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


def launch(gpu: SimulatedGPU, host_us: float, kernel_us: float, waits: bool = False):
    def fn():
        gpu.host += host_us
        gpu.enqueue(kernel_us)
        if waits:  # reads a value back, as a PyTorch fallback with .item() would
            gpu.host = max(gpu.host, gpu.busy)

    return fn


@pytest.mark.parametrize("host_us", [10.0, 120.0, 400.0])
def test_a_slow_host_does_not_enter_the_times(monkeypatch, host_us):
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times = benchmarking._timed(launch(gpu, host_us, kernel_us=12.0), Flush(gpu), 200)
    assert len(times) == 200
    assert max(times) == pytest.approx(0.012)


def test_without_the_sleep_the_host_would_have_been_timed(monkeypatch):
    """The simulation itself: with no sleep, a 120 us call path times a 12 us kernel at its host latency."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    monkeypatch.setattr(benchmarking, "sleep_us", lambda *args: 0.0)
    monkeypatch.setattr(benchmarking, "RETRIES", 0)
    times = benchmarking._timed(launch(gpu, 120.0, kernel_us=12.0), Flush(gpu), 50)
    assert max(times) > 0.05


def test_a_call_that_waits_for_the_gpu_is_timed_without_ever_longer_sleeps(monkeypatch):
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    times = benchmarking._timed(launch(gpu, 30.0, kernel_us=12.0, waits=True), Flush(gpu), 300)
    assert len(times) == 300
    assert max(times) == pytest.approx(0.012)
    assert len(gpu.slept_us) == 1 + benchmarking.RETRIES  # then its launches are no longer gated


def test_a_jittery_host_does_not_enter_the_times(monkeypatch):
    """Host time per call between 80 and 200 us (a collector's pause, a guard that misses), the GPU's 67 us a
    launch: batches the GPU catches up with are issued again behind longer sleeps."""
    gpu = SimulatedGPU()
    gpu.install(monkeypatch)
    calls = []

    def fn():
        calls.append(None)
        gpu.host += 200.0 if len(calls) % 7 == 0 else 80.0
        gpu.enqueue(12.0)

    times = benchmarking._timed(fn, Flush(gpu), 300)
    assert max(times) == pytest.approx(0.012)


def test_the_sleep_covers_the_hosts_lag_over_the_batch():
    assert benchmarking.sleep_us(64, host_us=100.0, device_us=60.0) == pytest.approx(20.0 + 64 * (125.0 - 60.0))
    assert benchmarking.sleep_us(64, host_us=30.0, device_us=60.0) == 20.0  # the GPU is the slower: no lag
    assert benchmarking.sleep_us(8, host_us=100.0, device_us=60.0, margin=2.5) == pytest.approx(20.0 + 8 * 190.0)
