"""The build service: every program amk compiles, an op list of ``build_fused_kernel`` or a subgraph of
``amk.compile``, is built here, one way::

    BuildRequest ──▶ cache lookup ──hit──▶ Built (no pass, no tuning)
                         │ miss
                         ▼
                    passes (amk-fuse or the request's pipeline, amk-tile, amk-stage, amk-emit-triton),
                    each kernel's configuration chosen as it is staged (tuned on a GPU, reusing the timings
                    recorded before on this device; kernels of symbolic sizes at the request's size hints)
                         ▼
                    program choice (where a row reduction follows a matmul, or feeds one of many rows, and for
                    fp32 matmuls under "highest": the vendor GEMM with the rest fused, built and timed first,
                    raced against the fully fused program; for amk.compile's subgraphs, the ops as PyTorch runs
                    them timed too: the fused kernels that cannot beat the faster of them are not refined)
                         ▼
                    cache store ──▶ Built

A :class:`BuildRequest` holds everything a build depends on; the cache key is made of it and of nothing else. What a
caller does with the result (a ``FusedKernel``, a subgraph of a compiled module) and how it verifies it against its
own reference is the caller's: :func:`keep_verification` stores a passing report with the entry.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import logging
import math
import numbers
import sys
import sysconfig
import time
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from amk import cache
from amk.build_phases import phase, recording
from amk.environment import float32_matmul_precision, interpreting
from amk.errors import InvalidArgumentError
from amk.lowering.configs import KernelConfig
from amk.numerics import relative_error
from amk.runtime import CompiledProgram, ShapeFunction, compiled_from_entry, sources_under
from amk.tuner import (
    GRAPH_TIMING_BELOW_MS,
    LAUNCH_BOUND_BYTES,
    OUTRUN_MARGIN,
    TIMED,
    Trial,
    TunerConfig,
    autotune_chooser,
    config_key,
    fastest_program,
    first_round_chooser,
    launch_bound_reason,
    measure,
    start_compile_workers,
    untimed_in_grid,
)

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from amk.ir_dump import IRDumper

# The IR, xDSL and sympy are imported where a build runs the passes: a cache hit needs none of them.

log = logging.getLogger("amk")


def _defined_in_amk(obj) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module == "amk" or module.startswith("amk.")


_PLAIN_VALUES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout)
# How deep the objects a rule reaches are followed: what lies deeper counts by its class (a linked structure of
# thousands of nodes exceeded Python's recursion limit).
_MAX_DEPTH = 24
# Objects of the standard library and of the libraries amk runs on count by their class, not their attributes: a
# closed-over logging.Logger reached every logger of the process (37 MB, another text once a library made one), an
# nn.Linear its weights. (Other installed packages are walked: a rule may be the method of one's configured object.)
_STANDARD_LIBRARY = tuple({sysconfig.get_paths()[name] for name in ("stdlib", "platstdlib")})
_LIBRARIES = {"torch", "numpy", "triton", "xdsl", "sympy", "optuna", "filelock", "platformdirs"}


def _library_class(cls: type) -> bool:
    if cls.__module__ == "builtins" or cls.__module__.partition(".")[0] in _LIBRARIES:
        return True
    file = getattr(sys.modules.get(cls.__module__), "__file__", None) or ""
    return file.startswith(_STANDARD_LIBRARY) and "-packages" not in file


class _Definitions:
    """What an extension computes, the same text in every process that registers the same code: a function's
    bytecode, constants (nested code by the same rule), names and the values it closes over or defaults to; a
    partial's function and arguments; a class's attributes and functions (``__call__`` and ``__init__`` included); a
    plain value's, number's, dtype's or device's repr; a tensor's or array's dtype, shape and a digest of its bytes; a
    module's name; an object of the standard library or of the libraries amk runs on its class, any other its
    class and attributes (slots included). An object met again is written as a reference to its first occurrence (a
    structure sharing its nodes grew exponentially). Never a repr that holds an address. The code actually
    registered, not its file, which may have been edited since; what it calls by name is not followed."""

    def __init__(self, enclosing: dict[int, int] | None = None):
        self.first_seen: dict[int, int] = {}  # id -> order of first occurrence
        self.kept: list = []  # what the ids name, alive until the text is made
        # the objects met by the text this one is a sort key within (a set's item): a cycle back to them ends there
        self.enclosing = enclosing or {}

    def __call__(self, obj, depth: int = 0) -> str:
        if isinstance(obj, _PLAIN_VALUES):
            return repr(obj)
        if id(obj) in self.first_seen:
            return f"<same as #{self.first_seen[id(obj)]}>"
        if id(obj) in self.enclosing:
            return f"<same as enclosing #{self.enclosing[id(obj)]}>"
        self.first_seen[id(obj)] = len(self.first_seen)
        self.kept.append(obj)
        if depth > _MAX_DEPTH:
            return f"<{type(obj).__module__}.{type(obj).__qualname__}>"
        inner = functools.partial(self, depth=depth + 1)
        if isinstance(obj, numbers.Number):  # numpy's scalars: float32(2.0) is not float32(3.0)
            return f"{type(obj).__qualname__}({obj!r})"
        if isinstance(obj, torch.Tensor):
            return f"tensor({obj.dtype}, {list(obj.shape)}, {obj.layout}, {_tensor_digest(obj)})"
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray | numpy.generic):
            array = numpy.ascontiguousarray(obj)
            return f"ndarray({array.dtype}, {list(array.shape)}, {hashlib.sha256(array.tobytes()).hexdigest()[:16]})"
        if isinstance(obj, types.ModuleType):
            return f"module({obj.__name__})"
        if isinstance(obj, enum.Enum):
            return f"{type(obj).__qualname__}.{obj.name}"
        if isinstance(obj, frozenset | set):
            # In an order every process agrees on (a set iterates its objects hashed by address in another order in
            # each), taken from each item's own text (as deep as this one may go, a cycle back to the objects met so
            # far cut): the numbers of the objects met first follow from it.
            def own_text(item) -> str:
                return _Definitions({**self.enclosing, **self.first_seen})(item, depth + 1)

            return f"{type(obj).__name__}({', '.join(map(inner, sorted(obj, key=own_text)))})"
        if isinstance(obj, tuple | list):
            return f"{type(obj).__name__}({', '.join(inner(item) for item in obj)})"
        if isinstance(obj, dict):
            return "{" + ", ".join(f"{inner(k)}: {inner(v)}" for k, v in obj.items()) + "}"
        if isinstance(obj, types.CodeType):
            constants = [inner(constant) for constant in obj.co_consts]
            return f"code({obj.co_code.hex()}, {constants}, {obj.co_names})"
        if isinstance(obj, functools.partial):
            return f"partial({inner(obj.func)}, {inner(obj.args)}, {inner(obj.keywords)})"
        if isinstance(obj, types.MethodType):  # and what it is bound to: Scaler(2.0).rule is not Scaler(3.0).rule
            return f"method({inner(obj.__func__)}, {inner(obj.__self__)})"
        if isinstance(obj, types.FunctionType):
            closure = [cell.cell_contents for cell in obj.__closure__ or () if cell.cell_contents is not obj]
            return (f"function({obj.__qualname__}, {inner(obj.__code__)}, {inner(closure)}, "
                    f"{inner(obj.__defaults__)}, {inner(obj.__kwdefaults__)})")
        if isinstance(obj, staticmethod | classmethod):
            return inner(obj.__func__)
        if isinstance(obj, property):
            return inner([obj.fget, obj.fset, obj.fdel])
        if isinstance(obj, type):
            if _defined_in_amk(obj) or _library_class(obj):
                return f"{obj.__module__}.{obj.__qualname__}"
            functions = types.FunctionType | staticmethod | classmethod
            members = {name: value for name, value in vars(obj).items()
                       if not name.startswith("__") or isinstance(value, functions)}
            return f"class({obj.__qualname__}, {inner(list(obj.__bases__))}, {inner(members)})"
        if _library_class(type(obj)):
            return f"<{type(obj).__module__}.{type(obj).__qualname__}>"
        # A callable instance, a bound method's self, a configuration a rule closes over, amk's ColumnSum.
        attributes = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
        attributes.update({name: getattr(obj, name) for cls in type(obj).__mro__ for name in _slot_names(cls)
                           if hasattr(obj, name)})
        return f"instance({inner(type(obj))}, {inner(attributes)})"


def _definition(obj) -> str:
    """:class:`_Definitions`' text of ``obj``."""
    return _Definitions()(obj)


