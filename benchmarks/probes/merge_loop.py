"""Diagnostic: how the second launch of tile_stats / tile_recompute merges each row's partial statistics.

    python benchmarks/probes/merge_loop.py --out benchmarks/results/<stem>.json

Each program loops over its row's tiles, merging ``merge_chunk`` tiles' states per iteration (amk-tile's option of
that name; by default 1 for tile_stats, 64 for tile_recompute, chosen from this script's measurements). This times
workload A (tile_stats, 16 tiles per row) and G (tile_recompute, 64 tiles per row; row_strip, and strip_recompute,
which runs the short K loop again in its second sweep instead of re-reading the logits) at a fixed configuration with chunks of 1, 4 and 16, in one process, checking each
output against the first. (``2026-11-30-h200-merge-loop.json`` came from an earlier version
of this script, which compared the loop as emitted then with copies asking Triton to pipeline or unroll it.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from amk.benchmarking import time_ms
from amk.lowering.configs import KernelConfig
from amk.oplist import build_module
from amk.pipeline import compile_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import save_rows  # noqa: E402

WORKLOADS = {
    "A": (["matmul", "add_bias", "gelu", "layernorm"], [(16384, 4096), (4096, 4096), (4096,), (4096,), (4096,)],
          torch.float16, KernelConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
          ["tile_stats"]),
    "G": (["matmul", ("scale", {"factor": 128 ** -0.5}), "softmax"], [(8192, 128), (128, 8192)], torch.float16,
          KernelConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
          ["tile_recompute", "row_strip", "strip_recompute"]),
}
CHUNKS = (1, 4, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    for name, (ops, shapes, dtype, config, strategies) in WORKLOADS.items():
        torch.manual_seed(0)
        inputs = [torch.randn(s, device="cuda", dtype=dtype) / (s[0] ** 0.5 if i == 1 else 1)
                  for i, s in enumerate(shapes)]
        expected = None
        for strategy in strategies:
            for chunk in CHUNKS if strategy not in ("row_strip", "strip_recompute") else (1,):
                compiled = compile_module(build_module(ops, shapes, dtype), lambda kernel, c=config: c,
                                          reduction_strategy=strategy, merge_chunk=chunk)
                out = compiled.program(*inputs)[0].float()
                expected = out if expected is None else expected
                row = {"workload": name, "strategy": strategy, "merge_chunk": chunk,
                       "max_abs_diff": (out - expected).abs().max().item(),
                       "ms": time_ms(lambda p=compiled.program, i=inputs: p(*i))}
                rows.append(row)
                print(json.dumps(row), flush=True)
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
