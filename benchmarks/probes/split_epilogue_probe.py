"""Diagnostic: A and C fused into one kernel against the same chain cut before its row reduction.

    python benchmarks/probes/split_epilogue_probe.py --workloads A,C --budget 24 --out benchmarks/results/<stem>.json

What bounds A is its epilogue (erf GELU and the LayerNorm statistics on CUDA cores while the tensor cores idle,
``2026-11-30-h200-epilogue-breakdown``), and persistent TMA kernels, which bring B's GEMM + ReLU to the cuBLAS
GEMM, lost on A with the statistics in the epilogue. This probe times, in one process on the same inputs, amk's fused
kernel against two amk kernels: the chain up to the row reduction (a tile2d GEMM whose epilogue is bias + GELU or the
residual, where the tuner may pick a persistent TMA kernel) and the row reduction alone over its stored output (one
extra HBM round trip of the output: 0.06 ms for A, 0.25 ms for C at 4.3 TB/s); also each of the two alone, eager and
torch.compile. Every output is checked against a float64 reference first. If the cut wins, the fusion pass should
cut there for long-K GEMMs.

The ``library`` cut leaves the GEMM to the vendor library (cuBLAS, through ``torch.matmul``, as torch.compile's
``extern_kernels.mm`` does) and fuses everything after it into one amk kernel (for A: bias, GELU and LayerNorm in
one pass over the stored product; for G: the scale and the softmax); ``library_tail_alone`` is that kernel alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, make_inputs, save_rows  # noqa: E402

# Where each chain is cut: the ops (and how many of the workload's operands) before the row reduction.
CUTS = {"A": (["matmul", "add_bias", "gelu"], 3, ["layernorm"]), "C": (["matmul", "add"], 3, ["rmsnorm"])}


def measure(name: str, tuner: amk.TunerConfig, amk_cut: bool) -> dict:
    workload = WORKLOADS[name]
    inputs = make_inputs(workload, workload.shapes, "cuda")
    output_shape = (workload.shapes[0][0], workload.shapes[1][1])
    fused = amk.build_fused_kernel(workload.ops, workload.shapes, workload.dtype, tuner_config=tuner)
    # the library cut: the workload's first op is its matmul of the first two operands
    library_tail = amk.build_fused_kernel(workload.ops[1:], [output_shape, *workload.shapes[2:]], workload.dtype,
                                          tuner_config=tuner)
    product = inputs[0] @ inputs[1]
    reference = workload.eager(*[t.double() for t in inputs])
    compiled = torch.compile(workload.eager)
    functions = {"fused": lambda: fused(*inputs), "library": lambda: library_tail(inputs[0] @ inputs[1], *inputs[2:]),
                 "library_tail_alone": lambda: library_tail(product, *inputs[2:]),
                 "cublas_gemm_alone": lambda: inputs[0] @ inputs[1],
                 "eager": lambda: workload.eager(*inputs), "compile": lambda: compiled(*inputs)}
    configs = {"fused": fused.config, "library_tail": library_tail.config}
    if amk_cut and name in CUTS:
        head_ops, head_count, tail_ops = CUTS[name]
        head_inputs, tail_operands = inputs[:head_count], inputs[head_count:]
        head = amk.build_fused_kernel(head_ops, workload.shapes[:head_count], workload.dtype, tuner_config=tuner)
        tail = amk.build_fused_kernel(tail_ops, [output_shape, *workload.shapes[head_count:]], workload.dtype,
                                      tuner_config=tuner)
        stored = head(*head_inputs)
        functions |= {"cut": lambda: tail(head(*head_inputs), *tail_operands), "head_alone": lambda: head(*head_inputs),
                      "tail_alone": lambda: tail(stored, *tail_operands)}
        configs |= {"head": head.config, "tail": tail.config}
    row = {"workload": name, "shapes": workload.shapes, "dtype": str(workload.dtype), "configs": configs,
           "errors": {}, "ms": {}}
    for label in [label for label in ("fused", "cut", "library", "eager", "compile") if label in functions]:
        out = functions[label]().double()
        row["errors"][label] = ((out - reference).norm() / reference.norm()).item()
    for label, function in functions.items():
        row["ms"][label] = time_ms(function)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="A,C", help="A, C (both cuts), G (the library cut only)")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--library-only", action="store_true", help="time the library cut only, not amk's own cut")
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("this diagnostic times GPU kernels: it needs a GPU")
    # the fused program as such: the tuner would otherwise also try the library cut itself (vendor_gemm)
    tuner = amk.TunerConfig(search_budget=args.budget, vendor_gemm=False)
    rows = []
    for name in args.workloads.split(","):
        rows.append(measure(name, tuner, not args.library_only))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
