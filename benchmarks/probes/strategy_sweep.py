"""Diagnostic: each row-reduction strategy of one workload, tuned on its own, then timed as a whole program.

    python benchmarks/probes/strategy_sweep.py --workload G [--variant 3] --strategies row_strip,strip_recompute,tile_recompute:16 \
        --grid BLOCK_SIZE_M=16,32,64 BLOCK_SIZE_N=128,256 --budget 24 --out benchmarks/results/<stem>.json

``strategy:N`` also sets amk-tile's ``merge_chunk=N`` (without it, the default). Each strategy
gets the same search budget over the same ``--grid`` (keys as in ``parameter_grid``; a key not given keeps the
tuner's default space for that strategy), in one process on the same inputs as eager, whose output and time are the
reference; every timed trial is kept. This is how ``auto``'s choices (tile pass) are checked against the
alternatives. GPU only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import time_ms
from amk.lowering.configs import PARAMETER_KEYS
from amk.oplist import build_module
from amk.pipeline import compile_module
from amk.symbolic import Dim
from amk.tuner import autotune_chooser, default_space, validate_grid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, save_rows  # noqa: E402

KEY_OF_FIELD = {field: key for key, field in PARAMETER_KEYS.items()}


def parse_grid(items: list[str]) -> dict[str, list[int]]:
    return {key: [int(v) for v in values.split(",")] for key, values in (item.split("=") for item in items)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument("--strategies", required=True)
    parser.add_argument("--grid", nargs="*", default=[])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--variant", type=int, default=1,
                        help="1: the workload's own shapes; 2, 3: its extra shapes (as run.py --extra-shapes)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    workload = WORKLOADS[args.workload]
    if args.variant > 1:
        workload = workload.variants()[args.variant - 2]
    torch.manual_seed(0)
    inputs = [torch.randn(s, device="cuda", dtype=workload.dtype) / (s[0] ** 0.5 if i == workload.weight else 1)
              for i, s in enumerate(workload.shapes)]
    expected = workload.eager(*[t.double() for t in inputs])
    rows = [{"strategy": "eager", "workload": workload.name, "shapes": workload.shapes,
             "ms": time_ms(lambda: workload.eager(*inputs))}]
    print(json.dumps(rows[0]), flush=True)
    overrides = parse_grid(args.grid)
    for item in args.strategies.split(","):
        strategy, chunk = (item.split(":") + [""])[:2]
        base = default_space(strategy, Dim(workload.shapes[0][0]), has_dot=True,
                             contraction=Dim(workload.shapes[0][1]))
        grid = {KEY_OF_FIELD[field]: values for field, values in base.items()} | overrides
        tuned, timed = {}, {}

        def on_tuned(kernel, config, trials, tuned=tuned, timed=timed):
            tuned[kernel.sym_name.data] = config.user_view()
            timed[kernel.sym_name.data] = sorted((t.as_dict() for t in trials if t.status == "ok"),
                                                 key=lambda t: t["time_ms"])

        chooser = autotune_chooser(amk.TunerConfig(search_budget=args.budget), validate_grid(grid), on_tuned)
        compiled = compile_module(workload.module(workload.shapes, workload.dtype) if workload.module
                                  else build_module(workload.ops, workload.shapes, workload.dtype),
                                  chooser, reduction_strategy=strategy, merge_chunk=int(chunk or 0))
        out = compiled.program(*inputs)[0].double()
        row = {"strategy": strategy, "merge_chunk": int(chunk) if chunk else "default", "configs": tuned,
               "rel_err": ((out - expected).norm() / expected.norm()).item(),
               "max_abs_err": (out - expected).abs().max().item(),
               "ms": time_ms(lambda p=compiled.program: p(*inputs))}
        print(json.dumps(row), flush=True)
        rows.append(row | {"trials": timed})
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
