"""``amk.build_fused_kernel``: an op list in, one verified fused kernel out, as a ``torch.nn.Module``."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import torch

from amk import cache
from amk.build_phases import phase, recording
from amk.errors import DeviceError, DTypeError, InvalidArgumentError, ShapeError
from amk.lowering.configs import KernelConfig
from amk.oplist import build_module, normalize_ops, normalize_shapes
from amk.runtime import CompiledProgram, default_device, interpreting, sources_under
from amk.tuner import TunerConfig, autotune_chooser, nearest_in_grid, validate_grid

# amk.pipeline (the xDSL passes and the emitter) and the IR are imported on a cache miss only: a warm start from
# the persistent cache needs neither xDSL nor sympy.

log = logging.getLogger("amk")

BACKENDS = ("triton",)


class FusedKernel(torch.nn.Module):
    """A compiled op chain. Call it with the operands in the order of ``input_shapes``.

    ``.source`` is the Triton code, ``.ir`` the IR text at every level (``tensor_op``, ``fused``, ``tiled_loop``,
    ``memory_staged``, ``triton``), ``.config`` the tile parameters in use, ``.torch_ops`` the ops left to PyTorch
    and ``.program_times`` the whole programs timed against each other while building (``TunerConfig.vendor_gemm``;
    all four for the shapes it was built for). ``.cache_hit`` tells whether the kernel came from the persistent cache
    (no tuning, no pass, no emission ran) and ``.cache_key`` is its key there. ``.build_phases`` says where the build's
    seconds went: ``emit`` (passes and Triton source), ``compile`` (Triton), ``time`` (timing candidates and
    programs), ``verify`` (checking outputs), ``total`` (the whole call, cache look-ups and loading included).

    Autograd: when grad mode is on and an input requires grad, the output carries a grad history; its backward
    recomputes the op chain in PyTorch (in float32 for 16-bit and 8-bit kernels, otherwise in the kernel's dtype) from
    the saved inputs and differentiates it, as ``amk.compile`` does. The forward still runs the fused kernel. Calls
    with no input requiring grad, or under ``torch.no_grad()`` / ``torch.inference_mode()``, record nothing.
    """

    cache_hit: bool = False
    cache_key: str | None = None

    def __init__(self, ops, shapes: list[tuple[int, ...]], dtype: torch.dtype, compiled: CompiledProgram,
                 builder, grid=None):
        super().__init__()
        self._grid = grid
        self.ops = ops
        self.shapes = shapes
        self.dtype = dtype
        self.device = default_device()
        self._compiled = {tuple(shapes): compiled}
        self._builder = builder
        self._hot: _HotPath | None = None
        self._hot_paths: dict[tuple, _HotPath | None] = {}  # per (shapes, device), made on the first call with them
        self._references: dict[tuple, object] = {}  # per shapes: the tensor_op function a backward differentiates

    @property
    def compiled(self) -> CompiledProgram:
        return self._compiled[tuple(self.shapes)]

    @property
    def source(self) -> str:
        return self.compiled.source

    @property
    def source_paths(self) -> list[str]:
        """Files holding the emitted Triton code, one per kernel."""
        return [k.source_path for k in self.compiled.kernels.values()]

    @property
    def ir(self) -> dict[str, str]:
        return self.compiled.ir

    @property
    def config(self) -> dict[str, int] | dict[str, dict[str, int]]:
        configs = {name: k.config.user_view() for name, k in self.compiled.kernels.items()}
        return next(iter(configs.values())) if len(configs) == 1 else configs

    @property
    def num_kernels(self) -> int:
        return len(self.compiled.kernels)

    @property
    def torch_ops(self) -> list[str]:
        """The ops this program runs in PyTorch instead of in its kernels, in order: ``tensor_op.matmul`` when the
        tuner found the vendor library's GEMM with the rest fused faster (``TunerConfig.vendor_gemm``)."""
        return [step.operation().name for step in self.compiled.program.steps if step.kind == "op"]

    def with_dtype(self, dtype: torch.dtype) -> FusedKernel:
        """The same op chain built for another dtype."""
        return build_fused_kernel(self.ops, self.shapes, dtype, autotune=False, parameter_grid=self._grid)

    def _check(self, tensors: Sequence) -> tuple[tuple[int, ...], ...]:
        if len(tensors) != len(self.shapes):
            raise InvalidArgumentError(f"the kernel takes {len(self.shapes)} tensors, got {len(tensors)}")
        for index, tensor in enumerate(tensors):  # one cheap test per tensor on the hot path; the reasons below
            if not (isinstance(tensor, torch.Tensor) and tensor.dtype == self.dtype
                    and tensor.device.type == self.device.type and tensor.numel()):
                self._reject(index, tensor)
        call_shapes = tuple(tuple(t.shape) for t in tensors)
        if call_shapes in self._compiled:  # built for (or re-specialized to) these shapes: checked then
            return call_shapes
        rows = len(self.shapes[0]) - 1
        for index, (have, built) in enumerate(zip(call_shapes, self.shapes)):
            if have == built:
                continue
            leading = len(built) == len(self.shapes[0]) and len(have) == len(built) and have[rows:] == built[rows:]
            if not leading:
                raise ShapeError(f"argument {index} has shape {have}; the kernel was built for {built} (only the "
                                 f"leading dims {self.shapes[0][:rows]} of the first input may change)")
        return call_shapes

    def _reject(self, index: int, tensor) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(f"argument {index} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != self.dtype:
            raise DTypeError(f"argument {index} has dtype {tensor.dtype}; the kernel was built for {self.dtype}")
        if tensor.device.type != self.device.type:
            raise DeviceError(f"argument {index} is on {tensor.device}; the kernel runs on {self.device.type}"
                              + (" (no CUDA here: pass CPU tensors)" if self.device.type == "cpu" else ""))
        raise ShapeError(f"argument {index} is empty (shape {tuple(tensor.shape)}); amk kernels need data")

    def forward(self, *tensors: torch.Tensor):
        hot = self._hot
        if hot is not None and hot.accepts(tensors, self.dtype):  # (it refuses inputs that need a grad history)
            outputs = hot.run(tensors)
        elif torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            self._check(tensors)  # bad arguments fail here, not inside autograd
            outputs = _RecomputedBackward.apply(self, *tensors)
        else:
            outputs = self._walk(tensors)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The kernels' outputs, without autograd: the hot path when it applies, else the program walk."""
        hot = self._hot
        if hot is not None and hot.accepts(tensors, self.dtype):
            return hot.run(tensors)
        return self._walk(tensors)

    def _walk(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The checked call: validates the arguments, re-specializes for new leading dims, walks the program and
        makes the hot path for these shapes."""
        shapes = self._check(tensors)
        if shapes not in self._compiled:
            log.info("re-specializing for shapes %s", shapes)
            self._compiled[shapes] = self._builder(list(shapes))
        program = self._compiled[shapes].program
        outputs = program(*tensors)
        key = (shapes, tensors[0].device)
        if key not in self._hot_paths:
            run = program.fast_path(program.bind(tensors), key[1])
            self._hot_paths[key] = _HotPath(shapes, key[1], run) if run is not None else None
        # The next call with these shapes, dtype and device skips the checks above and the program walk.
        self._hot = self._hot_paths[key]
        return outputs

    def _reference(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The op chain evaluated op by op in PyTorch (differentiable), in the dtype of ``tensors``."""
        from amk.verification import evaluate_function, evaluate_reference, reference_function

        shapes = tuple(tuple(t.shape) for t in tensors)
        function = self._references.get(shapes)
        if function is None:  # built once per shapes: building the IR takes milliseconds
            function = self._references[shapes] = reference_function(self.ops, list(shapes))
        return evaluate_function(function, tensors, evaluate=evaluate_reference)


class _RecomputedBackward(torch.autograd.Function):
    """Forward: the fused kernels. Backward: the op chain recomputed in PyTorch from the saved inputs and
    differentiated (in float32 at least, so that a 16-bit kernel's gradients are not rounded at every op)."""

    @staticmethod
    def forward(ctx, kernel: FusedKernel, *tensors: torch.Tensor):
        ctx.kernel = kernel
        ctx.save_for_backward(*tensors)
        outputs = kernel._run(tensors)  # grad mode is off in here: the hot path applies
        inputs = {id(t) for t in tensors}
        return tuple(o.clone() if id(o) in inputs else o for o in outputs)  # autograd needs outputs it owns

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        kernel: FusedKernel = ctx.kernel
        saved = ctx.saved_tensors
        wanted = [index for index, needs in enumerate(ctx.needs_input_grad[1:]) if needs]
        with torch.enable_grad():
            leaves = []
            for index, tensor in enumerate(saved):
                leaf = tensor.detach().to(tensor.dtype if tensor.dtype.itemsize >= 4 else torch.float32)
                leaves.append(leaf.requires_grad_() if index in wanted else leaf)
            outputs = kernel._reference(leaves)
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        result: list[torch.Tensor | None] = [None] * len(saved)
        if pairs and wanted:
            computed = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wanted],
                                           [g.to(o.dtype) for o, g in pairs], allow_unused=True)
            for index, grad in zip(wanted, computed):
                result[index] = None if grad is None else grad.to(saved[index].dtype)
        return (None, *result)


class _HotPath:
    """The specialization called last, for calls whose tensors have exactly its shapes, dtype and device (already
    validated once): a few attribute tests per tensor, then the output allocation and the launch."""

    def __init__(self, shapes: tuple[tuple[int, ...], ...], device: torch.device, run):
        self.sizes = [torch.Size(shape) for shape in shapes]
        self.device = device
        self.run = run

    def accepts(self, tensors: Sequence, dtype: torch.dtype) -> bool:
        if len(tensors) != len(self.sizes):
            return False
        device = self.device
        for tensor, size in zip(tensors, self.sizes):
            # requires_grad is tested first and is_grad_enabled only when it is set: a call without grads pays
            # one attribute read per tensor for autograd.
            if not (isinstance(tensor, torch.Tensor) and tensor.dtype is dtype and tensor.shape == size
                    and tensor.device == device and not (tensor.requires_grad and torch.is_grad_enabled())):
                return False
        return True


def _choose_config(parameter_grid, autotune: bool, tuner_config: TunerConfig | None, tuning_log: dict,
                   store: cache.Store | None = None, shapes=None, recorded: dict | None = None):
    """Time candidates on a GPU when asked to; otherwise the heuristic (restricted to the grid when one is given).

    With a cache ``store``, trials timed before on this device and shapes are reused, and new ones are recorded;
    ``recorded`` (configs kept or imported for this very build) wins over both.
    """
    from amk.pipeline import heuristic_config

    if autotune and torch.cuda.is_available() and not interpreting():
        def timings(kernel) -> str:
            return cache.timing_key(str(kernel), shapes)

        def record(kernel, config, trials):
            tuning_log[kernel.sym_name.data] = [t.as_dict() for t in trials]
            if store is not None:
                store.record_trials(timings(kernel), trials, {"kernel": kernel.sym_name.data,
                                                              "shapes": [list(s) for s in shapes],
                                                              "device": cache.device_descriptor()})

        known = (lambda kernel: store.known_trials(timings(kernel))) if store is not None else None
        chooser = autotune_chooser(tuner_config or TunerConfig(), parameter_grid, record, known)
    else:
        def chooser(kernel) -> KernelConfig:
            heuristic = heuristic_config(kernel)
            return heuristic if parameter_grid is None else nearest_in_grid(parameter_grid, heuristic)

    if not recorded:
        return chooser

    def choose(kernel) -> KernelConfig:
        name = kernel.sym_name.data
        if name in recorded["kernels"]:
            try:
                config = cache.kernel_config(recorded["kernels"][name])
            except ValueError as error:
                log.warning("ignoring the recorded configuration of %s: %s", name, error)
                return chooser(kernel)
            log.info("using the recorded configuration of %s", name)
            if name in recorded.get("tuning_log", {}):
                tuning_log[name] = recorded["tuning_log"][name]
            return config
        return chooser(kernel)

    return choose


def _row_reduction_follows_matmul(module) -> bool:
    """Whether a row reduction reads one of the module's matmuls, directly or through elementwise ops: the fused kernel
    then runs the reduction's epilogue after its MMAs, and the vendor GEMM with the rest fused may be faster."""
    from amk.lowering import rules

    frontier = [result for op in module.walk() if rules.is_matmul(op) for result in op.results]
    seen = set()
    while frontier:
        for use in frontier.pop().uses:
            kind = rules.kind_of(use.operation)
            if kind == "reduction":
                return True
            if kind == "elementwise" and use.operation not in seen:
                seen.add(use.operation)
                frontier.extend(use.operation.results)
    return False


def _faster_with_vendor_gemm(fused: CompiledProgram, build_vendor, op_list, shapes, dtype: torch.dtype,
                             tuner_config: TunerConfig, times: dict[str, float]) -> CompiledProgram | None:
    """The program with the vendor GEMM (``build_vendor()``) when it computes what the fused one does on the same
    random inputs (every output compared) and is faster (both times put in ``times``); else None. A program that
    cannot be built or run is reported and left out: it is an alternative, the fused program stands."""
    from amk.tuner import fastest_program
    from amk.verification import TOLERANCES, input_scales, random_inputs

    try:
        vendor = build_vendor()
        inputs = random_inputs(shapes, dtype, "cuda", scales=input_scales(op_list, shapes))
        expected, got = fused.program(*inputs), vendor.program(*inputs)
    except Exception as error:  # e.g. a dtype the vendor library has no GEMM for
        log.warning("the program with the vendor GEMM failed (%s: %s); keeping the fused program",
                    type(error).__name__, error)
        return None
    for want, have in zip(expected, got, strict=True):
        with phase("verify"):
            want, have = want.float(), have.float()
            difference = (torch.linalg.vector_norm(have - want) / torch.linalg.vector_norm(want).clamp_min(1e-30)).item()
        if not difference <= 2 * TOLERANCES.get(dtype, 1e-2):
            log.warning("the program with the vendor GEMM differs from the fused one (relative error %.2e); keeping "
                        "the fused program", difference)
            return None
    faster, measured = fastest_program({"fused": lambda: fused.program(*inputs),
                                        "vendor_gemm": lambda: vendor.program(*inputs)}, tuner_config)
    times.update(measured)
    log.info("whole programs: fused %.4f ms, vendor GEMM + fused rest %.4f ms", times["fused"], times["vendor_gemm"])
    return vendor if faster == "vendor_gemm" else None


def build_fused_kernel(ops: Sequence, input_shapes: Sequence, dtype: torch.dtype = torch.float16, backend: str = "triton",
                       autotune: bool = True, tuner_config: TunerConfig | None = None,
                       parameter_grid: Mapping[str, Sequence[int]] | None = None, verify: bool = False) -> FusedKernel:
    """Compile a chain of ops into one fused kernel.

    ``ops`` are names (or ``(name, params)`` pairs) from :data:`amk.oplist.OPS`; ``input_shapes`` the shapes of the
    operands in the order the ops take them (see :mod:`amk.oplist`). Returns a :class:`FusedKernel`. With
    ``verify=True`` the kernel is checked against PyTorch on random inputs before it is returned.
    """
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend {backend!r} is not supported; available: {', '.join(BACKENDS)}")
    if not isinstance(verify, bool):
        raise InvalidArgumentError(f"verify must be True or False, got {verify!r}")
    if not isinstance(autotune, bool):
        raise InvalidArgumentError(f"autotune must be True or False, got {autotune!r}")
    if tuner_config is not None and not isinstance(tuner_config, TunerConfig):
        raise InvalidArgumentError(f"tuner_config must be an amk.TunerConfig, got {type(tuner_config).__name__}")
    if not isinstance(dtype, torch.dtype):
        raise DTypeError(f"dtype must be a torch.dtype such as torch.float16, got {dtype!r}")
    grid = validate_grid(parameter_grid)
    op_list = normalize_ops(ops)
    shapes = normalize_shapes(input_shapes)

    tuning_log: dict[str, list[dict]] = {}
    program_times: dict[str, float] = {}  # the whole programs timed against each other in this build, if any
    store = cache.store_for(tuner_config.target_cache_dir if tuner_config is not None else None)
    settings = cache.build_settings(grid, autotune, tuner_config)

    def build_cached(call_shapes: list[tuple[int, ...]], save: bool = True, times: dict[str, float] | None = None):
        """``(compiled, key, meta, entry)``; ``entry`` is the cache entry on a hit, None when compiled here; ``times``
        receives the whole programs' times when two are compared."""
        request = cache.request_key(op_list, call_shapes, dtype, settings)
        known = store.alias(request)  # a warm start skips building and printing the IR for the key
        hit = store.load_compiled(known) if known is not None else None
        if hit is None:
            from amk.ir_dump import module_text

            module = build_module(op_list, call_shapes, dtype)
            key, meta = cache.cache_key(module_text(module), call_shapes, dtype, settings, op_list)
            hit = store.load_compiled(key) if key != known else None
            if hit is not None:
                store.save_alias(request, key)
        if hit is not None:
            compiled, entry = hit
            tuning_log.update(entry.tuning_log)
            return compiled, entry.key, entry.meta, entry
        from amk.pipeline import compile_module

        log_here: dict[str, list[dict]] = {}
        recorded = store.load_config(key)
        chooser = _choose_config(grid, autotune, tuner_config, log_here, store, call_shapes, recorded)
        # Configs recorded for this build say which program they belong to; without them, the program with the
        # vendor GEMM is timed against the fused one where it may win.
        program = recorded.get("program", "fused") if recorded else "fused"
        # (fp8 has no plain vendor GEMM in PyTorch)
        try_vendor = (not recorded and settings.get("tuner", {}).get("vendor_gemm", False) and dtype.itemsize > 1
                      and _row_reduction_follows_matmul(module))
        # Candidates timed while tuning compile into the entry's folder too; every emitted source (the tuner's
        # candidates included) is written under the store's directory.
        with store.triton_cache(key), sources_under(store.root):
            compiled = compile_module(module, chooser, vendor_gemm=program == "vendor_gemm")
            if try_vendor:
                log_vendor: dict[str, list[dict]] = {}
                vendor = _faster_with_vendor_gemm(
                    compiled, lambda: compile_module(
                        build_module(op_list, call_shapes, dtype),
                        _choose_config(grid, autotune, tuner_config, log_vendor, store, call_shapes), vendor_gemm=True),
                    op_list, call_shapes, dtype, tuner_config or TunerConfig(), times if times is not None else {})
                if vendor is not None:
                    compiled, log_here, program = vendor, log_vendor, "vendor_gemm"
        if program == "vendor_gemm":
            meta = {**meta, "program": program}
        tuning_log.update(log_here)
        for compiled_kernel in compiled.kernels.values():
            store.attach_triton_cache(key, compiled_kernel)
        store.save_alias(request, key)
        if save:
            store.save(cache.entry_from_compiled(key, meta, compiled, log_here))
        return compiled, key, meta, None

    def build(call_shapes: list[tuple[int, ...]]) -> CompiledProgram:
        return build_cached(call_shapes)[0]

    started = time.perf_counter()
    with recording() as clock:
        compiled, key, meta, entry = build_cached(shapes, save=not verify, times=program_times)
        kernel = FusedKernel(op_list, shapes, dtype, compiled, build, parameter_grid)
        kernel.tuning_log = tuning_log
        kernel.program_times = program_times
        kernel.cache_hit, kernel.cache_key = entry is not None, key
        if kernel.num_kernels != 1:
            log.warning("the op chain %s compiled to %d kernels", [n for n, _ in op_list], kernel.num_kernels)
        if verify:
            with phase("verify"):
                _verify(kernel, entry, store, key, meta, compiled, tuning_log)
    kernel.build_phases = {**clock.seconds, "total": time.perf_counter() - started}
    if not kernel.cache_hit:
        log.info("built %s in %.1f s (%s)", [n for n, _ in op_list], kernel.build_phases["total"], clock.summary())
    return kernel


def _verify(kernel: FusedKernel, entry, store: cache.Store, key: str, meta: dict, compiled: CompiledProgram,
            tuning_log: dict) -> None:
    """Check ``kernel`` against PyTorch (unless its cache entry holds a passing report) and keep the report."""
    from amk.verification import reference_for
    from amk.verification import verify as run_verification

    stored = entry.verification if entry is not None else None
    report = cache.report_from_dict(stored) if stored else None
    if report is None or not report.passed:
        report = run_verification(kernel, reference_for(kernel.ops, len(kernel.shapes)), dtypes=[kernel.dtype])
        # Kept with the entry once it passed (a failing kernel raises above and is not cached).
        store.save(cache.entry_from_compiled(key, meta, compiled, tuning_log, cache.report_to_dict(report)))
    kernel.verification = report
