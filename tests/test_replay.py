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
from amk.replay import LaunchReplay, direct_launch

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


@pytest.mark.parametrize("hooked_when_recorded", [False, True])
def test_while_a_launch_hook_is_installed_calls_go_through_the_emitted_launcher(monkeypatch, hooked_when_recorded):
    """A profiler's hook, installed before or after a layout was recorded: Triton's launch, which calls it, runs the
    calls made while it is; once it is removed, the replay runs them (a recording made under a hook is not pinned to
    Triton's launch)."""
    from triton import knobs

    if not hasattr(knobs, "HookChain"):
        pytest.skip("this Triton has no launch hook chain")
    def profiler_hook(*args) -> None:
        pass

    replay, jit = make_replay()
    hook = knobs.HookChain()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
    if hooked_when_recorded:
        hook.add(profiler_hook)
    x, y, out = operands()
    replay(x, y, out)
    hook.add(profiler_hook)
    replay(x, y, out)
    assert jit.launches == 2 and jit.compiled.direct_launches == []
    hook.calls.clear()
    replay(x, y, out)
    torch.testing.assert_close(out, (x + y) * 3)
    assert jit.launches == 2 and jit.compiled.direct_launches == [(4, 1, 1)]


def test_the_first_call_records_and_later_calls_launch_directly_with_their_own_tensors():
    replay, jit = make_replay()
    for _ in range(4):
        x, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert jit.launches == 1
    assert jit.compiled.direct_launches == [(4, 1, 1)] * 3
    assert isinstance(replay.launch.__globals__["scale_kernel"], JITStandIn)  # recording left the module as it was


