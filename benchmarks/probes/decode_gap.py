"""Diagnostic: why ``amk.compile`` on workloads D, E and F written as modules runs slower under CUDA graphs than
``build_fused_kernel`` on the same computation.

    python benchmarks/probes/decode_gap.py --out benchmarks/results/<stem>.json --log /tmp/decode-gap.log

For each decode workload, in one process, on the same weights, every variant timed as replays of a CUDA graph
(``time_ms(..., cuda_graph=True)``, median) after its output is checked against a float64 reference:

- ``build_fused_kernel`` at the search budgets ``--budgets`` (``run.py`` tunes with 24, ``amk.compile`` with
  ``TunerConfig``'s default 16); for F, which is not an op chain, the row of that name is ``run.py``'s build of its
  tensor_op module (``workloads.ModuleKernel``), the figure ``run.py`` reports for F;
- ``amk.compile`` on the module (``benchmarks/workloads.py`` ``NormLinearResidual`` / ``SwiGLUResidual``) at the
  same budgets, with the weights as ``nn.Linear`` keeps them (``[N, K]``: the matmul reads ``W.T``, K-contiguous);
- ``amk.compile`` on the module whose weights are views ``W_kn.t()`` of the workload's contiguous ``[K, N]`` weights,
  so the matmul reads the same layout as ``build_fused_kernel``'s (the layout's share of the gap).

Each variant builds in its own fresh cache directory; ``amk.explain``'s report (strategy, configuration, race)
and the tuner's log lines (``--log``) say what each one chose.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import torch

import amk
from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import (  # noqa: E402
    WORKLOADS,
    ModuleKernel,
    NormLinearResidual,
    SwiGLUResidual,
    make_inputs,
    relative_error,
    save_rows,
)


def timed_row(name: str, fn, reference: torch.Tensor, **extra) -> dict:
    output = fn()
    torch.cuda.synchronize()
    error, max_abs = relative_error(output, reference)
    row = {"name": name, "rel_error": error, "max_abs_error": max_abs, **extra}
    row["ms"] = time_ms(fn, cuda_graph=True) if error < 2e-2 else None
    print(f"{name}: {row['ms']} ms, rel_error {error:.2e}", flush=True)
    return row


def module_for(workload: str, weights: list[torch.Tensor], kn_layout: bool) -> torch.nn.Module:
    """The workload as the module people write, holding ``weights`` (``[K, N]`` contiguous) either as ``nn.Linear``
    keeps its own (a contiguous ``[N, K]`` copy) or as transposed views of them."""
    def weight(w: torch.Tensor) -> torch.nn.Parameter:
        return torch.nn.Parameter(w.t() if kn_layout else w.t().contiguous(), requires_grad=False)

    if workload == "F":
        w_gate, w_up, w_down = weights
        module = SwiGLUResidual(w_gate.shape[0], w_gate.shape[1])
        module.gate_proj.weight, module.up_proj.weight = weight(w_gate), weight(w_up)
        module.down_proj.weight = weight(w_down)
    else:
        gain, w = weights
        module = NormLinearResidual(w.shape[0])
        module.norm.weight = torch.nn.Parameter(gain, requires_grad=False)
        module.proj.weight = weight(w)
    return module.to(device="cuda", dtype=torch.bfloat16)


def probe(name: str, budgets: list[int]) -> list[dict]:
    workload = WORKLOADS[name]
    inputs = make_inputs(workload, workload.shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    # The module's arguments: (x, residual) for D/E, (x,) for F; the rest are its weights.
    arguments, weights = ([inputs[0]], inputs[1:]) if name == "F" else ([inputs[0], inputs[3]], inputs[1:3])
    rows = [timed_row(f"{name} eager", lambda: workload.eager(*inputs), reference)]
    for budget in budgets:
        with tempfile.TemporaryDirectory() as cache:
            if workload.module is not None:  # F is not an op chain: run.py builds its tensor_op module
                kernel = ModuleKernel(workload, workload.shapes, budget, cache)
            else:
                kernel = amk.build_fused_kernel(workload.ops, workload.shapes, workload.dtype,
                                                tuner_config=amk.TunerConfig(search_budget=budget,
                                                                             target_cache_dir=cache))
            rows.append(timed_row(f"{name} build_fused_kernel budget {budget}", lambda kernel=kernel: kernel(*inputs), reference,
                                  config=kernel.config))
        for kn_layout in (False, True):
            with tempfile.TemporaryDirectory() as cache:
                tuner = amk.TunerConfig(search_budget=budget, target_cache_dir=cache)
                compiled = amk.compile(module_for(name, weights, kn_layout), tuner_config=tuner)
                with torch.no_grad():
                    compiled(*arguments)
                    layout = "W[K, N] viewed" if kn_layout else "nn.Linear's W[N, K]"
                    rows.append(timed_row(f"{name} amk.compile budget {budget}, {layout}",
                                          lambda compiled=compiled: compiled(*arguments), reference,
                                          explain=str(amk.explain(compiled, print_report=False))))
            torch._dynamo.reset()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="E,D,F")
    parser.add_argument("--budgets", default="16,24", help="comma-separated search budgets")
    parser.add_argument("--out", required=True, help="JSON results file")
    parser.add_argument("--log", help="also write amk's log (every timed candidate) here")
    args = parser.parse_args()
    if args.log:
        handler = logging.FileHandler(args.log)
        handler.setFormatter(logging.Formatter("%(relativeCreated)8.0f %(name)s %(message)s"))
        logging.getLogger("amk").addHandler(handler)
        logging.getLogger("amk").setLevel(logging.DEBUG)
    budgets = [int(b) for b in args.budgets.split(",")]
    rows = [row for name in args.workloads.split(",") for row in probe(name, budgets)]
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
