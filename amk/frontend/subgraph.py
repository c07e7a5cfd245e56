"""Running a fused subgraph. A :class:`FusedSubgraph` stands in for the FX nodes it replaced: it runs their compiled
:class:`~amk.runtime.Program` (one or more Triton kernels, plus any tensor_op ops that did not fuse, evaluated by
PyTorch), one program per size bucket (:mod:`amk.frontend.buckets`), built the first time a call falls into the
bucket. It keeps those nodes as a small GraphModule, which serves four purposes: the backward pass (autograd
recomputes the subgraph from those nodes and differentiates them, see :class:`_Recompute`), the check of each
bucket's kernels on its first call (``verify=True``), the race against them on that call (on a GPU with autotuning:
the faster runs the bucket from then on), and a fallback whenever a call does not match what the kernels were built
for (another device, a guarded scalar with another value, an empty input, a failed verification or first call, a
new bucket's first call inside a CUDA-graph capture).

The call path is short: the call's sizes (one shape read per symbol) index a table of launchers made on the first
call of those sizes (:meth:`~amk.runtime.Program.fast_path`: output shapes and workspace found once); only a size not
seen before finds its bucket, builds it if needed, and checks it. TorchDynamo guards every input tensor's device,
dtype and rank, so a graph sees one device per input: the device is checked when a size is first seen.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from torch.fx import GraphModule

from amk.autograd import builds_graph, recomputation_input, recomputed_gradients
from amk.build import Built, record_race, recorded_race
from amk.environment import default_device
from amk.frontend.buckets import SizeBuckets
from amk.frontend.nodes import meta_value
from amk.frontend.reports import AMK, PYTORCH, BucketReport, SubgraphReport, kernel_descriptions
from amk.frontend.stats import STATS
from amk.tuner import TunerConfig, fastest_program
from amk.verification import TOLERANCES, compare_with_pytorch

log = logging.getLogger("amk.frontend")


@dataclass(frozen=True)
class SymbolSource:
    """Where a size symbol's value is read at a call: argument ``arg`` (a SymInt), or its size ``dim`` (a tensor)."""

    symbol: str
    arg: int
    dim: int | None


class _Recompute(torch.autograd.Function):
    """Forward: the kernels. Backward: the replaced FX nodes re-run in PyTorch and differentiated."""

    @staticmethod
    def forward(ctx, runner: FusedSubgraph, *args):
        ctx.runner = runner
        ctx.positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.others = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        ctx.count = len(args)
        # Held as they are, unsaved: a tensor made under inference mode (features of a frozen backbone), which
        # autograd refuses to save and which never changes outside that mode, as eager's ops never save it here; and an
        # argument only returned unchanged, which no gradient reads and which a model may write in place after the
        # call (a cache's new keys), as eager's no-op .to does not save it.
        ctx.held = {i: args[i] for i in ctx.positions if args[i].is_inference() or i in runner.only_returned}
        ctx.saved_positions = [i for i in ctx.positions if i not in ctx.held]
        ctx.save_for_backward(*[args[i] for i in ctx.saved_positions])
        # Autocast is a thread's state that backward does not inherit: the nodes are recomputed under the forward's
        # (a Linear reading a bf16 activation with an fp32 weight cannot run without it), as torch.amp.custom_bwd does.
        device = runner.device.type
        ctx.autocast = (device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device))
        outputs = runner.launch(args)
        # An input returned unchanged (a no-op .to) is given back as itself by FusedSubgraph.forward; here it is an
        # alias without a grad history, not a copy: a model writes in place through it (a cache's new keys). Any other
        # output that is an input (PyTorch's ops of a bucket left to them) is a copy: autograd forbids writing in
        # place into an input a Function returned as it is.
        returned = {position for position, _ in runner.returned_arguments}
        inputs = {id(args[i]) for i in ctx.positions}
        outputs = tuple(o.detach() if i in returned else o.clone() if id(o) in inputs else o
                        for i, o in enumerate(outputs))
        ctx.mark_non_differentiable(*(outputs[i] for i in {*runner.non_differentiable, *returned}))
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        runner: FusedSubgraph = ctx.runner
        STATS.backward_recomputes += 1
        create_graph = builds_graph()
        args = [None] * ctx.count
        wanted = []
        for position, tensor in [*zip(ctx.saved_positions, ctx.saved_tensors), *ctx.held.items()]:
            needs = ctx.needs_input_grad[position + 1]
            args[position] = recomputation_input(tensor, needs, create_graph)
            if needs:
                wanted.append(position)
        for position, value in ctx.others.items():
            args[position] = value
        device, dtype, enabled = ctx.autocast
        with torch.enable_grad(), torch.autocast(device, dtype=dtype, enabled=enabled):
            outputs = runner.fallback(*args[:runner.fallback_arity])
        dtypes = [a.dtype if isinstance(a, torch.Tensor) else None for a in args]
        return (None, *recomputed_gradients(outputs, grads, args, wanted, dtypes, create_graph))