def test_a_launcher_wrapped_for_its_first_launch_into_a_cache_entry_is_recorded_and_replayed(tmp_path, monkeypatch):
    """A built program's kernels are wrapped until their first launch, which compiles into the cache entry's folder
    (``Store.attach_triton_cache``); a hot path built before that launch held the wrapper, whose module names no jit
    kernel: nothing was recorded, and every call went through Triton (on the H100, BERT's attention row: 125 µs of
    host time a call). The recording now runs the emitted launcher within the wrapper's folder."""
    from amk import cache
    from amk.triton_cache import current_folder

    monkeypatch.setattr(cache, "interpreting", lambda: False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    folders = []

    class FolderRecordingJIT(JITStandIn):
        def __getitem__(self, grid):
            folders.append(current_folder())
            return super().__getitem__(grid)

    namespace = {"scale_kernel": FolderRecordingJIT()}
    exec(LAUNCHER, namespace)
    kernel, jit = SimpleNamespace(launch=namespace["launch"]), namespace["scale_kernel"]
    store = cache.Store(tmp_path)
    store.attach_triton_cache("an-entry", kernel)
    assert kernel.launch is not namespace["launch"]
    replay = LaunchReplay(kernel.launch, checked=2)
    for _ in range(4):
        x, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert jit.launches == 1 and jit.compiled.direct_launches == [(4, 1, 1)] * 3
    assert folders == [store.entry_dir("an-entry") / "triton"]  # the recording launch compiled into the entry


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


COPYING_LAUNCHER = '''
def launch(x, y, out):
    scale_kernel[(x.shape[0],)](x.clone(), y, out, x.stride(0), x.stride(1), SCALE=3, num_warps=1)
'''


def test_a_launch_on_a_copy_the_launcher_made_is_not_replayed():
    """A launcher that hands the kernel a copy of an input (TMA cannot read the input as it is) launches every call
    through Triton: a replay would keep the first call's copy."""
    namespace = {"scale_kernel": JITStandIn()}
    exec(COPYING_LAUNCHER, namespace)
    replay, jit = LaunchReplay(namespace["launch"], checked=2), namespace["scale_kernel"]
    for _ in range(3):
        x, y, out = operands()
        replay(x, y, out)
        torch.testing.assert_close(out, (x + y) * 3)
    assert list(replay.replays.values()) == [None] and jit.launches == 3 and jit.compiled.direct_launches == []


class AddressReader(CompiledStandIn):
    """A compiled kernel as the GPU runs one: it reads each tensor at its address with the layout its launch was
    recorded with (shapes and strides fixed in the binary and in the recorded integer arguments), whatever tensor
    object the launch hands it."""

    def __init__(self, layouts: list):
        super().__init__()
        self.layouts = layouts  # each tensor argument's (shape, strides) when recorded

    def __getitem__(self, grid):
        def runner(*arguments):
            self.direct_launches.append(grid)
            scale(*[torch.as_strided(a, *self.layouts[i], a.storage_offset()) if isinstance(a, torch.Tensor) else a
                    for i, a in enumerate(arguments)])

        return runner


class ViewCounter:
    """A viewer (the view a kernel takes of a call's tensor) that counts the views it makes."""

    def __init__(self, view):
        self.view, self.made = view, 0

    def __call__(self, tensor):
        self.made += 1
        return self.view(tensor)


class AddressReadingJIT(JITStandIn):
    """The ``scale`` jit kernel whose compiled kernel reads addresses (:class:`AddressReader`) with the layout of the
    launch that compiled it."""

    def __init__(self):
        super().__init__()
        self.compiled = AddressReader([])

    def __getitem__(self, grid):
        run = super().__getitem__(grid)

        def launch(*args, **kwargs):
            self.compiled.layouts[:] = [(a.shape, a.stride()) if isinstance(a, torch.Tensor) else None for a in args]
            return run(*args, **kwargs)

        return launch


def viewed_replay():
    """A replay of the ``scale`` launcher on ``[4, 6]`` views: ``x`` given as ``[2, 2, 6]`` (rows flattened), ``y`` as
    its ``[6, 4]`` transpose, ``out`` as ``[2, 2, 6]``."""
    jit = AddressReadingJIT()
    namespace = {"scale_kernel": jit}
    exec(LAUNCHER, namespace)
    viewers = [ViewCounter(lambda t: t.reshape(4, 6)), ViewCounter(torch.Tensor.t), ViewCounter(lambda t: t.reshape(4, 6))]
    return LaunchReplay(namespace["launch"], checked=2, viewers=viewers), jit, viewers


def test_replays_launch_the_callers_tensors_where_the_views_share_their_memory():
    """A view costs the host more than a microsecond and a kernel reads addresses: once recorded, a layout whose views
    are the caller's memory at the same address is replayed on the caller's tensors, without views."""
    replay, jit, viewers = viewed_replay()
    for _ in range(3):
        x, y, out = torch.randn(2, 2, 6), torch.randn(6, 4), torch.empty(2, 2, 6)
        replay(x, y, out)
        torch.testing.assert_close(out.reshape(4, 6), (x.reshape(4, 6) + y.t()) * 3)
    assert jit.launches == 1 and jit.compiled.direct_launches == [(4, 1, 1)] * 2
    assert [viewer.made for viewer in viewers] == [1, 1, 1]  # the recording's views only


def test_a_view_that_copies_is_made_for_every_replay():
    """A reshape that cannot view its tensor copies it (a new address): the layout that needs it is replayed on the
    views, made again on every call."""
    replay, jit, viewers = viewed_replay()
    for _ in range(3):
        x = torch.randn(2, 6, 2).transpose(1, 2)  # [2, 2, 6] whose rows cannot be flattened without a copy
        y, out = torch.randn(6, 4), torch.empty(2, 2, 6)
        replay(x, y, out)
        torch.testing.assert_close(out.reshape(4, 6), (x.reshape(4, 6) + y.t()) * 3)
    assert jit.launches == 1 and len(jit.compiled.direct_launches) == 2
    assert [viewer.made for viewer in viewers] == [3, 3, 3]


class CppLauncherStandIn:
    """PyTorch's C++ launcher of Inductor's kernels (``torch._C._StaticCudaLauncher``), recording its launches."""

    launches: list = []

    @staticmethod
    def _launch_kernel(function, x, y, z, warps, shared, types, arguments, stream):
        CppLauncherStandIn.launches.append((function, (x, y, z), warps, shared, types, arguments, stream))


def compiled_kernel(signature: dict[str, str], **metadata):
    """A compiled kernel as Triton 3.6 describes one: its source's parameters and types, its loaded function and its
    metadata (no scratch, one CTA, unless ``metadata`` says otherwise)."""
    fields = {"num_warps": 4, "shared": 1024, "global_scratch_size": 0, "profile_scratch_size": 0,
              "launch_cooperative_grid": False, "launch_pdl": False, "num_ctas": 1, **metadata}
    kernel = CompiledStandIn()
    kernel.metadata = SimpleNamespace(**fields)
    kernel.function = 0x7F00
    kernel.src = SimpleNamespace(fn=SimpleNamespace(arg_names=list(signature)), signature=signature, constants={})
    return kernel


@pytest.fixture
def cpp_launcher(monkeypatch):
    CppLauncherStandIn.launches = []
    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", CppLauncherStandIn, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 77, raising=False)
    monkeypatch.setattr(torch._C._dynamo.guards, "_empty_strided_cuda",
                        lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype), raising=False)
    return CppLauncherStandIn.launches


