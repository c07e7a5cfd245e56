"""Host overhead of an amk call against a bare Triton launch of the same kernel, on the decode workloads D and E and
two kernels with workspace (a split-K GEMM with its counter, a GEMM + LayerNorm keeping row statistics).

    python benchmarks/host_overhead.py --out benchmarks/results/DATE-h200-host-overhead.json

Per call, in microseconds of host time (a loop of launches, synchronized once at the end, divided by the count):
``amk`` is ``kernel(*inputs)`` (the hot path's checks, output allocation, then on a GPU the compiled kernel launched
directly by ``amk.replay``); ``bare_triton`` calls the emitted launcher directly on tensors prepared once (``kernel[grid](...)``,
Triton's own launch path only). On a GPU the difference is what amk adds (negative: amk's call is the cheaper). Without a GPU the kernels would run in Triton's interpreter, so there the launch
is replaced by a no-op in both and ``amk`` is amk's own Python path alone. ``workspace_us`` is what finding the
call's workspace buffers costs (one set per thread and CUDA stream, :mod:`amk.workspace`), included in ``amk``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment, host_us

WORKLOADS = {
    "D": (["rmsnorm", "matmul", "add"], [(16, 4096), (4096,), (4096, 4096), (16, 4096)]),
    "E": (["rmsnorm", "matmul", "add"], [(1, 4096), (4096,), (4096, 4096), (1, 4096)]),
    "split_k": (["matmul", "add"], [(1, 8192), (8192, 256), (1, 256)]),
    "layernorm": (["matmul", "add_bias", "layernorm"], [(16, 4096), (4096, 4096), (4096,), (4096,), (4096,)]),
}


def per_call_us(fn, calls: int) -> float:
    """Host time per call, waiting for the device at the end (a launch-bound call's whole cost)."""
    return host_us(fn, calls=calls, warmup=100, wait_for_device=True)


def measure(name: str, calls: int) -> dict:
    ops, shapes = WORKLOADS[name]
    kernel = amk.build_fused_kernel(ops, shapes, torch.bfloat16, autotune=False)
    device = kernel.device
    inputs = [torch.randn(s, device=device, dtype=torch.bfloat16) for s in shapes]
    (compiled,) = kernel.compiled.kernels.values()
    if device.type != "cuda":
        compiled.launch = lambda *views: None
    kernel(*inputs)
    views = [*inputs]  # D and E take their inputs as the kernel views them (2-D, no transpose)
    views += [torch.empty(s.shape({}), device=device, dtype=s.dtype) for s in compiled.outputs]
    views += [torch.zeros(s.shape({}), device=device, dtype=s.dtype) for s in compiled.workspace]
    amk_us = per_call_us(lambda: kernel(*inputs), calls)
    bare_us = per_call_us(lambda: compiled.launch(*views), calls)
    workspaces = list(kernel.compiled.program.workspaces.values())
    workspace_us = per_call_us(lambda: [workspace() for workspace in workspaces], calls)
    return {"workload": name, "ops": ops, "shapes": shapes, "config": kernel.config, "amk_us": amk_us,
            "bare_triton_us": bare_us, "amk_minus_bare_us": amk_us - bare_us,
            "workspace_buffers": len(compiled.workspace), "workspace_us": workspace_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()
    rows = [measure(name, args.calls) for name in WORKLOADS]
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]),
                "launch": "Triton" if torch.cuda.is_available() else "no-op (no GPU: amk's own path only)",
                "rows": rows}
    for row in rows:
        print(f"{row['workload']}: amk {row['amk_us']:.1f} us, bare Triton launch {row['bare_triton_us']:.1f} us, "
              f"amk adds {row['amk_minus_bare_us']:.1f} us per call; finding its {row['workspace_buffers']} workspace "
              f"buffers {row['workspace_us']:.2f} us")
    if args.out:
        Path(args.out).write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