def _tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of a tensor's values; of its kind alone where it has none to read (meta, sparse, other layouts)."""
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        return f"{tensor.device.type} values not read"
    data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


def _slot_names(cls: type) -> tuple[str, ...]:
    slots = vars(cls).get("__slots__", ())
    names = (slots,) if isinstance(slots, str) else tuple(slots)
    return tuple(name for name in names if name not in ("__dict__", "__weakref__"))


def extensions_fingerprint() -> str:
    """A hash of what was registered from outside amk's packages (lowering rules, row reductions, references,
    strategies, passes, op-list entries), each by its definition, or "" when nothing was: the cache's key holds amk's
    own sources (:func:`amk.cache.source_fingerprint`), and a rule edited in the user's module must not find the
    kernels its last version built."""
    # Only registries already imported can hold a user's entries (registering imports them); importing the others
    # would cost a warm start, which builds nothing, the IR's imports.
    rules, strategies = sys.modules.get("amk.lowering.rules"), sys.modules.get("amk.lowering.strategies.registry")
    references, oplist, opt = (sys.modules.get(f"amk.{name}") for name in ("reference", "oplist", "opt"))
    parts = []
    if rules is not None:
        # (here, where the rules and so xDSL are loaded: a warm start loads no xDSL, see amk.api)
        from amk.registration import check_registration

        added_rules = {op: rule for op, rule in rules.ELEMENTWISE_RULES.items()
                       if rule is not rules.BUILT_IN_ELEMENTWISE_RULES.get(op)}
        for op, rule in added_rules.items():  # (set in the dict itself, not through register_elementwise)
            check_registration("rules.ELEMENTWISE_RULES", op, rule)
        parts += [f"rule {op.name}: {_definition(rule)}" for op, rule in added_rules.items()]
        for op, reduction in rules.ROW_REDUCTIONS.items():
            if reduction is not rules.BUILT_IN_ROW_REDUCTIONS.get(op):
                check_registration("rules.ROW_REDUCTIONS", op)
                if not isinstance(reduction, rules.RowReduction):
                    raise InvalidArgumentError(f"rules.ROW_REDUCTIONS[{op.__name__}] must be a "
                                               f"amk.lowering.rules.RowReduction, got {reduction!r}")
                # (fields, not dataclasses.astuple, which deep-copies them)
                fields = {field.name: getattr(reduction, field.name) for field in dataclasses.fields(reduction)}
                parts.append(f"reduction {op.name}: {_definition(fields)}")
    if references is not None:
        parts += [f"reference {op.name}: {_definition(fn)}" for op, fn in references.REFERENCE.items()
                  if fn is not references.BUILT_IN_REFERENCE.get(op)]
    if strategies is not None:
        parts += [f"strategy {name}: {_definition(type(strategy))}" for name, strategy in strategies.STRATEGIES.items()
                  if not _defined_in_amk(type(strategy)) or strategy.name != name]
    if opt is not None:
        parts += [f"pass {name}: {_definition(cls)}" for name, cls in opt.REGISTERED_PASSES.items()]
    if oplist is not None:
        parts += [f"op {name}: {spec.params} {_definition(spec.build)}" for name, spec in oplist.OPS.items()
                  if spec is not oplist.BUILT_IN_OPS.get(name)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16] if parts else ""