def test_a_replayed_launch_goes_through_pytorchs_launcher_without_the_constexprs(cpp_launcher):
    """The C++ launcher gets the loaded function, the grid, the non-constexpr arguments with their type codes, one
    null pointer per scratch parameter Triton appends, and the current stream."""
    kernel = compiled_kernel({"x": "*fp32", "y": "*fp32", "out": "*fp32", "stride_0": "i32", "stride_1": "constexpr",
                              "SCALE": "constexpr"})
    launch = direct_launch(kernel, (4, 1, 1), ["x0", "y0", "out0", 6, 1, 3], count=3)
    x, y, out = operands()
    launch((x, y, out))
    assert cpp_launcher == [(0x7F00, (4, 1, 1), 4, 1024, "OOOiOO", (x, y, out, 6, None, None), 77)]
    assert kernel.direct_launches == []


def test_a_kernels_global_scratch_is_allocated_for_each_launch(cpp_launcher):
    """Device-side tensor descriptors live in global scratch: grid x CTAs x the kernel's bytes, a new buffer per launch
    (a launch in flight keeps its own), passed where Triton's launcher passes it, before the profile scratch."""
    kernel = compiled_kernel({"x": "*fp32", "y": "*fp32", "out": "*fp32", "SCALE": "constexpr"},
                             global_scratch_size=128)
    launch = direct_launch(kernel, (4, 2, 1), ["x0", "y0", "out0", 3], count=3)
    x, y, out = operands()
    launch((x, y, out))
    launch((x, y, out))
    (first, second) = [arguments for *_, types, arguments, _ in cpp_launcher]
    assert cpp_launcher[0][4] == "OOOOO" and first[:3] == (x, y, out) and first[4] is None
    assert first[3].dtype == torch.uint8 and first[3].shape == (4 * 2 * 128,) and second[3] is not first[3]


@pytest.mark.parametrize("reason", ["tensor descriptor", "fp16 scalar", "profile scratch", "instrumented", "cluster"])
def test_kernels_needing_more_than_pytorchs_launcher_replay_through_triton(cpp_launcher, reason):
    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "stride_0": "i32", "stride_1": "i32",
                 "SCALE": "constexpr"}
    metadata = {}
    if reason == "tensor descriptor":
        signature["x"] = "tensordesc<fp32[16, 16]>"
    elif reason == "fp16 scalar":  # the C++ launcher would pass 4 bytes of float where the kernel reads 2
        signature["stride_1"] = "fp16"
    elif reason == "profile scratch":
        metadata["profile_scratch_size"] = 64
    elif reason == "instrumented":  # GSan appends parameters of its own
        metadata["instrumentation_mode"] = "gsan"
    else:
        metadata["num_ctas"] = 2
    kernel = compiled_kernel(signature, **metadata)
    launch = direct_launch(kernel, (4, 1, 1), ["x0", "y0", "out0", 6, 1, 3], count=3)
    x, y, out = operands()
    launch((x, y, out))
    torch.testing.assert_close(out, (x + y) * 3)
    assert cpp_launcher == [] and kernel.direct_launches == [(4, 1, 1)]


