"""Diagnostic: where each contender's time goes, kernel by kernel (torch.profiler's CUDA activity).

    python benchmarks/probes/kernel_times.py --workloads A,C,G --budget 12 --out benchmarks/results/<stem>.json
    python benchmarks/probes/kernel_times.py --workloads A --configs 128x256x64:w8s4 128x128x64:w8s4 --out ...

For each workload, in one process on the same inputs: amk (its kernels' launches, e.g. tile_stats' statistics launch
and its finishing launch), torch.compile (default and ``max-autotune-no-cudagraphs``: its GEMM and the kernels
around it) and the cuBLAS GEMM alone. Each is checked against a float64 reference, then called ``--calls`` times
under the profiler; every GPU kernel's mean device time per call is reported with what the kernel would take at the
HBM bandwidth for the bytes the whole program must move (the floor of run.py). This is the profiling evidence of what
bounds a missed target: which launch is slow, and how far each is from its own traffic. ``--configs`` also profiles
amk's program at fixed configurations (``BLOCK_MxBLOCK_NxBLOCK_K:wWARPSsSTAGES[:mMERGE_CHUNK]``, no tuning), to see how each launch
of a multi-launch strategy depends on the tile shape they share.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

import amk
from amk.lowering.configs import KernelConfig
from amk.oplist import build_module
from amk.pipeline import compile_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import PEAK_BYTES, PEAK_FLOPS, WORKLOADS, make_inputs, relative_error, save_rows, tensor_bytes  # noqa: E402


def kernel_times(function, calls: int) -> dict[str, float]:
    """Mean device time per call of every GPU kernel ``function`` launches, in milliseconds, slowest first."""
    for _ in range(5):
        function()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(calls):
            function()
        torch.cuda.synchronize()
    totals = defaultdict(float)
    for event in profile.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time_total / 1e3 / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def parse_config(text: str) -> tuple[KernelConfig, int]:
    """``128x256x64:w8s4`` -> BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4; a third field
    ``:m16`` sets amk-tile's merge_chunk (default 0: the pass's choice)."""
    tiles, launch, *merge = text.split(":")
    block_m, block_n, block_k = (int(v) for v in tiles.split("x"))
    warps, stages = launch.removeprefix("w").split("s")
    config = KernelConfig(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=int(warps),
                          num_stages=int(stages))
    return config, int(merge[0].removeprefix("m")) if merge else 0


def measure(name: str, budget: int, calls: int, configs: list[str]) -> dict:
    workload = WORKLOADS[name]
    inputs = make_inputs(workload, workload.shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    built = amk.build_fused_kernel(workload.ops, workload.shapes, workload.dtype,
                                   tuner_config=amk.TunerConfig(search_budget=budget))
    compiled = torch.compile(workload.eager)
    tuned = torch.compile(workload.eager, mode="max-autotune-no-cudagraphs")
    contenders = {"amk": lambda: built(*inputs), "compile": lambda: compiled(*inputs),
                  "compile_max_autotune": lambda: tuned(*inputs), "cublas_gemm": lambda: workload.gemm(*inputs)}
    for text in configs:
        config, merge_chunk = parse_config(text)
        program = compile_module(build_module(workload.ops, workload.shapes, workload.dtype),
                                 lambda kernel, config=config: config, merge_chunk=merge_chunk).program
        contenders[f"amk {text}"] = lambda program=program: program(*inputs)[0]
    output_shape = tuple(reference.shape)
    bytes_moved = tensor_bytes(workload.shapes, workload.dtype, output_shape)
    flops = workload.flops(workload.shapes)
    row = {"workload": name, "shapes": workload.shapes, "dtype": str(workload.dtype), "amk_config": built.config,
           "floor_ms": max(flops / PEAK_FLOPS, bytes_moved / PEAK_BYTES) * 1e3,
           "gemm_flops_ms": flops / PEAK_FLOPS * 1e3, "bytes_ms": bytes_moved / PEAK_BYTES * 1e3,
           "errors": {}, "kernels_ms": {}, "total_ms": {}}
    for label, function in contenders.items():
        if label != "cublas_gemm":
            row["errors"][label] = relative_error(function(), reference)
        kernels = kernel_times(function, calls)
        row["kernels_ms"][label] = kernels
        row["total_ms"][label] = sum(kernels.values())
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="A,C,G")
    parser.add_argument("--budget", type=int, default=12, help="amk's autotuning candidates per kernel")
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per contender")
    parser.add_argument("--configs", nargs="*", default=[],
                        help="fixed amk configurations to profile as well, e.g. 128x256x64:w8s4")
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()
    for text in args.configs:
        try:
            parse_config(text)
        except ValueError:
            parser.error(f"--configs {text!r}: expected BLOCK_MxBLOCK_NxBLOCK_K:wWARPSsSTAGES[:mMERGE_CHUNK], "
                         "e.g. 128x256x64:w8s4:m16")
    names = args.workloads.split(",")
    for name in names:
        if name not in WORKLOADS or WORKLOADS[name].gemm is None:
            parser.error(f"workload {name!r}: choose from those with a single GEMM to compare with, "
                         f"{', '.join(n for n, w in WORKLOADS.items() if w.gemm is not None)}")
    if not torch.cuda.is_available():
        parser.error("this diagnostic profiles GPU kernels: it needs a GPU")
    rows = []
    for name in names:
        rows.append(measure(name, args.budget, args.calls, args.configs))
        print(json.dumps(rows[-1], indent=1), flush=True)
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
