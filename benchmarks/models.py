"""The model benchmark (issue 18, deliverable 7): modules written as people write them (``nn.Module`` classes with
``nn.Linear``, ``nn.LayerNorm``, ``nn.RMSNorm``...) under eager PyTorch, torch.compile (default,
``max-autotune-no-cudagraphs``, and ``reduce-overhead`` on the decode rows) and ``amk.compile`` (plain and under CUDA
graphs), in one process on the same inputs, correctness first.

    python benchmarks/models.py                                  # every row (needs a GPU)
    python benchmarks/models.py --rows llama_mlp_decode_m1,gpt2_mlp --quick
    python benchmarks/models.py --small --rows fp16_linear_layernorm   # tiny shapes: a smoke test (CPU: eager, amk)
    python benchmarks/models.py --rows gpt2_mlp,bert_ffn --append   # add rows to today's file (a run in parts)
    python benchmarks/models.py --append --missing --time-limit 400 # the rows today's file lacks (the next part)
    python benchmarks/models.py --process-per-row                # each row in a fresh process: cold first calls
    python benchmarks/models.py --render FILE.json               # rewrite a results file's table and chart
    python benchmarks/models.py --autocast bfloat16 --rows bert_ffn  # AMP: fp32 modules called under torch.autocast

On the H200 a row takes 20 s to 2 minutes, most of it torch.compile's max-autotune and amk's tuning on cold caches;
where one command may not run for long, run the rows in parts with ``--append`` (each row measures its contenders
in one process) or stop starting rows after ``--time-limit`` seconds. The parts must share a GPU and versions: rows
appended to a file measured with others are refused (a geomean over both would compare nothing).

Per row and contender, in this order:

- ``first_call_s``: wall time of the first call, synchronized: compilation and tuning for the compiled contenders
  (caches are fresh temporary directories unless ``--warm-caches``; contenders built in ``BUILD_ORDER``, which puts
  max-autotune first among torch.compile's modes, so that its first call on a process's first row pays Inductor's
  start as amk's pays its compile workers'); for ``amk``, also ``compile_worker_jobs``, the
  candidates amk's compile workers compiled meanwhile, ``compile_worker_job_s``, those jobs' seconds in the workers
  added up (divided by the workers' count: a lower bound of the first call where compiling is what it waits for),
  ``compile_workers_boot_s``, the slowest worker's start
  (importing torch and triton) when this row's build started the pool, and ``compile_workers_broken``,
  why they stopped if they did (its candidates then compile in the tuning process). ``amk_graphs`` wraps ``amk``'s
  compiled module in ``amk.frontend.graphs.cuda_graphed``, so its first call is the warm-up and capture only. Each
  contender is called on the same input tensors every time, so ``amk_graphs`` replays the graph captured on them
  with no input copy (a loop refilling its buffers in place does the same); ``reduce_overhead``'s inputs are marked
  static (``torch._dynamo.mark_static_address``) so that torch's CUDA-graph trees do not copy them either.
- correctness: the output of the fourth call (CUDA-graph contenders replay by then) against the module run in
  float64 on float64 copies of the inputs: relative L2 error and maximum absolute error. A contender whose relative
  error exceeds ``max(amk.verification.TOLERANCES[dtype], 2 x eager's)`` is reported as wrong and not timed.
- ``host_us``: per-call host time. After a synchronize, N back-to-back calls (100; 50 with ``--quick``) are timed
  on the host clock without waiting for the GPU at the end, elapsed / N; the contenders of a row take turns, round
  after round, once they are all built (10 rounds; 6 with ``--quick``), and each gets its median. It is what
  issuing one call costs the host (guards, Python, launches) while the GPU works through the queue, and a
  launch-bound call's floor; a call that synchronizes shows its GPU time here too, and so would calls that fill
  CUDA's queue of pending launches (about a thousand: N calls of a few launches each stay under it).
- ``ms``: median time per call, ``amk.benchmarking.time_ms`` (CUDA events around each call after an L2 flush, as
  ``triton.testing.do_bench(fn, return_mode="median")``), the calls queued behind a GPU sleep as long as the host's
  time to issue them: the GPU's time per call from a cold L2, whatever the host's speed (``host_us`` says what the
  host takes; a call is launch-bound where that is the longer). Like the host times, in turns once every contender
  is built: round after round (3; 1 with ``--quick``) each contender is timed, and ``ms`` is the median of its
  rounds (``ms_rounds`` lists them): the GPU's clocks drift with its temperature and power over a row's minutes
  (the same program of the Llama prefill row ran 1.94 ms in one run and 2.19 in another, each timed right after its
  own build), and timed in turns every contender meets the same drift.
- ``replay_ms`` (decode rows, on a GPU; the contenders that are not CUDA graphs themselves), in the same turns:
  median time per call as back-to-back replays of one captured CUDA graph of the calls
  (``amk.benchmarking.time_ms(cuda_graph=True)``, ``triton.testing.do_bench_cudagraph``), the way
  ``benchmarks/run.py`` times D, E and F under graphs, so that a decode row compares with those figures;
  ``replay_error`` where the calls cannot be captured.

Per row, ``amk_ran`` records what ``amk.explain`` says of the compiled module after its calls: each size bucket of
each fused subgraph, whether amk's kernels or the subgraph's PyTorch ops ran it, with the times (or the failed check)
that decided it and the seconds of its build per phase (where ``first_call_s`` went), and the ops left to PyTorch
outside the subgraphs (the table's last section): an amk figure equal to eager's is then told from a kernel that lost
its race or failed its check.

With ``--autocast DTYPE`` (``float16`` or ``bfloat16``) every row runs as automatic mixed precision runs a model: the
module's parameters and inputs in float32, every contender's calls (its first, compiling, call
included) under ``torch.autocast(device, dtype=DTYPE)``, and its error held to DTYPE's tolerance.

``speedup`` is the best correct torch.compile time of the row over the best correct amk time (above 1: amk is
faster); ``speedup_no_graphs`` compares plain ``amk`` with the better of ``compile`` and ``max_autotune``. The
geomeans are over the rows that have them. Writes ``<out>/<date>-<gpu>-models.json``, ``.md`` and (with matplotlib)
``.png``, rewritten after every row, naming the GPU, versions, date and command.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from workloads import COMPILERS, ROWS, Row, chosen_names, fresh_caches, gpu_slug, relative_error

import amk
from amk.benchmarking import environment, host_us, time_ms
from amk.compile_worker import shared_pool
from amk.environment import float32_matmul_precision
from amk.frontend.graphs import cuda_graphed
from amk.runtime import default_device
from amk.tuner import compile_workers
from amk.verification import TOLERANCES

TORCH_COMPILE = ("compile", "max_autotune", "reduce_overhead")
AMK = ("amk", "amk_graphs")
CONTENDERS = ("eager", *TORCH_COMPILE, *AMK)
# The order a row builds its contenders in: max-autotune before torch.compile's default mode, so that on a process's
# first row each compiler's first call includes its own start, as in a new process (Inductor's imports and compile
# pool for max-autotune, 2-2.5 s on the H200 host, which the default mode's first call paid when it went first; the
# compile workers' for amk); the default mode then finds Inductor started, as on every later row.
BUILD_ORDER = ("eager", "max_autotune", *(name for name in CONTENDERS if name not in ("eager", "max_autotune")))
# The contenders that are not CUDA graphs themselves: on decode rows each is also timed as replays of one captured
# graph of its calls (``replay_ms``), the way benchmarks/run.py times D, E and F under graphs.
REPLAYED = ("eager", "compile", "max_autotune", "amk")
LABELS = {"eager": "eager", "compile": "torch.compile", "max_autotune": "max-autotune-no-cudagraphs",
          "reduce_overhead": "reduce-overhead", "amk": "amk.compile", "amk_graphs": "amk.compile + CUDA graphs"}


# --- Measuring -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    rep_ms: float
    warmup_ms: float
    host_calls: int
    host_repeats: int
    device_rounds: int


# Host time from 10-20 calls varied by 2x between runs of the same module (2026-12-02-h200-models-4 against
# -host-profile, 200 calls): more calls average out the collector and the allocator's first calls.
FULL = Timing(rep_ms=100.0, warmup_ms=25.0, host_calls=100, host_repeats=5, device_rounds=3)
QUICK = Timing(rep_ms=20.0, warmup_ms=5.0, host_calls=50, host_repeats=3, device_rounds=1)
# CPU: every call is interpreted
INTERPRETER = Timing(rep_ms=0.0, warmup_ms=0.0, host_calls=1, host_repeats=1, device_rounds=1)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()




def make_contender(name: str, module: nn.Module, compiled_amk: list) -> Callable:
    """The callable of contender ``name``. ``amk_graphs`` wraps the module that the ``amk`` contender compiled
    (``compiled_amk`` holds it), so the row compiles amk once."""
    if name == "amk":
        compiled_amk.append(amk.compile(module))
        return compiled_amk[0]
    if name in COMPILERS:
        return COMPILERS[name](module)
    if compiled_amk:  # what amk.compile(module, cuda_graphs=True) runs: the wrapper around the compiled module
        return cuda_graphed(compiled_amk[0])
    return amk.compile(module, cuda_graphs=True)


def interleaved_host_us(contenders: dict[str, tuple[Callable, list[torch.Tensor]]], timing: Timing) -> dict:
    """Each contender's per-call host time, measured in turns: round after round, ``host_calls`` calls of each
    contender (:func:`amk.benchmarking.host_us`), the median over rounds. A process's host calls get slower or faster
    over its life (compile pools' threads, the allocator, the collector): measured one after the other, the later
    contenders took that drift (eager itself measured 38 then 57 us in one process, -host-layers-b71ee59)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(2 * timing.host_repeats):
        for name, (fn, inputs) in contenders.items():
            samples[name].append(host_us(lambda fn=fn, inputs=inputs: fn(*inputs), calls=timing.host_calls))
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def interleaved_device_ms(contenders: dict[str, tuple[Callable, list[torch.Tensor]]], timing: Timing,
                          replay: bool) -> dict[str, dict]:
    """Each contender's ``ms`` (and with ``replay``, for the contenders in ``REPLAYED``, its ``replay_ms`` or
    ``replay_error``), timed in turns: ``timing.device_rounds`` rounds, each contender once a round; the median of
    the rounds, which are kept as ``ms_rounds`` (see the module's docstring). A contender whose call raises while
    timed gets ``status`` "failed" and its error instead."""
    rounds: dict[str, list[float]] = {name: [] for name in contenders}
    replays: dict[str, list[float]] = {name: [] for name in contenders if replay and name in REPLAYED}
    errors: dict[str, str] = {}
    failed: dict[str, dict] = {}  # contenders whose calls raised while timed: reported, not timed further
    for _ in range(timing.device_rounds):
        for name, (fn, inputs) in contenders.items():
            if name in failed:
                continue
            call = functools.partial(fn, *inputs)
            try:
                rounds[name].append(time_ms(call, rep_ms=timing.rep_ms, warmup_ms=timing.warmup_ms))
            except Exception as failure:
                failed[name] = {"status": "failed", "error": f"{type(failure).__name__}: {failure}"[:400]}
                continue
            if name in replays and name not in errors:
                try:
                    replays[name].append(time_ms(call, rep_ms=timing.rep_ms, cuda_graph=True))
                except Exception as failure:  # not capturable: reported, the row's other figures stand
                    errors[name] = f"{type(failure).__name__}: {failure}"[:200]
    results = {name: {"ms": statistics.median(values), "ms_rounds": [round(v, 5) for v in values]}
               for name, values in rounds.items() if name not in failed}
    results.update(failed)
    for name, values in replays.items():
        if name in failed:
            continue
        if name in errors:
            results[name]["replay_error"] = errors[name]
        elif values:
            results[name]["replay_ms"] = statistics.median(values)
    return results


def first_call(fn: Callable, inputs: list[torch.Tensor], reference: torch.Tensor, limit: float) -> dict:
    """One contender's first call (compiling, tuning) and correctness (see the module's docstring)."""
    result: dict = {"status": "ok"}
    start = time.perf_counter()
    fn(*inputs)
    synchronize()
    result["first_call_s"] = round(time.perf_counter() - start, 3)
    for _ in range(2):
        fn(*inputs)
    result["rel_l2"], result["max_abs"] = relative_error(fn(*inputs), reference)
    if not result["rel_l2"] <= limit:  # NaN counts as wrong
        result["status"] = "wrong"
    return result


def under_autocast(fn: Callable, device: torch.device, dtype: torch.dtype) -> Callable:
    """``fn`` called under ``torch.autocast(device, dtype)``, as a mixed-precision training loop calls its model."""
    def call(*inputs):
        with torch.autocast(device.type, dtype=dtype):
            return fn(*inputs)
    return call


def run_row(row: Row, contenders: list[str], small: bool, timing: Timing, autocast: torch.dtype | None = None) -> dict:
    """One row's results (see the module's docstring); with ``autocast``, the module and its inputs in float32 and
    every call under ``torch.autocast`` to that dtype."""
    device = default_device()
    torch.manual_seed(0)
    module, shapes = row.build(small)
    storage = torch.float32 if autocast else row.dtype
    module = module.to(device=device, dtype=storage).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shape, generator=generator).to(device=device, dtype=storage) for shape in shapes]
    with torch.no_grad():
        reference = copy.deepcopy(module).double()(*[t.double() for t in inputs])
    compute = autocast or row.dtype
    # under autocast the title's dtype is the row's own, not what it computes in: say so
    title = f"{row.title}; run as float32 under autocast to {compute}".replace("torch.", "") if autocast else row.title
    result = {"row": row.name, "title": title, "dtype": str(compute).removeprefix("torch."),
              "input_shapes": shapes, "contenders": {}}
    if autocast:
        result["autocast"] = f"float32 parameters and inputs under torch.autocast({device.type}, {compute})"
    compiled_amk: list = []
    measured: dict[str, tuple[Callable, list[torch.Tensor]]] = {}  # the contenders that ran right, for host times
    for name in contenders:
        if name == "reduce_overhead" and not row.decode:
            continue
        # Same values, distinct tensors: amk.compile marks its arguments' leading dims dynamic, and reduce-overhead
        # keeps its inputs' addresses; neither may leak into another contender.
        own_inputs = [t.clone() for t in inputs]
        if name == "reduce_overhead":  # called on the same tensors every time, as amk_graphs: no copy into the graph
            for tensor in own_inputs:
                torch._dynamo.mark_static_address(tensor)
        # Eager defines what the dtype can give; the others may be off by twice as much, or the dtype's tolerance.
        eager_error = result["contenders"].get("eager", {}).get("rel_l2", 0.0)
        limit = math.inf if name == "eager" else max(TOLERANCES[compute], 2 * eager_error)
        workers = shared_pool(compile_workers())  # the process's pool, shared by every amk build
        jobs_before = len(workers.job_seconds)
        try:
            with torch.no_grad():
                fn = make_contender(name, module, compiled_amk)
                if autocast:
                    fn = under_autocast(fn, device, autocast)
                result["contenders"][name] = first_call(fn, own_inputs, reference, limit)
                if result["contenders"][name]["status"] == "ok":
                    measured[name] = (fn, own_inputs)
            if name == "amk":
                result["contenders"][name]["compile_worker_jobs"] = len(workers.job_seconds) - jobs_before
                result["contenders"][name]["compile_worker_job_s"] = round(sum(workers.job_seconds[jobs_before:]), 2)
                if workers.boot_seconds and not jobs_before:  # the pool started during this row's first call
                    result["contenders"][name]["compile_workers_boot_s"] = round(max(workers.boot_seconds), 2)
                if workers.broken is not None:
                    result["contenders"][name]["compile_workers_broken"] = workers.broken
        except Exception as failure:  # a contender that does not compile or run is reported, not fatal
            result["contenders"][name] = {"status": "failed", "error": f"{type(failure).__name__}: {failure}"[:400]}
        print(f"   {name}: {json.dumps(result['contenders'][name])}", flush=True)
    with torch.no_grad():
        for name, times in interleaved_device_ms(measured, timing, row.decode and torch.cuda.is_available()).items():
            result["contenders"][name].update(times)
            if times.get("status") == "failed":
                del measured[name]
        for name, value in interleaved_host_us(measured, timing).items():
            result["contenders"][name]["host_us"] = value
    del measured
    if compiled_amk:
        result["amk_ran"] = what_amk_ran(amk.explain(compiled_amk[0], print_report=False))
    result["speedup"] = speedup(result["contenders"], TORCH_COMPILE, AMK)
    result["speedup_no_graphs"] = speedup(result["contenders"], ("compile", "max_autotune"), ("amk",))
    del module, reference, inputs, compiled_amk
    torch._dynamo.reset()  # each row compiles the same forward code objects again; stay under Dynamo's limits
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def what_amk_ran(report) -> dict:
    """From ``amk.explain`` of the row's compiled module: each size bucket of each fused subgraph, what ran it (``amk``
    or ``pytorch``), the times or the reason that decided it, its program (kernels, and ops such as the vendor GEMM
    that it leaves to PyTorch), the seconds its build took per phase (``build_s``) and the whole programs its build
    timed (``build_ms``), why its kernels were not searched where they were not (``not_searched``), and the ops left
    to PyTorch outside the subgraphs."""
    buckets = [{"subgraph": subgraph.name, "sizes": bucket.sizes, "runs": bucket.runs, "amk_ms": bucket.amk_ms,
                "pytorch_ms": bucket.pytorch_ms, "note": bucket.note, "cached": bucket.cached, "program": bucket.kernels,
                "build_s": {name: round(seconds, 2) for name, seconds in bucket.build_phases.items()},
                "build_ms": bucket.build_times,
                **({"not_searched": bucket.not_searched} if bucket.not_searched else {})}
               for graph in report.graphs for subgraph in graph.subgraphs for bucket in subgraph.buckets]
    return {"buckets": buckets, "left_to_pytorch": [f"{node.name}: {node.reason}" for node in report.pytorch]}


