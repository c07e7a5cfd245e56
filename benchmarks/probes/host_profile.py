"""Diagnostic: where a compiled module's per-call host time goes (issue 18's call overhead), function by function.

    python benchmarks/probes/host_profile.py --rows bf16_linear_rmsnorm,fp16_linear_logsumexp [--calls 2000]
        [--contenders eager,compile,max_autotune,amk] [--out FILE.json]

For each row of the model benchmark (``ROWS`` of ``benchmarks/workloads.py``), in one process on the same inputs: the
per-call host time (:func:`amk.benchmarking.host_us` over 100 back-to-back calls, as ``models.py`` measures it) of
the ``--contenders`` (eager, torch.compile default and ``max-autotune-no-cudagraphs``, the mode issue 18 compares
host time with, and ``amk.compile``) and eager's again once they are all built (``eager_after_builds``), the names of
the process's threads, then ``--calls`` calls of the amk-compiled module under ``cProfile``: the
``--top`` functions by their own time, each with its calls, own and cumulative microseconds per call of the module
(amk's wrapper, TorchDynamo's frames, the subgraph's launcher and the PyTorch ops appear among them). Without a GPU
it runs the rows at their small sizes in Triton's interpreter, where the kernels' own time swamps the rest (use it to
check the probe, not to read the figures).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import threading
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment, host_us

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import ROWS, chosen_names  # noqa: E402


def profile_calls(fn, calls: int, top: int) -> tuple[str, list[dict]]:
    """``calls`` calls of ``fn`` under cProfile: the printed table of the ``top`` functions by own time, and per
    function its calls and own and cumulative microseconds per call of ``fn``."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
    stats.print_stats(top)
    functions = [{"function": f"{Path(file).name}:{line}({name})", "calls_per_call": count / calls,
                  "own_us": own / calls * 1e6, "cumulative_us": cumulative / calls * 1e6}
                 for (file, line, name), (_, count, own, cumulative, _) in stats.stats.items()]
    functions.sort(key=lambda entry: -entry["own_us"])
    return text.getvalue(), functions[:top]


CONTENDERS = {"eager": lambda module: module, "compile": torch.compile,
              "max_autotune": lambda module: torch.compile(module, mode="max-autotune-no-cudagraphs"),
              "amk": amk.compile}


def run_row(name: str, contenders: list[str], calls: int, top: int, small: bool) -> dict:
    row = ROWS[name]
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    module, shapes = row.build(small)
    module = module.to(device=device, dtype=row.dtype).eval()
    inputs = [torch.randn(shape, device=device).to(row.dtype) for shape in shapes]
    result: dict = {"row": name, "host_us": {}}
    with torch.no_grad():
        made = {contender: CONTENDERS[contender](module) for contender in contenders}
        for contender, fn in made.items():
            for _ in range(4):
                fn(*inputs)
            result["host_us"][contender] = round(host_us(lambda fn=fn: fn(*inputs), calls=100, repeats=5), 2)
        # Eager again, now that every contender has been built: a process whose host calls got slower meanwhile
        # (compile pools' threads, allocator state) slows every contender's measurement, not only amk's.
        result["host_us"]["eager_after_builds"] = round(host_us(lambda: module(*inputs), calls=100, repeats=5), 2)
        amk_module = made.get("amk") or amk.compile(module)
        table, functions = profile_calls(lambda: amk_module(*inputs), calls, top)
    result["amk_profile"] = functions
    result["threads"] = sorted(thread.name for thread in threading.enumerate())
    print(f"== {name}: host us {result['host_us']}\n{table}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="bf16_linear_rmsnorm,fp16_linear_logsumexp",
                        help=f"comma-separated rows of the model benchmark: {', '.join(ROWS)}")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"comma-separated, whose host time is measured: {', '.join(CONTENDERS)}")
    parser.add_argument("--calls", type=int, default=2000, help="calls profiled per row")
    parser.add_argument("--top", type=int, default=30, help="functions listed per row")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    names = chosen_names(parser, args.rows, ROWS, "rows")
    contenders = [name for name in args.contenders.split(",") if name]
    if not contenders or any(name not in CONTENDERS for name in contenders):
        parser.error(f"--contenders takes a comma-separated list of {', '.join(CONTENDERS)}")
    small = not torch.cuda.is_available()
    report = {"environment": environment(), "command": " ".join(sys.argv), "small_sizes": small,
              "rows": [run_row(name, contenders, args.calls, args.top, small) for name in names]}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
