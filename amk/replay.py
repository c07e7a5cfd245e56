"""Launching a specialized kernel again without Triton's per-call launch path.

``kernel[grid](...)`` (``JITFunction.run``) binds every argument, computes the specialization key (the type, the
16-byte alignment of each pointer, whether each integer is 1 or a multiple of 16) and looks the compiled kernel up,
on every call: 30-45 µs of host time per launch on the H200's host, more than a whole decode step runs on the GPU.
Once a call's shapes are fixed (amk's hot path), everything but the tensors' addresses is known. :class:`LaunchReplay`
runs the emitted launcher once through Triton, records what it launched (the compiled kernel, its grid and its
argument list) and afterwards launches that compiled kernel directly with the new tensors put in. What else Triton
specializes on, the strides and the 16-byte alignment of the tensors, keys the recordings: each such layout is
recorded once (when nothing can be recorded, the emitted launcher runs as before).

A replayed launch goes, where it can, through the C++ launcher PyTorch's Inductor launches its own Triton kernels with
(``torch._C._StaticCudaLauncher``: the loaded CUDA function, its grid and its arguments handed to ``cuLaunchKernel``),
which skips the Python of Triton's compiled-kernel launcher (its stream lookup, launch metadata and allocator
lookup); a kernel's global scratch (device-side tensor descriptors) is allocated for each launch as Triton allocates
it. Kernels that need more than that launcher offers (tensor-descriptor arguments, fp16 scalars, profiling scratch,
instrumentation, clusters) are launched through Triton's compiled kernel, or, with global scratch, are not replayed
(the emitted launcher installs the allocator Triton's launcher then needs). Gluon's kernels, like Triton's TMA
kernels, make their TMA descriptors on the device, so they take pointers and are replayed the same way. While a
Triton launch hook is installed (a profiler's), replayed calls go through the emitted launcher, so that Triton calls
the hook.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import types
from collections.abc import Callable, Sequence

import torch

from amk.workspace import output_allocator

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
    so that the module, which other calls may be running, is left as it is.

    A ``launch`` with a ``triton_cache_scope`` wraps the emitted launcher (``__wrapped__``) until the kernel's first
    launch, which compiles into a cache entry's folder (``amk.cache.Store.attach_triton_cache``): the recording runs
    the emitted launcher within that scope. (The globals of the wrapper's own module name no jit kernel: a replay
    built on the wrapper recorded nothing, and every call went through Triton, 30-45 µs of host time a launch.)"""
    from triton.runtime.jit import JITFunction

    scope = getattr(launch, "triton_cache_scope", None)
    if scope is not None:
        launch = launch.__wrapped__
    else:
        scope = contextlib.nullcontext
    launches: list[tuple] = []
    recorders = {name: _Recorder(value, launches) for name, value in launch.__globals__.items()
                 if isinstance(value, JITFunction)}
    recording = types.FunctionType(launch.__code__, {**launch.__globals__, **recorders}, launch.__name__,
                                   launch.__defaults__, launch.__closure__)
    with scope():
        recording(*views)
    return launches


