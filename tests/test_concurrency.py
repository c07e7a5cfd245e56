"""Kernels and compiled modules are safe to call from several threads (and, on a GPU, on several CUDA streams and
under CUDA-graph replay): workspace buffers are never shared by calls in flight, and launches that run in Triton's
interpreter are serialized."""

from __future__ import annotations

import threading

import pytest
import torch
from conftest import INTERPRETER_WARNINGS

import amk
import amk.benchmarking
from amk.oplist import normalize_ops
from amk.runtime import default_device
from amk.verification import reference_for
from amk.workspace import Workspace

pytestmark = INTERPRETER_WARNINGS

DEVICE = default_device()

# Chains whose kernels have workspace at these shapes: row statistics (chunk_recompute) and split-K partial sums
# with a completion counter.
CHAINS = {
    "layernorm": (["matmul", "add_bias", "layernorm"], [(4, 32), (32, 64), (64,), (64,), (64,)]),
    "rmsnorm": (["matmul", "rmsnorm"], [(4, 32), (32, 64), (64,)]),
    "softmax": (["matmul", "softmax"], [(4, 32), (32, 64)]),
    "split_k": (["matmul", "add"], [(1, 1024), (1024, 16), (1, 16)]),
}


def build(name: str):
    ops, shapes = CHAINS[name]
    kernel = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False)
    assert any(k.workspace for k in kernel.compiled.kernels.values()), f"{name} has no workspace to share"
    return kernel


def cases(name: str, count: int, seed: int) -> list[tuple[list[torch.Tensor], torch.Tensor]]:
    """``count`` different input sets for chain ``name``, each with its float64 reference output."""
    ops, shapes = CHAINS[name]
    reference = reference_for(normalize_ops(ops), len(shapes))
    generator = torch.Generator().manual_seed(seed)
    result = []
    for _ in range(count):
        inputs = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes]
        inputs[1] /= shapes[1][0] ** 0.5
        result.append(([t.to(DEVICE, torch.float32) for t in inputs], reference(*inputs)))
    return result


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.double().cpu() - expected).norm() / expected.norm()).item()


def call_from_threads(threads: int, calls: int, work) -> list[str]:
    """Run ``work(thread, call)`` ``calls`` times in each of ``threads`` threads started together; the failures."""
    failures: list[str] = []
    start = threading.Barrier(threads)

    def worker(thread: int) -> None:
        start.wait()
        for call in range(calls):
            try:
                failure = work(thread, call)
            except Exception as error:  # an error in a thread must fail the test, not vanish with the thread
                failure = f"{type(error).__name__}: {error}"
            if failure:
                failures.append(f"thread {thread}, call {call}: {failure}")

    pool = [threading.Thread(target=worker, args=(index,)) for index in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return failures


# Calls per thread: Triton's interpreter runs one launch at a time (amk serializes them), so on the CPU the threads
# interleave only between launches; 20 calls each still interleave 160 launches over four kernels (each interpreted
# launch is slow: 50 calls took 38 s of CI's time).
CALLS = 50 if DEVICE.type == "cuda" else 20


def test_kernels_with_workspace_give_every_thread_correct_results():
    """8 threads x 50 calls (20 in the interpreter), each thread on its own inputs, spread over four kernels with
    workspace."""
    names = list(CHAINS)
    kernels = {name: build(name) for name in names}
    inputs = {name: cases(name, 8, seed) for seed, name in enumerate(names)}  # one input set per thread

    def work(thread: int, call: int) -> str | None:
        name = names[(thread + call) % len(names)]
        args, expected = inputs[name][thread]
        error = relative_error(kernels[name](*args), expected)
        return None if error < 1e-4 else f"{name}: relative error {error:.2e}"

    assert call_from_threads(8, CALLS, work) == []


def test_a_compiled_module_gives_every_thread_correct_results():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64)).to(DEVICE)
    compiled = amk.compile(model)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(4, 32, generator=generator).to(DEVICE) for _ in range(4)]
    with torch.no_grad():
        expected = [model(x).double().cpu() for x in inputs]
        compiled(inputs[0])  # compiled once, before the threads

        def work(thread: int, call: int) -> str | None:
            with torch.no_grad():
                error = relative_error(compiled(inputs[thread]), expected[thread])
            return None if error < 1e-4 else f"relative error {error:.2e}"

        assert call_from_threads(4, 10, work) == []


