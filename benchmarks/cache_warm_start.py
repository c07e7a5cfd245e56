"""Warm start from the persistent cache: a first process builds (and tunes) a kernel, a second process builds the
same kernel and gets its first result. Writes a JSON results file. With ``--compile`` the same computation is a module
written as people write it (``nn.Linear`` without bias, the residual, ``nn.RMSNorm``) given to ``amk.compile``: the
second process's first output then also pays TorchDynamo's trace, which no cache keeps across processes (issue 18
asks for at most 2 s after imports), and two more processes time torch.compile (``max-autotune-no-cudagraphs``, with
its own caches) on the same module the same way. Both compilers import TorchDynamo and the modules ``torch.compile()``
imports when first called (AOTAutograd's among them), amk its front end too: those imports
(``front_end_imports_s``) run before the timer.

Each process imports torch and amk and puts its inputs on the device first (CUDA context creation is a cost of the
process, not of amk); ``first_result_s`` runs from the ``build_fused_kernel`` call to the synchronized output, and
the JSON keeps a profile of that span. Both processes share one ``PYTHONPYCACHEPREFIX``: where site-packages is
read-only and ships without bytecode, or ``PYTHONDONTWRITEBYTECODE`` is set (the H200 machine's torch environment),
every process would otherwise compile
sympy's and Triton's sources anew (~2 s), which a normal ``pip install`` (it writes ``.pyc`` files) never does.

    python benchmarks/cache_warm_start.py --out benchmarks/results/cache-warm-start.json
    python benchmarks/cache_warm_start.py --compile --out /tmp/compile-warm-start.json
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
batch, tokens, features = json.loads(sys.argv[4])
x = torch.randn(batch, tokens, features, device=device, dtype=torch.bfloat16)
w = (torch.randn(features, features, device=device) / features ** 0.5).bfloat16()
r = torch.randn(batch, tokens, features, device=device, dtype=torch.bfloat16)
if device == "cuda":
    torch.cuda.synchronize()
inputs_ready = time.perf_counter() - started
settings = amk.TunerConfig(search_budget=int(sys.argv[1]), target_cache_dir=sys.argv[2])


class ResidualRMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(features, features, bias=False)
        self.norm = torch.nn.RMSNorm(features)

    def forward(self, x, r):
        return self.norm(self.proj(x) + r)


front_end_imports = 0.0
if sys.argv[3] != "kernel":  # the user's module, built before the timer as the inputs are: not amk's time
    module = ResidualRMSNorm().to(device=device, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        module.proj.weight.copy_(w.t())
    # Both compilers import TorchDynamo (2.6 s on a 2-core CPU) when first called, amk its front end too, and
    # torch.compile() itself imports its debugging wrappers, AOTAutograd's with them (1.5 s on the H200 host):
    # Python's import time, the same with a cold or a warm cache, reported apart from the time to the first output.
    started = time.perf_counter()
    import torch._dynamo.repro.after_dynamo
    amk.compile
    front_end_imports = time.perf_counter() - started
profiler = cProfile.Profile()
start = time.perf_counter()
profiler.enable()
if sys.argv[3] == "compile":
    kernel = amk.compile(module, tuner_config=settings)
    call, arguments = kernel, (x, r)
elif sys.argv[3] == "torch_compile":
    kernel = torch.compile(module, mode="max-autotune-no-cudagraphs")
    call, arguments = kernel, (x, r)
else:
    kernel = amk.build_fused_kernel(["matmul", "add", "rmsnorm"], [x.shape, w.shape, r.shape], torch.bfloat16,
                                    tuner_config=settings)
    call, arguments = kernel, (x, w, r)
built = time.perf_counter() - start
with torch.no_grad():
    out = call(*arguments)
if device == "cuda":
    torch.cuda.synchronize()
first_result = time.perf_counter() - start
profiler.disable()
start = time.perf_counter()
with torch.no_grad():
    call(*arguments)
if device == "cuda":
    torch.cuda.synchronize()
second_call = time.perf_counter() - start
text = io.StringIO()
pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(45)
if sys.argv[3] == "compile":  # what each size bucket ran, and whether its build came from the cache
    buckets = [bucket for graph in amk.explain(kernel, print_report=False).graphs for subgraph in graph.subgraphs
               for bucket in subgraph.buckets]
    built_with = {"cache_hit": bool(buckets) and all(bucket.cached for bucket in buckets),
                  "programs": [bucket.kernels for bucket in buckets]}
elif sys.argv[3] == "kernel":
    built_with = {"cache_hit": kernel.cache_hit, "config": kernel.config}
else:
    built_with = {}
print(json.dumps({**built_with, "import_torch_and_amk_s": imported, "process_start_to_inputs_on_device_s": inputs_ready,
                  "front_end_imports_s": front_end_imports,
                  "build_s": built, "first_result_s": first_result, "second_call_s": second_call,
                  "profile_of_build_and_first_call": text.getvalue().splitlines()[:80]}))
"""


def run_child(budget: int, cache_dir: str, bytecode_dir: str, mode: str, sizes: list[int]) -> dict:
    environment = os.environ | {"PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX", bytecode_dir),
                                "TORCHINDUCTOR_CACHE_DIR": str(Path(cache_dir) / "inductor")}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run([sys.executable, "-c", CHILD, str(budget), cache_dir, mode, json.dumps(sizes)],
                            capture_output=True, text=True, env=environment,
                            cwd=bytecode_dir)  # not the checkout: `-c` would import its uninstalled `amk` folder
    if result.returncode != 0:
        sys.exit(f"the {mode} process failed (exit status {result.returncode}):\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=8, help="tuning candidates in the first process")
    parser.add_argument("--compile", action="store_true",
                        help="amk.compile a module instead of build_fused_kernel, and time torch.compile's "
                             "max-autotune-no-cudagraphs on it the same way")
    parser.add_argument("--small", action="store_true", help="x[2, 8, 64] (a smoke test; CPU is fine)")
    parser.add_argument("--out", required=True, help="JSON results file")
    args = parser.parse_args()
    import torch

    from amk.benchmarking import environment

    if not args.small and not torch.cuda.is_available():
        parser.error("the full sizes are timed on a GPU (Triton's interpreter runs them for many minutes); "
                     "--small runs a smoke test on the CPU")
    mode = "compile" if args.compile else "kernel"
    sizes = [2, 8, 64] if args.small else [16, 2048, 8192]
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as bytecode_dir:
        cold = run_child(args.budget, cache_dir, bytecode_dir, mode, sizes)
        warm = run_child(args.budget, cache_dir, bytecode_dir, mode, sizes)
        # torch.compile's own warm start (its FX graph and autotuning caches) on the same module, for comparison
        torch_compile = ({"cold_process": run_child(args.budget, cache_dir, bytecode_dir, "torch_compile", sizes),
                          "warm_process": run_child(args.budget, cache_dir, bytecode_dir, "torch_compile", sizes)}
                         if args.compile else None)
    batch, tokens, features = sizes
    workload = (f"x[{batch},{tokens},{features}] @ W[{features},{features}] + residual -> RMSNorm, bf16"
                + ("" if args.small else " (usage example 3's shapes)"))
    if args.compile:
        workload += ", as an nn.Module (Linear without bias, residual, nn.RMSNorm) through amk.compile"
    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]), "workload": workload,
                "cold_process": cold, "warm_process": warm,
                **({"torch_compile_max_autotune_no_cudagraphs": torch_compile} if torch_compile else {})}
    Path(args.out).write_text(json.dumps(document, indent=2))
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
