"""The amk benchmark suite: each workload under eager, torch.compile (default and max-autotune-no-cudagraphs), the
cuBLAS GEMM alone and amk, in one process on the same inputs, correctness checked first.

    python benchmarks/run.py                       # every workload, every contender (needs a GPU)
    python benchmarks/run.py --workloads A,G --contenders eager,compile,amk
    python benchmarks/run.py --small               # tiny shapes: a smoke test of the suite itself (CPU is fine)
    python benchmarks/run.py --extra-shapes        # each workload family at two other shapes
    python benchmarks/run.py --render FILE.json    # rewrite a results file's table and chart from its JSON

Writes ``benchmarks/results/<stem>.json`` and ``.md`` (table: times, amk's speedup against each contender, the
fraction of the floor amk reaches) and, with matplotlib, ``.png``. Times are medians in milliseconds
(``amk.benchmarking.time_ms``; CUDA-graph replays for the graph columns). The floor is max(FLOPs / 790 TFLOP/s,
bytes / 4.3 TB/s), the ceilings measured on the H200.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from workloads import (
    PEAK_BYTES,
    PEAK_FLOPS,
    WORKLOADS,
    ModuleKernel,
    Workload,
    make_inputs,
    relative_error,
    tensor_bytes,
)

import amk
from amk.benchmarking import environment, time_ms
from amk.runtime import default_device

CONTENDERS = ("eager", "compile", "compile_max_autotune", "cublas", "amk")


def run_workload(workload: Workload, contenders: list[str], small: bool, graphs: bool, budget: int) -> dict:
    device = default_device()
    shapes = workload.small_shapes if small else workload.shapes
    inputs = make_inputs(workload, shapes, device)
    start = time.perf_counter()
    if workload.module is not None:
        kernel = ModuleKernel(workload, shapes, budget)
    else:
        kernel = amk.build_fused_kernel(workload.ops, shapes, workload.dtype,
                                        tuner_config=amk.TunerConfig(search_budget=budget))
    build_s = time.perf_counter() - start
    reference = workload.eager(*[t.double() if device.type == "cpu" else t.float() for t in inputs])
    title = workload.title if workload.name in WORKLOADS else f"{workload.title} at {' x '.join(map(str, shapes[:2]))}"
    result = {"workload": workload.name, "title": title, "shapes": shapes, "dtype": str(workload.dtype),
              "amk_build_s": round(build_s, 2), "amk_kernels": kernel.num_kernels, "amk_config": kernel.config,
              "amk_torch_ops": getattr(kernel, "torch_ops", []), "amk_program_times": getattr(kernel, "program_times", {}),
              "times_ms": {}, "graph_times_ms": {}, "errors": {}, "tuning_log": getattr(kernel, "tuning_log", {})}
    out = kernel(*inputs)
    result["errors"]["amk"] = relative_error(out, reference)
    output_shape = tuple(out.shape)
    flops = workload.flops(shapes)
    bytes_moved = tensor_bytes(shapes, workload.dtype, output_shape)
    result["floor_ms"] = max(flops / PEAK_FLOPS, bytes_moved / PEAK_BYTES) * 1e3
    functions = {"amk": lambda: kernel(*inputs), "eager": lambda: workload.eager(*inputs)}
    if "compile" in contenders:
        compiled = torch.compile(workload.eager)
        functions["compile"] = lambda: compiled(*inputs)
    if "compile_max_autotune" in contenders:
        tuned = torch.compile(workload.eager, mode="max-autotune-no-cudagraphs")
        functions["compile_max_autotune"] = lambda: tuned(*inputs)
    if "cublas" in contenders and workload.gemm is not None:
        functions["cublas"] = lambda: workload.gemm(*inputs)
    for name in [c for c in contenders if c in functions]:
        fn = functions[name]
        if name != "cublas":
            value = fn() if name != "amk" else out
            result["errors"].setdefault(name, relative_error(value, reference))
        result["times_ms"][name] = time_ms(fn)
        if graphs and workload.cuda_graphs and device.type == "cuda":
            try:
                result["graph_times_ms"][name] = time_ms(fn, cuda_graph=True)
            except Exception as error:  # a contender that cannot be captured is reported, not fatal
                result["graph_times_ms"][name] = f"not capturable: {type(error).__name__}: {error}"[:200]
    return result


OTHERS = [c for c in CONTENDERS if c != "amk"]


def table(results: list[dict]) -> str:
    """Times, amk's speedup against each contender (above 1x amk is faster) and the fraction of the floor amk
    reaches."""
    lines = ["| workload | floor | " + " | ".join(CONTENDERS) + " | amk rel. error | "
             + " | ".join(f"amk vs {c}" for c in OTHERS) + " | amk / floor |",
             "|---" * (2 * len(CONTENDERS) + 3) + "|"]
    for r in results:
        for label, times in (("", r["times_ms"]), (" (graphs)", r["graph_times_ms"])):
            if not times:
                continue
            amk_ms = times.get("amk") if isinstance(times.get("amk"), float) else None
            cells = [f"{times[c]:.4f}" if isinstance(times.get(c), float) else "—" for c in CONTENDERS]
            speedups = [f"{times[c] / amk_ms:.2f}x" if amk_ms and isinstance(times.get(c), float) else "—"
                        for c in OTHERS]
            floor = f"{r['floor_ms'] / amk_ms:.0%}" if amk_ms else "—"
            lines.append(f"| {r['workload']}{label}: {r['title']} | {r['floor_ms']:.4f} | " + " | ".join(cells)
                         + f" | {r['errors']['amk'][0]:.2e} | " + " | ".join(speedups) + f" | {floor} |")
    return "\n".join(lines)


def chart(results: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(CONTENDERS)
    for index, contender in enumerate(CONTENDERS):
        values = [r["floor_ms"] / r["times_ms"][contender] if isinstance(r["times_ms"].get(contender), float) else 0
                  for r in results]
        axis.bar([i + index * width for i in range(len(results))], values, width, label=contender)
    axis.set_xticks([i + 0.4 for i in range(len(results))], [r["workload"] for r in results])
    axis.set_ylabel("fraction of the roofline floor (higher is better)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, from " + ", ".join(WORKLOADS))
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated, from " + ", ".join(CONTENDERS))
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke test; CPU is fine)")
    parser.add_argument("--extra-shapes", action="store_true",
                        help="run each workload family at its two extra shapes (A2, A3, ...) instead")
    parser.add_argument("--no-graphs", action="store_true", help="skip the CUDA-graph measurements")
    parser.add_argument("--budget", type=int, default=24, help="autotuning candidates per kernel")
    parser.add_argument("--out", default="benchmarks/results", help="directory for the results files")
    parser.add_argument("--stem", default=None, help="results file name without extension")
    parser.add_argument("--render", metavar="JSON", help="measure nothing: rewrite the table and chart of a results "
                        "file from its JSON (after a change to their format)")
    args = parser.parse_args(argv)
    if args.render:
        path = Path(args.render)
        write_reports(json.loads(path.read_text()), path.parent, path.stem)
        return
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = [n for n in names if n not in WORKLOADS] + [c for c in contenders if c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown workloads or contenders: {', '.join(unknown)}")
    workloads = [WORKLOADS[name] for name in names]
    if args.extra_shapes:
        workloads = [variant for workload in workloads for variant in workload.variants()]
    results = []
    for workload in workloads:
        print(f"== workload {workload.name}: {workload.title}", flush=True)
        results.append(run_workload(workload, contenders, args.small, not args.no_graphs, args.budget))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "tuning_log"}, default=str), flush=True)
    env = environment()
    stem = args.stem or f"bench-{env['date'][:10]}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"environment": env, "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
                "results": results}
    (out / f"{stem}.json").write_text(json.dumps(document, indent=2, default=str))
    print(write_reports(document, out, stem))


def write_reports(document: dict, out: Path, stem: str) -> str:
    """``<stem>.md`` (the table) and ``<stem>.png`` (the chart) of a results document; returns the Markdown."""
    env, results = document["environment"], document["results"]
    markdown = (f"# amk benchmarks ({env['gpu']})\n\ntorch {env['torch']}, triton {env['triton']}, amk {env['amk']}, "
                f"{env['date']}\n\nCommand: `python benchmarks/{document['command']}`\n\nMedian ms.\n\n{table(results)}\n")
    (out / f"{stem}.md").write_text(markdown)
    chart(results, out / f"{stem}.png")
    return markdown


if __name__ == "__main__":
    main()
