"""Diagnostic: a compiled module's per-call host time, layer by layer (issue 18's call overhead), without a profiler.

    python benchmarks/probes/host_layers.py --rows fp16_linear_layernorm [--out FILE.json]

cProfile's own cost per Python call swamps calls of a few microseconds, so this probe times the layers of one call
directly, each with :func:`amk.benchmarking.host_us` (50 back-to-back calls, the median of 20 repetitions), in one
process on the same inputs:

- ``eager``: the module; ``ops``: the same PyTorch ops called directly (the row's ``forward`` without ``nn.Module``);
- ``dynamo_eager`` and ``dynamo_eager_dynamic``: ``torch.compile(backend="eager")`` (TorchDynamo's guards and frame,
  the floor any backend pays), static and with dynamic shapes (amk marks leading dims dynamic);
- ``max_autotune``: ``torch.compile(mode="max-autotune-no-cudagraphs")``, the host time issue 18 compares with;
- ``amk`` and ``amk_static`` (``dynamic=False``): ``amk.compile``;
- ``amk_subgraph``: each fused subgraph called alone on the arguments it gets; ``amk_launcher``: its launcher (the
  program's fast path) alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch

import amk
from amk.benchmarking import environment, host_us
from amk.frontend.subgraph import FusedSubgraph
from amk.runtime import default_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import ROWS  # noqa: E402


def timed(fn) -> float:
    for _ in range(5):
        fn()
    return round(host_us(fn, calls=50, repeats=20), 2)


def captured_subgraph_calls(compiled, inputs) -> list[tuple[FusedSubgraph, tuple]]:
    """Run ``compiled`` once with every fused subgraph's ``launch`` wrapped: each subgraph with its arguments."""
    calls = []
    subgraphs = [o for o in gc.get_objects() if type(o) is FusedSubgraph]
    for subgraph in subgraphs:
        def recording(args, subgraph=subgraph, launch=subgraph.launch):
            calls.append((subgraph, tuple(args)))
            return launch(args)

        subgraph.launch = recording
    compiled(*inputs)
    for subgraph in subgraphs:
        del subgraph.launch
    return calls


def run_row(name: str) -> dict:
    row = ROWS[name]
    torch.manual_seed(0)
    device = default_device()
    module, shapes = row.build(device.type != "cuda")  # small sizes in Triton's interpreter: a check of the probe
    module = module.to(device=device, dtype=row.dtype).eval()
    inputs = [torch.randn(shape, device=device).to(row.dtype) for shape in shapes]
    result: dict = {"row": name}
    with torch.no_grad():
        result["eager"] = timed(lambda: module(*inputs))
        forward = type(module).forward
        result["ops"] = timed(lambda: forward(module, *inputs))
        for label, make in (("dynamo_eager", lambda: torch.compile(module, backend="eager")),
                            ("dynamo_eager_dynamic", lambda: torch.compile(module, backend="eager", dynamic=True)),
                            ("max_autotune", lambda: torch.compile(module, mode="max-autotune-no-cudagraphs")),
                            ("amk_static", lambda: amk.compile(module, dynamic=False)),
                            ("amk", lambda: amk.compile(module))):
            torch._dynamo.reset()
            fn = make()
            result[label] = timed(lambda fn=fn: fn(*inputs))
        subgraphs = captured_subgraph_calls(fn, inputs)
        result["amk_subgraph"] = [timed(lambda s=s, a=a: s(*a)) for s, a in subgraphs]
        launchers = []
        for subgraph, args in subgraphs:
            (run,) = subgraph.launchers.values()
            launchers.append(timed(lambda run=run, args=args: run(args)))
        result["amk_launcher"] = launchers
        result["eager_again"] = timed(lambda: module(*inputs))
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="fp16_linear_layernorm", help=f"comma-separated, from {', '.join(ROWS)}")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    results = {"environment": environment(), "command": " ".join(sys.argv),
               "rows": [run_row(name) for name in args.rows.split(",")]}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
