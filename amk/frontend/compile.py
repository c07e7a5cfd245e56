"""``amk.compile``, the ``"amk"`` TorchDynamo backend, and ``amk.explain``.

How a model runs::

    amk.compile(model)  ──TorchDynamo──►  FX graph (torch level)  ──amk_backend──►  GraphModule
                                              │ analyze: which nodes have a tensor_op equivalent (and why not)
                                              │ partition: connected runs of supported nodes (no cycles)
                                              │ import each run → func.func of tensor_op → amk pipeline → kernels
                                              ▼
                        each run replaced by a call to a FusedSubgraph module; the rest stays PyTorch

The modules behind it, each importing at run time only those before it: :mod:`~amk.frontend.spellings` and
:mod:`~amk.frontend.nodes` (reading FX nodes), :mod:`~amk.frontend.importer` (building the ``tensor_op`` function of
a run), :mod:`~amk.frontend.converters` and :mod:`~amk.frontend.patterns` (what each node becomes),
:mod:`~amk.frontend.analysis` (which nodes are imported, and why not); :mod:`~amk.frontend.settings`,
:mod:`~amk.frontend.stats`, :mod:`~amk.frontend.reports` (what ``amk.explain`` shows), :mod:`~amk.frontend.subgraph`
(the :class:`~amk.frontend.subgraph.FusedSubgraph` that runs the kernels, with its backward and fallback) and
:mod:`~amk.frontend.backend` (the graph compiler and :func:`amk_backend`). This module holds the entry points.

Dynamic shapes: ``amk.compile`` marks every leading dim of the tensor arguments dynamic (``maybe_mark_dynamic``;
every dim of integer and boolean ones: token ids, positions, masks) and traces with ``backed_size_oblivious`` so
that a size of 1 is not specialized (the first tensor argument's first dim only, its batch: other size-1 dims usually
broadcast or are tested, and are static but for other arguments' batch: ``_mark_leading_dims``); the imported IR then
has symbolic dims (``s77``), so one graph and one kernel source per strategy serve every batch and sequence size. Each
size bucket of the row count is built (strategy and configuration chosen, tuned on a GPU) for its sizes, the first
time a call falls into it or ahead with ``tune_sizes`` (:mod:`~amk.frontend.buckets`); the subgraph picks the
bucket's kernels at each call, without TorchDynamo recompiling. ``STATS`` counts graphs and compiles.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import inspect
import itertools
import logging
import os
import sys
import threading
import types
from collections.abc import Callable, Iterable, Sequence

import torch
from torch.utils import _pytree as pytree

from amk.build import expect_tuned_builds
from amk.environment import being_traced, initialize
from amk.errors import InvalidArgumentError
from amk.frontend.backend import BACKEND_NAME, TRACE_AGAIN_POSSIBLE, SizeOneKeptSymbolic, amk_backend, register_backend
from amk.frontend.graphs import CUDAGraphed, cuda_graphed
from amk.frontend.reports import ExplainReport
from amk.frontend.settings import Settings, make_settings
from amk.frontend.stats import STATS

log = logging.getLogger("amk.frontend")

# Kept importable from here: the ``torch_dynamo_backends`` entry point names ``amk.frontend.compile:amk_backend``.
__all__ = ["STATS", "CompiledModule", "ExplainReport", "amk_backend", "clear_cache", "compile", "explain",
           "make_settings", "register_backend"]


def clear_cache(cache_dir=None) -> None:
    """Remove the compiled programs of the cache directory (``cache_dir``, else ``AMK_CACHE_DIR`` or the user cache
    directory), as ``amk cache clear`` does: the next compilation of each subgraph runs the passes again. Kernels
    already in use keep working; tuned configurations and timings stay."""
    from amk import cache
    from amk.tuner import check_directory_argument

    check_directory_argument(cache_dir, "clear_cache's cache_dir")
    cache.store_for(cache_dir).clear()


def _size_oblivious_config():
    """torch's config module holding ``backed_size_oblivious`` (tracing without specializing sizes 0 and 1, so that a
    batch of 1 gets the same symbolic kernel), or None in a torch without it."""
    config = getattr(torch.fx.experimental, "_config", None)
    return config if config is not None and hasattr(config, "backed_size_oblivious") else None


def _leading_dims(values):
    """``(tensor, axis)`` for every leading dim (all but the last: features) of the floating-point tensor arguments in
    ``values`` (nested in lists, tuples and dicts too), parameters aside, and every dim of the integer and boolean
    ones (token ids [B, T], positions [T], padding masks [B, S]: their last dim is a sequence, not features)."""
    for value in values:
        if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
            numbers = value.is_floating_point() or value.is_complex()
            for axis in range(value.dim() - 1 if numbers else value.dim()):
                yield value, axis
        elif isinstance(value, list | tuple):
            yield from _leading_dims(value)
        elif isinstance(value, dict):
            yield from _leading_dims(value.values())


# A dim of size 1 is marked dynamic on the first tensor argument's first dim only: a batch of 1 of the model's input
# then serves every batch. Not on other arguments: a dim marked dynamic is traced as "not 1", so one that broadcasts
# (RoPE's cos [1, 1, T, D], a causal mask [1, 1, T, T]) either fails the trace or is guarded equal to the batch, a
# compile more for every new batch (a call whose trace fails with them marked is traced again with none: see
# _Caller). Other dims of size 1 (a decoding step's one token, in the input ids, the position ids [B, 1] or the
# cache position [1]) are marked static, as torch.compile has them: models test them (Hugging Face's
# ``is_causal = q_len > 1 and ...``), and traced symbolic, as TorchDynamo's automatic dynamic shapes would keep them
# under backed_size_oblivious, the test is a SymBool where PyTorch takes a bool (a graph break at
# scaled_dot_product_attention, then a recompile per layer). Only other arguments' batch is left to TorchDynamo (a
# mask [1, S] after [B, S] then serves every batch).


def _mark_leading_dims(values, first_size_one: bool) -> bool:
    """Mark the leading dims of the tensor arguments dynamic, the first tensor argument's first dim too where it is 1
    and ``first_size_one``, and the other dims of size 1 static but for other arguments' batch (the first dim of a
    tensor of two dims or more); whether a dim of size 1 was marked dynamic."""
    marked_size_one = False
    first = None
    for tensor, axis in _leading_dims(values):
        first = tensor if first is None else first
        if tensor.shape[axis] != 1:
            torch._dynamo.maybe_mark_dynamic(tensor, axis)
        elif tensor is first and axis == 0 and first_size_one:
            torch._dynamo.maybe_mark_dynamic(tensor, axis)
            marked_size_one = True
        elif tensor is first or axis > 0 or tensor.dim() == 1:
            _mark_static(tensor, axis)
    return marked_size_one


def _mark_static(tensor: torch.Tensor, axis: int) -> None:
    """Mark a dim of size 1 static, unless it is marked dynamic already (by the user, or by amk on an earlier call of
    the same tensor: TorchDynamo gives that mark precedence, and a mark taken back would change its guards)."""
    if axis not in getattr(tensor, "_dynamo_dynamic_indices", ()) and \
            axis not in getattr(tensor, "_dynamo_weak_dynamic_indices", ()):
        torch._dynamo.mark_static(tensor, axis)


def _unmark_size_one_dims(values) -> None:
    """Take back the first tensor argument's dynamic mark of a dim of size 1 (``maybe_mark_dynamic`` keeps its marks
    in this set; torch has no call that removes one) and mark it static, as later calls' are (TorchDynamo guards the
    marks: a trace with that dim unmarked would not serve them)."""
    first = next(_leading_dims(values), (None, None))[0]
    for tensor, axis in _leading_dims(values):
        if tensor is first and tensor.shape[axis] == 1:
            getattr(tensor, "_dynamo_weak_dynamic_indices", set()).discard(axis)
            _mark_static(tensor, axis)


def _dynamo_sources() -> str:
    """The folder of TorchDynamo's own files (with a trailing separator), whose frames are not the model's."""
    return os.path.dirname(torch._dynamo.__file__) + os.sep


def _nothing_ran_before_the_trace(error: Exception) -> bool:
    """Whether the frames executing when TorchDynamo's trace failed with ``error`` were this module's and torch's call
    machinery only (``Module.__call__``, TorchDynamo's entry and frame conversion): no frame of the model was running
    (the caller of a callee traced on its own, the frame a resumed function continues), so the failed trace was the
    call's first. Read from the error's own traceback, so that traces in other threads do not count."""
    codes = []
    frame = error.__traceback__
    while frame is not None:
        codes.append(frame.tb_frame.f_code)
        frame = frame.tb_next
    return _call_machinery_only(codes)


def _call_machinery_only(codes: Sequence[types.CodeType]) -> bool:
    """Whether the frames of ``codes`` (outermost first), up to TorchDynamo's frame conversion, are this module's and
    torch's call machinery only (see :func:`_nothing_ran_before_the_trace`)."""
    dynamo = _dynamo_sources()
    module_call = torch.nn.Module._call_impl.__code__.co_filename
    for code in codes:
        if code.co_filename == os.path.join(dynamo, "convert_frame.py"):
            return True
        if not (code.co_filename in (__file__, module_call) or code.co_filename.startswith(dynamo)):
            return False
    return False


def _size_one_kept_symbolic(error: Exception) -> bool:
    """Whether ``error`` is the backend's :class:`SizeOneKeptSymbolic` (raised only where the call can be traced
    again)."""
    return isinstance(getattr(error, "inner_exception", error), SizeOneKeptSymbolic)


def _trace_to_make_again(error: Exception) -> bool:
    """Whether TorchDynamo's ``error`` is one a trace made again may avoid: a failure while it traced on fake tensors,
    or a trace that kept a dim of size 1 symbolic where a static 1 matters."""
    return isinstance(error, torch._dynamo.exc.TorchRuntimeError) or _size_one_kept_symbolic(error)


def _signature(args: tuple, kwargs: dict) -> tuple | None:
    """What, of a call's arguments, makes TorchDynamo compile its frame again in practice: each tensor's shape,
    strides, dtype, device and whether it requires grad, each scalar's type and value, and the keywords; None where an
    argument is anything else (a container, a tensor subclass, an object whose insides may be guarded)."""
    parts: list = [tuple(kwargs)]
    for value in (*args, *kwargs.values()):
        if type(value) is torch.Tensor:
            parts.append((value.shape, value.stride(), value.dtype, value.device, value.requires_grad))
        elif value is None or type(value) in (bool, int, float, str):
            parts.append((type(value), value))
        else:
            return None
    return tuple(parts)


def _global_state():
    """TorchDynamo's own snapshot of the global state its guards check (grad mode, autocast, default dtype,
    deterministic algorithms, ...): ``check()`` says whether it still holds. None in a torch without it."""
    try:
        from torch._C._dynamo.guards import GlobalStateGuard
    except ImportError:
        return None
    return GlobalStateGuard()


def _entry_codes(function: Callable | None) -> tuple[types.CodeType, ...]:
    """The code of the frame TorchDynamo traces first when ``function`` is called, with the code of what it wraps:
    a decorated function's wrapper (``@torch.no_grad()``'s) is that frame and the functions under it
    (``__wrapped__``) are traced inside it; a ``functools.partial``'s function; a callable object's ``__call__``."""
    codes = []
    while function is not None and len(codes) < 16:  # a __wrapped__ chain that loops ends somewhere
        if isinstance(function, functools.partial):
            function = function.func
            continue
        code = getattr(function, "__code__", None)
        if code is None:  # a callable object: its class's __call__, unless that is a builtin's
            call = inspect.getattr_static(type(function), "__call__", None)
            function = call if isinstance(call, types.FunctionType) else None
            continue
        codes.append(code)
        function = getattr(function, "__wrapped__", None)
    return tuple(codes)


class _Caller:
    """Calls the Dynamo-compiled callable with amk's dynamic-shape treatment of the arguments: leading dims marked
    dynamic, and ``backed_size_oblivious`` on while Dynamo may trace the call (a call whose arguments differ from the
    last one's, see :func:`_signature`). The flag is set and put back by hand: ``config.patch`` costs about 30 us a
    call, more than a compiled graph's call itself."""

    def __init__(self, compiled: Callable, dynamic: bool | None, module: torch.nn.Module | None = None,
                 entry: Callable | None = None, expect_builds: Callable[[Iterable[torch.Tensor]], None] | None = None):
        self.compiled = compiled
        # A torch.compile'd module's forward, without OptimizedModule.__call__: that only warns of global module hooks
        # (which then fire as in the module itself) and flags the call for torch.distributed's module tracker, in
        # about 10 us a call.
        from torch._dynamo.eval_frame import OptimizedModule

        self.call = compiled.forward if isinstance(compiled, OptimizedModule) else compiled
        self.dynamic = dynamic
        self.module = module
        self.size_oblivious = _size_oblivious_config()
        self.compiled_for: tuple | None = None  # the last marked call's _signature, with the module's mode
        self.global_state = None  # TorchDynamo's global state at that call (_global_state)
        # Whether the first tensor argument's dims of size 1 are marked dynamic too: not once a trace failed with them.
        self.mark_size_one = True
        # The code TorchDynamo traces first at each call (the module's forward, or the function): a trace that failed
        # there failed before anything of the call ran.
        self.entry_codes = _entry_codes(type(module).forward if module is not None else entry)
        # Handed the first call's tensor arguments, then dropped: where the builds that call starts will be tuned,
        # their compile workers boot (seconds) while TorchDynamo traces it, not from the first build.
        self.expect_builds = expect_builds

    @property
    def training(self) -> bool | None:
        """The compiled module's mode (None for a function): part of a CUDA graph's signature."""
        return None if self.module is None else self.module.training

    def __call__(self, *args, **kwargs):
        if self.expect_builds is not None:
            expect, self.expect_builds = self.expect_builds, None
            expect([leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)])
        if self.dynamic is False:
            return self.call(*args, **kwargs)
        signature = (self.training, _signature(args, kwargs))
        if signature[1] is not None and signature == self.compiled_for and self.global_state is not None \
                and self.global_state.check():
            # Arguments like the last call's, for which TorchDynamo compiled the frame or found it compiled: it does
            # not trace this one, so neither the marks nor the flag are needed (together 10-15 us a call: a marked
            # tensor's guards run longer). What else makes it compile again (an edited module) is rare; such a compile
            # sees the leading dims unmarked, and TorchDynamo makes them dynamic when their sizes next change (one
            # compile more).
            return self.call(*args, **kwargs)
        marked_size_one = self.dynamic is None and _mark_leading_dims((args, kwargs),
                                                                      self.mark_size_one and self._forward_first())
        failed = None
        try:
            result = self._traced_call(args, kwargs)
        except (torch._dynamo.exc.TorchRuntimeError, torch._dynamo.exc.BackendCompilerFailed) as error:
            if not _trace_to_make_again(error):
                raise
            failed = error
        if failed is not None:
            # Out of the except block: a trace that fails again there logs and raises its own failure, without the
            # first one's chained in ("During handling of the above exception": 200 more lines for a model's error).
            result = self._call_again(args, kwargs, failed, marked_size_one)
        self.compiled_for, self.global_state = signature, _global_state()
        return result

    def _forward_first(self) -> bool:
        """Whether the call's first traced frame is the module's own forward (or the function): no forward pre-hook
        runs before it, nor a wrapper installed on the instance (as accelerate and PEFT do). Otherwise a trace that
        fails on a marked size-1 dim (a batch of 1 broadcast against a parameter) cannot be made again, part of the
        call having run, so such dims are not marked (a batch of 1, then another, compiles twice)."""
        module = self.module
        return module is None or not (module._forward_pre_hooks or "forward" in vars(module)
                                      or torch.nn.modules.module._global_forward_pre_hooks)

    def _call_again(self, args, kwargs, error: Exception, marked_size_one: bool):
        """The call made again after TorchDynamo's trace of it failed with ``error``: with the first argument's size-1
        dims static where they were marked dynamic (one broadcasts against a parameter's dim), then also without
        ``backed_size_oblivious`` (a dim TorchDynamo itself made dynamic, traced size-obliviously like amk's: a
        second argument's size-1 dim that broadcasts, [1, N] after [B, N], or a first argument's after a call where
        it was not 1; without the flag such a dim specializes to 1, a compile more). Each only while the failed trace
        was of the call's first frame, nothing of the call having run (:meth:`_failed_in_entry_frame`; the backend's
        :class:`SizeOneKeptSymbolic`, a trace that kept a dim of size 1 symbolic where a static 1 matters, is raised
        only then: :meth:`_may_trace_again`); else ``error`` reaches the caller, and later calls trace without the
        flag."""
        attempts = []
        if marked_size_one:
            # Later calls trace with no size-1 dim dynamic (those left static specialize: a batch of 1, then
            # another, compiles twice).
            self.mark_size_one = False
            _unmark_size_one_dims((args, kwargs))
            attempts.append(("with the first argument's size-1 dims static", lambda: self._traced_call(args, kwargs)))
        if self.size_oblivious is not None:
            attempts.append(("without backed_size_oblivious", lambda: self.call(*args, **kwargs)))
        for how, attempt in attempts:
            # (a size-1 dim kept symbolic is reported only where the call can be made again: _may_trace_again)
            if not (self._failed_in_entry_frame(error) or _size_one_kept_symbolic(error)):
                # The failed trace (a frame resumed after a graph break) would fail the same way on every later call.
                self.size_oblivious = None
                log.warning("amk.compile: TorchDynamo's trace failed after part of the call may have run, so the call "
                            "is not made again; later calls trace without backed_size_oblivious (a batch of 1 then "
                            "compiles graphs of its own): %s", str(error).splitlines()[0])
                break
            log.info("amk.compile: TorchDynamo's trace failed in the call's first frame (%s); tracing again %s",
                     str(error).splitlines()[0], how)
            try:
                return attempt()
            except (torch._dynamo.exc.TorchRuntimeError, torch._dynamo.exc.BackendCompilerFailed) as again:
                if not _trace_to_make_again(again):
                    raise
                error = again
        raise error

    def _may_trace_again(self) -> bool:
        """Whether the graph TorchDynamo compiles now (the caller being its compiler) is of this call's first frame,
        with nothing of the call run yet: no forward pre-hook or wrapper ran before it (:meth:`_forward_first`), and
        between this caller's frame and TorchDynamo's frame conversion there is call machinery only (a callee traced
        on its own, or a function resumed after a graph break, runs inside a frame of the model); never while
        TorchDynamo's ``suppress_errors`` is on, which would take the backend's request to trace again for a failure
        and run the frame untraced for good."""
        if torch._dynamo.config.suppress_errors:
            return False
        codes, frame = [], sys._getframe(1)
        while frame is not None and frame.f_code is not _Caller._traced_call.__code__:
            codes.append(frame.f_code)
            frame = frame.f_back
        return frame is not None and self._forward_first() and _call_machinery_only(codes[::-1])

    def _failed_in_entry_frame(self, error: Exception) -> bool:
        """Whether TorchDynamo's failed trace was of the call's own first frame, before any frame of the model ran
        (:func:`_nothing_ran_before_the_trace`), and the outermost user frame of the error's stack is a line of
        ``entry_codes`` (not a function resumed after a graph break, nor a callee traced on its own after its caller
        ran, which may share its name and file: another module's ``forward``): then the call can be made again."""
        # A module class of torch's own (nn.Sequential) is traced through a wrapper frame of TorchDynamo's first
        # (external_utils.wrap_inline), which is not the user's.
        dynamo_sources = _dynamo_sources()
        stack = list(itertools.dropwhile(lambda frame: frame.filename.startswith(dynamo_sources),
                                         getattr(error, "real_stack", None) or ()))
        # Name, file and line: a function resumed after a graph break (torch_dynamo_resume_in_forward_at_N) has the
        # file and lines of the one it resumes, another module's forward its name and maybe its file.
        return _nothing_ran_before_the_trace(error) and bool(stack) and any(
            stack[0].name == code.co_name and stack[0].filename == code.co_filename
            and stack[0].lineno in {line for *_, line in code.co_lines() if line is not None}
            for code in self.entry_codes)

    def _traced_call(self, args, kwargs):
        """The call with ``backed_size_oblivious`` on (TorchDynamo may trace it)."""
        if self.size_oblivious is None:
            return self.call(*args, **kwargs)
        token = TRACE_AGAIN_POSSIBLE.set(self._may_trace_again)
        try:
            with _SIZE_OBLIVIOUS_TRACING.on(self.size_oblivious):
                return self.call(*args, **kwargs)
        finally:
            TRACE_AGAIN_POSSIBLE.reset(token)


