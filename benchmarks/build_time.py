"""Cold build times, per phase, and how steady the default build's result is.

    python benchmarks/build_time.py --out benchmarks/results/DATE-h200-build-time

Each build runs in a fresh process with empty caches (its own ``AMK_CACHE_DIR`` and ``TRITON_CACHE_DIR``), as a
user's first build does: workloads A, B, C, G (``workloads.py``) and the three usage examples' chains
(examples/usage/), each with the settings the example uses (the defaults, except example 3's ``TunerConfig`` and
``parameter_grid``). The process reports the build's wall time, ``FusedKernel.build_phases``, the program chosen,
then the built kernel's median time (``triton.testing.do_bench``, median) and its relative error against the eager
float32 result on the same inputs. ``--repeat B=5`` builds B five times from scratch, for the spread of the default
build. Each row is also appended to ``STEM.jsonl`` as soon as it is measured, so a run cut short keeps what it did.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import WORKLOADS, make_inputs, relative_error  # noqa: E402

EXAMPLE3_TUNER = dict(search_budget=40, warmup_runs=15, measure_runs=40, enable_warp_specialization=True)
EXAMPLE3_GRID = {"BLOCK_SIZE_M": [32, 64, 128], "BLOCK_SIZE_N": [64, 128, 256], "BLOCK_SIZE_K": [32, 64],
                 "num_warps": [4, 8, 16], "num_stages": [2, 3, 4, 5], "GROUP_SIZE_M": [8]}
# The usage examples as (workload whose ops, dtype and eager reference they share, their input shapes, settings).
EXAMPLES = {
    "example1": ("A", [(32, 512, 4096), (4096, 4096), (4096,), (4096,), (4096,)], {}),
    "example2": ("B", [(64, 1024, 4096), (4096, 4096), (4096,)], {}),
    "example3": ("C", [(16, 2048, 8192), (8192, 8192), (16, 2048, 8192)],
                 {"tuner": EXAMPLE3_TUNER, "grid": EXAMPLE3_GRID}),
}
BUILDS = ["A", "B", "C", "G", *EXAMPLES]


def build_one(name: str) -> dict:
    """Build ``name`` in this process (fresh caches are the caller's business) and measure what was built."""
    import triton.testing

    base, shapes, settings = EXAMPLES[name] if name in EXAMPLES else (name, WORKLOADS[name].shapes, {})
    workload = WORKLOADS[base]
    inputs = make_inputs(workload, shapes, "cuda")
    tuner = amk.TunerConfig(**settings["tuner"]) if "tuner" in settings else None
    start = time.perf_counter()
    kernel = amk.build_fused_kernel(workload.ops, shapes, workload.dtype, tuner_config=tuner,
                                    parameter_grid=settings.get("grid"))
    build_s = time.perf_counter() - start
    error, max_abs = relative_error(kernel(*inputs), workload.eager(*[t.float() for t in inputs]))
    median = triton.testing.do_bench(lambda: kernel(*inputs), return_mode="median")
    return {"build": name, "ops": workload.ops, "shapes": shapes, "dtype": str(workload.dtype), "build_s": build_s,
            "phases": kernel.build_phases, "program": "vendor_gemm" if kernel.torch_ops else "fused",
            "config": kernel.config, "median_ms": median, "rel_l2": error, "max_abs": max_abs,
            "trials": {k: sum(1 for t in log if t["status"] != "pruned") for k, log in kernel.tuning_log.items()}}


def build_fresh(name: str) -> dict:
    """``build_one(name)`` in a new process with empty amk and Triton caches."""
    with tempfile.TemporaryDirectory(prefix="amk-build-time-") as scratch:
        env = dict(os.environ, AMK_CACHE_DIR=f"{scratch}/amk", TRITON_CACHE_DIR=f"{scratch}/triton")
        done = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"build": name, "error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| build | wall s | emit | compile | time | verify | program | trials | median ms | rel. L2 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['build']} | failed | | | | | | | | |")
            continue
        phases = row["phases"]
        lines.append(f"| {row['build']} | {row['build_s']:.1f} | {phases['emit']:.1f} | {phases['compile']:.1f} | "
                     f"{phases['time']:.1f} | {phases['verify']:.1f} | {row['program']} | "
                     f"{sum(row['trials'].values())} | {row['median_ms']:.4f} | {row['rel_l2']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", default=",".join(BUILDS), help="comma-separated, from " + ", ".join(BUILDS))
    parser.add_argument("--repeat", default="B=5", help="NAME=COUNT: build NAME this many times (the spread)")
    parser.add_argument("--out", help="results stem: writes STEM.json and STEM.md")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: build one and print its JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(build_one(args.one)))
        return
    names = args.builds.split(",")
    unknown = [n for n in names if n not in BUILDS]
    if unknown:
        parser.error(f"unknown builds {unknown}; choose from {', '.join(BUILDS)}")
    repeated, _, count = args.repeat.partition("=")
    if repeated not in BUILDS or not count.isdigit():
        parser.error(f"--repeat takes NAME=COUNT with NAME from {', '.join(BUILDS)}, got {args.repeat!r}")
    if not torch.cuda.is_available():
        parser.error("cold build times are measured on a GPU")
    rows = []
    for name in names:
        for _ in range(int(count) if name == repeated else 1):
            rows.append(build_fresh(name))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
            if args.out:
                with open(f"{args.out}.jsonl", "a") as partial:
                    partial.write(json.dumps(rows[-1]) + "\n")
    spread = [r["median_ms"] for r in rows if r["build"] == repeated and "error" not in r]
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]), "rows": rows,
                "spread": {"build": repeated, "medians_ms": spread,
                           "max_over_min": max(spread) / min(spread) if spread else None,
                           "median_of_medians_ms": statistics.median(spread) if spread else None}}
    report = table(rows) + (f"\n\n{repeated} built {len(spread)} times from scratch: medians "
                            f"{', '.join(f'{m:.4f}' for m in spread)} ms; slowest/fastest "
                            f"{document['spread']['max_over_min']:.4f}\n" if spread else "\n")
    print(report)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(document, indent=2))
        Path(f"{args.out}.md").write_text(f"# Cold builds ({document['environment']['gpu']})\n\n"
                                          f"`{document['command']}`\n\n{report}")


if __name__ == "__main__":
    main()
