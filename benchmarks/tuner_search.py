"""Search strategies against the full grid, on usage example 3 (RMSNorm(x @ w + residual), bf16, its 216-point grid).

In one process: the exhaustive search times every viable configuration of the grid; then the model-guided
(bayesian, the default) and random strategies search the same grid with ``search_budget`` candidates each, every
search with its own fresh cache so nothing is reused. The chosen configuration of each budgeted search is looked up
in the exhaustive log and compared with the grid's best; then the chosen configurations are built again and timed
against each other in interleaved rounds (``amk.benchmarking.time_ms`` medians on the same inputs), which takes the GPU's drift in
clock over a long search out of the comparison.

    python benchmarks/tuner_search.py --out benchmarks/results/DATE-h200-tuner-search.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment, time_ms

GRID = {"BLOCK_SIZE_M": [32, 64, 128], "BLOCK_SIZE_N": [64, 128, 256], "BLOCK_SIZE_K": [32, 64],
        "num_warps": [4, 8, 16], "num_stages": [2, 3, 4, 5], "GROUP_SIZE_M": [8]}
OPS = ["matmul", "add", "rmsnorm"]


def search(shapes, strategy: str, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as cache_dir:
        settings = amk.TunerConfig(search_budget=budget, warmup_runs=15, measure_runs=40,
                                   enable_warp_specialization=True, target_cache_dir=cache_dir, search=strategy)
        start = time.perf_counter()
        kernel = amk.build_fused_kernel(OPS, shapes, torch.bfloat16, tuner_config=settings, parameter_grid=GRID)
        seconds = time.perf_counter() - start
    (trials,) = kernel.tuning_log.values()
    return {"strategy": strategy, "budget": budget, "seconds": seconds, "config": kernel.config,
            "timed": sum(t["status"] == "ok" for t in trials), "trials": trials}


def retime(shapes, configs: dict[str, dict], rounds: int = 5) -> dict[str, float]:
    """Median over interleaved rounds of each configuration's ``do_bench`` median, on one set of inputs."""
    torch.manual_seed(0)
    x = torch.randn(shapes[0], device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(shapes[1], device="cuda") / shapes[1][0] ** 0.5).bfloat16()
    residual = torch.randn(shapes[2], device="cuda", dtype=torch.bfloat16)
    kernels = {name: amk.build_fused_kernel(OPS, shapes, torch.bfloat16, autotune=False,
                                            parameter_grid={key: [value] for key, value in config.items()})
               for name, config in configs.items()}
    samples: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, kernel in kernels.items():
            samples[name].append(time_ms(lambda kernel=kernel: kernel(x, w, residual)))
    return {name: statistics.median(values) for name, values in samples.items()}


def config_text(config: dict) -> str:
    return ",".join(f"{k}={config[k]}" for k in sorted(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=int, default=40, help="candidates for the budgeted strategies")
    parser.add_argument("--strategies", default="bayesian,random", help="budgeted strategies to compare, comma-separated")
    parser.add_argument("--small", action="store_true", help="a small problem (a quick check of the script)")
    parser.add_argument("--out", required=True, help="JSON results file (a .md table is written beside it)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("tuner_search.py times candidates: it needs a CUDA GPU")
    batch, seq, hidden = (2, 256, 1024) if args.small else (16, 2048, 8192)
    shapes = [(batch, seq, hidden), (hidden, hidden), (batch, seq, hidden)]

    full = search(shapes, "exhaustive", 10_000)
    times = {config_text(t["config"]): t["time_ms"] for t in full["trials"] if t["status"] == "ok"}
    best = min(times.values())
    rows = [{"strategy": "exhaustive", "timed": full["timed"], "seconds": full["seconds"],
             "chosen_ms": best, "vs_grid_best": 1.0, "config": full["config"]}]
    runs = [full]
    for strategy in args.strategies.split(","):
        run = search(shapes, strategy, args.budget)
        runs.append(run)
        chosen = times.get(config_text(run["config"]))
        rows.append({"strategy": strategy, "timed": run["timed"], "seconds": run["seconds"], "chosen_ms": chosen,
                     "vs_grid_best": None if chosen is None else chosen / best, "config": run["config"]})

    retimed = retime(shapes, {row["strategy"]: row["config"] for row in rows})
    for row in rows:
        row["retimed_ms"] = retimed[row["strategy"]]
        row["retimed_vs_grid_best"] = retimed[row["strategy"]] / retimed["exhaustive"]

    document = {"environment": environment(), "command": " ".join(["python", *sys.argv]),
                "workload": f"usage example 3: RMSNorm(x{list(shapes[0])} @ w{list(shapes[1])} + residual), bf16",
                "grid": GRID, "grid_points": 216, "rows": rows, "runs": runs}
    out = Path(args.out)
    out.write_text(json.dumps(document, indent=2))
    lines = [f"# Tuner search on {document['environment']['gpu']} ({document['environment']['date']})", "",
             f"`{document['command']}`; {document['workload']}; torch {document['environment']['torch']}, "
             f"triton {document['environment']['triton']}. Times are the tuner's own medians (CUDA events, L2 "
             "flushed, 15 warm-up and 40 timed runs) from the exhaustive run; re-timed: the chosen configurations "
             "built again and timed against each other (median of 5 interleaved `do_bench` medians).", "",
             "| strategy | candidates timed | search time (s) | chosen config, exhaustive log (ms) | vs grid best | "
             "re-timed (ms) | re-timed vs grid best | config |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        ratio = "—" if row["vs_grid_best"] is None else f"{row['vs_grid_best']:.3f}"
        chosen = "—" if row["chosen_ms"] is None else f"{row['chosen_ms']:.4f}"
        lines.append(f"| {row['strategy']} | {row['timed']} | {row['seconds']:.1f} | {chosen} | {ratio} | "
                     f"{row['retimed_ms']:.4f} | {row['retimed_vs_grid_best']:.3f} | {config_text(row['config'])} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