def ran_summary(ran: dict) -> str:
    """One line: how many buckets ran amk's kernels, how many PyTorch's ops, and the ops left to PyTorch."""
    runs = [bucket["runs"] for bucket in ran["buckets"]]
    text = f"{runs.count('amk')} of {len(runs)} buckets ran amk's kernels"
    reasons = [bucket["note"] for bucket in ran["buckets"] if bucket["runs"] != "amk"]
    if reasons:
        text += "; PyTorch: " + "; ".join(reasons)
    if ran["left_to_pytorch"]:
        text += "; not fused: " + "; ".join(ran["left_to_pytorch"])
    return text


def best_ms(contenders: dict, names) -> float | None:
    times = [contenders[n]["ms"] for n in names if contenders.get(n, {}).get("status") == "ok"]
    return min(times) if times else None


def speedup(contenders: dict, theirs, ours) -> float | None:
    their_ms, our_ms = best_ms(contenders, theirs), best_ms(contenders, ours)
    return round(their_ms / our_ms, 3) if their_ms and our_ms else None


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return round(math.exp(statistics.fmean(math.log(v) for v in values)), 3) if values else None


# --- Reports -------------------------------------------------------------------------------------------------------

def cell(contender: dict | None, key: str, digits: int) -> str:
    if contender is None:
        return "—"
    if contender["status"] != "ok" and key not in contender:
        return contender["status"]
    value = contender.get(key)
    return "—" if value is None else f"{value:.{digits}f}"


