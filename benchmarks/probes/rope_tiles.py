"""Diagnostic: the rotary-embedding kernel (``q * cos + rotate_half(q) * sin`` on the heads' transposed view, as
Hugging Face's Llama applies it) at each tile shape, against torch.compile on the same inputs.

    python benchmarks/probes/rope_tiles.py [--heads 32,8] [--seq 4096] [--out FILE.json]

Why: in ``2026-12-07-h100-models-57-rope`` amk's two rotation kernels (q's 32 heads, k's 8, a prefill of 4096 tokens,
bf16) took about 36 µs where Inductor's took 30; the tuner kept ``tile2d``'s heuristic tile, 8 rows x 128 columns
(the head), 4 warps. The tuner's space for a kernel without a matmul holds tiles of 1-16 rows: this probe times
taller ones too. (Since ``amk.frontend.layouts.fold_heads`` the kernel of a projection's output held by the module's
input spans ``[B*S, H*D]``, each head rotated within its 128 columns; a projection in the same graph takes the
rotation as its epilogue instead.) For each head count, one ``amk.compile`` per configuration, its tile2d search space patched to
that one configuration (each in a fresh cache directory), checked against float64 and timed by
:func:`amk.benchmarking.time_ms` (events after an L2 flush, as the model table's ``ms``), beside eager and
torch.compile (default and ``max-autotune-no-cudagraphs``). GPU only.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

import amk
from amk.benchmarking import time_ms
from amk.lowering.strategies import strategy_named
from amk.tuner import TunerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import relative_error, rotate_half, save_rows  # noqa: E402

BLOCK_M = (4, 8, 16, 32, 64)
WARPS = (2, 4, 8)


class Rotary(nn.Module):
    """The rotation of one projection's output ``p [B, S, H * D]`` split into heads, as LlamaRotaryQKV does it."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim

    def forward(self, p, cos, sin):
        batch, seq, _ = p.shape
        q = p.view(batch, seq, -1, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin


def one_config(block_m: int, warps: int, head_dim: int):
    """``amk.compile`` of :class:`Rotary` whose tile2d kernels search only this tile."""
    tile2d = strategy_named("tile2d")
    tile2d.search_space = lambda *args, **kwargs: {"BLOCK_M": [block_m], "BLOCK_N": [head_dim],
                                                    "num_warps": [warps], "num_stages": [1]}
    return amk.compile(Rotary(head_dim), tuner_config=TunerConfig(target_cache_dir=tempfile.mkdtemp()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", default="32,8")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("rope_tiles.py times GPU kernels: it needs a GPU")
    rows = []
    d = args.head_dim
    for heads in (int(h) for h in args.heads.split(",")):
        generator = torch.Generator().manual_seed(0)
        inputs = [torch.randn(shape, generator=generator).to("cuda", torch.bfloat16)
                  for shape in ((1, args.seq, heads * d), (1, args.seq, d), (1, args.seq, d))]
        reference = Rotary(d)(*[t.double() for t in inputs])
        # Each made right before its first call: one_config's search space is the process's until the next one.
        contenders = {"eager": lambda: Rotary(d), "compile": lambda: torch.compile(Rotary(d)),
                      "max_autotune": lambda: torch.compile(Rotary(d), mode="max-autotune-no-cudagraphs")}
        contenders |= {f"amk BLOCK_M={m} num_warps={w}": functools.partial(one_config, m, w, d)
                       for m, w in itertools.product(BLOCK_M, WARPS)}
        for name, make in contenders.items():
            row = {"heads": heads, "contender": name}
            try:
                fn = make()
                row["rel_l2"], row["max_abs"] = relative_error(fn(*inputs), reference)
                row["ms"] = round(time_ms(functools.partial(fn, *inputs)), 5)
                if name.startswith("amk"):
                    report = amk.explain(fn, print_report=False)
                    row["ran"] = [{"runs": bucket.runs, "amk_ms": bucket.amk_ms, "pytorch_ms": bucket.pytorch_ms,
                                   "program": bucket.kernels}
                                  for graph in report.graphs for sub in graph.subgraphs for bucket in sub.buckets]
            except Exception as failure:  # a configuration that does not build is reported, not fatal
                row["error"] = f"{type(failure).__name__}: {failure}"[:300]
            print(json.dumps(row), flush=True)
            rows.append(row)
            torch._dynamo.reset()
    if args.out:
        save_rows(args.out, rows)


if __name__ == "__main__":
    main()
