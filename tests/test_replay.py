"""Launch replay: after one launch through Triton, a hot-path call launches the recorded compiled kernel directly.

Without a GPU, Triton's interpreter has no compiled kernel to replay, so the logic (which arguments are refilled,
which layouts fall back to the emitted launcher) is checked against a stand-in for a compiled kernel that computes in
PyTorch; on a GPU, the real thing is checked end to end, under a CUDA graph too.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from conftest import eager, make_inputs, rel_l2
from triton.runtime.jit import JITFunction

import amk
from amk.replay import LaunchReplay

LAUNCHER = '''
def launch(x, y, out):
    grid = (x.shape[0],)
    scale_kernel[grid](x, y, out, x.stride(0), x.stride(1), SCALE=3, num_warps=1)
'''


def scale(x, y, out, stride_0, stride_1, SCALE):
    out.copy_((torch.as_strided(x, x.shape, (stride_0, stride_1)) + y) * SCALE)


class CompiledStandIn:
    """What Triton's compiled kernel offers the replay: metadata and ``[grid](*arguments)``; counts its launches."""

    name = "scale_kernel"
    metadata = SimpleNamespace(global_scratch_size=0)

    def __init__(self):
        self.direct_launches = []

    def __getitem__(self, grid):
        def runner(*arguments):
            self.direct_launches.append(grid)
            scale(*arguments)

        return runner


class JITStandIn(JITFunction):
    """``scale`` as a jit kernel whose launches run in PyTorch: (x + y) * 3."""

    def __init__(self):  # noqa: D107 - Triton's constructor would parse the function for a GPU compile
        self.signature = inspect.signature(scale)
        self.compiled = CompiledStandIn()
        self.launches = 0

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.launches += 1
            scale(*args, SCALE=kwargs["SCALE"])
            return self.compiled

        return run


def make_replay():
    namespace = {"scale_kernel": JITStandIn()}
    exec(LAUNCHER, namespace)
    return LaunchReplay(namespace["launch"], checked=2), namespace["scale_kernel"]


def operands():
    return torch.randn(4, 6), torch.randn(4, 6), torch.empty(4, 6)


def test_the_first_call_records_and_later_calls_launch_directly_with_their_own_tensors():
    replay, jit = make_replay()
    for _ in range(4):
        x, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert jit.launches == 1
    assert jit.compiled.direct_launches == [(4, 1, 1)] * 3
    assert isinstance(replay.launch.__globals__["scale_kernel"], JITStandIn)  # recording left the module as it was


def test_a_tensor_passed_twice_when_recording_does_not_tie_the_later_calls_operands():
    replay, jit = make_replay()
    x, _, out = operands()
    replay(x, x, out)
    torch.testing.assert_close(out, x * 6)
    x, y, out = operands()
    replay(x, y, out)
    torch.testing.assert_close(out, (x + y) * 3)
    assert jit.compiled.direct_launches == [(4, 1, 1)]


def test_each_layout_is_recorded_once_and_replayed():
    """Triton specializes on strides and 16-byte alignment: a call with another layout is recorded as a launch of
    its own, replayed afterwards too."""
    replay, jit = make_replay()
    transposed = torch.randn(6, 4).t()  # same shape, other strides: another specialization
    misaligned = torch.randn(25)[1:].view(4, 6)  # 4-byte offset
    for x in (torch.randn(4, 6), transposed, misaligned) * 2:
        _, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert jit.launches == 3 and jit.compiled.direct_launches == [(4, 1, 1)] * 3
    assert len(replay.replays) == 3


def test_beyond_max_layouts_calls_go_through_triton():
    replay, jit = make_replay()
    for stride in range(1, LaunchReplay.MAX_LAYOUTS + 3):
        x = torch.randn(4, 6 * stride)[:, ::stride]  # column stride 1, 2, 3, ...: a new layout each time
        _, y, out = operands()
        replay(x, y, out)
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    layouts = LaunchReplay.MAX_LAYOUTS
    assert len(replay.replays) == layouts
    assert jit.launches == layouts + 2 * 2 and len(jit.compiled.direct_launches) == layouts


def test_without_a_compiled_kernel_the_launcher_keeps_running():
    replay, jit = make_replay()
    jit.compiled = None  # what Triton's interpreter returns
    for _ in range(3):
        x, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert list(replay.replays.values()) == [None] and jit.launches == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replaying a compiled kernel needs a GPU")
def test_decode_kernel_replays_correctly_on_the_gpu(monkeypatch):
    """D-like chain (RMSNorm prologue, split-K GEMM, residual): after the recording call Triton's launch path is not
    run again, every call computes its own inputs, a column-major weight is recorded once as a layout of its own and
    then replayed too, and a CUDA graph captures the replay."""
    ops = ["rmsnorm", "matmul", "add"]
    shapes = [(16, 512), (512,), (512, 256), (16, 256)]
    kernel = amk.build_fused_kernel(ops, shapes, torch.bfloat16, autotune=False)
    jit_runs = []
    run = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: jit_runs.append(self) or run(self, *a, **k))

    def check(inputs):
        output = kernel(*inputs)
        assert rel_l2(output, eager(ops, [t.double() for t in inputs])) < 1e-2
        return output

    for seed in range(4):
        check([t.cuda() for t in make_inputs(ops, shapes, torch.bfloat16, seed=seed)])
    launched_through_triton = len(jit_runs)
    assert launched_through_triton >= 1
    check([t.cuda() for t in make_inputs(ops, shapes, torch.bfloat16, seed=9)])
    assert len(jit_runs) == launched_through_triton

    for seed in (5, 8):
        inputs = [t.cuda() for t in make_inputs(ops, shapes, torch.bfloat16, seed=seed)]
        inputs[2] = inputs[2].t().contiguous().t()  # the weight column-major: another specialization
        check(inputs)
        assert len(jit_runs) > launched_through_triton
        if seed == 5:
            recorded_both = len(jit_runs)
    assert len(jit_runs) == recorded_both

    inputs = [t.cuda() for t in make_inputs(ops, shapes, torch.bfloat16, seed=6)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(*inputs)
    fresh = [t.cuda() for t in make_inputs(ops, shapes, torch.bfloat16, seed=7)]
    for tensor, new in zip(inputs, fresh):
        tensor.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_l2(captured, eager(ops, [t.double() for t in fresh])) < 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replaying a compiled kernel needs a GPU")
def test_a_kernel_of_two_launches_replays_both():
    """tile_stats: output tiles, then a launch merging the statistics; after the recording call both launches are
    replayed, each call on its own inputs."""
    ops = ["matmul", "add_bias", "gelu", "layernorm"]
    shapes = [(256, 512), (512, 384), (384,), (384,), (384,)]
    kernel = amk.build_fused_kernel(ops, shapes, torch.float16, autotune=False)
    assert 'strategy = "tile_stats"' in kernel.ir["tiled_loop"]
    for seed in range(4):
        inputs = [t.cuda() for t in make_inputs(ops, shapes, torch.float16, seed=seed)]
        assert rel_l2(kernel(*inputs), eager(ops, [t.double() for t in inputs])) < 2e-3
