"""Milestones 1-3 of ``docs/design-gluon.md`` on the GPU: a workload's chain emitted as Gluon by ``amk-emit-gluon`` in
both schedules, checked against the float64 reference, then timed against amk's Triton kernel of the cooperative
configuration (the same staged kernel through ``amk-emit-triton``) and cuBLAS's GEMM alone, in one process on the same
inputs: ``gluon`` (cooperative: 128 x 256 x 64, 8 warps, ``--stages``), ``gluon_pingpong`` (two 4-warp consumers on
alternate 128 x 128 x 64 tiles, ``--pingpong-stages``), ``triton``, ``cublas_gemm_alone``, ``eager``.

    timeout 300 python benchmarks/probes/gluon_smoke.py [--workload B] [--m 65536] [--n 4096] [--k 4096]
        [--stages 3] [--pingpong-stages 4] [--out FILE.json]

``--workload B`` (matmul + bias + ReLU, fp16; ``--m/--n/--k`` set its shape; ``--activation gelu`` or ``gelu_tanh``
in place of the ReLU, the epilogues of a ViT's or GPT-2's first MLP GEMM) is a tile2d kernel; ``A`` (GELU and
LayerNorm) and ``C`` (residual and RMSNorm, bf16), at their workload shapes, are strip_finish kernels: each tile's
pre-normalization values and row statistics are written, the tile is counted in its row strip, and the strip's last
tile merges the statistics and normalizes the strip while it is in L2. Run it under ``timeout``: a kernel whose
barriers are wrong waits forever instead of failing. Each kernel's relative L2 error against the float64 result
comes first (bound: twice eager's, or the dtype's tolerance); a kernel that fails it is not timed, and one that
passes is checked again after its timing runs. Without a GPU,
``--emit-only DIR`` writes the sources (what the GPU run would load) and stops.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from xdsl.passes import PassPipeline

from amk.context import make_context
from amk.dialects import memory_staged
from amk.dtypes import to_torch
from amk.lowering.emit_gluon import emit_gluon
from amk.lowering.emit_triton import emit_triton
from amk.oplist import build_module
from amk.opt import AMK_PASSES
from amk.verification import TOLERANCES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, make_inputs, relative_error  # noqa: E402

COOPERATIVE = "block_m=128 block_n=256 block_k=64 num_warps=8"  # the tuner's first Hopper prior
PINGPONG = "block_m=128 block_n=128 block_k=64 num_warps=4"  # each consumer warpgroup's tile
# B's epilogue is elementwise (tile2d); A's and C's end in a norm over the whole row
STRATEGIES = {"A": "{reduction_strategy=strip_finish}", "B": "", "C": "{reduction_strategy=strip_finish}"}


# B's epilogue activation (``--activation``): its op and PyTorch's function.
ACTIVATIONS = {"relu": ("relu", torch.relu), "gelu": ("gelu", torch.nn.functional.gelu),
               "gelu_tanh": (("gelu", {"approximate": "tanh"}),
                             lambda x: torch.nn.functional.gelu(x, approximate="tanh"))}


def workload_of(name: str, activation: str):
    """Workload ``name``; for B, its chain with ``activation`` after the bias."""
    workload = WORKLOADS[name]
    if name != "B" or activation == "relu":
        return workload
    op, function = ACTIVATIONS[activation]
    return dataclasses.replace(workload, ops=["matmul", "add_bias", op],
                               eager=lambda x, w, b: function(x @ w + b))


def shapes_of(name: str, m: int, n: int, k: int) -> list[tuple[int, ...]]:
    """The operands' shapes: B's at ``m x k @ k x n``, the others' at their workload's shapes."""
    return [(m, k), (k, n), (n,)] if name == "B" else WORKLOADS[name].shapes


def staged_kernel(workload, shapes, stages: int, tiles: str) -> memory_staged.KernelOp:
    """``workload``'s chain at ``shapes``, staged persistent with TMA at ``tiles`` with ``stages`` stages."""
    name = workload.name
    module = build_module(workload.ops, shapes, workload.dtype)
    ctx = make_context()
    config = f"{tiles} num_stages={stages} persistent=1 tma=1"
    PassPipeline.parse_spec(AMK_PASSES, f"amk-fuse,amk-tile{STRATEGIES[name]},amk-stage{{{config}}}").apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))


