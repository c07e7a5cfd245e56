"""Diagnostic: the second launch of tile_stats / tile_recompute merges each row's partial statistics in a loop over
the row's tiles (one tile's state per iteration, a chain of dependent global loads). This times the emitted kernels
against copies whose merge loop asks Triton to pipeline its loads (``num_stages``) or unroll it, on workload A
(16 tiles per row) and G (64 tiles per row).

    python benchmarks/merge_loop.py --out benchmarks/results/<stem>.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import amk
from amk.benchmarking import environment, time_ms
from amk.runtime import load_source

WORKLOADS = {
    "A": (["matmul", "add_bias", "gelu", "layernorm"], [(16384, 4096), (4096, 4096), (4096,), (4096,), (4096,)],
          torch.float16, {"BLOCK_SIZE_M": [128], "BLOCK_SIZE_N": [256], "BLOCK_SIZE_K": [64], "num_warps": [8],
                          "num_stages": [3], "GROUP_SIZE_M": [8]}),
    "G": (["matmul", ("scale", {"factor": 128 ** -0.5}), "softmax"], [(8192, 128), (128, 8192)], torch.float16,
          {"BLOCK_SIZE_M": [128], "BLOCK_SIZE_N": [128], "BLOCK_SIZE_K": [64], "num_warps": [8], "num_stages": [3],
           "GROUP_SIZE_M": [8]}),
}
MERGE = "for t in tl.range(0, "
VARIANTS = {"as emitted": "", "num_stages=3": ", num_stages=3", "loop_unroll_factor=4": ", loop_unroll_factor=4"}


def patched(source: str, extra: str) -> str:
    head, found, rest = source.partition(MERGE)
    if not found:
        raise ValueError("no merge loop in the source")
    bounds, _, tail = rest.partition("):\n")
    return head + MERGE + bounds + extra + "):\n" + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    for name, (ops, shapes, dtype, grid) in WORKLOADS.items():
        kernel = amk.build_fused_kernel(ops, shapes, dtype, parameter_grid=grid,
                                        tuner_config=amk.TunerConfig(search_budget=1))
        torch.manual_seed(0)
        inputs = [torch.randn(s, device="cuda", dtype=dtype) / (s[0] ** 0.5 if i == 1 else 1)
                  for i, s in enumerate(shapes)]
        expected = kernel(*inputs).float()
        compiled = next(iter(kernel.compiled.kernels.values()))
        for label, extra in VARIANTS.items():
            row = {"workload": name, "variant": label}
            try:
                compiled.launch = load_source(patched(compiled.source, extra), f"{compiled.name}_{len(rows)}").launch
                row["max_abs_diff"] = (kernel(*inputs).float() - expected).abs().max().item()
                row["ms"] = time_ms(lambda k=kernel, i=inputs: k(*i))
            except Exception as error:  # a variant this Triton rejects is reported, not fatal
                row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w") as handle:
        json.dump({"environment": environment(), "command": " ".join(sys.argv), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
