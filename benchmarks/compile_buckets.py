"""Size buckets of ``amk.compile`` on a GPU: a Linear + ReLU compiled once, then called at each size, each size's
bucket tuned on its first call (``--ahead``: all of them while compiling, ``tune_sizes``); per bucket the strategy
and configuration chosen, the two times of its race against the PyTorch ops it replaces (on its first call), what
runs, and the compiled module's time per call against eager PyTorch at that size (``amk.benchmarking.time_ms``:
device time, L2 flushed). The results file is rewritten after each size.

    python benchmarks/compile_buckets.py --out benchmarks/results/DATE-h200-compile-buckets.json

Defaults: fp16, K = N = 4096, batches 1, 16 and 1024, ``TunerConfig(search_budget=8)``. Without a GPU it runs in
Triton's interpreter (use ``--features 64 --batches 1 3 17``): nothing is timed there, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment, time_ms
from amk.environment import default_device, initialize
from amk.frontend.stats import STATS


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=4096)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 1024])
    parser.add_argument("--search-budget", type=int, default=8)
    parser.add_argument("--ahead", action="store_true", help="build every size's bucket while compiling")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    initialize()
    device = default_device()
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.features, args.features), torch.nn.ReLU()).to(device, dtype)
    inputs = {rows: torch.randn(rows, args.features, device=device, dtype=dtype) for rows in args.batches}
    report: dict = {"environment": environment(), "features": args.features, "dtype": str(dtype),
                    "search_budget": args.search_budget, "batches": args.batches}
    graphs = STATS.graphs
    calls = report["calls"] = {}
    with tempfile.TemporaryDirectory() as cache, torch.no_grad():  # a cold build: nothing tuned before
        started = time.perf_counter()
        compiled = amk.compile(model, inputs[args.batches[0]], tune_sizes=args.batches[1:] if args.ahead else None,
                               tuner_config=amk.TunerConfig(search_budget=args.search_budget, target_cache_dir=cache))
        report["compile_s"] = time.perf_counter() - started  # the first size's bucket (and with --ahead the others)
        for rows, x in inputs.items():
            started = time.perf_counter()
            out = compiled(x)  # a bucket's first call: built (unless ahead), verified and raced against PyTorch
            first = time.perf_counter() - started
            error = ((out.float() - model(x).float()).norm() / model(x).float().norm()).item()
            calls[rows] = {"first_call_s": first, "relative_error": error,
                           "amk_ms": time_ms(lambda x=x: compiled(x)), "eager_ms": time_ms(lambda x=x: model(x))}
            calls[rows]["speedup_over_eager"] = calls[rows]["eager_ms"] / calls[rows]["amk_ms"]
            explained = amk.explain(compiled, print_report=False)
            report["dynamo_graphs"] = STATS.graphs - graphs
            report["buckets"] = [{"sizes": b.sizes, "hints": b.hints, "kernels": b.kernels, "runs": b.runs,
                                  "amk_ms": b.amk_ms, "pytorch_ms": b.pytorch_ms, "note": b.note}
                                 for graph in explained.graphs for subgraph in graph.subgraphs for b in subgraph.buckets]
            report["explain"] = str(explained)
            print(rows, calls[rows], flush=True)
            if args.out is not None:
                args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(report["explain"])
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
