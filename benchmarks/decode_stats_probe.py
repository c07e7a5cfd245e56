"""Diagnostic: where D's RMSNorm statistics cost their ~3 µs, by editing the emitted kernel's K loop.

    python benchmarks/decode_stats_probe.py --out benchmarks/results/<stem>.json

``decode_floor.py`` showed that ``x * g`` in the K loop costs 0.5 µs but the row statistics 2.8 µs, although they
add one multiply-add per element of a [16, 128] tile. Hypothesis: ``x`` then has two users in different layouts
(the dot's operand layout and the blocked layout of the element-wise sum), so Triton converts it through shared
memory in every iteration. The probe times amk's D kernel (RMSNorm, split-K, the tuner's configuration in
``2026-11-30-h200-decode-48``) as emitted and with its K loop edited: ``no_stats`` (the sum of squares dropped: a
timing bound, wrong output), ``dot_tf32x3`` / ``dot_tf32`` (the row sums of ``x * x`` taken by a second ``tl.dot``
against a tile of ones, so that both uses of ``x`` want the dot operand layout), ``gram_diagonal`` (the diagonal of
``x @ x^T`` on the bf16 tile: exact, and both operands are the tile the main dot reads). Under CUDA graphs, each output
compared with the unedited kernel's. A probe of the emitted code, not something amk emits.
"""

from __future__ import annotations

import argparse

import torch

import amk
from amk.benchmarking import save_rows, time_ms
from amk.runtime import load_source

GRID = {"BLOCK_SIZE_N": [128], "BLOCK_SIZE_K": [128], "SPLIT_K": [4], "num_warps": [2], "num_stages": [5]}
TERMS = "sumsq_terms = tl.full((BLOCK_M, BLOCK_K), 0.0, tl.float32)"
UPDATE = "rmsnorm_3 = sumsq_terms_1 + rmsnorm_1"
REDUCE = "rmsnorm_6 = tl.sum(sumsq_terms_1, axis=1, keep_dims=True)"


def by_dot(precision: str) -> list[tuple[str, str]]:
    ones = "tl.full((BLOCK_K, 16), 1.0, tl.float32)"
    return [(TERMS, "sumsq_terms = tl.full((BLOCK_M, 16), 0.0, tl.float32)"),
            (UPDATE, f'rmsnorm_3 = tl.dot(rmsnorm_1, {ones}, sumsq_terms_1, input_precision="{precision}")'),
            (REDUCE, "rmsnorm_6 = tl.max(sumsq_terms_1, axis=1, keep_dims=True)")]


# x @ x^T on the bf16 tile: its diagonal is the rows' sums of squares, exact (a product of two bf16 values fits in
# fp32), and both operands come from the tile the main dot reads.
GRAM = [(TERMS, "sumsq_terms = tl.full((BLOCK_M, BLOCK_M), 0.0, tl.float32)"),
        (UPDATE, "rmsnorm_3 = tl.dot(x_tile, tl.trans(x_tile), sumsq_terms_1)"),
        (REDUCE, "rmsnorm_6 = tl.sum(tl.where(tl.arange(0, BLOCK_M)[:, None] == tl.arange(0, BLOCK_M)[None, :], "
                 "sumsq_terms_1, 0.0), axis=1, keep_dims=True)")]

VARIANTS = {"as_emitted": [], "no_stats": [(UPDATE, "rmsnorm_3 = sumsq_terms_1")],
            "dot_tf32x3": by_dot("tf32x3"), "dot_tf32": by_dot("tf32"), "gram_diagonal": GRAM}


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
        print(f"{name:12s} {row['ms']:.4f} ms  rel. error vs as emitted {error:.1e}", flush=True)
        rows.append(row)
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
