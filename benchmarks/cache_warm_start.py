"""Warm start from the persistent cache: a first process builds (and tunes) a kernel, a second process builds the
same kernel and gets its first result. Writes a JSON results file.

Each process imports torch and amk and puts its inputs on the device first (CUDA context creation is a cost of the
process, not of amk); ``first_result_s`` runs from the ``build_fused_kernel`` call to the synchronized output, and
the JSON keeps a profile of that span. Both processes share one ``PYTHONPYCACHEPREFIX``: where site-packages is
read-only and ships without bytecode, or ``PYTHONDONTWRITEBYTECODE`` is set (the H200 machine's torch environment),
every process would otherwise compile
sympy's and Triton's sources anew (~2 s), which a normal ``pip install`` (it writes ``.pyc`` files) never does.

    python benchmarks/cache_warm_start.py --out benchmarks/results/cache-warm-start.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import cProfile, io, json, pstats, sys, time
started = time.perf_counter()
import torch
import amk
imported = time.perf_counter() - started
device = "cuda" if torch.cuda.is_available() else "cpu"
x = torch.randn(16, 2048, 8192, device=device, dtype=torch.bfloat16)
w = (torch.randn(8192, 8192, device=device) / 8192 ** 0.5).bfloat16()
r = torch.randn(16, 2048, 8192, device=device, dtype=torch.bfloat16)
if device == "cuda":
    torch.cuda.synchronize()
inputs_ready = time.perf_counter() - started
profiler = cProfile.Profile()
start = time.perf_counter()
profiler.enable()
kernel = amk.build_fused_kernel(["matmul", "add", "rmsnorm"], [(16, 2048, 8192), (8192, 8192), (16, 2048, 8192)],
                                torch.bfloat16, tuner_config=amk.TunerConfig(search_budget=int(sys.argv[1]),
                                                                             target_cache_dir=sys.argv[2]))
built = time.perf_counter() - start
out = kernel(x, w, r)
if device == "cuda":
    torch.cuda.synchronize()
first_result = time.perf_counter() - start
profiler.disable()
start = time.perf_counter()
kernel(x, w, r)
if device == "cuda":
    torch.cuda.synchronize()
second_call = time.perf_counter() - start
text = io.StringIO()
pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
print(json.dumps({"cache_hit": kernel.cache_hit, "import_torch_and_amk_s": imported,
                  "process_start_to_inputs_on_device_s": inputs_ready, "build_s": built,
                  "first_result_s": first_result, "second_call_s": second_call, "config": kernel.config,
                  "profile_of_build_and_first_call": text.getvalue().splitlines()[:80]}))
"""


def run_child(budget: int, cache_dir: str, bytecode_dir: str) -> dict:
    environment = os.environ | {"PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX", bytecode_dir)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([sys.executable, "-c", CHILD, str(budget), cache_dir], capture_output=True, text=True,
                            check=True, env=environment)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=8, help="tuning candidates in the first process")
    parser.add_argument("--out", required=True, help="JSON results file")
    args = parser.parse_args()
    from amk.benchmarking import environment

    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as bytecode_dir:
        cold = run_child(args.budget, cache_dir, bytecode_dir)
        warm = run_child(args.budget, cache_dir, bytecode_dir)
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]),
                "workload": "usage example 3 shapes: x[16,2048,8192] @ W[8192,8192] + residual -> RMSNorm, bf16",
                "cold_process": cold, "warm_process": warm}
    Path(args.out).write_text(json.dumps(document, indent=2))
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
