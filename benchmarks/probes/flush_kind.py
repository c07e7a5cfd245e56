"""Diagnostic: decode rows timed from a cold L2 left dirty (the model table's flush) and from one left clean.

    python benchmarks/probes/flush_kind.py --rows norm_linear_residual_m1,norm_linear_residual_m16 [--out FILE.json]

The model table times each call after ``flush.zero_()`` of 256 MB, as ``triton.testing.do_bench`` does: the call
starts with L2 full of dirty lines, so a kernel that streams a 32 MB weight also writes 32 MB of zeroes back to HBM as
it evicts them. A decode step of a real model finds L2 full of what its previous layers read (their weights, the KV
cache: clean lines) and writes back little. Why it matters: E at one row (``norm_linear_residual_m1``) is the table's
one row under 0.95x (amk 23.1 µs against max-autotune's 20.9 on the H100 in ``2026-12-07-h100-models-56``) while as
graph replays (warm L2) amk's is 1.6x faster; the bare cuBLAS product of that shape measured 22.6 µs after the dirty
flush (``2026-12-06-h100-swap-ab-49``), slower than max-autotune's whole row.

For each row, in one process on the same inputs, each contender (eager, torch.compile default and
``max-autotune-no-cudagraphs``, ``amk.compile``; every output checked against float64 first) is timed three ways,
in turns over three rounds (median of the rounds):

- ``dirty_ms``: as the table's ``ms`` (``zero_()`` of 256 MB before each call; 100 calls through the table's timer);
- ``clean_ms``: the same timer with the flush replaced by a read of 256 MB (a sum into one element), which leaves
  L2 full of clean lines;
- ``replay_ms``: back-to-back replays of a captured CUDA graph (warm L2).

GPU only.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import sys
from pathlib import Path

import torch

import amk
from amk import benchmarking
from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import COMPILERS, ROWS, chosen_names, relative_error, save_rows  # noqa: E402

CONTENDERS = ("eager", "compile", "max_autotune", "amk")


class ReadFlush:
    """Stands in for the flush tensor of :func:`amk.benchmarking._timed`, which calls ``zero_()`` before each timed
    call: this one reads its 256 MB instead of writing them, so the timed call finds only clean lines in L2."""

    def __init__(self):
        self.buffer = torch.ones(benchmarking.L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def zero_(self):
        self.buffer.sum()  # a scalar result: torch 2.11's sum takes no out= without a dim


def flushed_ms(call, flush) -> float:
    """Median ms of 100 calls, each after ``flush.zero_()``, through the table's timer (its batches, sleeps and
    events: :func:`amk.benchmarking._timed`), after 10 calls of warm-up."""
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    return statistics.median(benchmarking._timed(call, flush, 100)[0])


def run_row(name: str) -> dict:
    row = ROWS[name]
    torch.manual_seed(0)
    module, shapes = row.build(False)
    module = module.to(device="cuda", dtype=row.dtype).eval()
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shape, generator=generator).to(device="cuda", dtype=row.dtype) for shape in shapes]
    with torch.no_grad():
        reference = copy.deepcopy(module).double()(*[t.double() for t in inputs])
    result, calls = {"row": name, "contenders": {}}, {}
    with torch.no_grad():
        for contender in CONTENDERS:
            own = [t.clone() for t in inputs]
            fn = module if contender == "eager" else amk.compile(module) if contender == "amk" else COMPILERS[
                contender](module)
            rel_l2, max_abs = relative_error(fn(*own), reference)
            result["contenders"][contender] = {"rel_l2": rel_l2, "max_abs": max_abs}
            calls[contender] = functools.partial(fn, *own)
        dirty = torch.empty(benchmarking.L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        clean = ReadFlush()
        times = {c: {"dirty_ms": [], "clean_ms": [], "replay_ms": []} for c in calls}
        for _ in range(3):
            for contender, call in calls.items():
                times[contender]["dirty_ms"].append(flushed_ms(call, dirty))
                times[contender]["clean_ms"].append(flushed_ms(call, clean))
                times[contender]["replay_ms"].append(time_ms(call, cuda_graph=True))
    for contender, kinds in times.items():
        result["contenders"][contender].update({kind: round(statistics.median(v), 5) for kind, v in kinds.items()})
        print(name, contender, result["contenders"][contender], flush=True)
    torch._dynamo.reset()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="norm_linear_residual_m1,norm_linear_residual_m16",
                        help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    names = chosen_names(parser, args.rows, ROWS, "rows")
    if not torch.cuda.is_available():
        sys.exit("flush_kind.py times GPU caches: it needs a GPU")
    rows = [run_row(name) for name in names]
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
