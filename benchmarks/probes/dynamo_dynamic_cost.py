"""Diagnostic: what TorchDynamo's frame costs per call with amk's dynamic leading dims against static shapes.

    python benchmarks/probes/dynamo_dynamic_cost.py --rows attention_scores,bert_ffn [--out FILE.json]

Each variant is ``torch.compile(backend="eager")`` on the row's module after ``torch._dynamo.reset()`` (no other
variant's cache entries in the way), timed as ``host_layers.py`` times layers (back-to-back calls, host clock,
median of rounds); then a cProfile of the amk-marked variant's calls lists the Python functions such a call runs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path

import torch

from amk.benchmarking import environment, host_us
from amk.runtime import default_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workloads import ROWS  # noqa: E402


def mark_leading(inputs):
    for tensor in inputs:
        for axis in range(tensor.dim() - 1):
            torch._dynamo.maybe_mark_dynamic(tensor, axis)


def timed(fn, rounds: int = 15) -> float:
    for _ in range(5):
        fn()
    return round(statistics.median(host_us(fn, calls=50) for _ in range(rounds)), 2)


def run_row(name: str) -> dict:
    row = ROWS[name]
    torch.manual_seed(0)
    device = default_device()
    module, shapes = row.build(device.type != "cuda")
    module = module.to(device=device, dtype=row.dtype).eval()
    inputs = [torch.randn(shape, device=device).to(row.dtype) for shape in shapes]
    config = torch._dynamo.config
    result: dict = {"row": name, "host_us": {}, "cpp_symbolic_shape_guards": getattr(
        config, "enable_cpp_symbolic_shape_guards", None)}
    variants = {"eager_module": (None, False, {}), "static": ("eager", False, {}), "dynamic_true": ("eager", True, {}),
                "marked": ("eager", None, {}), "marked_no_cpp_guards": ("eager", None, {"cpp": False}),
                "marked_cpp_guards": ("eager", None, {"cpp": True})}
    profile_text = ""
    with torch.no_grad():
        for label, (backend, dynamic, options) in variants.items():
            torch._dynamo.reset()
            args = [x.clone() for x in inputs]
            if backend is None:
                result["host_us"][label] = timed(lambda args=args: module(*args))
                continue
            if "cpp" in options:
                if not hasattr(config, "enable_cpp_symbolic_shape_guards"):
                    continue
                saved = config.enable_cpp_symbolic_shape_guards
                config.enable_cpp_symbolic_shape_guards = options["cpp"]
            try:
                fn = torch.compile(module, backend=backend, dynamic=dynamic)
                if dynamic is None:
                    mark_leading(args)
                fn(*args)
                result["host_us"][label] = timed(lambda fn=fn, args=args: fn(*args))
                if label == "marked":
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(2000):
                        fn(*args)
                    profile.disable()
                    stream = io.StringIO()
                    pstats.Stats(profile, stream=stream).sort_stats("tottime").print_stats(25)
                    profile_text = stream.getvalue()
            except Exception as error:  # a variant this torch cannot run
                result["host_us"][label] = f"failed: {type(error).__name__}: {error}"[:300]
            finally:
                if "cpp" in options:
                    config.enable_cpp_symbolic_shape_guards = saved
    result["profile_marked"] = profile_text
    print(json.dumps(result["host_us"]), flush=True)
    print(profile_text, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="attention_scores", help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    results = {"environment": environment(), "command": " ".join(sys.argv),
               "rows": [run_row(name) for name in args.rows.split(",")]}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