def tables(document: dict) -> str:
    rows, present = document["rows"], [c for c in CONTENDERS if any(c in r["contenders"] for r in document["rows"])]
    header = " | ".join(LABELS[c] for c in present)
    rule = "|---" * (len(present) + 1) + "|"
    lines = ["Median ms per call (`wrong`: output outside the tolerance, not timed; `failed`: did not run).\n",
             f"| row | {header} | speed-up | speed-up without graphs |", rule + "---|---|"]
    for r in rows:
        cells = " | ".join(cell(r["contenders"].get(c), "ms", 4) for c in present)
        ratios = " | ".join(f"{r[k]:.2f}x" if r[k] else "—" for k in ("speedup", "speedup_no_graphs"))
        lines.append(f"| {r['row']}: {r['title']} | {cells} | {ratios} |")
    means = document["geomean"]
    if means["speedup"]:
        lines.append(f"\nGeomean speed-up of amk over the best torch.compile mode: {means['speedup']:.3f}x "
                     f"({means['rows']} rows); without CUDA graphs on either side: {means['speedup_no_graphs']:.3f}x.\n")
    for title, key, digits in (("Per-call host time, µs", "host_us", 1), ("First call, s", "first_call_s", 2)):
        lines += [f"\n{title}.\n", f"| row | {header} |", rule]
        lines += [f"| {r['row']} | " + " | ".join(cell(r["contenders"].get(c), key, digits) for c in present) + " |"
                  for r in rows]
    replayed = [r for r in rows if any("replay_ms" in c for c in r["contenders"].values())]
    if replayed:
        names = [c for c in REPLAYED if any(c in r["contenders"] for r in replayed)]
        lines += ["\nDecode rows, ms per call as back-to-back replays of one captured CUDA graph "
                  "(`triton.testing.do_bench_cudagraph`, as `benchmarks/run.py` times D, E and F under graphs; no L2 "
                  "flush between calls).\n", "| row | " + " | ".join(LABELS[c] for c in names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        lines += [f"| {r['row']} | " + " | ".join("not capturable" if "replay_error" in r["contenders"].get(c, {})
                                                   else cell(r["contenders"].get(c), "replay_ms", 4) for c in names)
                  + " |" for r in replayed]
    lines += ["\nRelative L2 error against float64 (maximum absolute error).\n", f"| row | {header} |", rule]
    for r in rows:
        errors = []
        for c in present:
            entry = r["contenders"].get(c)
            errors.append("—" if entry is None or "rel_l2" not in entry else
                          f"{entry['rel_l2']:.1e} ({entry['max_abs']:.1e})" + (" wrong" if entry["status"] == "wrong"
                                                                               else ""))
        lines.append(f"| {r['row']} | " + " | ".join(errors) + " |")
    ran = [(r["row"], ran_summary(r["amk_ran"])) for r in rows if "amk_ran" in r]
    if ran:
        lines += ["\nWhat amk.compile ran (`amk.explain`).\n"] + [f"- {row}: {summary}" for row, summary in ran]
    failures = [(r["row"], c, e["error"]) for r in rows for c, e in r["contenders"].items() if e["status"] == "failed"]
    if failures:
        lines += ["\nFailures:\n"] + [f"- {row} / {c}: `{error}`" for row, c, error in failures]
    return "\n".join(lines) + "\n"


def chart(document: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = document["rows"]
    present = [c for c in CONTENDERS if c != "eager" and any(c in r["contenders"] for r in rows)]
    figure, axis = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    width = 0.8 / max(len(present), 1)
    for index, name in enumerate(present):
        values = []
        for r in rows:
            eager_ms, ms = best_ms(r["contenders"], ("eager",)), best_ms(r["contenders"], (name,))
            values.append(eager_ms / ms if eager_ms and ms else 0)
        axis.bar([i + index * width for i in range(len(rows))], values, width, label=LABELS[name])
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xticks([i + 0.4 for i in range(len(rows))], [r["row"] for r in rows], rotation=45, ha="right")
    axis.set_ylabel("speed-up over eager (higher is better)")
    axis.set_title(f"{document['environment']['gpu']}, {document['environment']['date'][:10]}")
    axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path)


def write_reports(document: dict, out: Path, stem: str) -> str:
    """``<stem>.json``, ``.md`` and ``.png`` of a results document; returns the Markdown."""
    results = document["rows"]
    document["geomean"] = {"speedup": geomean(r["speedup"] for r in results),
                           "speedup_no_graphs": geomean(r["speedup_no_graphs"] for r in results),
                           "rows": sum(1 for r in results if r["speedup"])}
    env = document["environment"]
    markdown = (f"# amk model benchmark ({env['gpu']})\n\ntorch {env['torch']}, triton {env['triton']}, amk "
                f"{env['amk']}, python {env['python']}, {env['date']}; float32 matmul precision "
                f"\"{document['float32_matmul_precision']}\"; caches: {document['caches']}"
                + (f"; float32 modules and inputs under torch.autocast to {document['autocast']}"
                   if document.get("autocast") else "") + ".\n\n"
                f"Command: `{document['command']}`\n\n" + tables(document))
    if document.get("not_run"):
        markdown += f"\nNot run (time limit): {', '.join(document['not_run'])}.\n"
    (out / f"{stem}.json").write_text(json.dumps(document, indent=1))
    (out / f"{stem}.md").write_text(markdown)
    chart(document, out / f"{stem}.png")
    return markdown


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated, from " + ", ".join(ROWS))
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated, from " + ", ".join(CONTENDERS) + " (reduce_overhead: decode rows only)")
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke test; CPU is fine)")
    parser.add_argument("--quick", action="store_true", help="shorter timing (fewer timed calls)")
    parser.add_argument("--warm-caches", action="store_true", help="keep the user's amk, Inductor and Triton caches "
                        "(default: fresh temporary ones, so that first calls are cold)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="S",
                        help="start no further row once S seconds have passed (the rest are listed as not run)")
    parser.add_argument("--append", action="store_true", help="add to <stem>.json where it exists, rows measured "
                        "again replacing theirs (a run split over several commands, each row in one process)")
    parser.add_argument("--missing", action="store_true", help="with --append: only the rows <stem>.json does not "
                        "have yet (the next part of a run split over several commands)")
    parser.add_argument("--out", default="benchmarks/results", help="directory for the results files")
    parser.add_argument("--stem", default=None, help="results file name without extension "
                        "(default: YYYY-MM-DD-<gpu>-models)")
    parser.add_argument("--autocast", choices=("float16", "bfloat16"), default=None,
                        help="mixed precision: float32 modules and inputs, every call under torch.autocast to this "
                        "dtype (default stem YYYY-MM-DD-<gpu>-models-autocast-<dtype>)")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: rewrite the table and chart of a results "
                        "file from its JSON")
    parser.add_argument("--process-per-row", action="store_true", help="each row in a process of its own, with "
                        "caches of its own: every contender's first call is its process's first, cold (by default "
                        "a run's rows share a process and its caches, and a row after one of the same shapes finds "
                        "Inductor's autotuning done)")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        write_reports(json.loads(path.read_text()), path.parent, path.stem)
        return
    names = chosen_names(parser, args.rows, ROWS, "rows")
    chosen = chosen_names(parser, args.contenders, CONTENDERS, "contenders")
    if args.missing and not args.append:
        parser.error("--missing adds to an existing results file: use it with --append")
    on_gpu = default_device().type == "cuda"
    if not on_gpu and not args.small:
        parser.error("without a GPU the kernels run in Triton's interpreter: use --small (tiny shapes)")
    if args.process_per_row:
        run_rows_in_processes(args, names)
        return
    with contextlib.nullcontext() if args.warm_caches else fresh_caches():
        run_rows(args, names, chosen, on_gpu, argv)


