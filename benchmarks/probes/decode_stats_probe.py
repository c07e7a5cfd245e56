"""Diagnostic: what D's RMSNorm statistics cost in the K loop, by editing the emitted kernel.

    python benchmarks/probes/decode_stats_probe.py [--rows 1] --out benchmarks/results/<stem>.json

``decode_floor.py`` showed x * g in the K loop costing 0.5 µs and the row statistics 2.8 µs when they were added up
element-wise (one multiply-add per element of a [16, 128] tile). This probe found why and what to do instead; amk
now emits its ``gram_diagonal`` form. It times amk's D kernel (RMSNorm, split-K, the tuner's configuration in
``2026-11-30-h200-decode-48``) as emitted and with its K loop edited back: ``elementwise`` (x * x added into a
[BLOCK_M, BLOCK_K] tile, its rows summed after the loop: what amk emitted before), ``dot_tf32`` (the row sums of x * x
by a dot against a tile of ones, in tf32), ``no_stats`` (no sum of squares: a timing bound, wrong output). Under CUDA
graphs, each output compared with the as-emitted kernel's. (The committed ``-decode-stats-probe`` files were taken by
the first version of this probe, which started from the element-wise form.) A probe of the emitted code, not
something amk emits.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import time_ms
from amk.runtime import load_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import save_rows  # noqa: E402

GRID = {"BLOCK_SIZE_N": [128], "BLOCK_SIZE_K": [128], "SPLIT_K": [4], "num_warps": [2], "num_stages": [5]}
GRAM_INIT = "gram = tl.zeros((BLOCK_M, BLOCK_M), dtype=tl.float32)"
GRAM_UPDATE = "gram_2 = tl.dot(x_tile, x_tile_t, gram_1)"
DIAGONAL = ("tl.sum(tl.where(tl.arange(0, BLOCK_M)[:, None] == tl.arange(0, BLOCK_M)[None, :], gram_1, 0.0), axis=1, "
            "keep_dims=True)")

VARIANTS = {
    "gram_diagonal": [],
    "elementwise": [(GRAM_INIT, "gram = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)"),
                    (GRAM_UPDATE, "gram_2 = gram_1 + x_f32 * x_f32"),
                    (DIAGONAL, "tl.sum(gram_1, axis=1, keep_dims=True)")],
    "dot_tf32": [(GRAM_INIT, "gram = tl.zeros((BLOCK_M, 16), dtype=tl.float32)"),
                 (GRAM_UPDATE, 'gram_2 = tl.dot(x_f32 * x_f32, tl.full((BLOCK_K, 16), 1.0, tl.float32), gram_1, '
                               'input_precision="tf32")'),
                 (DIAGONAL, "tl.max(gram_1, axis=1, keep_dims=True)")],
    "no_stats": [(GRAM_UPDATE, "gram_2 = gram_1")],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--out", help="JSON results file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("this diagnostic times CUDA graphs: it needs a GPU")
    torch.manual_seed(0)
    shapes = [(args.rows, 4096), (4096,), (4096, 4096), (args.rows, 4096)]
    kernel = amk.build_fused_kernel(["rmsnorm", "matmul", "add"], shapes, torch.bfloat16, parameter_grid=GRID)
    (compiled,) = kernel.compiled.kernels.values()
    inputs = [torch.randn(s, device="cuda", dtype=torch.bfloat16) / (64 if i == 2 else 1) for i, s in enumerate(shapes)]
    rows, expected = [], None
    for name, edits in VARIANTS.items():
        source = compiled.source
        for old, new in edits:
            if old not in source:
                raise SystemExit(f"{name}: the emitted kernel no longer contains {old!r}; update the probe")
            source = source.replace(old, new)
        module = load_source(source, f"probe_{name}")
        out = torch.empty(shapes[0], device="cuda", dtype=torch.bfloat16)
        workspace = [torch.zeros(s.shape({}), device="cuda", dtype=s.dtype) for s in compiled.workspace]
        views = [*inputs, out, *workspace]
        module.launch(*views)
        expected = out.clone() if expected is None else expected
        error = ((out.double() - expected.double()).norm() / expected.double().norm()).item()
        row = {"variant": name, "ms": time_ms(lambda m=module, v=views: m.launch(*v), cuda_graph=True),
               "rel_error_vs_as_emitted": error, "config": kernel.config}
        print(f"{name:14s} {row['ms']:.4f} ms  rel. error vs as emitted {error:.1e}", flush=True)
        rows.append(row)
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
