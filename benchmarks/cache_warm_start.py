"""Warm start from the persistent cache: a first process builds (and tunes) a kernel, a second process builds the
same kernel and gets its first result. Writes a JSON results file.

    python benchmarks/cache_warm_start.py --out benchmarks/results/cache-warm-start.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
import amk
start = time.perf_counter()
kernel = amk.build_fused_kernel(["matmul", "add", "rmsnorm"], [(16, 2048, 8192), (8192, 8192), (16, 2048, 8192)],
                                torch.bfloat16, tuner_config=amk.TunerConfig(search_budget=int(sys.argv[1]),
                                                                             target_cache_dir=sys.argv[2]))
built = time.perf_counter() - start
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(16, 2048, 8192, device=device, dtype=torch.bfloat16)
w = (torch.randn(8192, 8192, device=device) / 8192 ** 0.5).bfloat16()
r = torch.randn(16, 2048, 8192, device=device, dtype=torch.bfloat16)
out = kernel(x, w, r)
if device == "cuda":
    torch.cuda.synchronize()
first_result = time.perf_counter() - start
print(json.dumps({"cache_hit": kernel.cache_hit, "build_s": built, "first_result_s": first_result,
                  "config": kernel.config}))
"""


def run_child(budget: int, cache_dir: str) -> dict:
    result = subprocess.run([sys.executable, "-c", CHILD, str(budget), cache_dir], capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=8, help="tuning candidates in the first process")
    parser.add_argument("--out", required=True, help="JSON results file")
    args = parser.parse_args()
    from amk.benchmarking import environment

    with tempfile.TemporaryDirectory() as cache_dir:
        cold = run_child(args.budget, cache_dir)
        warm = run_child(args.budget, cache_dir)
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]),
                "workload": "usage example 3 shapes: x[16,2048,8192] @ W[8192,8192] + residual -> RMSNorm, bf16",
                "cold_process": cold, "warm_process": warm}
    Path(args.out).write_text(json.dumps(document, indent=2))
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