@dataclass(frozen=True)
class BuildRequest:
    """What a build depends on. ``make_module`` returns a fresh ``tensor_op`` module each call (the passes rewrite it);
    ``shapes`` are the operands' shapes (sizes, or symbol names where a size is dynamic) and ``dtype`` their element
    type (None where they differ; the module's argument types say each), both part of the key. ``ops``: the op list
    the module was built from, when there is one (a warm start then finds the entry without building IR). ``pipeline``: the tensor-level
    passes (None: ``amk-fuse``). ``dumper``: receives the IR after every pass; a dumped build runs the passes, so it
    skips the cache lookup (its entry is still stored). ``size_hints``: ``(symbol, value)`` pairs, the size bucket a
    program of symbolic sizes is built for (``amk.compile`` builds one per bucket of the row count): the tiling
    strategy is chosen, and each kernel configured (tuned on a GPU, the heuristic otherwise), as for those sizes,
    while the kernels stay symbolic and correct for every size. ``bucket``: the size bucket's label where the hints
    are one call's values in it (a decoding step's key length, seen only inside ``s + 1``, takes the call's): the key
    then names the bucket, not the hints, so that a call of the bucket in another process, at other values, finds the
    build."""

    make_module: Callable[[], ModuleOp]
    shapes: list[tuple]
    dtype: torch.dtype | None = None
    ops: list | None = None
    autotune: bool = True
    tuner_config: TunerConfig | None = None
    grid: dict[str, list[int]] | None = None
    pipeline: str | None = None
    dumper: IRDumper | None = field(default=None, compare=False)
    size_hints: tuple[tuple[str, int], ...] = ()
    bucket: str | None = None
    # The caller runs whichever is faster of the program and the module's ops as PyTorch runs them (amk.compile's
    # subgraphs): those ops are timed first, and a kernel that cannot beat them is not refined; GEMMs alone are not
    # searched (_not_worth_a_search). In a tuned build's key: a build not raced must not take such a program.
    raced_against_pytorch: bool = field(default=False, compare=False)
    # PyTorch's setting when the request was made ("highest", its default, or "high").
    float32_matmul_precision: str = field(default_factory=float32_matmul_precision)

    @property
    def fp32_dot(self) -> str:
        """How fp32 matmul tiles are multiplied, as PyTorch's float32 matmul precision allows: fp32-accurate
        (IEEE) under "highest", TF32 under "high"."""
        return "ieee" if self.float32_matmul_precision == "highest" else "tf32"

    @property
    def settings(self) -> dict:
        """The settings in the cache key: those that change which program is built, and only those (the cache
        directory does not)."""
        settings: dict = {"autotune": self.timed, "parameter_grid": self.grid, "fp32_dot": self.fp32_dot}
        if self.timed:
            tc = self.tuner_config or TunerConfig()
            settings["tuner"] = {"search_budget": tc.search_budget, "warmup_runs": tc.warmup_runs,
                                 "measure_runs": tc.measure_runs, "strategy": tc.search,
                                 "enable_warp_specialization": tc.enable_warp_specialization,
                                 "vendor_gemm": tc.vendor_gemm}
            if self.raced_against_pytorch:
                settings["raced_against_pytorch"] = True
        if self.bucket is not None:
            settings["size_bucket"] = self.bucket
        elif self.size_hints:
            settings["size_hints"] = dict(self.size_hints)
        extensions = extensions_fingerprint()
        if extensions:
            settings["extensions"] = extensions
        return settings if self.pipeline is None else {**settings, "pipeline": self.pipeline}

    @property
    def timed(self) -> bool:
        """Whether candidates are timed (asked for, and a GPU to time them on)."""
        return self.autotune and torch.cuda.is_available() and not interpreting()

    @property
    def store(self) -> cache.Store:
        return cache.store_for(self.tuner_config.target_cache_dir if self.tuner_config is not None else None)


@dataclass
class Built:
    """A built program: ``entry`` is the cache entry it came from (None when it was compiled by this build);
    ``tuning_log`` holds every kernel's trials, ``program_times`` the whole programs timed against each other,
    ``build_phases`` the seconds the build spent per phase (:mod:`amk.build_phases`) and in all (``total``)."""

    compiled: CompiledProgram
    key: str
    meta: dict
    entry: cache.Entry | None = None
    tuning_log: dict[str, list[dict]] = field(default_factory=dict)
    program_times: dict[str, float] = field(default_factory=dict)
    build_phases: dict[str, float] = field(default_factory=dict)
    # Why its kernels kept their heuristic configurations without a search (:func:`_not_worth_a_search`), or "".
    not_searched: str = ""

    @property
    def cache_hit(self) -> bool:
        return self.entry is not None


def check_build_arguments(autotune, verify, tuner_config) -> None:
    """The arguments both front ends take: ``autotune`` and ``verify`` True or False, ``tuner_config`` a
    :class:`~amk.TunerConfig` or None; anything else is an :class:`~amk.errors.InvalidArgumentError`."""
    if not isinstance(autotune, bool):
        raise InvalidArgumentError(f"autotune must be True or False, got {autotune!r}")
    if not isinstance(verify, bool):
        raise InvalidArgumentError(f"verify must be True or False, got {verify!r}")
    if tuner_config is not None and not isinstance(tuner_config, TunerConfig):
        raise InvalidArgumentError(f"tuner_config must be an amk.TunerConfig, got {type(tuner_config).__name__}")


def expect_tuned_builds(tensors: Iterable[torch.Tensor], tuner_config: TunerConfig | None = None) -> None:
    """Start the compile workers now where the coming builds, reading one of ``tensors``, will be tuned: on a GPU,
    with a cache directory that holds no program yet (a warm cache may serve them all, and then the workers would
    take CPUs and memory for nothing), and a floating-point tensor larger than a kernel bound by its launch moves
    altogether (:data:`~amk.tuner.LAUNCH_BOUND_BYTES`, as in :func:`_lookup`). For :func:`amk.compile` given a module
    with such weights, or called the first time with such arguments: the workers boot (seconds: torch and Triton
    each) while TorchDynamo traces the first call (and while the caller goes on before it), rather than from the
    first build."""
    if interpreting() or not torch.cuda.is_available():
        return
    if not any(tensor.is_cuda and tensor.is_floating_point() and tensor.layout == torch.strided
               and tensor.nbytes > LAUNCH_BOUND_BYTES for tensor in tensors):
        return
    if cache.store_for(tuner_config.target_cache_dir if tuner_config is not None else None).holds_no_program():
        start_compile_workers()


def build(request: BuildRequest, save: bool = True) -> Built:
    """Build ``request`` (see the module's docstring); ``save=False`` leaves the entry unwritten (a caller that
    verifies first stores it with :func:`keep_verification`). Its phases are timed (``Built.build_phases``; inside a
    caller's :func:`~amk.build_phases.recording`, they add to the caller's)."""
    started = time.perf_counter()
    with recording() as clock:
        built = _build(request, save)
    built.build_phases = {**clock.seconds, "total": time.perf_counter() - started}
    return built


def _build(request: BuildRequest, save: bool) -> Built:
    store, settings = request.store, request.settings
    alias = cache.request_key(request.ops, request.shapes, request.dtype, settings) if request.ops else None
    if request.dumper is None:
        hit = _lookup(store, alias, request, settings)
        if isinstance(hit, Built):
            return hit
        key, meta, module = hit
    else:
        module = request.make_module()
        key, meta = cache.cache_key(anonymous_text(module), request.shapes, request.dtype, settings, request.ops)
    recorded = store.load_config(key)
    if recorded:
        try:
            compiled, log_here, program, program_times, not_searched = _compile(request, module, key, store,
                                                                                recorded)
        except Exception as error:  # configs imported, or recorded by another machine, that this one cannot build
            log.warning("the configurations recorded for %s do not build here (%s: %s); building without them",
                        key[:12], type(error).__name__, error)
            recorded = None
            module = request.make_module()  # the passes rewrote the first one
    if not recorded:
        compiled, log_here, program, program_times, not_searched = _compile(request, module, key, store, None)
    built = Built(compiled, key, {**meta, "program": program} if program == "vendor_gemm" else meta,
                  tuning_log=log_here, program_times=program_times, not_searched=not_searched)
    for compiled_kernel in compiled.kernels.values():
        store.attach_triton_cache(key, compiled_kernel)
    if alias is not None:
        store.save_alias(alias, key)
    if save:
        store.save(entry_of(built))
    return built


