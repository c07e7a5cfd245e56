"""Diagnostic: how fast anything that reads D's 32 MB weight once runs under CUDA graphs, next to amk's D and E.

    python benchmarks/probes/decode_floor.py --out benchmarks/results/<stem>.json

All timed as the D/E targets are (``do_bench_cudagraph``, median), in one process on the same weight W[4096, 4096]
bf16: a column sum of W in fp32 (PyTorch's reduction: a pure read of W, the practical floor of one kernel that
streams it), the cuBLAS GEMM alone for M = 16 and M = 1, then amk's GEMM + residual with a growing prologue — none,
``x * g`` (elementwise: the A operand computed in registers), RMSNorm without a weight (row statistics), the full
RMSNorm with its weight (D and E) — at the configuration the tuner chose in ``2026-11-30-h200-decode-48`` (outputs
checked against eager first), so that each piece of the prologue's cost shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import save_rows  # noqa: E402

DECODE_GRID = {"BLOCK_SIZE_N": [128], "BLOCK_SIZE_K": [128], "SPLIT_K": [4], "num_warps": [2], "num_stages": [5]}


def amk_row(name: str, ops: list, shapes: list, inputs: list, reference) -> dict:
    kernel = amk.build_fused_kernel(ops, shapes, torch.bfloat16, parameter_grid=DECODE_GRID)
    output = kernel(*inputs)
    error = ((output.double() - reference.double()).norm() / reference.double().norm()).item()
    return {"name": name, "ms": time_ms(lambda: kernel(*inputs), cuda_graph=True), "rel_error": error,
            "config": kernel.config}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("this diagnostic times CUDA graphs: it needs a GPU")
    torch.manual_seed(0)
    hidden = 4096
    w = torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16) / hidden ** 0.5
    gamma = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    rows = [{"name": "W.sum(0) in fp32 (a pure read of W)",
             "ms": time_ms(lambda: w.sum(0, dtype=torch.float32), cuda_graph=True)}]
    for m in (16, 1):
        x = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16)
        rows.append({"name": f"cuBLAS x[{m},4096] @ W alone", "ms": time_ms(lambda x=x: x @ w, cuda_graph=True)})
        rows.append(amk_row(f"amk x[{m},4096] @ W + residual", ["matmul", "add"],
                            [(m, hidden), (hidden, hidden), (m, hidden)], [x, w, residual], x @ w + residual))
        rows.append(amk_row(f"amk (x[{m},4096]*g) @ W + residual", ["mul", "matmul", "add"],
                            [(m, hidden), (hidden,), (hidden, hidden), (m, hidden)], [x, gamma, w, residual],
                            (x * gamma) @ w + residual))
        unweighted = torch.nn.functional.rms_norm(x.float(), (hidden,), eps=1e-5).to(torch.bfloat16)
        rows.append(amk_row(f"amk RMSNorm(x[{m},4096]) @ W + residual", ["rmsnorm", "matmul", "add"],
                            [(m, hidden), (hidden, hidden), (m, hidden)], [x, w, residual], unweighted @ w + residual))
        normed = torch.nn.functional.rms_norm(x.float(), (hidden,), eps=1e-5) * gamma.float()
        reference = (normed.to(torch.bfloat16) @ w) + residual
        rows.append(amk_row(f"amk RMSNorm(x[{m},4096])*g @ W + residual", ["rmsnorm", "matmul", "add"],
                            [(m, hidden), (hidden,), (hidden, hidden), (m, hidden)], [x, gamma, w, residual],
                            reference))
    floor_ms = w.numel() * w.element_size() / 4.3e12 * 1e3
    for row in rows:
        row["weight_bandwidth_tb_s"] = w.numel() * w.element_size() / (row["ms"] * 1e-3) / 1e12
        print(f"{row['name']:48s} {row['ms']:.4f} ms  {row['weight_bandwidth_tb_s']:.2f} TB/s"
              + (f"  rel. error {row['rel_error']:.1e}" if "rel_error" in row else ""))
    print(f"HBM floor for the weight alone: {floor_ms:.4f} ms")
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