def assert_a_captured_graph_replays_new_inputs(kernel, ops, shapes, dtype, tolerance: float) -> None:
    """A CUDA graph captures a call of ``kernel``; new inputs copied into the captured ones, a replay computes them."""
    inputs = [t.cuda() for t in make_inputs(ops, shapes, dtype, seed=6)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = kernel(*inputs)
    fresh = [t.cuda() for t in make_inputs(ops, shapes, dtype, seed=7)]
    for tensor, new in zip(inputs, fresh):
        tensor.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_l2(captured, eager(ops, [t.double() for t in fresh])) < tolerance


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

    assert_a_captured_graph_replays_new_inputs(kernel, ops, shapes, torch.bfloat16, 1e-2)


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


# A TMA kernel (device-side tensor descriptors in global scratch) on nn.Linear's weight, read transposed.
TMA_GRID = {"BLOCK_SIZE_M": [64], "BLOCK_SIZE_N": [64], "BLOCK_SIZE_K": [64], "GROUP_SIZE_M": [8], "num_warps": [4],
            "num_stages": [3], "PERSISTENT": [1], "TMA": [1]}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replaying a compiled kernel needs a GPU")
@pytest.mark.parametrize(("ops", "shapes", "grid"), [
    (["matmul", "add_bias", "relu"], [(64, 256), (256, 128), (128,)], None),
    ([("matmul", {"transpose_b": True}), "add_bias", "relu"], [(200, 256), (192, 256), (192,)], TMA_GRID),
], ids=["plain", "tma-scratch-transposed-weight"])
def test_on_the_gpu_replays_go_through_pytorchs_launcher(monkeypatch, ops, shapes, grid):
    """Where this torch has Inductor's C++ launcher, a replayed launch goes through it, with correct results; a CUDA
    graph captures it. Also a TMA kernel, whose global scratch each launch allocates, on a transposed weight."""
    real = getattr(torch._C, "_StaticCudaLauncher", None)
    if real is None:
        pytest.skip("this torch has no C++ launcher for Triton kernels")
    if grid is not None and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("device-side tensor descriptors need compute capability 9.0")
    launches = []

    class Counting:
        @staticmethod
        def _launch_kernel(*arguments):
            launches.append(arguments[0])
            return real._launch_kernel(*arguments)

    monkeypatch.setattr(torch._C, "_StaticCudaLauncher", Counting)
    kernel = amk.build_fused_kernel(ops, shapes, torch.float16, autotune=grid is not None, parameter_grid=grid)
    if grid is not None:
        assert kernel.config["TMA"] == 1 and "_tma_readable(w.t())" in kernel.source, kernel.tuning_log
    for seed in range(4):
        inputs = [t.cuda() for t in make_inputs(ops, shapes, torch.float16, seed=seed)]
        assert rel_l2(kernel(*inputs), eager(ops, [t.double() for t in inputs])) < 2e-3
    replayed = len(launches)
    assert replayed >= 1  # the first calls set up the hot path and record its launch through Triton
    inputs = [t.cuda() for t in make_inputs(ops, shapes, torch.float16, seed=4)]
    assert rel_l2(kernel(*inputs), eager(ops, [t.double() for t in inputs])) < 2e-3
    assert len(launches) == replayed + 1  # every later call
    assert_a_captured_graph_replays_new_inputs(kernel, ops, shapes, torch.float16, 2e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replaying a compiled kernel needs a GPU")
def test_amk_compiles_hot_path_launches_nothing_through_triton_after_its_first_call(monkeypatch):
    """A module built fresh (its kernels wrapped until their first launch, which compiles into the cache entry) and
    called: from the second call on, no launch goes through Triton's JIT path."""
    from amk import cache

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)  # which leaves Triton's cache, and the kernels, unwrapped
    wrapped = []
    attach = cache.Store.attach_triton_cache

    def attach_and_note(store, key, kernel):
        launch = kernel.launch
        attach(store, key, kernel)
        wrapped.append(kernel.launch is not launch)

    monkeypatch.setattr(cache.Store, "attach_triton_cache", attach_and_note)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512)).cuda().half()
    compiled = amk.compile(model, autotune=False)
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    compiled(x)
    assert any(wrapped), wrapped
    jit_runs = []
    run = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **k: jit_runs.append(self) or run(self, *a, **k))
    for _ in range(3):
        out = compiled(x)
    torch.testing.assert_close(out, model(x), atol=2e-2, rtol=2e-2)
    assert jit_runs == []