class LaunchReplay:
    """An emitted launcher that launches the compiled kernels it recorded directly, one recording per layout.

    The caller (amk's hot path) guarantees that every call has the shapes and dtypes of the first; what Triton
    specializes on beyond them, the strides and 16-byte alignment of the caller's tensors, keys the recordings: the
    first call with a layout runs the emitted launcher through Triton and records it, later calls with that layout
    replay it. ``checked`` is how many leading tensors come from the caller; the tensors after them (fresh outputs,
    workspace) are allocated by amk with the same layout on every call. Beyond ``MAX_LAYOUTS`` layouts, calls go
    through Triton.

    ``viewers`` (one per leading tensor, None where the launcher takes the tensor as it is) give the views the
    emitted launcher takes of the caller's tensors (``nn.Linear``'s weight transposed, rows flattened). A view costs
    the host about 1.5 µs (``benchmarks/probes/launch_paths.py``), and a compiled kernel reads only its tensors'
    addresses: where each view of a recorded layout is the caller's memory at the same address (not a copy that a
    reshape had to make), replays launch the caller's tensors themselves, and only a recording, or a call Triton
    launches, makes the views. The views' strides, which the recording keeps as the kernel's integer arguments,
    follow from the tensors' own, which key the recordings.
    """

    MAX_LAYOUTS = 4

    def __init__(self, launch: Callable, checked: int, viewers: Sequence[Callable | None] | None = None):
        self.launch = launch
        self.checked = checked
        self.viewers = viewers
        self.replays: dict[tuple, Callable | None] = {}  # None: recorded, but not replayable
        self.lock = threading.Lock()

    def __call__(self, *tensors: torch.Tensor) -> None:
        # A list made into a tuple: 30% faster than a generator's tuple (1.8 against 2.6 us for five tensors on a
        # 2-core CPU), on every launch.
        layout = tuple([(tensor.stride(), tensor.data_ptr() % _ALIGNMENT == 0) for tensor in tensors[:self.checked]])
        replay = self.replays.get(layout)
        if replay is not None:
            replay(tensors)
            return
        views = self.views(tensors)
        with self.lock:
            if layout not in self.replays and len(self.replays) < self.MAX_LAYOUTS:
                self.replays[layout] = self._record(views, tensors)
                return
        self.launch(*views)  # not replayable: through Triton, other threads' calls not held up meanwhile

    def views(self, tensors: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """What the emitted launcher takes for the caller's ``tensors``."""
        return tensors if self.viewers is None else viewed(tensors, self.viewers)

    def _record(self, views: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> Callable | None:
        """Launch ``views`` (of the caller's ``tensors``) through Triton, recording; the replay of what was launched, or
        None."""
        from triton import knobs

        launches = record(self.launch, views)
        if not launches or any(compiled is None for compiled, _, _ in launches):
            return None  # Triton's interpreter returns no compiled kernel
        count = len(views)
        if any(len(arguments) < count or any(a is not v for a, v in zip(arguments, views))
               for _, _, arguments in launches):
            # The emitted launchers pass their tensors first and in order (a copy the launcher made of an input that
            # TMA cannot read as it is stands in for it: such a call is left to Triton).
            return None
        # The first ``count`` arguments are refilled on every call (and the first call's tensors not kept alive).
        runs = [direct_launch(compiled, grid + (1,) * (3 - len(grid)), arguments, count)
                for compiled, grid, arguments in launches]
        if any(run is None for run in runs):
            return None
        log.debug("launching %s directly from now on", ", ".join(c.name for c, _, _ in launches))
        launch, runtime, view = self.launch, knobs.runtime, self.views
        in_place = all(v.data_ptr() == tensor.data_ptr() for v, tensor in zip(views, tensors))

        def replay(tensors: Sequence[torch.Tensor]) -> None:
            if _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
                launch(*view(tensors))  # a profiler's hooks, installed since: Triton's launch calls them
                return
            views = tensors if in_place else view(tensors)
            for run in runs:
                run(views)

        return replay


def viewed(tensors: Sequence[torch.Tensor], viewers: Sequence[Callable | None]) -> list[torch.Tensor]:
    """``tensors`` with each of the leading ones that has a viewer in ``viewers`` replaced by its view (the tensors
    past the viewers, such as workspace, as they are)."""
    return [tensor if view is None else view(tensor) for tensor, view in zip(tensors, viewers)] + \
        list(tensors[len(viewers):])


# Triton's parameter types as the C++ launcher's argument codes: pointers are "O". (Inductor's table also maps fp16
# and bf16 scalars to "f", a 4-byte float where the kernel reads 2 bytes: such kernels keep Triton's launcher.)
_ARGUMENT_CODES = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B", "u16": "H",
                   "u32": "I", "u64": "K", "fp32": "f", "f32": "f", "fp64": "d"}
# Metadata a kernel launched by the C++ launcher must not need: profiling scratch, cooperative or
# programmatic-dependent launches.
_NEEDS_TRITONS_LAUNCHER = ("profile_scratch_size", "launch_cooperative_grid", "launch_pdl")


def direct_launch(compiled, grid: tuple[int, int, int], arguments: list,
                  count: int) -> Callable[[Sequence], None] | None:
    """A launch of ``compiled`` on ``grid`` with new values of its first ``count`` arguments (``arguments``: all of
    them as bound when recorded, constexprs included): through PyTorch's C++ launcher where the kernel allows it
    (:func:`_direct_codes`), else through the compiled kernel's own launcher; None for a kernel that needs global
    scratch memory (device-side tensor descriptors) and cannot take the C++ launcher: its own launcher would need the
    allocator that the emitted launcher installs on every call."""
    runner = compiled[grid]  # also loads the kernel's CUDA function, which the C++ launcher launches
    rest = arguments[count:]
    metadata = compiled.metadata
    scratch_size = getattr(metadata, "global_scratch_size", 0)
    codes = _direct_codes(compiled)
    launcher = getattr(torch._C, "_StaticCudaLauncher", None)
    if codes is None or len(codes) != len(arguments) or launcher is None or not compiled.function:
        return None if scratch_size else lambda views: runner(*views, *rest)
    kept = tuple(value for value, code in zip(arguments, codes) if code)[count:]
    # Triton appends a global (3.3 on) and a profile (3.5 on) scratch pointer to every kernel's parameters: null
    # where unused; global scratch, where used, is allocated for each launch as Triton's launcher allocates it.
    has_global, has_profile = (hasattr(metadata, name) for name in ("global_scratch_size", "profile_scratch_size"))
    types = "".join(codes) + "O" * (has_global + has_profile)
    profile = (None,) if has_profile else ()
    launch, warps, shared = launcher._launch_kernel, metadata.num_warps, metadata.shared
    current_stream, current_device = torch._C._cuda_getCurrentRawStream, torch._C._cuda_getDevice
    (x, y, z) = grid
    # ``compiled.function`` is read per launch, not kept as a bare handle: the kernel object, which unloads its module
    # when collected, stays alive with the replay.
    if not scratch_size:
        tail = (*kept, *((None,) if has_global else ()), *profile)

        def run(views: Sequence) -> None:
            launch(compiled.function, x, y, z, warps, shared, types, (*views, *tail), current_stream(current_device()))

        return run
    scratch_shape = (x * y * z * getattr(metadata, "num_ctas", 1) * scratch_size,)
    allocate = output_allocator(torch.device("cuda", current_device()))

    def run_with_scratch(views: Sequence) -> None:
        scratch = allocate(scratch_shape, (1,), torch.uint8)
        launch(compiled.function, x, y, z, warps, shared, types, (*views, *kept, scratch, *profile),
               current_stream(current_device()))

    return run_with_scratch


def _direct_codes(compiled) -> list[str] | None:
    """Per parameter of ``compiled``, in order, its argument code for the C++ launcher ('' for a constexpr, which is
    not passed); None where the kernel needs Triton's launcher: a parameter of another type (a tensor descriptor, an
    fp16 scalar), profiling scratch, instrumentation (GSan's extra parameters), more than one CTA per program, or a
    cooperative or PDL launch. (Launch hooks are the replay's to check, on every call.)"""
    metadata = compiled.metadata
    if (any(getattr(metadata, name, 0) for name in _NEEDS_TRITONS_LAUNCHER) or getattr(metadata, "num_ctas", 1) != 1
            or getattr(metadata, "tensordesc_meta", None) or getattr(metadata, "instrumentation_mode", "")):
        return None
    source = getattr(compiled, "src", None)
    if source is None or not hasattr(source, "fn"):
        return None
    constants = {key[0] if isinstance(key, tuple) else key for key in getattr(source, "constants", {})}
    codes: list[str] = []
    for index, name in enumerate(source.fn.arg_names):
        kind = source.signature.get(name)
        if kind == "constexpr" or index in constants:
            codes.append("")
        elif isinstance(kind, str) and kind.startswith("*"):
            codes.append("O")
        elif kind in _ARGUMENT_CODES:
            codes.append(_ARGUMENT_CODES[kind])
        else:
            return None
    return codes


def _hooked(hook) -> bool:
    """Whether a Triton launch hook is installed: a function (Triton 3.4), or a chain with calls in it (3.5 on)."""
    return hook is not None and bool(getattr(hook, "calls", True))