def results_stem(args: argparse.Namespace, env: dict) -> str:
    return args.stem or f"{env['date'][:10]}-{gpu_slug(env['gpu'])}-models" + (
        f"-autocast-{args.autocast}" if args.autocast else "")


def run_rows_in_processes(args: argparse.Namespace, names: list[str]) -> None:
    """``--process-per-row``: each row measured by ``python models.py --rows ROW --append`` in a process of its own,
    one after the other, into the same results file; the rows not started before ``--time-limit`` (or whose process
    failed) are listed as not run."""
    env = environment()
    stem, out = results_stem(args, env), Path(args.out)
    path = out / f"{stem}.json"
    if args.append and path.exists():  # refused or skipped here: a process started only to stop costs a second or more
        previous = json.loads(path.read_text())
        check_same_machine(previous["environment"], env, path)
        if args.missing:
            names = [name for name in names if name not in {row["row"] for row in previous["rows"]}]
    common = ["--contenders", args.contenders, "--out", args.out, "--stem", stem,
              *(["--small"] if args.small else []), *(["--quick"] if args.quick else []),
              *(["--warm-caches"] if args.warm_caches else []), *(["--autocast", args.autocast] if args.autocast else [])]
    started, not_run, appending = time.perf_counter(), [], args.append  # the first row run starts the file afresh
    for name in names:
        if args.time_limit is not None and time.perf_counter() - started > args.time_limit:
            not_run.append(name)
            continue
        append = ["--append"] if appending else []
        appending = True
        result = subprocess.run([sys.executable, __file__, "--rows", name, *common, *append], check=False)
        if result.returncode:
            print(f"== {name}: its process exited with {result.returncode}", flush=True)
            not_run.append(name)
    if not_run and path.exists():
        document = json.loads(path.read_text())
        document["not_run"] = [*document.get("not_run", []), *not_run]
        print(write_reports(document, out, stem))


