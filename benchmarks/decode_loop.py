"""A decoding loop as people write one: an attention layer's step, its key and value caches grown with ``torch.cat``
by one token a step and passed back in, compiled by ``amk.compile`` and by torch.compile, each contender running the
whole loop in one process on the same inputs.

Per contender: the loop's wall time (compiling, tuning and TorchDynamo's recompiles included: a cache one longer
each step is a new size on every step), its slowest step and the steps over 0.1 s, the worst relative L2 error of
any step's output against the module in float64 on the same inputs (correctness first: a contender past the
tolerance is marked wrong and not timed), TorchDynamo's graphs compiled, and at the last step's length the median
device time (``amk.benchmarking.time_ms``) and the per-call host time; for amk, its pipeline runs (builds).

    python benchmarks/decode_loop.py --out benchmarks/results   # on a GPU: YYYY-MM-DD-<gpu>-decode-loop.{json,md}
    python benchmarks/decode_loop.py --small                    # tiny shapes in Triton's interpreter (nothing timed)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from workloads import COMPILERS, fresh_caches, gpu_slug, relative_error

from amk.benchmarking import environment, host_us, time_ms
from amk.environment import default_device, initialize
from amk.frontend.stats import STATS

CONTENDERS = ("eager", "compile", "max_autotune", "amk")
TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


class DecodeAttention(nn.Module):
    """One attention layer's step: the new tokens' queries, keys and values from one projection, the caches grown by
    the new keys and values, softmax attention over them, the output projection."""

    def __init__(self, features: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(features, 3 * features)
        self.out = nn.Linear(features, features)

    def forward(self, x, k_cache, v_cache):
        batch, tokens, features = x.shape
        head = features // self.heads
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.heads, head).permute(2, 0, 3, 1, 4)
        k_cache = torch.cat([k_cache, k], dim=2)
        v_cache = torch.cat([v_cache, v], dim=2)
        probs = (q @ k_cache.transpose(-1, -2) * head**-0.5).softmax(dim=-1)
        y = (probs @ v_cache).transpose(1, 2).reshape(batch, tokens, features)
        return self.out(y), k_cache, v_cache


def run_loop(name: str, module: nn.Module, reference: nn.Module, steps: list[torch.Tensor], start: tuple,
             tolerance: float, on_gpu: bool) -> dict:
    """Contender ``name`` through the whole loop: each step's input token with the caches of its own previous step,
    its output judged against ``reference`` (the module in float64) on the same inputs."""
    torch._dynamo.reset()
    graphs, builds = torch._dynamo.utils.counters["stats"]["unique_graphs"], STATS.pipeline_runs
    fn = COMPILERS[name](module)
    k_cache, v_cache = start
    times, worst = [], 0.0
    loop_start = time.perf_counter()
    for x in steps:
        began = time.perf_counter()
        out, next_k, next_v = fn(x, k_cache, v_cache)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
        expected = reference(x.double(), k_cache.double(), v_cache.double())[0]
        worst = max(worst, relative_error(out, expected)[0])
        k_cache, v_cache = next_k, next_v
    result = {"loop_s": round(time.perf_counter() - loop_start, 3), "first_step_s": round(times[0], 3),
              "slowest_step_s": round(max(times), 3), "median_step_s": round(statistics.median(times), 5),
              "steps_over_0.1s": sum(t > 0.1 for t in times), "worst_rel_l2": worst,
              "dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs,
              "status": "ok" if worst <= tolerance else "wrong"}
    if name == "amk":
        result["amk_builds"] = STATS.pipeline_runs - builds
    if result["status"] == "ok" and on_gpu:  # at the last step's length, its compiled code already made
        last = (steps[-1], k_cache[:, :, :-1].contiguous(), v_cache[:, :, :-1].contiguous())
        result["last_step_ms"] = time_ms(lambda: fn(*last))
        result["last_step_host_us"] = round(host_us(lambda: fn(*last), calls=100, repeats=5, warmup=5), 2)
    return result


def table(document: dict) -> str:
    columns = ("loop_s", "first_step_s", "slowest_step_s", "steps_over_0.1s", "dynamo_graphs", "amk_builds",
               "worst_rel_l2", "last_step_ms", "last_step_host_us")
    lines = ["| contender | status | " + " | ".join(columns) + " |", "|---" * (len(columns) + 2) + "|"]
    for name, result in document["contenders"].items():
        cells = [f"{result[c]:.3g}" if isinstance(result.get(c), float) else str(result.get(c, "—")) for c in columns]
        lines.append(f"| {name} | {result['status']} | " + " | ".join(cells) + " |")
    shape = document["shape"]
    env = document["environment"]
    return (f"# Decoding loop with a growing cache ({env['gpu']})\n\ntorch {env['torch']}, triton {env['triton']}, "
            f"amk {env['amk']}, python {env['python']}, {env['date']}.\n\nCommand: `{document['command']}`\n\n"
            f"{shape['steps']} steps of one token, batch {shape['batch']}, {shape['features']} features in "
            f"{shape['heads']} heads, {shape['dtype']}, caches from {shape['start']} to "
            f"{shape['start'] + shape['steps']} tokens. Times in seconds, `last_step_ms` the median device time "
            "of a step at the last length, `last_step_host_us` its host time per call.\n\n" + "\n".join(lines) + "\n")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated, from "
                        + ", ".join(CONTENDERS) + " (without a GPU: eager and amk)")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--start", type=int, default=128, help="the caches' length before the first step")
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke test; CPU is fine)")
    parser.add_argument("--warm-caches", action="store_true", help="keep the user's amk, Inductor and Triton caches "
                        "(default: fresh temporary ones, so that the loop's first steps compile cold)")
    parser.add_argument("--out", type=Path, help="directory for YYYY-MM-DD-<gpu>-decode-loop.{json,md}")
    parser.add_argument("--stem", default=None, help="results file name without extension")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.contenders.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in CONTENDERS]
    if unknown or not chosen:
        parser.error(f"unknown contenders {', '.join(unknown) or '(none given)'}; choose from {', '.join(CONTENDERS)}")
    initialize()
    device = default_device()
    on_gpu = device.type == "cuda"
    if not on_gpu and not args.small:
        parser.error("without a GPU the kernels run in Triton's interpreter: use --small (tiny shapes)")
    chosen = [name for name in chosen if on_gpu or name in ("eager", "amk")]  # torch.compile wants a C++ compiler
    batch, features, heads = (2, 32, 2) if args.small else (8, 1024, 16)
    dtype = torch.float16 if on_gpu else torch.float32
    torch.manual_seed(0)
    module = DecodeAttention(features, heads).to(device, dtype).eval()
    reference = DecodeAttention(features, heads).to(device, torch.float64).eval()
    reference.load_state_dict(module.state_dict())
    generator = torch.Generator(device=device).manual_seed(0)
    head = features // heads
    start = tuple(torch.randn(batch, heads, args.start, head, device=device, dtype=dtype, generator=generator)
                  for _ in range(2))
    steps = [torch.randn(batch, 1, features, device=device, dtype=dtype, generator=generator)
             for _ in range(args.steps)]
    document = {"environment": environment(), "command": "python benchmarks/decode_loop.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "contenders": {},
        "shape": {"batch": batch, "features": features, "heads": heads, "dtype": str(dtype), "start": args.start,
                  "steps": args.steps}}
    with contextlib.nullcontext() if args.warm_caches else fresh_caches(), torch.no_grad():
        for name in chosen:
            document["contenders"][name] = run_loop(name, module, reference, steps, start, TOLERANCE[dtype], on_gpu)
            print(name, json.dumps(document["contenders"][name]), flush=True)
    markdown = table(document)
    print(markdown)
    if args.out:
        env = document["environment"]
        stem = args.stem or f"{env['date'][:10]}-{gpu_slug(env['gpu'])}-decode-loop"
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.json").write_text(json.dumps(document, indent=1))
        (args.out / f"{stem}.md").write_text(markdown)
    return document


if __name__ == "__main__":
    main()
