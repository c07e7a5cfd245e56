"""``amk.build_fused_kernel``: an op list in, one verified fused kernel out, as a ``torch.nn.Module``."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence

import torch

from amk.autograd import builds_graph, recomputation_input, recomputed_gradients
from amk.build import BuildRequest, Built, build, check_build_arguments, keep_verification
from amk.build_phases import phase, recording
from amk.environment import being_traced, float32_matmul_precision, fp8_supported, interpreting
from amk.errors import DeviceError, DTypeError, InvalidArgumentError, ShapeError
from amk.lowering.configs import PARAMETER_KEYS
from amk.oplist import build_module, normalize_ops, normalize_shapes
from amk.runtime import CompiledProgram, default_device
from amk.tuner import TunerConfig, validate_grid

# amk.pipeline (the xDSL passes and the emitter) and the IR are imported on a cache miss only: a warm start from
# the persistent cache needs neither xDSL nor sympy.

log = logging.getLogger("amk")

BACKENDS = ("triton",)


class FusedKernel(torch.nn.Module):
    """A compiled op chain. Call it with the operands in the order of ``input_shapes``.

    ``.source`` is the Triton code (Gluon for a kernel built with ``GLUON``), ``.ir`` the IR text at every level
    (``tensor_op``, ``fused``, ``tiled_loop``, ``memory_staged``, ``triton``), ``.config`` the tile parameters in use,
    ``.torch_ops`` the ops left to PyTorch and ``.program_times`` the whole programs timed against each other while
    building (``TunerConfig.vendor_gemm``; all four for the shapes it was built for; ``fused_kernel_alone``
    where a kernel of the fused program alone was slower than the other program, which was then kept unraced). ``.cache_hit`` tells whether the kernel came from the persistent cache
    (no tuning, no pass, no emission ran) and ``.cache_key`` is its key there. ``.build_phases`` says where the build's
    seconds went: ``emit`` (passes and Triton source), ``compile`` (waiting for the compile workers),
    ``compile_here`` (candidates' first launches in this process), ``prepare``, ``time`` (timing candidates and
    programs), ``verify`` (checking outputs), ``total`` (the whole call, cache look-ups and loading included).

    Autograd: when grad mode is on and an input requires grad, the output carries a grad history; its backward
    recomputes the op chain in PyTorch (in float32 for 16-bit and 8-bit kernels, otherwise in the kernel's dtype) from
    the saved inputs and differentiates it, as ``amk.compile`` does. The forward still runs the fused kernel. Calls
    with no input requiring grad, or under ``torch.no_grad()`` / ``torch.inference_mode()``, record nothing.
    """

    cache_hit: bool = False
    cache_key: str | None = None

    def __init__(self, build_arguments: dict, precision: str, compiled: CompiledProgram, builder):
        super().__init__()
        # build_fused_kernel's arguments, normalized, and the float32 matmul precision it was built at: with_dtype,
        # copies and pickles build with them
        self._build_arguments = build_arguments
        self.float32_matmul_precision = precision
        self.ops = build_arguments["ops"]
        self.shapes = build_arguments["input_shapes"]
        self.dtype = build_arguments["dtype"]
        self.device = default_device()
        self._compiled = {tuple(self.shapes): compiled}
        self._builder = builder
        self._hot: _HotPath | None = None
        self._hot_paths: dict[tuple, _HotPath] = {}  # per (shapes, device), made on the first call with them
        self._references: dict[tuple, object] = {}  # per shapes: the tensor_op function a backward differentiates
        # A kernel loaded from the cache in a new process leaves the compiler and its IR unimported (a warm start).
        self._traced_chain = _op_chain_function(self.ops, self.shapes) if "xdsl" in sys.modules else None

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
        """The ops this program runs in PyTorch instead of in its kernels, in order: ``tensor_op.matmul`` (or
        ``tensor_op.linear``, a Linear's bias and ReLU or tanh GELU in the GEMM's epilogue) when the tuner found the
        vendor library's GEMM with the rest fused faster (``TunerConfig.vendor_gemm``)."""
        return [step.operation().name for step in self.compiled.program.steps if step.kind == "op"]

    def __reduce__(self):
        """``copy.deepcopy`` and pickling (``torch.save`` of the kernel) build the op chain again with the same
        arguments, from the kernel cache where the first build left it, rather than copy the compiled launchers
        (loaded modules and per-thread state, which can be neither copied nor pickled)."""
        return build_fused_kernel_from, (self._build_arguments, self.float32_matmul_precision)

    def with_dtype(self, dtype: torch.dtype) -> FusedKernel:
        """The same op chain built for another dtype (untuned, in the same cache directory)."""
        return build_fused_kernel_from({**self._build_arguments, "dtype": dtype, "autotune": False, "verify": False},
                                       self.float32_matmul_precision)

    def _check(self, tensors: Sequence, traced: bool = False) -> tuple[tuple[int, ...], ...]:
        """The call's shapes, once its tensors are checked. ``traced``: they are a trace's (TorchDynamo's fake
        tensors), whose leading dims may be symbols that a comparison would guard, and whose emptiness the trace need
        not know (an empty batch then reaches PyTorch's ops)."""
        if len(tensors) != len(self.shapes):
            raise InvalidArgumentError(f"the kernel takes {len(self.shapes)} tensors, got {len(tensors)}")
        for index, tensor in enumerate(tensors):  # one cheap test per tensor on the hot path; the reasons below
            if not (isinstance(tensor, torch.Tensor) and tensor.layout is torch.strided and not tensor.is_nested
                    and tensor.dtype == self.dtype and tensor.device.type == self.device.type
                    and (traced or tensor.numel())):
                self._reject(index, tensor)
        call_shapes = tuple(tuple(t.shape) for t in tensors)
        if not traced and call_shapes in self._compiled:  # built for (or re-specialized to) these shapes: checked then
            return call_shapes
        rows = len(self.shapes[0]) - 1
        for index, (have, built) in enumerate(zip(call_shapes, self.shapes)):
            leading = len(built) == len(self.shapes[0]) and len(have) == len(built) and have[rows:] == built[rows:]
            if not leading and have != built:
                raise ShapeError(f"argument {index} has shape {have}; the kernel was built for {built} (an argument "
                                 f"of the first input's rank may change its leading dims, here the first {rows}, and "
                                 "keep its last; the others keep their shapes)")
        return call_shapes

    def _reject(self, index: int, tensor) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(f"argument {index} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.layout is not torch.strided or tensor.is_nested:
            raise InvalidArgumentError(f"argument {index} is a {'nested' if tensor.is_nested else tensor.layout} tensor; "
                                       "amk kernels take dense (torch.strided) tensors: call .to_dense() first")
        if tensor.dtype != self.dtype:
            # (a FusedKernel is an nn.Module without parameters: .half() and .to(dtype) leave it as it is)
            from amk.dtypes import TORCH_TO_IR  # (here: it imports xDSL, which a warm start does not load)

            hint = f": kernel.with_dtype({tensor.dtype}) builds it for that dtype" if tensor.dtype in TORCH_TO_IR else ""
            raise DTypeError(f"argument {index} has dtype {tensor.dtype}; the kernel was built for {self.dtype}{hint}")
        if tensor.device.type != self.device.type:
            raise DeviceError(f"argument {index} is on {tensor.device}; the kernel runs on {self.device.type}"
                              + (" (no CUDA here: pass CPU tensors)" if self.device.type == "cpu" else ""))
        raise ShapeError(f"argument {index} is empty (shape {tuple(tensor.shape)}); amk kernels need data")

    def forward(self, *tensors: torch.Tensor, **keywords):
        if being_traced():
            return _single(self._traced(tensors, keywords))
        # (38 and 79 ns a call on a 2-core CPU)
        if torch._C._are_functorch_transforms_active():
            # A batched tensor of torch.vmap has no storage for the kernels to read; torch.func.grad's level wraps
            # the arguments alike.
            raise InvalidArgumentError("amk kernels do not run under torch.func's transforms (torch.vmap, "
                                       "torch.func.grad, jacrev, ...): call the kernel on the batch itself, as "
                                       "leading dims of a kernel built for them, and take gradients with "
                                       "torch.autograd (loss.backward())")
        if torch._C._is_tracing():
            # TorchScript's tracer does not see a kernel launch: the traced module returned this call's output as a
            # constant for every later input.
            raise InvalidArgumentError("torch.jit.trace cannot trace an amk kernel (its launch is not a TorchScript "
                                       "op): use torch.compile or torch.export, which trace it as its op chain")
        hot = self._hot
        if hot is not None and hot.accepts(tensors, self.dtype) and not keywords:  # (it refuses inputs that need a
            return _single(hot.run(tensors))  # grad history)
        self._refuse_keywords(keywords)
        # A tensor with PyTorch's negative bit (z.conj().imag) holds -x in memory; the kernels read memory.
        tensors = tuple(t.resolve_neg() if isinstance(t, torch.Tensor) and t.is_neg() else t for t in tensors)
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
            self._check(tensors)  # bad arguments fail here, not inside autograd
            outputs = _RecomputedBackward.apply(self, *tensors)
        else:
            outputs = self._walk(tensors)
        return _single(outputs)

    def _refuse_keywords(self, keywords: Mapping) -> None:
        if keywords:
            raise InvalidArgumentError(f"the kernel takes its {len(self.shapes)} tensors as positional arguments, got "
                                       f"keyword argument(s) {', '.join(map(repr, keywords))}")

    def _traced(self, tensors: Sequence, keywords: Mapping) -> list[torch.Tensor]:
        """A call inside a model that TorchDynamo or torch.export traces: the arguments checked as a call's, then the
        op chain as PyTorch ops, which they trace and the model's compiler compiles (amk's fuses them again), as a
        compiled module called there is traced as its model; a kernel launch cannot be traced. Autocast stays off,
        as it does not touch the kernel's launch, and casts round to their dtype, as the kernel's do."""
        from amk.verification import evaluate_function

        self._refuse_keywords(keywords)
        self._check(tensors, traced=True)
        if not torch.is_autocast_enabled(self.device.type):  # (no autocast region to split amk.compile's subgraphs)
            return evaluate_function(self._op_chain, tensors)
        with torch.autocast(self.device.type, enabled=False):
            return evaluate_function(self._op_chain, tensors)

    @property
    def _op_chain(self):
        """The tensor_op function a trace of a call evaluates. Built with the kernel where the compiler is imported
        already (a build that compiled; ~1 ms), else here, on the first trace (a process that loaded every kernel from
        the cache): building xDSL IR is not traceable, so TorchDynamo breaks the graph for it once, which
        ``fullgraph=True`` refuses."""
        if self._traced_chain is None:
            self._traced_chain = _op_chain_function(self.ops, self.shapes)
        return self._traced_chain

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
            self._hot_paths[key] = _HotPath(shapes, key[1], program.fast_path(program.bind(tensors), key[1]))
        # The next call with these shapes, dtype and device skips the checks above and the program walk.
        self._hot = self._hot_paths[key]
        return outputs

    def _reference(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The op chain evaluated op by op in PyTorch (differentiable), in the dtype of ``tensors``."""
        from amk.verification import evaluate_function, evaluate_reference

        shapes = tuple(tuple(t.shape) for t in tensors)
        function = self._references.get(shapes)
        if function is None:  # built once per shapes: building the IR takes milliseconds
            function = self._references[shapes] = _op_chain_function(self.ops, shapes)
        return evaluate_function(function, tensors, evaluate=evaluate_reference)


def _op_chain_function(ops, shapes):
    """The ``tensor_op`` function of ``ops`` at ``shapes`` that PyTorch evaluates (imports the compiler's IR: only
    where it is needed, so that a kernel loaded from the cache starts without it)."""
    from amk.verification import reference_function

    return reference_function(ops, list(shapes))


def _single(outputs: Sequence[torch.Tensor]):
    """A kernel's outputs as a call returns them: the tensor itself where there is one."""
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


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
    def backward(ctx, *grads):
        kernel: FusedKernel = ctx.kernel
        saved = ctx.saved_tensors
        wanted = [index for index, needs in enumerate(ctx.needs_input_grad[1:]) if needs]
        create_graph = builds_graph()
        with torch.enable_grad():
            leaves = [recomputation_input(tensor, index in wanted, create_graph,
                                          tensor.dtype if tensor.dtype.itemsize >= 4 else torch.float32)
                      for index, tensor in enumerate(saved)]
            outputs = kernel._reference(leaves)
        return (None, *recomputed_gradients(outputs, grads, leaves, wanted, [t.dtype for t in saved], create_graph))


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
            if not (isinstance(tensor, torch.Tensor) and tensor.dtype is dtype and tensor.layout is torch.strided
                    and tensor.shape == size and tensor.device == device and not tensor.is_neg()
                    and not (tensor.requires_grad and torch.is_grad_enabled())):
                return False
        return True


def build_fused_kernel(ops: Sequence, input_shapes: Sequence, dtype: torch.dtype = torch.float16, backend: str = "triton",
                       autotune: bool = True, tuner_config: TunerConfig | None = None,
                       parameter_grid: Mapping[str, Sequence[int]] | None = None, verify: bool = False) -> FusedKernel:
    """Compile a chain of ops into one fused kernel.

    ``ops`` are names (or ``(name, params)`` pairs) from :data:`amk.oplist.OPS`; ``input_shapes`` the shapes of the
    operands in the order the ops take them (see :mod:`amk.oplist`). Returns a :class:`FusedKernel`. With
    ``verify=True`` the kernel is checked against PyTorch on random inputs before it is returned. fp32 matmuls follow
    PyTorch's float32 matmul precision in force now (:func:`amk.environment.float32_matmul_precision`); the kernel
    keeps it for the other shapes it is called with, its copies and pickles.
    """
    return _build_fused_kernel(ops, input_shapes, dtype, backend, autotune, tuner_config, parameter_grid, verify,
                               float32_matmul_precision())


def _device_name() -> str:
    if not torch.cuda.is_available() or interpreting():
        return "its kernels in Triton's CPU interpreter"
    capability = ".".join(map(str, torch.cuda.get_device_capability()))
    return f"on a {torch.cuda.get_device_name()} (compute capability {capability})"


def build_fused_kernel_from(arguments: dict, precision: str | None = None) -> FusedKernel:
    """:func:`build_fused_kernel` called with ``arguments`` at the float32 matmul ``precision`` (None: the one in force
    now): a kernel's copy or one loaded back by pickle, which keep the precision it was built at."""
    return _build_fused_kernel(**arguments, precision=precision or float32_matmul_precision())


def _build_fused_kernel(ops, input_shapes, dtype, backend, autotune, tuner_config, parameter_grid, verify,
                        precision: str) -> FusedKernel:
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"backend {backend!r} is not supported; available: {', '.join(BACKENDS)}")
    check_build_arguments(autotune, verify, tuner_config)
    if not isinstance(dtype, torch.dtype):
        raise DTypeError(f"dtype must be a torch.dtype such as torch.float16, got {dtype!r}")
    grid = validate_grid(parameter_grid)
    op_list = normalize_ops(ops)
    shapes = normalize_shapes(input_shapes)
    if torch.float8_e4m3fn in (dtype, *(params.get("dtype") for name, params in op_list if name == "cast")) \
            and not fp8_supported():
        # (Triton's CPU interpreter converts to fp8 wrongly: 0.49 became 0.25, silently)
        raise DTypeError("fp8 (torch.float8_e4m3fn) kernels need a CUDA GPU of compute capability 8.9 or newer; "
                         f"this process runs {_device_name()}")

    def request(call_shapes: list[tuple[int, ...]]) -> BuildRequest:
        return BuildRequest(lambda: build_module(op_list, call_shapes, dtype), call_shapes, dtype, op_list, autotune,
                            tuner_config, grid, float32_matmul_precision=precision)

    tuning_log: dict[str, list[dict]] = {}  # every build's, re-specializations to other shapes included

    def build_for(call_shapes: list[tuple[int, ...]]) -> CompiledProgram:
        built = build(request(call_shapes))
        tuning_log.update(built.tuning_log)
        return built.compiled

    started = time.perf_counter()
    with recording() as clock:
        built = build(request(shapes), save=not verify)
        arguments = {"ops": op_list, "input_shapes": shapes, "dtype": dtype, "backend": backend, "autotune": autotune,
                     "tuner_config": tuner_config, "parameter_grid": _user_grid(grid), "verify": verify}
        kernel = FusedKernel(arguments, precision, built.compiled, build_for)
        tuning_log.update(built.tuning_log)
        kernel.tuning_log = tuning_log
        kernel.program_times = built.program_times
        kernel.cache_hit, kernel.cache_key = built.cache_hit, built.key
        if kernel.num_kernels != 1 and not (kernel.num_kernels == 0 and kernel.torch_ops):
            log.warning("the op chain %s compiled to %d kernels", [n for n, _ in op_list], kernel.num_kernels)
        if verify:
            with phase("verify"):
                _verify(kernel, request(shapes), built)
    kernel.build_phases = {**clock.seconds, "total": time.perf_counter() - started}
    if not kernel.cache_hit:
        log.info("built %s in %.1f s (%s)", [n for n, _ in op_list], kernel.build_phases["total"], clock.summary())
    return kernel


def _user_grid(grid: dict[str, list[int]] | None) -> dict[str, list[int]] | None:
    """A checked grid under its ``parameter_grid`` names: what a kernel's copies are built with, rather than the
    caller's mapping, which may change after the build or not pickle (a ``MappingProxyType``)."""
    if grid is None:
        return None
    return {key: list(grid[field]) for key, field in PARAMETER_KEYS.items() if field in grid}


def _verify(kernel: FusedKernel, request: BuildRequest, built: Built) -> None:
    """Check ``kernel`` against PyTorch (unless its cache entry holds a passing report) and keep the report."""
    from amk.verification import VerificationReport, reference_for
    from amk.verification import verify as run_verification

    stored = built.entry.verification if built.entry is not None else None
    report = VerificationReport.from_dict(stored) if stored else None
    if report is None or not report.passed:
        report = run_verification(kernel, reference_for(kernel.ops, len(kernel.shapes)), dtypes=[kernel.dtype])
        keep_verification(request, built, report)  # a failing kernel raised above and is not cached
    kernel.verification = report