class MaskedAttentionProbabilities(torch.nn.Module):
    """BERT's extended padding mask [B, 1, 1, S] and a bias per head and position [1, H, T, S] (T5's), both read by
    the softmax's kernel through a map of its rows (``broadcast_rows``)."""

    def forward(self, scores, padding, bias):
        return (scores * 0.125 + bias + (1.0 - padding[:, None, None, :]) * -10000.0).softmax(-1)


def test_a_kernel_reading_broadcast_rows_gives_every_thread_correct_results():
    """Each thread with its own batch size, padding mask and bias, so the row maps differ between calls in flight."""
    model = MaskedAttentionProbabilities()
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(0)
    cases = []
    for batch in (2, 3, 5, 2):
        scores = torch.randn(batch, 3, 6, 16, generator=generator).to(DEVICE)
        padding = (torch.rand(batch, 16, generator=generator) > 0.3).float().to(DEVICE)
        bias = torch.randn(1, 3, 6, 16, generator=generator).to(DEVICE)
        cases.append(((scores, padding, bias), model(scores, padding, bias).double().cpu()))
    compiled(*cases[0][0])  # compiled once, before the threads
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert [len(sub.kernels) for sub in graph.subgraphs] == [1], graph.subgraphs  # the mask's view runs in PyTorch

    def work(thread: int, call: int) -> str | None:
        args, expected = cases[thread]
        error = relative_error(compiled(*args), expected)
        return None if error < 1e-5 else f"relative error {error:.2e}"

    assert call_from_threads(4, 10, work) == []


def test_each_thread_has_its_own_workspace_buffers():
    specs = [((4, 2), torch.float32, False), ((3,), torch.int32, True)]
    workspace = Workspace(specs, torch.device("cpu"))
    mine = workspace()
    assert workspace() is mine and [b.shape for b in mine] == [(4, 2), (3,)]
    assert torch.equal(mine[1], torch.zeros(3, dtype=torch.int32))  # counters start at zero
    theirs = []
    thread = threading.Thread(target=lambda: theirs.extend(workspace()))
    thread.start()
    thread.join()
    assert len(theirs) == 2 and all(a.data_ptr() != b.data_ptr() for a, b in zip(mine, theirs))
    assert Workspace([], torch.device("cpu"))() == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA streams need a GPU")
def test_kernels_with_workspace_are_correct_on_four_streams_at_once():
    names = list(CHAINS)
    kernels = {name: build(name) for name in names}
    inputs = {name: cases(name, 4, seed) for seed, name in enumerate(names)}
    streams = [torch.cuda.Stream() for _ in range(4)]

    def work(thread: int, call: int) -> str | None:
        name = names[(thread + call) % len(names)]
        args, expected = inputs[name][thread]
        with torch.cuda.stream(streams[thread]):
            out = [kernels[name](*args) for _ in range(20)][-1]  # queued back to back on this stream
            streams[thread].synchronize()
        error = relative_error(out, expected)
        return None if error < 1e-4 else f"{name}: relative error {error:.2e}"

    assert call_from_threads(4, 25, work) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_timing_as_graph_replays_lets_other_threads_synchronize():
    """amk.compile's builds time candidates and PyTorch's ops as CUDA-graph replays while the model's other threads
    may run: a capture in PyTorch's "global" mode (Triton's do_bench_cudagraph's) makes another thread's value read
    to the host meanwhile raise. Both threads must get through."""
    kernel = build(next(iter(CHAINS)))
    ((args, _),) = cases(next(iter(CHAINS)), 1, 3)
    kernel(*args)
    stop, failures = threading.Event(), []

    def synchronize_until_stopped():
        try:
            while not stop.is_set():
                torch.ones(64, device="cuda").sum().item()  # a copy to the host, and a wait for its stream
        except RuntimeError as error:
            failures.append(str(error).splitlines()[0])

    other = threading.Thread(target=synchronize_until_stopped)
    other.start()
    try:
        times = [amk.benchmarking.time_ms(lambda: kernel(*args), cuda_graph=True, rep_ms=5) for _ in range(20)]
    finally:
        stop.set()
        other.join()
    assert failures == [] and all(t > 0 for t in times)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("name", list(CHAINS))