def _compile(request: BuildRequest, module: ModuleOp, key: str, store: cache.Store,
             recorded: dict | None) -> tuple[CompiledProgram, dict[str, list[dict]], str, dict[str, float], str]:
    """Run the passes on ``module`` (configured as ``recorded`` says, where given): the compiled program, its
    kernels' tuning log, which program it is (``fused`` or ``vendor_gemm``), the times of the programs raced and why
    its kernels were not searched ("" where they were, or were not to be)."""
    from amk.pipeline import compile_module

    log.debug("building %s (%s)", key, "configurations recorded" if recorded else "nothing recorded")
    not_searched = "" if recorded else _not_worth_a_search(request, module)
    # Configs recorded for this build say which program they belong to; without them, the program with the vendor
    # GEMM is timed against the fused one where it may win (fp8 has no plain vendor GEMM in PyTorch).
    program = recorded.get("program", "fused") if recorded else "fused"
    try_vendor = not recorded and not not_searched and _tries_the_vendor_program(request, module)
    # judged before the passes rewrite the module
    tolerance = _program_tolerance(module) if try_vendor else None
    log_here: dict[str, list[dict]] = {}
    program_times: dict[str, float] = {}
    # Candidates timed while tuning compile into the entry's folder too; every emitted source (the tuner's candidates
    # included) is written under the store's directory.
    with store.triton_cache(key), sources_under(store.root):
        # The program with the vendor GEMM is built and timed first (while the fused kernels' first candidates
        # compile), and so are the PyTorch ops where the caller races them: the faster one's time tells the fused
        # program's tuning which kernels cannot win (their refinement is skipped); the vendor program is then raced
        # against the fused one on the same inputs (PyTorch's ops are the caller's to race, on its inputs).
        vendor = None
        if try_vendor:
            # The vendor program's few candidates go to the workers first: it is tuned next, and behind the fused
            # program's first round (13-16 compiles of 2-4 s each on an H100 host) they waited 2 s for a worker.
            vendor_request = _vendor_program_request(request)
            _compile_first_round(vendor_request, module, store, vendor_gemm=True)
            _compile_first_round(request, module, store)
            log.debug("the programs' first candidates are with the compile workers; tuning the vendor program")
            vendor = _vendor_program(vendor_request, module, store)
            log.debug("the vendor program tuned; tuning the fused one")
        if request.raced_against_pytorch and request.timed and not recorded and not not_searched:
            _time_pytorch_ops(request, module, program_times)
        rivals = [vendor.time_ms if vendor is not None else None, program_times.get("pytorch_ops")]
        beaten_at_ms = min((ms for ms in rivals if ms is not None), default=None)
        chooser = config_chooser(request, log_here, store, recorded, beaten_at_ms, not_searched=not_searched)
        compiled = compile_module(module, chooser, pipeline=request.pipeline, dumper=request.dumper,
                                  vendor_gemm=program == "vendor_gemm", fp32_dot=request.fp32_dot,
                                  size_hints=dict(request.size_hints))
        if vendor is not None and (_outrun_by_vendor(log_here, vendor, program_times)
                                   or _faster_with_vendor_gemm(compiled, vendor, tolerance, request, program_times)):
            compiled, log_here, program = vendor.compiled, vendor.tuning_log, "vendor_gemm"
    return compiled, log_here, program, program_times, not_searched


def _lookup(store: cache.Store, alias: str | None, request: BuildRequest, settings: dict):
    """A :class:`Built` from the cache, or ``(key, meta, module)`` to build (the module already made for the key)."""
    known = store.alias(alias) if alias is not None else None  # a warm start skips building and printing the IR
    hit = _load(store, known) if known is not None else None
    module = key = meta = None
    if hit is None:
        # A build whose kernels will be tuned has its compile workers boot (seconds) while its passes run, not from
        # its first kernel tuned. Builds of small operands may tune nothing, their kernels all bound by their launch:
        # their workers start at a kernel tuned, not to take CPUs and memory for nothing.
        if alias is not None and known is None and request.timed and _operands_outgrow_a_launch(request):
            start_compile_workers()  # an op list never built before: they also boot while its module is made
        module = request.make_module()
        key, meta = cache.cache_key(anonymous_text(module), request.shapes, request.dtype, settings, request.ops)
        hit = _load(store, key) if key != known else None
        if hit is not None and alias is not None:
            store.save_alias(alias, key)
        elif (hit is None and alias is None and request.timed
              and _operands_outgrow_a_launch(request, _argument_dtypes(module)) and store.load_config(key) is None):
            # A captured subgraph's miss is known from its module's key (configs recorded for the key, imported or
            # kept from an earlier build, are used without tuning).
            start_compile_workers()
    return hit if hit is not None else (key, meta, module)


def _load(store: cache.Store, key: str) -> Built | None:
    """The program of the entry ``key`` as the store holds it, rebuilt by the runtime; None when there is none or it
    does not load (the store then drops it, and this build replaces it)."""
    entry = store.load(key)
    if entry is None:
        return None
    try:
        compiled = compiled_from_entry(entry, store.root)
    except Exception as error:
        store.discard(key, f"{type(error).__name__}: {error}")
        return None
    for kernel in compiled.kernels.values():
        store.attach_triton_cache(key, kernel)
    return Built(compiled, entry.key, entry.meta, entry, dict(entry.tuning_log))


def entry_of(built: Built, verification: dict | None = None) -> cache.Entry:
    """What the cache keeps of a built program: plain data (configs, sources, launch plan, IR, tuning log)."""
    kernels = built.compiled.kernels
    return cache.Entry(built.key, dict(built.meta), _kernel_configs(built),
                       {name: k.source for name, k in kernels.items()}, built.compiled.program.plan(),
                       dict(built.compiled.ir), {name: log_ for name, log_ in built.tuning_log.items() if name in kernels},
                       verification)


def keep_verification(request: BuildRequest, built: Built, report) -> None:
    """Store ``built`` with its passing verification ``report`` (a report that did not pass is not kept)."""
    request.store.save(entry_of(built, report.to_dict()))


def recorded_race(built: Built, tuner_config: TunerConfig) -> dict | None:
    """How ``built``'s program fared against the PyTorch ops it replaces when a first call on this device checked
    it (``{"amk_ms", "pytorch_ms", "verified"}``; see :func:`record_race`), or None: only a program that came from
    the cache has one, as the same program, configured alike, raced before."""
    if not built.cache_hit:
        return None
    race = cache.store_for(tuner_config.target_cache_dir).race(_race_key(built))
    try:
        times = [float(race[name]) for name in ("amk_ms", "pytorch_ms")]
        verified = race["verified"]
    except (KeyError, TypeError, ValueError):  # none recorded, or a record this version does not read
        return None
    if not all(math.isfinite(ms) and ms > 0 for ms in times) or not isinstance(verified, bool):
        return None
    return {"amk_ms": times[0], "pytorch_ms": times[1], "verified": verified}