def run_rows(args: argparse.Namespace, names: list[str], chosen: list[str], on_gpu: bool, argv) -> None:
    """Measure the rows ``names`` with the ``chosen`` contenders and write the results files (:func:`main`)."""
    # torch.compile on the CPU needs a C++ compiler, and CUDA graphs a GPU: without one, eager and amk only.
    contenders = [name for name in BUILD_ORDER if name in chosen and (on_gpu or name in ("eager", "amk"))]
    timing = INTERPRETER if not on_gpu else QUICK if args.quick else FULL
    env = environment()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    autocast = getattr(torch, args.autocast) if args.autocast else None
    stem = results_stem(args, env)
    document = {"environment": env, "command": " ".join(["python", "benchmarks/models.py", *(argv or sys.argv[1:])]),
                "float32_matmul_precision": float32_matmul_precision(),
                "caches": "the user's" if args.warm_caches else "fresh temporary directories",
                "autocast": args.autocast, "rows": [],
                "not_run": []}
    earlier = out / f"{stem}.json"
    if args.append and earlier.exists():
        previous = json.loads(earlier.read_text())
        check_same_machine(previous["environment"], env, earlier)
        if args.missing:
            names = [name for name in names if name not in {row["row"] for row in previous["rows"]}]
        document["command"] = f"{previous['command']}; {document['command']}"
        document["rows"] = [row for row in previous["rows"] if row["row"] not in names]
    started = time.perf_counter()
    for name in names:
        if args.time_limit is not None and time.perf_counter() - started > args.time_limit:
            document["not_run"].append(name)
            continue
        print(f"== {name}: {ROWS[name].title}", flush=True)
        document["rows"].append(run_row(ROWS[name], contenders, args.small, timing, autocast))
        write_reports(document, out, stem)
    print(write_reports(document, out, stem))


# What rows of one table must share: a geomean over rows timed on two GPUs, or two versions, compares nothing
SAME_MACHINE_KEYS = ("gpu", "torch", "triton", "amk", "python")


def check_same_machine(previous: dict, current: dict, path: Path) -> None:
    """Refuse (exit with a message) to add rows to ``path``, whose rows were measured under ``previous``, on a GPU or
    with versions other than ``current``'s."""
    differing = [f"{key} {previous.get(key)!r} there, {current[key]!r} here" for key in SAME_MACHINE_KEYS
                 if previous.get(key) != current[key]]
    if differing:
        raise SystemExit(f"--append: {path} was measured elsewhere ({'; '.join(differing)}); its rows and this run's "
                         "would not compare. Use another --stem.")


if __name__ == "__main__":
    main()