def test_graphs_of_one_kernel_replay_correctly_on_two_streams_at_once(name):
    """Each captured graph owns its workspace: two graphs of one kernel replayed concurrently stay correct."""
    kernel = build(name)
    (first, first_expected), (second, second_expected) = cases(name, 2, 7)
    kernel(*first)  # compiled and recorded outside the capture
    graphs, outputs = [], []
    for args in (first, second):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs.append(kernel(*args))
        graphs.append(graph)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for _ in range(20):
        for graph, stream in zip(graphs, streams):
            with torch.cuda.stream(stream):
                graph.replay()
    torch.cuda.synchronize()
    assert relative_error(outputs[0], first_expected) < 1e-4
    assert relative_error(outputs[1], second_expected) < 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("warmed_up", [True, False])
def test_a_capture_after_a_call_zeroes_no_counters_in_the_graph(warmed_up):
    """Counters handed to a capture were zeroed before it (by the call that precedes it), so the graph replays no
    memset; without such a call the graph zeroes its own (correct, a microsecond slower per replay). The calls of one
    capture share its buffers (a graph calling a kernel three times zeroes nothing more); another capture gets its
    own. Read from what a replay does: counters set to 7 after the capture stay 7 unless the graph zeroes them."""
    workspace = Workspace([((64, 8), torch.float32, False), ((16,), torch.int32, True)], torch.device("cuda"))
    if warmed_up:
        workspace()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls = [workspace() for _ in range(3)]
        calls[0][0].fill_(1.0)  # a kernel of the graph's own, so that a graph without a memset is not empty
    assert all(call[1] is calls[0][1] for call in calls)
    counters = calls[0][1]
    torch.cuda.synchronize()
    if warmed_up:  # zeroed before the capture, by the call outside it
        assert torch.count_nonzero(counters).item() == 0
    counters.fill_(7)
    graph.replay()
    torch.cuda.synchronize()
    assert bool((counters == 7).all()) is warmed_up
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        assert workspace()[1] is not counters


@pytest.mark.skipif(DEVICE.type == "cuda", reason="the interpreter's lock (a forked CUDA context is not usable anyway)")
def test_a_process_forked_while_a_thread_runs_a_kernel_runs_kernels_too():
    """The child of a fork made while another thread was inside a kernel call inherited the interpreter's lock held
    by a thread it does not have: its first kernel call waited forever (a DataLoader worker forked beside a thread
    running inference)."""
    import os
    import signal
    import time

    kernel = build("layernorm")
    (inputs, expected), = cases("layernorm", 1, seed=9)
    running, stop = threading.Event(), threading.Event()

    def busy():
        while not stop.is_set():
            kernel(*inputs)
            running.set()

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    running.wait(60)
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when its kernel ran and was right
            signal.alarm(120)
            os._exit(0 if relative_error(kernel(*inputs), expected) < 1e-5 else 1)
        deadline = time.monotonic() + 120
        while (finished := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        if finished[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert finished[0] == pid and os.waitstatus_to_exitcode(finished[1]) == 0, "the forked child hung or failed"
    finally:
        stop.set()
        thread.join(60)
