"""Host time per call of a module compiled by ``amk.compile``: the whole compiled module (TorchDynamo's guards, the
graph, amk's fused subgraph) and the fused subgraph's own ``forward`` alone, against eager PyTorch.

    python benchmarks/compile_call_overhead.py [--rows 4] [--features 256] [--calls 2000] [--out FILE.json]

A Linear + ReLU (``--rows x --features``, launch-bound at these sizes). Per call, in microseconds of host time (a loop
of calls, synchronized once at the end, divided by the count). Without a GPU the kernels would run in Triton's
interpreter (milliseconds per launch), so there every kernel launch is replaced by a no-op and ``subgraph_forward``
is amk's own Python path alone: size dispatch, output allocation, workspace; ``compiled_module`` adds TorchDynamo's
guards and the FX graph around it; ``amk_compile_module`` is what users call, ``amk.compile(model)``, which adds the
dynamic-shape treatment of the arguments (leading dims marked dynamic, size-oblivious tracing switched on).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

import amk
import amk.runtime
from amk.benchmarking import environment, host_us
from amk.environment import default_device, initialize
from amk.frontend.backend import compile_graph
from amk.frontend.settings import make_settings
from amk.frontend.subgraph import FusedSubgraph


def per_call_us(fn, calls: int) -> float:
    """Host time per call, waiting for the device at the end (a launch-bound call's whole cost)."""
    return host_us(fn, calls=calls, warmup=100, wait_for_device=True)


def compiled_with_subgraph(model: torch.nn.Module):
    """``model`` compiled by TorchDynamo with amk's graph compiler, and the graphs it made (to find the fused
    subgraph module in)."""
    graphs = []
    # Without a GPU the launches are no-ops, whose outputs would fail verification: the call path is the point.
    settings = make_settings(autotune=False, verify=torch.cuda.is_available())

    def backend(gm, example_inputs):
        forward = compile_graph(gm, example_inputs, settings)
        graphs.append(gm)
        return forward

    return torch.compile(model, backend=backend), graphs


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    initialize()
    device = default_device()
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    if device.type != "cuda":
        amk.runtime.serialized = lambda launch: (lambda *arguments: None)
    model = torch.nn.Sequential(torch.nn.Linear(args.features, args.features), torch.nn.ReLU()).to(device, dtype)
    x = torch.randn(args.rows, args.features, device=device, dtype=dtype)
    torch._dynamo.mark_dynamic(x, 0)  # as amk.compile marks the batch dim: the kernels are symbolic in it
    compiled, graphs = compiled_with_subgraph(model)
    with torch.no_grad():
        compiled(x)
        (subgraph,) = [m for gm in graphs for m in gm.modules() if isinstance(m, FusedSubgraph)]
        arguments = _subgraph_arguments(subgraph, lambda: compiled(x))
        subgraph(*arguments)
        # What users call: amk.compile's module adds its dynamic-shape treatment of the arguments around the graph.
        user_module = amk.compile(model, autotune=False, verify=torch.cuda.is_available())
        user_module(x)
        results = {
            "eager_us": per_call_us(lambda: model(x), args.calls),
            "amk_compile_module_us": per_call_us(lambda: user_module(x), args.calls),
            "compiled_module_us": per_call_us(lambda: compiled(x), args.calls),
            "subgraph_forward_us": per_call_us(lambda: subgraph(*arguments), args.calls),
        }
    report = {"environment": environment(), "rows": args.rows, "features": args.features, "calls": args.calls,
              "launches": "real" if device.type == "cuda" else "no-ops (CPU)", **results}
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def _subgraph_arguments(subgraph: FusedSubgraph, call) -> tuple:
    """The arguments the graph passes its fused subgraph, recorded from one ``call`` of the compiled module (at its
    ``launch``: the graph calls the subgraph's ``forward`` without nn.Module's hook dispatch)."""
    seen = []
    launch = subgraph.launch

    def recording(arguments):
        seen.append(tuple(arguments))
        return launch(arguments)

    subgraph.launch = recording
    try:
        call()
    finally:
        del subgraph.launch
    return seen[0]


if __name__ == "__main__":
    main(sys.argv[1:])
