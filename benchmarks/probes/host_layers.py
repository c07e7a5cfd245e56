"""Diagnostic: a compiled module's per-call host time, layer by layer (issue 18's call overhead), without a profiler.

    python benchmarks/probes/host_layers.py --rows fp16_linear_layernorm [--dynamo | --composition] [--out FILE.json]

cProfile's own cost per Python call swamps calls of a few microseconds, so this probe times the layers of one call
directly, in one process on the same inputs, taking turns: 20 rounds of 50 back-to-back calls of each layer
(:func:`amk.benchmarking.host_us`), the median over rounds per layer:

- ``eager``: the module; ``ops``: the same PyTorch ops called directly (the row's ``forward`` without ``nn.Module``);
- ``dynamo_eager`` and ``dynamo_eager_dynamic``: ``torch.compile(backend="eager")`` (TorchDynamo's guards and frame,
  the floor any backend pays), static and with dynamic shapes (amk marks leading dims dynamic);
- ``max_autotune``: ``torch.compile(mode="max-autotune-no-cudagraphs")``, the host time issue 18 compares with;
- ``amk`` and ``amk_static`` (``dynamic=False``): ``amk.compile``;
- ``amk_subgraph_<i>``: each fused subgraph called alone on the arguments it gets; ``amk_launcher_<i>``: its
  launcher (the program's fast path: outputs allocated, ops run in PyTorch, kernels launched) alone;
- ``amk_kernel_launch_<i>``: each kernel launch of the call (a :class:`~amk.replay.LaunchReplay`) alone;
  ``amk_op_<i>``: each op the program runs in PyTorch (a vendor GEMM: ``F.linear``) alone, on the call's operands;
- ``amk_frame``: ``amk.compile``'s call with every fused subgraph answering with its last outputs (:func:`frame_alone`):
  what a call costs besides the launchers;
- ``launcher_pieces_<i>``: where a launcher's time goes, from calls of it with each piece wrapped in a timer
  (:func:`launcher_pieces`): output allocations, views (made by the launcher on the CPU; on a GPU a replay makes
  them only where a launch needs them, within its kernel launch), workspace lookups, kernel launches (the replays,
  with a kernel's global scratch, which they allocate), ops run in PyTorch, the timers' own cost, and the rest (the
  launcher's own Python and the frees of its tensors), in µs per call.

With ``--composition``, whether the call adds up from its parts instead (:func:`composition`): the parts timed alone
fell 20-80 µs short of the call on the H200's host; timed interleaved, on one compiled module, the call, its frame,
its subgraphs alone and the frame then the subgraphs back to back, with the garbage collector on and off. Where
``composite`` matches ``amk``, no cost is hidden in the real call: the parts cost more when they run in turn.

With ``--dynamo``, TorchDynamo's frame alone instead (``dynamo_variants``): ``torch.compile(backend="eager")`` static,
with ``dynamic=True`` and with amk's marks (with TorchDynamo's C++ symbolic-shape guards on and off where the torch has
the switch), each compiled after ``torch._dynamo.reset()`` so that no other variant's cache entries are in the way,
then a cProfile of the marked variant's calls: the Python functions such a call runs.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import amk
from amk import reference, runtime
from amk.benchmarking import environment, host_us
from amk.frontend.subgraph import FusedSubgraph
from amk.replay import LaunchReplay
from amk.runtime import default_device
from amk.workspace import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import ROWS  # noqa: E402


def interleaved(layers: dict[str, Callable[[], object]], rounds: int = 20) -> dict[str, float]:
    """Each layer's host time per call: round after round, 50 calls of each layer in turn, the median over rounds
    (a process's host calls drift over its life; measured one after the other, the later layers would take it)."""
    samples: dict[str, list[float]] = {name: [] for name in layers}
    for fn in layers.values():
        for _ in range(5):
            fn()
    for _ in range(rounds):
        for name, fn in layers.items():
            samples[name].append(host_us(fn, calls=50))
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def captured_calls(compiled, inputs) -> tuple[list[tuple[FusedSubgraph, tuple]], list[tuple[LaunchReplay, tuple]],
                                               list[tuple[Callable, tuple]]]:
    """Run ``compiled`` once with every fused subgraph's ``launch``, every launch replay and every op run in PyTorch
    wrapped: each subgraph with its arguments, each replay with its views, each op with its operands. The subgraphs'
    launchers are made again for that call (the ops are bound when a launcher is made), then once more without the
    wrappers."""
    subgraph_calls, replay_calls, op_calls = [], [], []
    subgraphs = [o for o in gc.get_objects() if type(o) is FusedSubgraph]
    for subgraph in subgraphs:
        def recording(args, subgraph=subgraph, launch=subgraph.launch):
            subgraph_calls.append((subgraph, tuple(args)))
            return launch(args)

        subgraph.launch = recording
        subgraph.launchers.clear()
    replay_call, bind = LaunchReplay.__call__, reference.bound

    def recording_replay(self, *views):
        replay_calls.append((self, views))
        return replay_call(self, *views)

    def recording_bind(op):
        run = bind(op)

        def recording_op(*operands):
            op_calls.append((run, operands))
            return run(*operands)

        return recording_op

    LaunchReplay.__call__, reference.bound = recording_replay, recording_bind
    try:
        compiled(*inputs)
    finally:
        LaunchReplay.__call__, reference.bound = replay_call, bind
        for subgraph in subgraphs:
            del subgraph.launch
            subgraph.launchers.clear()
    compiled(*inputs)
    return subgraph_calls, replay_calls, op_calls


def switchable(subgraphs: list[tuple[FusedSubgraph, tuple]]) -> list[bool]:
    """Make each fused subgraph's ``launch`` run its launcher while ``running[0]`` (the list returned) is true, else
    answer with the outputs of its call now; :func:`unswitched` puts the launches back."""
    running = [True]
    for subgraph, args in subgraphs:
        launch, outputs = subgraph.launch, subgraph.launch(args)
        subgraph.launch = lambda call_args, launch=launch, outputs=outputs: \
            launch(call_args) if running[0] else outputs
    return running


def unswitched(subgraphs: list[tuple[FusedSubgraph, tuple]]) -> None:
    for subgraph, _ in subgraphs:
        del subgraph.launch


def frame_alone(compiled, inputs, subgraphs: list[tuple[FusedSubgraph, tuple]]) -> float:
    """Host µs per call of ``compiled`` with each fused subgraph answering with its last outputs instead of running its
    launcher: TorchDynamo's frame and guards, amk's wrapper of them, and whatever the FX graph runs outside the
    subgraphs (timed alone; :func:`composition` times it interleaved with the real call)."""
    running = switchable(subgraphs)
    running[0] = False
    try:
        compiled(*inputs)
        return timed(lambda: compiled(*inputs))
    finally:
        unswitched(subgraphs)


def launcher_pieces(subgraph: FusedSubgraph, args: tuple, batches: int = 40, calls: int = 50) -> dict:
    """Host µs per call of ``subgraph``'s launcher, piece by piece: its launcher is made again with every output
    allocator, view, workspace, kernel launch and op run in PyTorch wrapped in a timer, then called in ``batches``
    batches of ``calls`` calls, each batch after a synchronize (as :func:`amk.benchmarking.host_us` times, so that a
    queue of GPU work does not block the launches), and made again as it was afterwards. The timers' cost, measured on
    a no-op in the same process, is reported per call (``timers``) and left out of ``rest``; it falls partly inside
    the pieces, partly outside them."""
    seconds: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    clock = time.perf_counter

    def timed(piece: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds[piece] += clock() - start
                counts[piece] += 1

        return wrapper

    def nothing():
        return None

    wrapped_nothing = timed("nothing", nothing)
    timer_cost = max(0.0, host_us(wrapped_nothing, calls=100_000, repeats=5)
                     - host_us(nothing, calls=100_000, repeats=5))  # µs per wrapped call
    originals = (runtime.output_allocator, runtime.viewed, Workspace.__call__, LaunchReplay.__call__, reference.bound)
    runtime.output_allocator = lambda device: timed("allocations", originals[0](device))
    runtime.viewed = timed("views", originals[1])
    Workspace.__call__ = timed("workspace", originals[2])
    LaunchReplay.__call__ = timed("kernel_launches", originals[3])
    reference.bound = lambda op: timed("ops", originals[4](op))
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    total = 0.0
    try:
        subgraph.launchers.clear()
        subgraph(*args)  # makes the launcher with the timers in it, and records its launches
        (run,) = subgraph.launchers.values()
        if getattr(run, "__func__", None) is FusedSubgraph._run_fallback:
            return {"runs": "pytorch"}
        for _ in range(10):
            run(args)
        seconds.clear()
        counts.clear()
        for _ in range(batches):
            synchronize()
            start = clock()
            for _ in range(calls):
                run(args)
            total += clock() - start
    finally:
        (runtime.output_allocator, runtime.viewed, Workspace.__call__, LaunchReplay.__call__,
         reference.bound) = originals
        subgraph.launchers.clear()
    subgraph(*args)  # the launcher as it was
    synchronize()
    per_call = 1e6 / (batches * calls)
    pieces: dict = {piece: round(value * per_call, 2) for piece, value in seconds.items()}
    timers = timer_cost * sum(counts.values()) / (batches * calls)
    pieces["timers"] = round(timers, 2)
    pieces["rest"] = round((total - sum(seconds.values())) * per_call - timers, 2)
    pieces["launcher"] = round(total * per_call, 2)
    pieces["wrapped_calls"] = {piece: count / (batches * calls) for piece, count in counts.items()}
    return pieces


def row_module(name: str) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The row's module and inputs on the default device (small sizes in Triton's interpreter: a check of the probe)."""
    row = ROWS[name]
    torch.manual_seed(0)
    device = default_device()
    module, shapes = row.build(device.type != "cuda")
    module = module.to(device=device, dtype=row.dtype).eval()
    return module, [torch.randn(shape, device=device).to(row.dtype) for shape in shapes]


def run_row(name: str) -> dict:
    module, inputs = row_module(name)
    forward = type(module).forward
    layers: dict[str, Callable[[], object]] = {"eager": lambda: module(*inputs),
                                               "ops": lambda: forward(module, *inputs)}
    with torch.no_grad():
        for label, make in (("dynamo_eager", lambda: torch.compile(module, backend="eager")),
                            ("dynamo_eager_dynamic", lambda: torch.compile(module, backend="eager", dynamic=True)),
                            ("max_autotune", lambda: torch.compile(module, mode="max-autotune-no-cudagraphs")),
                            ("amk_static", lambda: amk.compile(module, dynamic=False)),
                            ("amk", lambda: amk.compile(module))):
            fn = make()
            fn(*inputs)
            layers[label] = lambda fn=fn: fn(*inputs)
        subgraphs, replays, ops = captured_calls(fn, inputs)
        for index, (subgraph, args) in enumerate(subgraphs):
            (run,) = subgraph.launchers.values()
            layers[f"amk_subgraph_{index}"] = lambda s=subgraph, a=args: s(*a)
            layers[f"amk_launcher_{index}"] = lambda run=run, args=args: run(args)
        for index, (replay, views) in enumerate(replays):
            layers[f"amk_kernel_launch_{index}"] = lambda r=replay, v=views: r(*v)
        for index, (op, operands) in enumerate(ops):
            layers[f"amk_op_{index}"] = lambda op=op, operands=operands: op(*operands)
        result = {"row": name, "host_us": interleaved(layers)}
        for index, (subgraph, args) in enumerate(subgraphs):
            result[f"launcher_pieces_{index}"] = launcher_pieces(subgraph, args)
        result["amk_frame"] = frame_alone(fn, inputs, subgraphs)
    print(json.dumps(result), flush=True)
    return result


def mark_leading(inputs):
    """amk.compile's marks: every dim but the last of each input dynamic."""
    for tensor in inputs:
        for axis in range(tensor.dim() - 1):
            torch._dynamo.maybe_mark_dynamic(tensor, axis)


def timed(fn, rounds: int = 15) -> float:
    """One layer's host time per call, alone (:func:`interleaved`'s measure)."""
    return interleaved({"fn": fn}, rounds)["fn"]


# TorchDynamo variants: (backend, dynamic, C++ symbolic-shape guards: None leaves torch's setting); no backend: the
# module itself.
DYNAMO_VARIANTS = {"eager_module": (None, False, None), "static": ("eager", False, None),
                   "dynamic_true": ("eager", True, None), "marked": ("eager", None, None),
                   "marked_no_cpp_guards": ("eager", None, False), "marked_cpp_guards": ("eager", None, True)}


def dynamo_variants(name: str) -> dict:
    module, inputs = row_module(name)
    config = torch._dynamo.config
    has_cpp_switch = hasattr(config, "enable_cpp_symbolic_shape_guards")
    result: dict = {"row": name, "dynamo_host_us": {},
                    "cpp_symbolic_shape_guards": config.enable_cpp_symbolic_shape_guards if has_cpp_switch else None}
    profile_text = ""
    with torch.no_grad():
        for label, (backend, dynamic, cpp_guards) in DYNAMO_VARIANTS.items():
            torch._dynamo.reset()
            args = [x.clone() for x in inputs]
            if backend is None:
                result["dynamo_host_us"][label] = timed(lambda args=args: module(*args))
                continue
            if cpp_guards is not None and not has_cpp_switch:
                continue
            saved = config.enable_cpp_symbolic_shape_guards if has_cpp_switch else None
            if cpp_guards is not None:
                config.enable_cpp_symbolic_shape_guards = cpp_guards
            try:
                fn = torch.compile(module, backend=backend, dynamic=dynamic)
                if dynamic is None:
                    mark_leading(args)
                fn(*args)
                result["dynamo_host_us"][label] = timed(lambda fn=fn, args=args: fn(*args))
                if label == "marked":
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(2000):
                        fn(*args)
                    profile.disable()
                    stream = io.StringIO()
                    pstats.Stats(profile, stream=stream).sort_stats("tottime").print_stats(25)
                    profile_text = stream.getvalue()
            except Exception as error:  # a variant this torch cannot run
                result["dynamo_host_us"][label] = f"failed: {type(error).__name__}: {error}"[:300]
            finally:
                if has_cpp_switch:
                    config.enable_cpp_symbolic_shape_guards = saved
    result["profile_marked"] = profile_text
    print(json.dumps(result["dynamo_host_us"]), flush=True)
    print(profile_text, flush=True)
    return result


def composition(name: str) -> dict:
    """Whether the call's host time adds up from its parts: on one compiled module, interleaved (:func:`interleaved`),
    the call (``amk``), the call with the subgraphs answering from their last outputs (``frame``), the subgraphs
    alone on the arguments the call gives them (``subgraphs``), ``frame`` then ``subgraphs`` back to back
    (``composite``), ``amk`` and ``subgraphs`` with Python's garbage collector off during each call (``_nogc``), and
    the row's ops (``ops``)."""
    torch._dynamo.reset()
    module, inputs = row_module(name)
    with torch.no_grad():
        compiled = amk.compile(module)
        compiled(*inputs)
        subgraphs = captured_calls(compiled, inputs)[0]
        running = switchable(subgraphs)

        def call(run_launchers: bool):
            running[0] = run_launchers
            return compiled(*inputs)

        def subgraphs_alone():
            running[0] = True
            for subgraph, args in subgraphs:
                subgraph(*args)

        def composite():
            call(False)
            subgraphs_alone()

        layers = {"amk": lambda: call(True), "frame": lambda: call(False), "subgraphs": subgraphs_alone,
                  "composite": composite, "amk_nogc": without_gc(lambda: call(True)),
                  "subgraphs_nogc": without_gc(subgraphs_alone), "ops": lambda: type(module).forward(module, *inputs)}
        try:
            for layer in layers.values():
                layer()
            result = {"row": name, "host_us": interleaved(layers)}
        finally:
            unswitched(subgraphs)
    print(json.dumps(result), flush=True)
    return result


def without_gc(fn: Callable[[], object]) -> Callable[[], object]:
    def call():
        gc.disable()
        try:
            return fn()
        finally:
            gc.enable()

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="fp16_linear_layernorm", help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--dynamo", action="store_true",
                        help="TorchDynamo's frame alone, static against amk's dynamic marks, each variant compiled "
                             "after a reset (dynamo_variants), instead of the layers")
    parser.add_argument("--composition", action="store_true",
                        help="whether the call's host time adds up from its frame and its subgraphs, all timed "
                             "interleaved (composition), instead of the layers")
    args = parser.parse_args()
    measure = dynamo_variants if args.dynamo else composition if args.composition else run_row
    torch._dynamo.config.recompile_limit = 64  # one forward compiled five ways, each with its dynamic-shape variants
    results = {"environment": environment(), "command": " ".join(sys.argv),
               "rows": [measure(name) for name in args.rows.split(",")]}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