def record_race(built: Built, tuner_config: TunerConfig, amk_ms: float, pytorch_ms: float, verified: bool) -> None:
    """Keep the times of ``built``'s program and of the PyTorch ops it replaces, timed on a first call, and whether
    that call checked its outputs against theirs: a later process that loads the program from the cache decides
    with them instead of timing (and checking) it again."""
    cache.store_for(tuner_config.target_cache_dir).save_race(
        _race_key(built), {"program": built.key, "amk_ms": amk_ms, "pytorch_ms": pytorch_ms, "verified": verified})


def _race_key(built: Built) -> str:
    return cache.race_key(built.key, _kernel_configs(built))


def _kernel_configs(built: Built) -> dict[str, dict]:
    """Each kernel's configuration, by kernel name, as the cache keeps it."""
    return {name: kernel.config.as_dict() for name, kernel in built.compiled.kernels.items()}


def anonymous_text(module: ModuleOp) -> str:
    """The module's text without value names: the same ops on the same types make the same key (the identical
    layers of a model share one entry)."""
    from amk.ir_dump import module_text

    clone = module.clone()
    for op in clone.walk():
        for result in op.results:
            result.name_hint = None
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    arg.name_hint = None
    return module_text(clone)


# How many configurations that won for other kernels of the same family on this device seed a new kernel's search.
LEARNED_SEEDS = 4


def config_chooser(request: BuildRequest, tuning_log: dict, store: cache.Store | None = None,
                   recorded: dict | None = None, beaten_at_ms: float | None = None,
                   first_round_only: bool = False, not_searched: str = "") -> Callable:
    """How each kernel's configuration is chosen: timed on a GPU when asked to (trials timed before on this device
    and shapes are reused, new ones recorded), the heuristic otherwise (restricted to the grid when one is given);
    a kernel of symbolic sizes is timed, or given the heuristic, at the sizes of the request's ``size_hints``, and
    keeps the heuristic where they do not give every symbol a value (the tuner times concrete sizes). A kernel, of
    static or hinted sizes, that is bound by its launch there (:func:`amk.tuner.launch_bound_reason`) keeps it too;
    either way with one ``untimed`` trial in its log saying why. ``recorded``
    (configs kept or imported for this very build) wins over both. ``beaten_at_ms``: the time of the build's other
    program or of the module's PyTorch ops, the faster (:func:`amk.tuner.tune`'s). ``first_round_only``: each kernel
    that would be tuned only has its first round of candidates handed to the compile workers
    (:func:`amk.tuner.first_round_chooser`), nothing is timed or recorded, and the heuristic is returned.
    ``not_searched``: why every kernel keeps the heuristic (:func:`_not_worth_a_search`), where none is searched."""
    from amk.lowering.stage import kernel_problem
    from amk.pipeline import heuristic_config

    size_hints = dict(request.size_hints)

    def untimed(kernel) -> KernelConfig:
        heuristic = heuristic_config(kernel, size_hints)
        return heuristic if request.grid is None else untimed_in_grid(request.grid, heuristic, kernel, size_hints)

    chooser = untimed
    if request.timed:
        def timings(kernel) -> str:
            return cache.timing_key(str(kernel), request.shapes, size_hints, request.fp32_dot)

        def family(kernel) -> dict:
            """What makes another kernel's winner a good first guess for this one: the same tiling strategy, with or
            without a dot, element size and dot precision, on the same device."""
            _, _, contraction, element_bytes = kernel_problem(kernel, size_hints)
            return {"strategy": kernel.strategy.data, "has_dot": contraction is not None,
                    "element_bytes": element_bytes, "fp32_dot": request.fp32_dot, "device": cache.device_descriptor()}

        def record(kernel, config, trials):
            tuning_log[kernel.sym_name.data] = [t.as_dict() for t in trials]
            if store is not None:
                record_trials(store, timings(kernel), trials, {"kernel": kernel.sym_name.data,
                                                               "shapes": [list(s) for s in request.shapes],
                                                               **family(kernel)})

        known = (lambda kernel: known_trials(store, timings(kernel))) if store is not None else None
        learned = (lambda kernel: store.winners(family(kernel), LEARNED_SEEDS)) if store is not None else None
        settings = request.tuner_config or TunerConfig()
        tuned = (first_round_chooser(settings, request.grid, known, request.fp32_dot, size_hints, learned)
                 if first_round_only else
                 autotune_chooser(settings, request.grid, record, known, request.fp32_dot, size_hints, learned,
                                  beaten_at_ms))

        def untuned_reason(kernel) -> str | None:
            """Why ``kernel`` keeps the heuristic instead of being tuned, or None: sizes the tuner cannot give a value
            (symbols without a hint; workspace dims hold tile sizes too), or a launch-bound kernel."""
            if not_searched:
                return not_searched
            missing = ({s for arg in kernel.body.block.args for d in arg.type.dims for s in d.free_symbols}
                       - {p.data for p in kernel.tile_params.data} - set(size_hints))
            if missing:
                return f"sizes without a value to tune at ({', '.join(sorted(missing))})"
            return launch_bound_reason(kernel, size_hints)

        def chooser(kernel) -> KernelConfig:
            reason = untuned_reason(kernel)
            if reason is None:
                return tuned(kernel)
            log.info("%s keeps the heuristic configuration, not autotuned: %s", kernel.sym_name.data, reason)
            config = untimed(kernel)
            tuning_log[kernel.sym_name.data] = [Trial(config, "untimed", detail=reason).as_dict()]
            return config

        if hasattr(tuned, "search"):
            def search(kernel) -> None:
                """Search the kernels that ``chooser`` will tune (see :func:`amk.tuner.autotune_chooser`)."""
                if untuned_reason(kernel) is None:
                    tuned.search(kernel)

            chooser.search = search

    if not recorded:
        return chooser

    def choose(kernel) -> KernelConfig:
        name = kernel.sym_name.data
        if name in recorded["kernels"]:
            try:
                config = KernelConfig.from_dict(recorded["kernels"][name])
            except ValueError as error:
                log.warning("ignoring the recorded configuration of %s: %s", name, error)
                return chooser(kernel)
            log.info("using the recorded configuration of %s", name)
            if name in recorded.get("tuning_log", {}):
                tuning_log[name] = recorded["tuning_log"][name]
            return config
        return chooser(kernel)

    return choose


def known_trials(store: cache.Store, key: str) -> dict[str, Trial]:
    """The trials timed before for the timing ``key``, by config key (entries that do not read as trials skipped)."""
    known = {}
    for name, data in store.timings(key).items():
        try:
            known[name] = Trial.from_dict(data)
        except (KeyError, TypeError, ValueError):
            continue
    return known


def record_trials(store: cache.Store, key: str, trials, meta: dict | None = None) -> None:
    """Adds newly timed ``trials`` (not pruned, untimed or reused ones) to the timings of ``key``."""
    fresh = {config_key(t.config): t.as_dict() for t in trials if t.status in TIMED and not t.reused}
    if fresh:
        store.merge_timings(key, fresh, meta or {})


