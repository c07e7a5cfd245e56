"""Diagnostic: hardware counters (Nsight Compute) of amk's kernels beside the cuBLAS GEMM alone — what bounds a
missed target, read off the GPU rather than inferred from timings.

    python benchmarks/probes/ncu_profile.py --workloads A,C,G --out benchmarks/results/<stem>

For each workload, amk's program is built as the suite's tuner chose it (the ``amk_config`` of the workload in the
results files given by ``--results``, with the GEMM left to cuBLAS where ``amk_torch_ops`` says so), checked against
float64, warmed up, and then one call of it
and one of the cuBLAS GEMM alone run between ``cudaProfilerStart`` and ``cudaProfilerStop``. ``ncu`` (clocks left
alone: ``--clock-control none``) profiles each kernel of that region with the sections that say what bounds it:
speed of light, compute workload (pipe utilization), scheduler and warp-state statistics (stall reasons),
occupancy, launch statistics, memory workload. Writes ``<stem>-W.txt`` (ncu's details page for workload W),
``<stem>-W.csv`` (every metric collected) and ``<stem>.json`` (per kernel: duration, throughputs, the busiest pipes,
the top stall reasons).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from amk.benchmarking import environment
from amk.lowering.configs import KernelConfig
from amk.oplist import build_module
from amk.pipeline import compile_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, make_inputs, relative_error  # noqa: E402

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "SchedulerStats", "WarpStateStats", "Occupancy",
            "LaunchStats", "MemoryWorkloadAnalysis")
RESULTS = Path(__file__).resolve().parents[1] / "results"
DEFAULT_RESULTS = (str(RESULTS / "2026-11-30-h200-merge-all-AC.json"), str(RESULTS / "2026-11-30-h200-unrounded-G.json"))
# Columns of ncu's raw page kept in the summary as they are.
SUMMARY_METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue_active_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__occupancy_limit_registers": "blocks_per_sm_limit_registers",
    "launch__occupancy_limit_shared_mem": "blocks_per_sm_limit_shared_memory",
    "launch__grid_size": "grid_size",
}
PIPE_PREFIXES = ("sm__inst_executed_pipe_", "sm__pipe_")
STALL_PREFIX = "smsp__average_warps_issue_stalled_"


def tuned_configs(paths: list[str]) -> dict[str, dict]:
    """Each workload's ``amk_config`` in the given suite results files (a later file wins), with ``vendor_gemm`` set
    where the tuner kept the program that leaves the GEMM to cuBLAS."""
    configs = {}
    for path in paths:
        for result in json.loads(Path(path).read_text())["results"]:
            if result.get("amk_config"):
                configs[result["workload"]] = {"config": result["amk_config"],
                                               "vendor_gemm": "tensor_op.matmul" in result.get("amk_torch_ops", [])}
    return configs


def profiled_region(name: str, tuned: dict) -> None:
    """Build workload ``name`` as ``tuned``, check it, then run one amk call and one cuBLAS GEMM in the profiler's
    region (the child process that ncu watches)."""
    workload = WORKLOADS[name]
    inputs = make_inputs(workload, workload.shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    kernel_config = KernelConfig.from_user_view(tuned["config"])
    program = compile_module(build_module(workload.ops, workload.shapes, workload.dtype),
                             lambda kernel: kernel_config, vendor_gemm=tuned["vendor_gemm"]).program
    error = relative_error(program(*inputs)[0], reference)
    print(json.dumps({"workload": name, **tuned, "rel_err": error}), flush=True)
    if error[0] > 1e-2:
        raise SystemExit(f"workload {name}: amk's output is wrong (relative error {error[0]:.2e}); not profiled")
    for _ in range(3):
        program(*inputs)
        workload.gemm(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    program(*inputs)
    workload.gemm(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def raw_rows(report: Path) -> list[dict[str, str]]:
    """ncu's raw page of ``report`` in base units (durations in ns): one dict per profiled kernel (the units row
    dropped)."""
    text = subprocess.run(["ncu", "-i", str(report), "--page", "raw", "--csv", "--print-units", "base"],
                          capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    return rows[1:] if rows and not rows[0].get("ID", "").strip().isdigit() else rows


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def summarize(row: dict[str, str]) -> dict:
    """A profiled kernel in a few numbers: its throughputs, the pipes it keeps busiest and why its warps stall."""
    summary = {"kernel": row.get("Kernel Name", "?")[:120]}
    summary |= {label: number(row[metric]) for metric, label in SUMMARY_METRICS.items() if metric in row}
    pipes = {metric: number(value) for metric, value in row.items()
             if metric.startswith(PIPE_PREFIXES) and metric.endswith("pct_of_peak_sustained_active")}
    summary["busiest_pipes_pct"] = dict(sorted(((k, v) for k, v in pipes.items() if v), key=lambda kv: -kv[1])[:6])
    stalls = {metric.removeprefix(STALL_PREFIX): number(value) for metric, value in row.items()
              if metric.startswith(STALL_PREFIX) and metric.endswith("_per_issue_active.ratio")}
    summary["top_stalls_per_issue"] = dict(sorted(((k, v) for k, v in stalls.items() if v),
                                                  key=lambda kv: -kv[1])[:6])
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="A,C,G")
    parser.add_argument("--results", nargs="+", default=list(DEFAULT_RESULTS),
                        help="suite results files whose amk_config each workload is built at")
    parser.add_argument("--out", help="stem of the output files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configs = tuned_configs(args.results)
    names = args.workloads.split(",")
    missing = [name for name in names if name not in configs or not WORKLOADS[name].ops]
    if missing:
        parser.error(f"no tuned amk configuration of workload(s) {', '.join(missing)} in {', '.join(args.results)}")
    if args.child:
        profiled_region(args.child, configs[args.child])
        return
    if not args.out:
        parser.error("--out is required")
    out = Path(args.out)
    document = {"environment": environment(), "command": "python " + " ".join(sys.argv), "kernels": {}}
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            report = Path(scratch) / "report.ncu-rep"
            command = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
                       *[arg for section in SECTIONS for arg in ("--section", section)],
                       "-o", str(report.with_suffix("")), sys.executable, __file__, "--workloads", name, "--child", name, "--results", *args.results]
            subprocess.run(command, check=True)
            details = subprocess.run(["ncu", "-i", str(report), "--page", "details"], capture_output=True, text=True,
                                     check=True).stdout
            out.with_name(f"{out.name}-{name}.txt").write_text(details)
            rows = raw_rows(report)
            with out.with_name(f"{out.name}-{name}.csv").open("w", newline="") as handle:
                if rows:
                    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                    writer.writeheader()
                    writer.writerows(rows)
        document["kernels"][name] = {**configs[name], "profiled": [summarize(row) for row in rows]}
        print(json.dumps(document["kernels"][name], indent=1), flush=True)
    out.with_suffix(".json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