@dataclass
class Bucket:
    """One size bucket of a subgraph: its build (None when it did not compile), its report (what runs and why), and
    whether its first call checked it."""

    built: Built | None
    report: BucketReport
    checked: bool = False


# Launchers kept per subgraph at most: a model called with ever new sizes (sequence lengths) starts the table over
# rather than keep a launcher, with its output shapes and workspace, per size forever.
MAX_LAUNCHERS = 256


def _size_reader(sources: list[SymbolSource]) -> Callable[[tuple], tuple]:
    """A function of a call's arguments giving its symbols' values, one read each. TorchDynamo passes a graph's size
    symbols as int arguments (the usual case): they are picked by position, without a generator (0.05 against 0.39 us
    a call on a 2-core CPU, on every call)."""
    reads = [(source.arg, source.dim) for source in sources]
    if not reads:
        return lambda args: ()
    if len(reads) == 1:
        ((arg, dim),) = reads
        return (lambda args: (args[arg],)) if dim is None else (lambda args: (args[arg].shape[dim],))
    if all(dim is None for _, dim in reads):
        return operator.itemgetter(*(arg for arg, _ in reads))
    return lambda args: tuple(args[arg] if dim is None else args[arg].shape[dim] for arg, dim in reads)


class FusedSubgraph(torch.nn.Module):
    """Stands in for a run of FX nodes: runs their compiled kernels (per size bucket), or ``fallback`` (the nodes).

    ``build_bucket(key, size_hints)`` builds the program of a bucket; ``first`` is the bucket the backend built already
    (its key, build and size hints); ``symbols`` say where each symbol of ``sizes`` is read (in ``sizes.symbols``
    order); ``time_with`` is the tuner configuration to race each bucket's kernels against PyTorch with, None when
    they are not timed (``untimed`` says why); ``non_differentiable`` the outputs PyTorch computes without a grad
    history, which a call that records one returns without it too; ``row_major_inputs`` the arguments that
    TorchDynamo traced with strides of their own (no guard fixes their layout) and that an output follows other than
    through a matmul: a call where one's strides are not in row-major order runs the PyTorch ops, which lay out the
    outputs as its strides say; ``returned_arguments`` the outputs that are arguments returned unchanged, as
    (output position, argument position), and ``only_returned`` the arguments that nothing else reads."""

    def __init__(self, name: str, build_bucket: Callable[[Hashable, dict[str, int]], Built],
                 first: tuple[Hashable, Built, dict[str, int]], fallback: GraphModule, fallback_arity: int,
                 program_args: list, constants: list[torch.Tensor],
                 guards: list[tuple[int, float]], symbols: list[SymbolSource], sizes: SizeBuckets, verify: bool,
                 time_with: TunerConfig | None, untimed: str, report: SubgraphReport,
                 non_differentiable: tuple[int, ...] = (), row_major_inputs: tuple[int, ...] = (),
                 returned_arguments: tuple[tuple[int, int], ...] = (), only_returned: tuple[int, ...] = ()):
        super().__init__()
        self.name = name
        self.row_major_inputs = row_major_inputs
        self.non_differentiable = non_differentiable
        self.returned_arguments = returned_arguments
        self.only_returned = frozenset(only_returned)
        self.build_bucket = build_bucket
        self.fallback = fallback
        self.fallback_arity = fallback_arity
        self.program_args = program_args
        for index, constant in enumerate(constants):
            self.register_buffer(f"constant_{index}", constant, persistent=False)
        self.guards = guards
        self.guard_failed = False  # a call failed a guard before (warned then)
        self.sizes = sizes
        self.verify = verify
        self.time_with = time_with
        self.untimed = untimed
        self.report = report
        self.device = default_device()
        self.buckets: dict[Hashable, Bucket] = {}
        self.launchers: dict[tuple, Callable[[tuple], tuple]] = {}  # a call's sizes -> what runs it
        self.read_sizes = _size_reader(symbols)
        self.lock = threading.Lock()  # one thread prepares new sizes (and builds their bucket) at a time
        self._add_bucket(*first)

    def bucket_for_rows(self, rows: int, example: tuple) -> Bucket:
        """The bucket of ``rows`` rows (built now if it is new), the other symbols as in ``example``: for
        ``tune_sizes``."""
        with self.lock:
            return self._bucket(self.sizes.key_for_rows(rows, example), example)

    def _bucket(self, key: Hashable, sizes: tuple) -> Bucket:
        """The bucket ``key`` (built now, for hints made from the ``sizes`` that ask for it, if it is new)."""
        bucket = self.buckets.get(key)
        if bucket is not None:
            return bucket
        hints = self.sizes.hints(key, sizes)
        try:
            built = self.build_bucket(key, hints)
        except Exception as error:  # that bucket runs in PyTorch (reported, never wrong)
            log.warning("amk: %s does not compile for %s: %s: %s; those sizes run in PyTorch", self.name,
                        self.sizes.label(key), type(error).__name__, error)
            built = error
        return self._add_bucket(key, built, hints)

    def _add_bucket(self, key: Hashable, built: Built | Exception, hints: dict[str, int]) -> Bucket:
        report = BucketReport(self.sizes.label(key), hints)
        if isinstance(built, Exception):
            report.leave_to_pytorch(f"did not compile: {type(built).__name__}: {built}")
            built = None
        else:
            report.kernels, report.cached = kernel_descriptions(built.compiled), built.cache_hit
            report.fused = bool(built.compiled.kernels)
            report.build_phases, report.build_times = built.build_phases, dict(built.program_times)
            report.not_searched = built.not_searched
        bucket = self.buckets[key] = Bucket(built, report)
        self.report.buckets.append(report)
        return bucket

    def forward(self, *args):
        if self.guards or self.row_major_inputs:
            reason = self._guard_failure(args)
            if reason is not None:
                # Said once: a model whose every call fails a guard (a scalar computed from a changing size) would
                # otherwise run PyTorch's ops for good with nothing but amk.explain's count to show it.
                log.log(logging.DEBUG if self.guard_failed else logging.WARNING,
                        "amk: %s runs its PyTorch ops for this call (and any other like it): %s", self.name, reason)
                self.guard_failed = True
                self.report.ran_pytorch_for_a_call(reason)
                return self._run_fallback(args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            outputs = _Recompute.apply(self, *args)
            if not self.returned_arguments:
                return outputs
            outputs = list(outputs)
            for position, argument in self.returned_arguments:  # as eager's no-op .to: the input, its history too
                outputs[position] = args[argument]
            return tuple(outputs)
        return self.launch(args)

    # Called by the compiled graph on every call of the model: without nn.Module's hook dispatch (about 1.5 us), as
    # nothing registers hooks on this internal module; global module hooks (register_module_forward_hook) do not
    # see it either.
    __call__ = forward

    def launch(self, args) -> tuple:
        """Run the call: the launcher of its sizes, made (and its bucket built and checked) on their first call."""
        sizes = self.read_sizes(args)
        run = self.launchers.get(sizes)
        if run is None:
            return self._first_call(sizes, args)
        return run(args)

    def _guard_failure(self, args) -> str | None:
        for position, value in self.guards:
            if float(args[position]) != value:
                return (f"scalar argument {position} is {float(args[position])}, the kernels were built for {value} "
                        "(they take it as a constant)")
        for position in self.row_major_inputs:
            if not _in_row_major_order(args[position]):
                return (f"argument {position} has strides {tuple(args[position].stride())}, not in row-major order: "
                        "PyTorch lays the outputs out as it, amk's kernels row-major, as traced")
        return None

    def _run_fallback(self, args) -> tuple:
        STATS.fallbacks += 1
        # The generated forward itself: GraphModule's __call__ adds nn.Module's dispatch and a traceback wrapper, 5 us
        # a call on a 2-core CPU, on every call of a bucket that runs PyTorch.
        return tuple(self.fallback.forward(*args[:self.fallback_arity]))

    def _first_call(self, sizes: tuple, args) -> tuple:
        with self.lock:
            run = self.launchers.get(sizes)  # another thread may have made it meanwhile
            if run is None:
                run, outputs = self._prepare(sizes, args)
                if run is None:  # nothing prepared (inside a CUDA-graph capture): the next call prepares these sizes
                    return outputs
                if len(self.launchers) >= MAX_LAUNCHERS:
                    self._forget_launchers()
                self.launchers[sizes] = run
                if outputs is not None:
                    return outputs
        return run(args)

    def _forget_launchers(self) -> None:
        """Start the launchers over, and the programs' workspaces with them, which would otherwise keep scratch
        buffers for every size ever called. A call in flight keeps its buffers alive through its launcher."""
        self.launchers.clear()
        for bucket in self.buckets.values():
            if bucket.built is not None:
                bucket.built.compiled.program.workspaces.clear()

    def _prepare(self, sizes: tuple, args) -> tuple[Callable | None, tuple | None]:
        """What runs calls of ``sizes`` (None: nothing, this call is captured), and the outputs of this call when
        preparing it ran it (a bucket's first call, which checks the bucket)."""
        reason = self._unsupported(args)
        if reason is not None:
            log.debug("%s runs in PyTorch for the sizes %s: %s", self.name, sizes, reason)

            def run_unsupported(args) -> tuple:
                self.report.ran_pytorch_for_a_call(reason)
                return self._run_fallback(args)

            return run_unsupported, None
        key = self.sizes.key(sizes, self.buckets)
        known = self.buckets.get(key)
        if (known is None or not known.checked) and stream_capturing():
            # Building, tuning, verifying (.item()) and timing (synchronizing) a bucket are illegal while a CUDA graph
            # is captured; the PyTorch ops capture fine.
            return None, self._run_fallback(args)
        bucket = self._bucket(key, sizes)
        if bucket.report.runs == PYTORCH:  # it did not compile, failed its check, or PyTorch was faster
            return self._run_fallback, None
        bindings = dict(zip(self.sizes.symbols, sizes))
        # Outputs, workspace and constants go where the arguments are (cuda:1 as well as cuda:0): TorchDynamo guards
        # each input's device, so every call reaching this launcher has its arguments there.
        device = next((args[index].device for index in self.program_args if isinstance(index, int)), self.device)
        try:  # a failure of the kernels leaves the bucket to PyTorch (reported, never the caller's failure)
            # The program's operands: arguments by position, and the importer's constants, on the kernels' device.
            slots = [index if isinstance(index, int) else getattr(self, f"constant_{index[1]}").to(device)
                     for index in self.program_args]
            launch = bucket.built.compiled.program.fast_path(bindings, device, slots)

            def run(args) -> tuple:
                STATS.kernel_calls += 1
                return launch(args)

            outputs = None if bucket.checked else self._check(bucket, run, lambda: launch(args), args)
        except Exception as error:
            log.debug("amk: %s: the kernels' first call raised", self.name, exc_info=True)
            called = ", ".join(f"{symbol}={value}" for symbol, value in bindings.items())
            self._leave_to_pytorch(bucket, f"failed on the first call of {called or 'its sizes'}: "
                                           f"{type(error).__name__}: {error}")
            return self._run_fallback, self._run_fallback(args)
        bucket.checked = True
        return (run if bucket.report.runs == AMK else self._run_fallback), outputs

    def _leave_to_pytorch(self, bucket: Bucket, reason: str) -> None:
        bucket.report.leave_to_pytorch(reason)
        log.warning("amk: %s, %s: %s; these sizes run in PyTorch from now on", self.name, bucket.report.sizes, reason)

    def _unsupported(self, args) -> str | None:
        """Why the kernels cannot run on these arguments (another device, an empty input), or None."""
        for index in self.program_args:
            if isinstance(index, int):
                tensor = args[index]
                if tensor.device.type != self.device.type:
                    return f"a tensor is on {tensor.device}; the kernels run on {self.device.type}"
                if tensor.numel() == 0:
                    return "an input is empty"
        return None

    def _check(self, bucket: Bucket, run: Callable, launch: Callable[[], object], args) -> tuple:
        """The first call of a bucket (``run(args)``; ``launch()`` runs its kernels alone on this call's operands):
        the kernels' outputs checked against PyTorch (``verify``), and on a GPU with autotuning both timed on this
        call's inputs; the bucket's report records what runs from now on and why. A program from the cache that
        a first call raced (and checked, where ``verify`` asks for it) before on this device is decided by those
        times, as it would be again, and this call only runs its kernels (a failure still leaves the bucket to
        PyTorch)."""
        recorded = None if self.time_with is None else recorded_race(bucket.built, self.time_with)
        with torch.no_grad():
            outputs = run(args)
            if recorded is not None and (recorded["verified"] or not self.verify):
                bucket.report.timed(recorded["amk_ms"], recorded["pytorch_ms"], "on a first call before, as recorded")
                return outputs
            fallback_args = args[:self.fallback_arity]
            if self.verify:
                expected = self.fallback(*fallback_args)
                precise = _in_float64(self.fallback, fallback_args)
                for index, (have, want, coarsest) in enumerate(zip(outputs, expected, _coarsest_floats(self.fallback))):
                    reference = (lambda index=index: precise(index)) if want.is_floating_point() else None
                    judged_in = max((want.dtype, coarsest or want.dtype), key=lambda dtype: TOLERANCES.get(dtype, 0))
                    result = compare_with_pytorch(have, want, judged_in, reference)
                    if not result.passed:
                        STATS.verification_failures += 1
                        self._leave_to_pytorch(
                            bucket, f"verification failed: output {index} differs from PyTorch (relative L2 error "
                                    f"{result.relative_l2_error:.2e} > {result.tolerance:.2g})")
                        return tuple(expected)
            if self.time_with is None:
                bucket.report.note = f"not timed: {self.untimed}"
                return outputs
            _, times, how = fastest_program({AMK: launch, PYTORCH: self._pytorch_call(fallback_args)}, self.time_with)
        bucket.report.timed(times[AMK], times[PYTORCH], f"on its first call ({how})")
        record_race(bucket.built, self.time_with, times[AMK], times[PYTORCH], verified=self.verify)
        log.info("amk: %s, %s: %s", self.name, bucket.report.sizes, bucket.report.note)
        return outputs

    def _pytorch_call(self, fallback_args) -> Callable[[], object]:
        """The subgraph's PyTorch ops on ``fallback_args``, as each call of the model pays for them. Under autocast an
        fp32 weight's cast is cached for the rest of the autocast region, and a model's step enters a region of its
        own: timed back to back in the first call's region, PyTorch's ops skipped the casts that amk's kernels make on
        every call (an autocast Linear's PyTorch ops timed 0.069 ms against 0.109 per call), so the cache is cleared
        before each."""
        call = functools.partial(self.fallback.forward, *fallback_args)
        if not torch.is_autocast_enabled(self.device.type):
            return call

        def uncached():
            torch.clear_autocast_cache()
            return call()

        return uncached

    def extra_repr(self) -> str:
        return f"name={self.name!r}, buckets={[bucket.report.sizes for bucket in self.buckets.values()]}"


def _in_row_major_order(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s strides decrease from its first dim to its last (dims of size 1 aside, and broadcast dims
    of stride 0, which never decide PyTorch's layout: an expanded mask ``[1, H, 1, T].expand(B, H, 1, T)``), as a
    row-major tensor's or a row-major slice's: PyTorch lays an elementwise result of it out row-major."""
    strides = [stride for size, stride in zip(tensor.shape, tensor.stride()) if size != 1 and stride != 0]
    return all(outer >= inner for outer, inner in zip(strides, strides[1:]))


def _coarsest_floats(fallback: GraphModule) -> list[torch.dtype | None]:
    """Per output of the replaced nodes, the least precise floating dtype computed on its way (None: none): an fp32
    output computed through a bf16 Linear (``x.to(torch.bfloat16)`` in the model) carries bf16's rounding, in PyTorch
    and in the kernels alike, and is checked with bf16's tolerance. The arguments' own dtypes do not count: a bf16
    argument cast up with ``.float()`` is exact, and what follows it is checked at fp32's tolerance."""
    def coarser(a: torch.dtype | None, b: torch.dtype | None) -> torch.dtype | None:
        return max((a, b), key=lambda dtype: -1 if dtype is None else TOLERANCES.get(dtype, 0))

    coarsest: dict = {}
    for node in fallback.graph.nodes:
        computed = None
        if node.op in ("call_function", "call_method", "call_module"):
            value = meta_value(node)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                computed = value.dtype
        for source in node.all_input_nodes:
            computed = coarser(computed, coarsest.get(source))
        coarsest[node] = computed
    return [coarsest[output] for output in fallback.graph.output_node().args[0]]


def _in_float64(fallback: GraphModule, args) -> Callable[[int], torch.Tensor | None]:
    """Output ``index`` of the replaced nodes run on float64 copies of the floating-point arguments (run once, when
    first asked): the reference that a bucket's check falls back on where PyTorch's own low-precision result is too
    far from the kernels' (:func:`amk.verification.compare_with_pytorch`). Casts written in the model still round
    where they are; where the nodes cannot take float64 operands so (a softmax's probabilities cast back to fp16,
    ``.to(query.dtype)``, then multiplied by float64 values), they run again with every floating-point result kept
    in float64 (:class:`_KeptInFloat64`), the model's casts computing nothing; where they cannot at all, there is no
    reference: None."""
    outputs: list = []
    failed: list[str] = []
    wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]

    def output(index: int) -> torch.Tensor | None:
        if not outputs and not failed:
            for mode in (contextlib.nullcontext, _KeptInFloat64):
                try:
                    with mode():
                        # forward itself: GraphModule's __call__ prints the traceback of an error it re-raises
                        outputs.extend(fallback.forward(*wide))
                    break
                except Exception as error:  # the check keeps PyTorch's own result
                    failed.append(f"{type(error).__name__}: {error}")
            else:
                log.debug("the replaced nodes do not run in float64: %s", failed[-1])
            if outputs:
                failed.clear()
        return None if failed else outputs[index]

    return output


class _KeptInFloat64(torch.overrides.TorchFunctionMode):
    """Every floating-point tensor that an op computes from a float64 operand is kept in float64: the model's casts
    down (``.to(torch.float16)``, ``softmax(..., dtype=torch.float32)``) compute nothing, so that a float64 run of
    ops that mix the cast values with float64 ones goes through."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if (isinstance(result, torch.Tensor) and result.is_floating_point() and result.dtype != torch.float64
                and any(isinstance(a, torch.Tensor) and a.dtype == torch.float64
                        for a in (*args, *(kwargs or {}).values()))):
            return result.double()
        return result


def stream_capturing() -> bool:
    """Whether the current CUDA stream is capturing a CUDA graph."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()