def _reached_through_elementwise(values, forward: bool):
    """The ops that read ``values`` (``forward``) or produce them, directly or through elementwise ops: each once."""
    from xdsl.ir import Operation

    from amk.lowering import rules

    frontier, seen = list(values), set()
    while frontier:
        value = frontier.pop()
        for op in [use.operation for use in value.uses] if forward else [value.owner]:
            if not isinstance(op, Operation) or op in seen:  # a block argument has no producer
                continue
            seen.add(op)
            yield op
            if rules.kind_of(op) == "elementwise":
                frontier.extend(op.results if forward else op.operands)


def _row_reduction_follows_matmul(module) -> bool:
    """Whether a row reduction reads one of the module's matmuls, directly or through elementwise ops: the fused kernel
    then runs the reduction's epilogue after its MMAs, and the vendor GEMM with the rest fused may be faster."""
    from amk.lowering import rules

    matmul_results = [result for op in module.walk() if rules.is_matmul(op) for result in op.results]
    return any(rules.kind_of(op) == "reduction" for op in _reached_through_elementwise(matmul_results, forward=True))


# A norm whose output is a matmul's lhs runs in the fused kernel's K loop, on every tile of the lhs it loads. At decode
# sizes that saves a launch; at the Llama MLP's prefill (4096 rows) the fused dual GEMM ran at 290 TFLOP/s, 3.3 ms
# against PyTorch's 2.0-2.2 for the whole MLP (2026-12-02-h200-row-profile-llama-prefill.log). From this many rows
# the program with the norm as a row kernel before the vendor GEMMs is timed too.
PROLOGUE_VENDOR_MIN_ROWS = 256


def _matmul_has_a_costly_prologue(module, size_hints: dict[str, int]) -> bool:
    """Whether a matmul of at least ``PROLOGUE_VENDOR_MIN_ROWS`` rows (at the size hints) reads, as its lhs, directly
    or through elementwise ops, a norm-like row reduction (one that keeps its input's shape) or a cast: the fused
    kernel then applies it as a prologue on every lhs tile it loads. A cast is autocast's: fp32 activations read and
    converted in the K loop, without TMA, ran the Linear's GEMM in 95 us against cuBLAS's 45 on bf16 operands cast
    beforehand (1024 x 4096 x 4096 on the H100, 2026-12-05-h100-profile-autocast-44)."""
    from amk.dialects.tensor_op import CastOp, tensor_type
    from amk.lowering import rules
    from amk.symbolic import evaluate

    for matmul in (op for op in module.walk() if rules.is_matmul(op) and not op.lhs_transposed):
        try:
            rows = math.prod(evaluate(dim, size_hints) for dim in tensor_type(matmul.output).dims[:-1])
        except (ValueError, ArithmeticError):  # a size without a hint, or none at these hints
            continue
        if rows < PROLOGUE_VENDOR_MIN_ROWS:
            continue
        producers = _reached_through_elementwise([matmul.lhs], forward=False)
        if any(isinstance(op, CastOp) or rules.kind_of(op) == "reduction" and rules.ROW_REDUCTIONS[type(op)].keeps_shape
               for op in producers):
            return True
    return False


