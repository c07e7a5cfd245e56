"""Diagnostic: attention's probabilities softmax(q k^T * scale) as one batched kernel, strategy by strategy.

    python benchmarks/probes/batched_attention.py --out benchmarks/results/<stem>.json [--shape 8,16,512,64]
        [--strategies chunk_recompute,tile_stats,row_strip] [--budget 24]

Each strategy that lowers a batched matmul is tuned on its own (the tuner's default space, ``--budget`` candidates)
on the static shape and timed as a whole program against eager and torch.compile in the same process, on the same
inputs, each output checked against float64 first; then ``amk.compile`` builds the module as users run it (dynamic
batch, heads and lengths), with the build service's log of the programs it raced. GPU only.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch
from xdsl.parser import Parser

import amk
from amk.benchmarking import time_ms
from amk.pipeline import compile_module, make_context
from amk.tuner import autotune_chooser

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import ATTENTION_IR, AttentionScores, save_rows  # noqa: E402


class RaceLog(logging.Handler):
    """The build service's messages about the programs it raced and the configurations it kept."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="8,16,512,64", help="batch,heads,length,head_dim")
    parser.add_argument("--strategies", default="chunk_recompute,tile_stats,row_strip")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--symbolic", action="store_true",
                        help="also the kernel of symbolic sizes (B, H, S, T) amk.compile builds, tuned at the size "
                             "bucket's hints (the queries take the bucket's rows, B = H = 1) and at the call's sizes")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    b, h, s, d = (int(v) for v in args.shape.split(","))  # the keys as long as the queries
    scale = d ** -0.5
    torch.manual_seed(0)
    q, k = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(2))
    model = AttentionScores(d)
    expected = model(q.double(), k.double())

    def measured(name: str, function, **extra) -> dict:
        out = function().double()
        row = {"contender": name, "rel_err": ((out - expected).norm() / expected.norm()).item(),
               "max_abs_err": (out - expected).abs().max().item(), "ms": time_ms(function)} | extra
        print(json.dumps(row), flush=True)
        return row

    max_autotune = torch.compile(model, mode="max-autotune-no-cudagraphs")
    rows = [measured("eager", lambda: model(q, k)),
            measured("torch.compile max-autotune-no-cudagraphs", lambda: max_autotune(q, k))]
    static = {"b": b, "h": h, "s": s, "t": s}
    variants = [("static", static, None)]
    if args.symbolic:
        symbols = {"b": "B", "h": "H", "s": "S", "t": "T"}
        variants += [("symbolic, tuned at the bucket's hints", symbols, {"S": b * h * s, "H": 1, "B": 1, "T": s}),
                     ("symbolic, tuned at the call's sizes", symbols, {"B": b, "H": h, "S": s, "T": s})]
    for strategy in args.strategies.split(","):
        for variant, dims, hints in variants:
            tuned, timed = {}, {}

            def on_tuned(kernel, config, trials, tuned=tuned, timed=timed):
                tuned[kernel.sym_name.data] = config.user_view()
                timed[kernel.sym_name.data] = sorted((t.as_dict() for t in trials if t.status == "ok"),
                                                     key=lambda t: t["time_ms"])[:8]

            module = Parser(make_context(), ATTENTION_IR.format(d=d, scale=scale, **dims)).parse_module()
            chooser = autotune_chooser(amk.TunerConfig(search_budget=args.budget), None, on_tuned, size_hints=hints)
            compiled = compile_module(module, chooser, reduction_strategy=strategy, size_hints=hints)
            rows.append(measured(f"amk {strategy} ({variant})", lambda p=compiled.program: p(q, k)[0], configs=tuned,
                                 trials=timed))
    race = RaceLog()
    logging.getLogger("amk").addHandler(race)
    logging.getLogger("amk").setLevel(logging.INFO)
    compiled_model = amk.compile(model)
    rows.append(measured("amk.compile", lambda: compiled_model(q, k), build_log=race.lines,
                         explain=str(amk.explain(compiled_model, print_report=False))))
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