class _SizeObliviousTracing:
    """Turns torch's ``backed_size_oblivious`` on from the first call in flight that TorchDynamo may trace, in any
    thread, to the last one's end, then back to what it was: one thread's call ending does not turn it off under
    another thread's trace."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.before = False

    @contextlib.contextmanager
    def on(self, config):
        with self.lock:
            if self.calls == 0:
                self.before = config.backed_size_oblivious
                config.backed_size_oblivious = True
            self.calls += 1
        try:
            yield
        finally:
            with self.lock:
                self.calls -= 1
                if self.calls == 0:
                    config.backed_size_oblivious = self.before


_SIZE_OBLIVIOUS_TRACING = _SizeObliviousTracing()


def _compiled_caller(model_or_fn, settings: Settings, dynamic: bool | None,
                     cuda_graphs: bool) -> tuple[ExplainReport, _Caller | CUDAGraphed]:
    """``model_or_fn`` compiled by TorchDynamo with the amk backend (on its first call), called through
    :class:`_Caller`, and through CUDA graphs where ``cuda_graphs``; with the report of what it compiles (the graphs,
    and the code TorchDynamo keeps their compiled variants on)."""
    report = ExplainReport()
    settings = dataclasses.replace(settings, report=report.graphs.append)
    # The registered backend by its name, not a callable of ours: after a compile TorchDynamo drops its weak references
    # to the traced parameters for a registered backend only, and a parameter with one cannot be swapped
    # (torch.utils.swap_tensors: load_state_dict or .to() under swap_module_params_on_conversion, tensor subclasses).
    register_backend()  # for a source tree on sys.path, or a module unpickled in a new process
    compiled = torch.compile(model_or_fn, backend=BACKEND_NAME, options=settings.as_backend_options(), dynamic=dynamic)
    module = model_or_fn if isinstance(model_or_fn, torch.nn.Module) else None
    expect_builds = functools.partial(expect_tuned_builds, tuner_config=settings.tuner_config) \
        if settings.autotune else None
    caller = _Caller(compiled, dynamic, module, entry=None if module is not None else model_or_fn,
                     expect_builds=expect_builds)
    report.traced_code = caller.entry_codes[0] if caller.entry_codes else None
    return report, cuda_graphed(caller) if cuda_graphs else caller


@dataclasses.dataclass(frozen=True)
class _CompileOptions:
    """What :func:`compile` compiled a module with (its report aside): a copy of the module is compiled with them."""

    settings: Settings
    dynamic: bool | None
    cuda_graphs: bool


class CompiledModule(torch.nn.Module):
    """An ``nn.Module`` compiled by :func:`compile`: parameters are the original module's (``_orig_mod``).

    ``copy.deepcopy`` and pickling (``torch.save`` of the whole module) copy ``_orig_mod`` and the options of
    :func:`compile`, not what TorchDynamo compiled (its code objects can be neither copied nor pickled): the copy
    compiles its own ``_orig_mod`` on its first call, mostly from the kernel cache, with a report of its own. Each
    copy is a compile of the module class's ``forward`` more, and TorchDynamo's ``recompile_limit`` (8 per code
    object, as for separate ``amk.compile`` calls) applies: past it, further copies run in PyTorch with TorchDynamo's
    warning."""

    # What is the wrapper's own (these, nn.Module's bookkeeping in its __dict__, its class's attributes): set and
    # deleted on it; any other attribute is the model's (compiled.fc = layer, compiled.scale = 2.0), as on
    # torch.compile's module, so that calls see it.
    _OWN_ATTRIBUTES = frozenset({"_orig_mod", "_amk_options", "_amk_caller", "_amk_report"})

    def _is_own(self, name: str) -> bool:
        return (name in self._OWN_ATTRIBUTES or name in self.__dict__ or hasattr(type(self), name)
                or any(name in self.__dict__.get(kind, ()) for kind in ("_parameters", "_buffers", "_modules")))

    def __init__(self, module: torch.nn.Module, options: _CompileOptions):
        object.__setattr__(self, "_amk_initialized", False)  # nn.Module.__init__ sets training: the wrapper's own
        super().__init__()
        self._orig_mod = module
        object.__setattr__(self, "_amk_initialized", True)
        object.__setattr__(self, "_amk_options", options)
        self._compile_orig_mod()

    @property
    def training(self) -> bool:
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        if self.__dict__.get("_amk_initialized", True):  # (a module pickled by an amk before the flag has none)
            self._orig_mod.training = mode

    def __setattr__(self, name: str, value) -> None:
        if self._is_own(name):
            super().__setattr__(name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if self._is_own(name):
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __len__(self) -> int:
        return len(self._orig_mod)

    def __bool__(self) -> bool:  # else bool() would ask __len__, which a model without one refuses
        return bool(self._orig_mod)

    def _compile_orig_mod(self) -> None:
        report, caller = _compiled_caller(self._orig_mod, self._amk_options.settings, self._amk_options.dynamic,
                                          self._amk_options.cuda_graphs)
        object.__setattr__(self, "_amk_caller", caller)
        object.__setattr__(self, "_amk_report", report)  # what explain(compiled) shows

    def __getstate__(self):
        state = super().__getstate__()
        del state["_amk_caller"], state["_amk_report"]
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        initialize()  # an unpickling process may not have compiled anything yet
        self._compile_orig_mod()

    def forward(self, *args, **kwargs):
        if being_traced():  # called from a model being compiled: traced as the model, inlined
            return self._orig_mod(*args, **kwargs)
        return self._amk_caller(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_orig_mod"), name)  # compiled.fc is the model's fc


def compile(model_or_fn, example_inputs=None, *, autotune: bool = True, tuner_config=None, dump_ir=None,
            verify: bool = True, dynamic: bool | None = None, pipeline: str | None = None, tune_sizes=None,
            cuda_graphs: bool = False, sdpa_attention: bool = True):
    """Compile a model or function with TorchDynamo and the amk backend.

    Returns a callable with the same signature (an ``nn.Module`` sharing the parameters when given one; a deep copy
    of it, such as an EMA copy, or one loaded back by ``torch.load`` is a module of its own parameters, compiled again
    with the same options on its first call, mostly from the kernel cache). Supported runs of ops (Linear/matmul,
    norms, activations, residual adds, scaling, casts, softmax, log_softmax) become fused Triton kernels; everything
    else runs as PyTorch. ``dynamic=None`` (default) makes every leading dim of the floating-point
    tensor arguments symbolic (every dim of integer and boolean ones, such as token ids; dims of size 1 on the first
    tensor argument only, as other arguments' usually broadcast), so that changing the batch or sequence length does
    not recompile; ``True`` makes every dim symbolic, ``False`` none. Each symbolic size adds to TorchDynamo's work on
    every call (attention scores over q and k of four marked dims: 98 µs of host time a call against 80 with
    ``False`` on the H200): a model called with one shape only can pass ``False``.

    Size buckets: the kernels of a subgraph with dynamic sizes are built per bucket of its row count M (the product
    of its batch and sequence sizes: ``M = 1``, ``2..16``, ``17..64``, then each power of two), with the tiling
    strategy and the configuration chosen for that bucket (tuned on a GPU with ``autotune``), the first time a call
    falls into it; ``tune_sizes`` (a list of row counts M, e.g. ``[1, 16, 4096]``) builds those sizes' buckets
    ahead, while compiling. On a GPU with ``autotune``, the first call of each bucket also times its kernels against
    the PyTorch ops they replace on that call's inputs, and the faster runs the bucket from then on
    (:func:`explain` and the backend's report show, per bucket, what runs and the times that decided it).

    ``example_inputs`` (a tuple of arguments, or one tensor) compiles right away by calling the model once on them.
    ``dump_ir=DIR`` (or ``AMK_DUMP_IR=DIR``) writes each fused subgraph's IR after import and after every pass, and
    its Triton source (for the size bucket of the first call). ``verify=True`` checks each bucket's kernels against
    PyTorch on their first call; kernels that disagree leave that bucket to PyTorch. ``pipeline`` replaces the
    tensor-level passes (default ``"amk-duplicate-norm-prologues,amk-fuse"``). ``tuner_config.target_cache_dir``,
    when given, is where the compiled programs and the emitted Triton sources are kept.

    ``sdpa_attention=True`` (default) runs attention written op by op, ``softmax(q @ k^T * c + mask) @ v`` (Hugging
    Face's eager attention, nanoGPT's ``masked_fill(mask, -inf)``), as one call of PyTorch's
    ``scaled_dot_product_attention``, whose fused kernels never store the probabilities, as torch.compile rewrites it
    (:mod:`amk.frontend.attention` lists what matches); ``False`` leaves it to amk's kernels (the scores and their
    softmax in one, ``probs @ v`` in another).

    ``cuda_graphs=True`` runs each call through a captured CUDA graph, one per call signature (input shapes,
    dtypes, grad mode, ...), as torch.compile's ``mode="reduce-overhead"`` does: the host cost of a call becomes one
    graph launch (and one input copy, except while calls pass the first call's own tensors, which the graph then
    reads in place), the way to run decode steps. The rules (:mod:`amk.frontend.graphs`, docs/cuda-graphs.md): outputs are overwritten by later calls
    of the same signature (clone what you keep), parameters are read in place, calls that record autograd history or
    hold no CUDA tensors run without a graph.
    """
    if not callable(model_or_fn):
        raise InvalidArgumentError(f"amk.compile needs an nn.Module or a callable, got {type(model_or_fn).__name__}")
    if getattr(model_or_fn, "_compiled_call_impl", None) is not None:
        # Its own compiled forward would run instead of amk's kernels, silently.
        raise InvalidArgumentError("amk.compile got a module compiled in place (Module.compile()): its compiled "
                                   "forward would run instead of amk's kernels; call amk.compile on a module not "
                                   "compiled in place, or Module.compile(backend='amk')")
    _check_flag("dynamic", dynamic, none_allowed=True)
    if example_inputs is not None and not isinstance(example_inputs, torch.Tensor | tuple | list):
        raise InvalidArgumentError("example_inputs must be a tuple (or list) of arguments or a single tensor, got "
                                   f"{type(example_inputs).__name__}")
    _check_flag("cuda_graphs", cuda_graphs)
    initialize()  # before TorchDynamo imports triton: without CUDA, kernels run in its interpreter
    settings = make_settings(autotune, tuner_config, dump_ir, verify, pipeline, tune_sizes=tune_sizes,
                             sdpa_attention=sdpa_attention)
    if autotune and isinstance(model_or_fn, torch.nn.Module):
        # Before TorchDynamo's import (2.3 s of a new process's amk.compile on the H200 host), which they overlap.
        expect_tuned_builds(itertools.chain(model_or_fn.parameters(), model_or_fn.buffers()), settings.tuner_config)
    return _compile(model_or_fn, example_inputs, settings, dynamic, cuda_graphs)


def _check_flag(name: str, value, none_allowed: bool = False) -> None:
    """Raise :class:`InvalidArgumentError` unless ``value`` is a bool (or None where ``none_allowed``)."""
    if not isinstance(value, bool) and not (none_allowed and value is None):
        raise InvalidArgumentError(f"{name} must be {'None, ' if none_allowed else ''}True or False, got {value!r}")


def _compile(model_or_fn, example_inputs, settings: Settings, dynamic: bool | None, cuda_graphs: bool = False):
    """``model_or_fn`` compiled with ``settings``; the graphs it compiles go to the result's ``_amk_report``."""
    if isinstance(model_or_fn, torch.nn.Module):
        result = CompiledModule(model_or_fn, _CompileOptions(settings, dynamic, cuda_graphs))
    else:
        report, caller = _compiled_caller(model_or_fn, settings, dynamic, cuda_graphs)

        @functools.wraps(model_or_fn)
        def result(*args, **kwargs):
            if being_traced():  # called from a function being compiled: traced as the function
                return model_or_fn(*args, **kwargs)
            return caller(*args, **kwargs)

        result._amk_report = report

    if example_inputs is not None:
        args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        result(*args)
    return result


def _entry_of_its_own(model_or_fn) -> Callable:
    """A function calling ``model_or_fn``, of a code object and globals made for this call. TorchDynamo keeps what it
    compiled per code object, and counts it against its limit of 8 compiles (past which it stops compiling and runs
    PyTorch); each explain compiles anew: through a shared wrapper's code, or the function's own, the ninth explain
    reported nothing and a later amk.compile of that function ran no kernel. (A model with a graph break still has
    its own code compiled past the break, which the limit counts.) It keeps each compiled graph as a global of the
    frame it traced: in globals of their own, they go with the wrapper instead of piling up in this module's."""
    def entry(*args, **kwargs):
        return model_or_fn(*args, **kwargs)

    scope = {"__builtins__": builtins, "__name__": __name__}
    return types.FunctionType(entry.__code__.replace(), scope, entry.__name__, entry.__defaults__, entry.__closure__)


def explain(model_or_fn, example_inputs=None, *, dynamic: bool | None = None, pipeline: str | None = None,
            print_report: bool = True) -> ExplainReport:
    """Show what amk fuses in ``model_or_fn`` on ``example_inputs``: the fused kernels of every subgraph (prologue,
    matmul, epilogue), the ops left to PyTorch and why (apart from them, the model's steps on sizes, such as
    ``batch * heads`` or a check of a length, which launch nothing), and for the size bucket of the example what runs
    (each kernel's strategy and configuration; explain neither tunes nor times: the bucket says "not timed"). Prints
    the report and returns it (``str(report)``). It calls ``model_or_fn`` once on ``example_inputs``, as
    ``torch._dynamo.explain`` does: a module in training mode updates its buffers (BatchNorm's running statistics)
    as any call would; ``model.eval()`` first, or a copy, keeps them.

    Given a module or function compiled by :func:`compile`, explain shows what it has done so far instead (after
    calling it on ``example_inputs``, when given): every size bucket built, what runs it, and the times that decided
    it (on a GPU with autotuning, the bucket's kernels against the PyTorch ops they replace on its first call)."""
    if not callable(model_or_fn):
        raise InvalidArgumentError(f"amk.explain needs an nn.Module or a callable, got {type(model_or_fn).__name__}")
    _check_flag("dynamic", dynamic, none_allowed=True)
    _check_flag("print_report", print_report)
    if example_inputs is not None and not isinstance(example_inputs, torch.Tensor | tuple | list):
        raise InvalidArgumentError("example_inputs must be a tuple (or list) of arguments or a single tensor")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs or ())
    report = getattr(model_or_fn, "_amk_report", None)
    if report is not None:  # compiled by amk.compile: its own report, as its calls made it
        if dynamic is not None or pipeline is not None:
            raise InvalidArgumentError("dynamic and pipeline are amk.compile's to choose: explain takes neither for a "
                                       "compiled module")
        if example_inputs is not None:
            model_or_fn(*args)
    else:
        if example_inputs is None:
            raise InvalidArgumentError("example_inputs must be a tuple (or list) of arguments or a single tensor "
                                       "(only a module compiled by amk.compile can be explained without them)")
        settings = make_settings(autotune=False, verify=False, pipeline=pipeline)
        entry = _entry_of_its_own(model_or_fn)
        compiled = _compile(entry, None, settings, dynamic)
        try:
            compiled(*args)  # in the caller's grad mode: Dynamo's graph (and so the fusion) depends on it
        finally:
            # What TorchDynamo compiled for this explain, which nothing calls again: its cache entries on the
            # wrapper's code keep the graphs alive (and the code with them) until torch._dynamo.reset().
            torch._C._dynamo.eval_frame.reset_code(entry.__code__)
        report = compiled._amk_report
    if print_report:
        print(report)
    return report