def _function(module):
    """The module's one ``func.func``."""
    from xdsl.dialects import func

    (function,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    return function


def _arguments(module) -> list:
    """The arguments of the module's one function."""
    return list(_function(module).body.block.args)


def _argument_dtypes(module) -> list[torch.dtype]:
    """The element type of each argument of the module's function, in order (a captured subgraph's may differ: a
    bf16 model that keeps its norms' weights in fp32)."""
    from amk.dtypes import to_torch

    return [to_torch(argument.type.element_type) for argument in _arguments(module)]


def _tries_the_vendor_program(request: BuildRequest, module) -> bool:
    """Whether the build times the program that leaves the matmuls to the vendor library against the fused one:
    asked for, on a GPU, every argument a floating-point type of two bytes or more (fp8 has no plain vendor GEMM in
    PyTorch), every size known at the bucket's hints, and a program the vendor GEMM may speed up."""
    return (request.timed and (request.tuner_config or TunerConfig()).vendor_gemm
            and all(dtype.is_floating_point and dtype.itemsize > 1 for dtype in _argument_dtypes(module))
            and _shapes_at_hints(request) is not None
            and _vendor_gemm_may_win(module, request.fp32_dot, dict(request.size_hints)))


def _program_tolerance(module) -> float:
    """The tolerance (``amk.verification.TOLERANCES``) of the least precise dtype a program computes in: one of its
    arguments', or a narrower one its ops cast to (bf16 under autocast, from fp32 arguments)."""
    from amk.dialects.tensor_op import TensorType
    from amk.dtypes import to_torch
    from amk.verification import TOLERANCES

    computed = {to_torch(result.type.element_type) for op in module.walk() for result in op.results
                if isinstance(result.type, TensorType)}
    return max(TOLERANCES.get(each, 1e-2) for each in computed | set(_argument_dtypes(module)))


def _vendor_gemm_may_win(module, fp32_dot: str, size_hints: dict[str, int]) -> bool:
    """Whether the program that leaves the matmuls to the vendor library is worth timing against the fused one: where
    a row reduction follows a matmul (its epilogue then runs after the fused kernel's MMAs), where a norm or a cast
    precedes a matmul of many rows (:func:`_matmul_has_a_costly_prologue`), where a Linear's bias and activation
    can be the vendor GEMM's epilogue (``amk-vendor-epilogues``: cuBLASLt's ReLU or tanh GELU), and for every matmul
    of fp32 dots under PyTorch's "highest" (IEEE dots run on the CUDA cores; cuBLAS's fp32 GEMM is faster)."""
    from amk.dialects.tensor_op import tensor_type
    from amk.dtypes import to_ir
    from amk.lowering import rules
    from amk.passes.vendor_epilogues import linear_epilogue

    matmuls = [op for op in module.walk() if rules.is_matmul(op)]
    if fp32_dot == "ieee" and any(tensor_type(op.lhs).element_type == to_ir(torch.float32) for op in matmuls):
        return True
    epilogues = [linear_epilogue(op) for op in matmuls]
    return (_row_reduction_follows_matmul(module) or _matmul_has_a_costly_prologue(module, size_hints)
            or any(epilogue is not None and epilogue.activation for epilogue in epilogues))


# From this many rows, columns and terms (at a bucket's hints: its largest row count, so 129 rows are judged at 256), a
# GEMM of 16-bit floats (or of fp32 under TF32) is compute-bound, cuBLAS's ground: amk's kernels have not beaten
# PyTorch's F.linear there where they had nothing else to fuse. BERT's q/k/v projections (4096 x 768 x 768, fp16, on
# an H100) searched 52 candidates for 10.8 s of an 11.3 s first call, and lost the race 0.0332 ms against 0.0299
# (2026-12-06-h100-models-53-before). Decode's skinny GEMMs (split_k) do beat it.
GEMM_ALONE_MIN_SIZE = 256


def _not_worth_a_search(request: BuildRequest, module) -> str:
    """Why the module's kernels keep their heuristic configurations without a search, or "": where the caller races
    the program against the module's ops as PyTorch runs them (``BuildRequest.raced_against_pytorch``) and those ops
    are GEMMs alone (:func:`amk.reference.runs_only_gemms`: a Linear's product with its bias one F.linear), each with
    at least :data:`GEMM_ALONE_MIN_SIZE` rows, columns and terms at the hints, on tensor cores in PyTorch too (16-bit
    floats, or fp32 under TF32; under "highest" PyTorch's fp32 GEMM runs IEEE, which amk's TF32X3 kernels beat). The
    program then saves at most the reading of an input that two GEMMs share, little next to compute-bound GEMMs, and
    only a faster GEMM than cuBLAS's could win the race; the race still runs, and the faster of the two runs."""
    from amk.dialects.tensor_op import tensor_type
    from amk.dtypes import to_ir
    from amk.lowering import rules
    from amk.reference import runs_only_gemms
    from amk.symbolic import evaluate

    if not (request.raced_against_pytorch and request.timed and runs_only_gemms(_function(module))):
        return ""
    tensor_cores = {to_ir(torch.float16), to_ir(torch.bfloat16)} | (
        {to_ir(torch.float32)} if request.fp32_dot == "tf32" else set())
    size_hints = dict(request.size_hints)
    fewest_rows = math.inf
    for matmul in (op for op in module.walk() if rules.is_matmul(op)):
        if tensor_type(matmul.lhs).element_type not in tensor_cores:
            return ""
        lhs, output = tensor_type(matmul.lhs).dims, tensor_type(matmul.output).dims
        try:
            rows = math.prod(evaluate(dim, size_hints) for dim in output[:-1])
            terms = evaluate(lhs[-2 if matmul.lhs_transposed else -1], size_hints)
            columns = evaluate(output[-1], size_hints)
        except (ValueError, ArithmeticError):  # a size without a hint
            return ""
        if min(rows, columns, terms) < GEMM_ALONE_MIN_SIZE:
            return ""
        fewest_rows = min(fewest_rows, rows)
    return (f"its ops are GEMMs alone, of {fewest_rows} rows or more, which PyTorch runs as cuBLAS's GEMMs (with a "
            "Linear's bias in the GEMM): the program saves no pass over them but a shared input's reading, and is "
            "raced against them untuned")


def _operands_outgrow_a_launch(request: BuildRequest, dtypes: Sequence[torch.dtype] | None = None) -> bool:
    """Whether the request's operands alone move more bytes than a kernel bound by its launch may
    (:data:`amk.tuner.LAUNCH_BOUND_BYTES`): the kernel that reads them is tuned. ``dtypes``: each operand's, where
    they differ (read from the module); by default the request's one dtype."""
    shapes = _shapes_at_hints(request)
    if dtypes is None and request.dtype is not None and shapes is not None:
        dtypes = [request.dtype] * len(shapes)
    if shapes is None or dtypes is None:
        return False
    return sum(math.prod(shape) * dtype.itemsize for shape, dtype in zip(shapes, dtypes, strict=True)) \
        > LAUNCH_BOUND_BYTES


def _shapes_at_hints(request: BuildRequest) -> list[tuple[int, ...]] | None:
    """The operands' shapes with each symbolic size at its size hint (a size bucket's); None when a size has none."""
    hints = dict(request.size_hints)
    try:
        return [ShapeFunction.from_texts([str(size) for size in shape])(hints) for shape in request.shapes]
    except KeyError:  # a symbol without a hint
        return None


def _compile_first_round(request: BuildRequest, module, store: cache.Store, vendor_gemm: bool = False) -> None:
    """Hand the first round of each kernel's candidates (the fused program's, or with ``vendor_gemm`` the vendor
    program's) to the compile workers before the program with the vendor GEMM is tuned: their compiles (a tile_stats
    GEMM's took 1.5-4.6 s each on the H200 host) run while it is, and the program's tuning finds them in flight or
    done. Runs the passes on a copy of ``module``; a failure is the program's own build to report."""
    from amk.pipeline import compile_module

    program = "vendor" if vendor_gemm else "fused"
    try:
        compile_module(module.clone(), config_chooser(request, {}, store, first_round_only=True),
                       pipeline=request.pipeline, vendor_gemm=vendor_gemm, fp32_dot=request.fp32_dot,
                       size_hints=dict(request.size_hints))
    except Exception as error:
        log.debug("the %s program's first round was not compiled ahead: %s: %s", program, type(error).__name__, error)


@dataclass
class _VendorProgram:
    """The build's program with the vendor GEMM: tuned, the random inputs it was timed on, its time, and the values of
    the size symbols at those inputs (the bucket's hints: a symbol that the arguments' shapes show only inside an
    expression, a key length ``s7 + 1``, is not bound from them)."""

    compiled: CompiledProgram
    tuning_log: dict[str, list[dict]]
    inputs: list[torch.Tensor]
    time_ms: float
    bindings: dict[str, int]

    def run(self, program: CompiledProgram) -> list[torch.Tensor]:
        """``program`` (this one, or the fused program raced against it) on the inputs this one was timed on."""
        return program.program(*self.inputs, bindings=self.bindings)


# The vendor program is tuned with this share of the search budget: its kernels are row passes (its matmuls are the
# vendor library's), which search half of what they are given (``amk.tuner.ROW_PASS_BUDGET_SHARE``), so 2 candidates
# at the default budget of 16: the heuristic and the strategy's first prior. In three cold builds on an H100
# (2026-12-07-h100-build-60-*.log) its search of 8 and 3 finalists kept the heuristic or a configuration within 0.5%
# of it, while its compiles went to the workers ahead of the fused program's first round (jobs someone waits for come
# first), which the fused program's tuning then waited for.
VENDOR_PROGRAM_SEARCH_SHARE = 0.25


def _vendor_program_request(request: BuildRequest) -> BuildRequest:
    """``request`` with the vendor program's share of the search budget (``VENDOR_PROGRAM_SEARCH_SHARE``)."""
    settings = request.tuner_config or TunerConfig()
    return dataclasses.replace(request, tuner_config=dataclasses.replace(
        settings, search_budget=max(1, math.ceil(settings.search_budget * VENDOR_PROGRAM_SEARCH_SHARE))))


def _vendor_program(request: BuildRequest, module, store: cache.Store) -> _VendorProgram | None:
    """The program that leaves the matmuls to the vendor library (the passes run on a copy of ``module``), tuned as
    ``request`` says (:func:`_vendor_program_request`'s smaller search) and timed on random inputs of the request's
    shapes; None, reported, where it cannot be built or run: it is an alternative, the fused program stands."""
    from amk.pipeline import compile_module

    shapes, tuning_log = _shapes_at_hints(request), {}
    settings = request.tuner_config or TunerConfig()
    try:
        compiled = compile_module(module.clone(), config_chooser(request, tuning_log, store),
                                  pipeline=request.pipeline, vendor_gemm=True, fp32_dot=request.fp32_dot,
                                  size_hints=dict(request.size_hints))
        inputs = _example_inputs(request, module, shapes)
        bindings = dict(request.size_hints)
        time_ms = measure(lambda: compiled.program(*inputs, bindings=bindings), settings.warmup_runs,
                          settings.measure_runs)
    except Exception as error:  # e.g. a dtype the vendor library has no GEMM for
        log.warning("the program with the vendor GEMM failed (%s: %s); keeping the fused program",
                    type(error).__name__, error)
        return None
    return _VendorProgram(compiled, tuning_log, inputs, time_ms, bindings)


def _example_inputs(request: BuildRequest, module, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    """Random inputs of ``shapes`` (the request's at its hints) for timing whole programs on the GPU. Matmul weights
    are scaled by 1/sqrt(K), so that outputs stay O(1) however many matmuls the program chains (a gated MLP's at
    scale 1 overflow fp16); a subgraph's one-element inputs are the constants of its ops (an eps, a divisor): 1, not
    a random sign that would make NaNs."""
    from amk.verification import random_inputs

    inputs = random_inputs(shapes, _argument_dtypes(module), "cuda", scales=_weight_scales(module, shapes))
    if not request.ops:
        for tensor in inputs:
            if tensor.numel() == 1:
                tensor.fill_(1.0)
    return inputs


def _time_pytorch_ops(request: BuildRequest, module, times: dict[str, float]) -> None:
    """Time the module's ops as PyTorch runs them (:func:`amk.reference.as_pytorch_runs`: one by one, a Linear's
    product and bias in one call) on random inputs of the request's shapes, as the tuner times a candidate, into
    ``times["pytorch_ops"]``: the time a kernel must beat for its refinement to be worth its seconds, where the caller
    runs the faster of the two (``BuildRequest.raced_against_pytorch``). Nothing where a size has no value at the
    hints or the ops do not run on such inputs: the kernels are then refined as usual."""
    from amk.reference import as_pytorch_runs

    shapes = _shapes_at_hints(request)
    # Integer operands (indices) drawn at random could fault the device; masks are drawn as the tuner draws them.
    if shapes is None or not all(dtype.is_floating_point or dtype == torch.bool for dtype in _argument_dtypes(module)):
        return
    settings = request.tuner_config or TunerConfig()
    try:
        run, inputs = as_pytorch_runs(_function(module)), _example_inputs(request, module, shapes)
        with torch.no_grad():
            # As replays: the ops' GPU time, without the Python that runs them one by one (BERT's three projections,
            # evaluated op by op, timed 0.103 ms by events on an H100, against 0.029 as PyTorch runs them).
            times["pytorch_ops"] = measure(lambda: run(inputs), settings.warmup_runs, settings.measure_runs,
                                           graph_below=math.inf)
    except Exception as error:  # the race on the caller's inputs decides anyway
        log.info("the module's PyTorch ops were not timed (%s: %s); every kernel is refined", type(error).__name__,
                 error)


def _weight_scales(module, shapes: list[tuple[int, ...]]) -> list[float]:
    """Per argument of the module's function: 1/sqrt(K) where it is a matmul's rhs (a weight), else 1."""
    from amk.lowering import rules

    arguments = _arguments(module)
    scales = [1.0] * len(shapes)
    for matmul in (op for op in module.walk() if rules.is_matmul(op)):
        if matmul.rhs in arguments:
            index = arguments.index(matmul.rhs)
            scales[index] = 1.0 / math.sqrt(shapes[index][-1 if matmul.rhs_transposed else -2])
    return scales


def _outrun_by_vendor(fused_log: dict[str, list[dict]], vendor: _VendorProgram, times: dict[str, float]) -> bool:
    """Whether one of the fused program's kernels, at the best time it was measured at while tuned, already takes
    more than ``OUTRUN_MARGIN`` times the program with the vendor GEMM: the fused program, which runs it, loses their
    race, which is then not run (it would compile the fused program's untuned kernels first: 1.2-1.8 s of a Linear +
    norm row's first call on the H200). The slowest kernel, not their sum: each was timed from a cold L2, and in the
    program a kernel may find its producer's output still there. ``times`` receives both. Only where the vendor
    program takes ``GRAPH_TIMING_BELOW_MS`` or more: then it and every kernel slower than it were timed alike, by
    events. The vendor program is then kept without being compared with the fused one's outputs; the verification
    of the build (``verify``) checks it as it checks any program."""
    if vendor.time_ms < GRAPH_TIMING_BELOW_MS:
        return False
    slowest = max((min((trial["time_ms"] for trial in trials if trial.get("status") == "ok"), default=0.0)
                   for trials in fused_log.values()), default=0.0)
    if slowest <= vendor.time_ms * OUTRUN_MARGIN:
        return False
    times.update({"fused_kernel_alone": slowest, "vendor_gemm": vendor.time_ms})
    log.info("whole programs: a kernel of the fused one alone %.4f ms, vendor GEMM + fused rest %.4f ms: not raced",
             slowest, vendor.time_ms)
    return True


def _faster_with_vendor_gemm(fused: CompiledProgram, vendor: _VendorProgram, tolerance: float, request: BuildRequest,
                             times: dict[str, float]) -> bool:
    """Whether the program with the vendor GEMM computes what the fused one does on its inputs (every output
    compared, within twice the ``tolerance`` of the dtypes they compute in) and is faster, both timed again side by
    side (their times put in ``times``)."""
    try:
        expected, got = vendor.run(fused), vendor.run(vendor.compiled)
    except Exception as error:
        log.warning("the fused program failed on the vendor program's inputs (%s: %s); keeping the fused program",
                    type(error).__name__, error)
        return False
    for want, have in zip(expected, got, strict=True):
        with phase("verify"):
            difference = relative_error(have.float(), want.float())
        if not difference <= 2 * tolerance:
            log.warning("the program with the vendor GEMM differs from the fused one (relative error %.2e); keeping "
                        "the fused program", difference)
            return False
    faster, measured, _ = fastest_program({"fused": lambda: vendor.run(fused),
                                           "vendor_gemm": lambda: vendor.run(vendor.compiled)},
                                          request.tuner_config or TunerConfig())
    times.update(measured)
    log.info("whole programs: fused %.4f ms, vendor GEMM + fused rest %.4f ms", times["fused"], times["vendor_gemm"])
    return faster == "vendor_gemm"