def sources(workload, shapes, stages: int, pingpong_stages: int) -> dict[str, tuple[str, memory_staged.KernelOp]]:
    """The Gluon (cooperative) and the Triton source of the same staged kernel and the ping-pong Gluon source, each
    with the staged kernel it came from."""
    cooperative = staged_kernel(workload, shapes, stages, COOPERATIVE)
    pingpong = staged_kernel(workload, shapes, pingpong_stages, PINGPONG)
    return {"gluon": (emit_gluon(cooperative), cooperative),
            "gluon_pingpong": (emit_gluon(pingpong, schedule="pingpong"), pingpong),
            "triton": (emit_triton(cooperative), cooperative)}


def workspace(kernel: memory_staged.KernelOp) -> list[torch.Tensor]:
    """The kernel's scratch buffers and strip counters, if any, of the types the IR gives them (zeroed: the counters
    must start at 0)."""
    kinds = kernel.workspace.data if kernel.workspace is not None else []
    arguments = kernel.body.block.args[len(kernel.body.block.args) - len(kinds):]
    return [torch.zeros([dim.value for dim in argument.type.dims], device="cuda",
                        dtype=to_torch(argument.type.element_type)) for argument in arguments]


def run(workload, shapes, stages: int, pingpong_stages: int) -> dict:
    import triton.testing

    from amk.benchmarking import environment
    from amk.runtime import load_source

    name = workload.name
    inputs = make_inputs(workload, shapes, "cuda")
    reference = workload.eager(*[t.double() for t in inputs])
    bound = max(TOLERANCES[workload.dtype], 2 * relative_error(workload.eager(*inputs), reference)[0])
    contenders = {}
    for language, (source, kernel) in sources(workload, shapes, stages, pingpong_stages).items():
        launch = load_source(source, f"gluon_smoke_{language}").launch
        out = torch.empty(reference.shape, device="cuda", dtype=workload.dtype)
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
            if out is not None:  # the strip counters reset themselves: a later launch is as right as the first
                out.zero_()
                call()
                torch.cuda.synchronize()
                row["rel_l2_after_timing"] = relative_error(out, reference)[0]
                row["correct_after_timing"] = row["rel_l2_after_timing"] <= bound
        results[contender] = row
        print(contender, row, flush=True)
    return {"environment": environment(), "command": " ".join(sys.argv), "workload": name, "ops": workload.ops, "shapes": shapes,
            "error_bound": bound, "strategy": "strip_finish" if STRATEGIES[name] else "tile2d",
            "configs": {"gluon and triton": f"{COOPERATIVE} num_stages={stages}, persistent, TMA",
                        "gluon_pingpong": f"{PINGPONG} per consumer, num_stages={pingpong_stages}, persistent, TMA"},
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(STRATEGIES), default="B")
    parser.add_argument("--m", type=int, default=65536, help="B's rows (A and C run at their workload shapes)")
    parser.add_argument("--n", type=int, default=4096, help="B's columns")
    parser.add_argument("--k", type=int, default=4096, help="B's contraction")
    parser.add_argument("--activation", choices=sorted(ACTIVATIONS), default="relu",
                        help="B's activation after the bias")
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--pingpong-stages", type=int, default=4)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--emit-only", type=Path, metavar="DIR", help="write the three sources to DIR and stop")
    args = parser.parse_args()
    shapes = shapes_of(args.workload, args.m, args.n, args.k)
    workload = workload_of(args.workload, args.activation)
    if args.emit_only is not None:
        args.emit_only.mkdir(parents=True, exist_ok=True)
        for language, (source, _) in sources(workload, shapes, args.stages, args.pingpong_stages).items():
            (args.emit_only / f"{language}.py").write_text(source)
        return
    if not torch.cuda.is_available():
        parser.error("the Gluon kernel runs on a Hopper GPU only (use --emit-only DIR without one)")
    report = run(workload, shapes, args.stages, args.pingpong_stages)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
