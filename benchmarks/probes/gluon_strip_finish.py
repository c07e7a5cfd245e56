"""Milestone 3 of ``docs/design-gluon.md`` on the GPU: workload A's or C's chain (a GEMM whose epilogue ends in a
LayerNorm / RMSNorm over the whole row) as one ``strip_finish`` kernel emitted by ``amk-emit-gluon`` in both
schedules, checked against the float64 reference, then timed against amk's Triton kernel of the same staged IR and
the cuBLAS GEMM alone, in one process on the same inputs.

    timeout 300 python benchmarks/probes/gluon_strip_finish.py --workload A [--stages 3] [--pingpong-stages 4]
        [--out FILE.json]

The kernel writes each tile's pre-normalization values and row statistics, counts the tile in its row strip, and
the strip's last tile merges the statistics and normalizes the strip (while it is in L2). Run it under ``timeout``:
a kernel whose barriers are wrong waits forever instead of failing. Each kernel's relative L2 error against the
float64 result comes first (bound: twice eager's, or the dtype's tolerance); a kernel that fails it is not timed.
Without a GPU, ``--emit-only DIR`` writes the sources and stops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from xdsl.passes import PassPipeline

from amk.context import make_context
from amk.dialects import memory_staged
from amk.lowering.emit_gluon import emit_gluon
from amk.lowering.emit_triton import emit_triton
from amk.oplist import build_module
from amk.opt import AMK_PASSES
from amk.verification import TOLERANCES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, make_inputs, relative_error  # noqa: E402

COOPERATIVE = "block_m=128 block_n=256 block_k=64 num_warps=8"
PINGPONG = "block_m=128 block_n=128 block_k=64 num_warps=4"


def staged_kernel(name: str, stages: int, tiles: str) -> memory_staged.KernelOp:
    """Workload ``name``'s chain at its shapes, tiled by strip_finish, staged persistent with TMA at ``tiles``."""
    workload = WORKLOADS[name]
    module = build_module(workload.ops, workload.shapes, workload.dtype)
    ctx = make_context()
    config = f"{tiles} num_stages={stages} persistent=1 tma=1"
    PassPipeline.parse_spec(AMK_PASSES, f"amk-fuse,amk-tile{{reduction_strategy=strip_finish}},"
                                        f"amk-stage{{{config}}}").apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))


def sources(name: str, stages: int, pingpong_stages: int) -> dict[str, tuple[str, memory_staged.KernelOp]]:
    """The Gluon (cooperative and ping-pong) and the Triton sources, each with the staged kernel it came from."""
    cooperative = staged_kernel(name, stages, COOPERATIVE)
    pingpong = staged_kernel(name, pingpong_stages, PINGPONG)
    return {"gluon": (emit_gluon(cooperative), cooperative),
            "gluon_pingpong": (emit_gluon(pingpong, schedule="pingpong"), pingpong),
            "triton": (emit_triton(cooperative), cooperative)}


def workspace(kernel: memory_staged.KernelOp) -> list[torch.Tensor]:
    """The kernel's scratch buffers and strip counters (zeroed: the counters must start at 0)."""
    arguments = kernel.body.block.args[len(kernel.body.block.args) - len(kernel.workspace.data):]
    return [torch.zeros([dim.value for dim in argument.type.dims], device="cuda",
                        dtype=torch.int32 if kind.data == "counter" else torch.float32)
            for argument, kind in zip(arguments, kernel.workspace.data)]


def run(name: str, stages: int, pingpong_stages: int) -> dict:
    import triton.testing

    from amk.benchmarking import environment
    from amk.runtime import load_source

    workload = WORKLOADS[name]
    inputs = make_inputs(workload, workload.shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    eager_error = relative_error(workload.eager(*inputs), reference)[0]
    bound = max(TOLERANCES[workload.dtype], 2 * eager_error)
    rows, cols = reference.shape
    contenders = {}
    for language, (source, kernel) in sources(name, stages, pingpong_stages).items():
        launch = load_source(source, f"gluon_strip_finish_{language}").launch
        out = torch.empty(rows, cols, device="cuda", dtype=workload.dtype)
        scratch = workspace(kernel)
        contenders[language] = (lambda launch=launch, out=out, scratch=scratch: launch(*inputs, out, *scratch)), out
    contenders["cublas_gemm_alone"] = (lambda: workload.gemm(*inputs)), None
    contenders["eager"] = (lambda: workload.eager(*inputs)), None
    results = {}
    for contender, (call, out) in contenders.items():
        produced = call()
        torch.cuda.synchronize()
        row = {}
        if contender != "cublas_gemm_alone":
            row["rel_l2"], row["max_abs"] = relative_error(out if out is not None else produced, reference)
        if row.get("rel_l2", 0.0) <= bound:
            row["median_ms"] = triton.testing.do_bench(call, return_mode="median")
        results[contender] = row
        print(contender, row, flush=True)
    return {"environment": environment(), "command": " ".join(sys.argv), "workload": name,
            "shapes": workload.shapes, "error_bound": bound,
            "configs": {"gluon and triton": f"{COOPERATIVE} num_stages={stages}, persistent, TMA, strip_finish",
                        "gluon_pingpong": f"{PINGPONG} per consumer, num_stages={pingpong_stages}, persistent, TMA, "
                                          "strip_finish"},
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["A", "C"], default="A")
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--pingpong-stages", type=int, default=4)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--emit-only", type=Path, metavar="DIR", help="write the three sources to DIR and stop")
    args = parser.parse_args()
    if args.emit_only is not None:
        args.emit_only.mkdir(parents=True, exist_ok=True)
        for language, (source, _) in sources(args.workload, args.stages, args.pingpong_stages).items():
            (args.emit_only / f"{language}.py").write_text(source)
        return
    if not torch.cuda.is_available():
        parser.error("the Gluon kernel runs on a Hopper GPU only (use --emit-only DIR without one)")
    report = run(args.workload, args.stages, args.pingpong_stages)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
