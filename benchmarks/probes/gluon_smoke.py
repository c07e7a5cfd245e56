"""Milestones 1 and 2 of ``docs/design-gluon.md`` on the GPU: workload B's chain (matmul + bias + ReLU, fp16) emitted as
Gluon by ``amk-emit-gluon`` in both schedules, checked against PyTorch, then timed against amk's Triton kernel of
the cooperative configuration (the same staged kernel through ``amk-emit-triton``) and cuBLAS, in one process on
the same inputs: ``gluon`` (cooperative: 128 x 256 x 64, 8 warps, ``--stages``), ``gluon_pingpong`` (two 4-warp
consumers on alternate 128 x 128 x 64 tiles, ``--pingpong-stages``), ``triton``, ``cublas``, ``eager``.

    timeout 300 python benchmarks/probes/gluon_smoke.py [--m 65536] [--n 4096] [--k 4096] [--stages 3]
        [--pingpong-stages 4] [--out FILE.json]

Run it under ``timeout``: a kernel whose barrier phases are wrong waits forever instead of failing. Each kernel's
relative L2 error against the float32 result of the same fp16 inputs comes first; a kernel that fails the check is
not timed. Without a GPU, ``--emit-only DIR`` writes the sources (what the GPU run would load) and stops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from xdsl.parser import Parser
from xdsl.passes import PassPipeline

from amk.context import make_context
from amk.dialects import memory_staged
from amk.lowering.emit_gluon import emit_gluon
from amk.lowering.emit_triton import emit_triton
from amk.opt import AMK_PASSES

COOPERATIVE = "block_m=128 block_n=256 block_k=64 num_warps=8"  # the tuner's first Hopper prior
PINGPONG = "block_m=128 block_n=128 block_k=64 num_warps=4"  # each consumer warpgroup's tile


def staged_kernel(m: int, n: int, k: int, stages: int, tiles: str = COOPERATIVE) -> memory_staged.KernelOp:
    """B's chain at ``m x k @ k x n`` in fp16, staged persistent with TMA at ``tiles`` with ``stages`` pipeline
    stages."""
    x, w, b = (f"!tensor_op.tensor<[{shape}], f16>" for shape in (f"{m}, {k}", f"{k}, {n}", f"{n}"))
    y = f"!tensor_op.tensor<[{m}, {n}], f16>"
    text = f"""func.func @linear(%x : {x}, %w : {w}, %b : {b}) -> {y} {{
  %0 = tensor_op.matmul %x, %w : ({x}, {w}) -> {y}
  %1 = tensor_op.add %0, %b : ({y}, {b}) -> {y}
  %2 = tensor_op.relu %1 : {y}
  func.return %2 : {y}
}}"""
    ctx = make_context()
    module = Parser(ctx, text).parse_module()
    config = f"{tiles} num_stages={stages} persistent=1 tma=1"
    PassPipeline.parse_spec(AMK_PASSES, f"amk-fuse,amk-tile,amk-stage{{{config}}}").apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, memory_staged.KernelOp))


def sources(m: int, n: int, k: int, stages: int, pingpong_stages: int) -> dict[str, str]:
    """The Gluon (cooperative) and the Triton source of the same staged kernel, and the ping-pong Gluon kernel."""
    kernel = staged_kernel(m, n, k, stages)
    return {"gluon": emit_gluon(kernel),
            "gluon_pingpong": emit_gluon(staged_kernel(m, n, k, pingpong_stages, PINGPONG), schedule="pingpong"),
            "triton": emit_triton(kernel)}


def relative_error(have: torch.Tensor, want: torch.Tensor) -> float:
    return ((have.float() - want).norm() / want.norm()).item()


def run(m: int, n: int, k: int, stages: int, pingpong_stages: int) -> dict:
    import triton.testing

    from amk.benchmarking import environment
    from amk.runtime import load_source

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=generator).div_(k ** 0.5).half()
    w = torch.randn(k, n, device="cuda", generator=generator).half()
    b = torch.randn(n, device="cuda", generator=generator).half()
    expected = torch.relu(x.float() @ w.float() + b.float())
    contenders = {}
    for language, source in sources(m, n, k, stages, pingpong_stages).items():
        launch = load_source(source, f"gluon_smoke_{language}").launch
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        contenders[language] = (lambda launch=launch, out=out: launch(x, w, b, out)), out
    contenders["cublas"] = (lambda: torch.matmul(x, w)), None
    contenders["eager"] = (lambda: torch.relu(torch.addmm(b, x, w))), None
    results = {}
    for name, (call, out) in contenders.items():
        produced = call()
        torch.cuda.synchronize()
        error = relative_error(out if out is not None else produced, expected) if name != "cublas" else None
        row = {"rel_l2": error}
        if error is None or error <= 1e-3:
            row["median_ms"] = triton.testing.do_bench(call, return_mode="median")
        results[name] = row
        print(name, row, flush=True)
    return {"environment": environment(), "command": " ".join(sys.argv), "shape": [m, n, k],
            "configs": {"gluon and triton": f"{COOPERATIVE} num_stages={stages}, persistent, TMA",
                        "gluon_pingpong": f"{PINGPONG} per consumer, num_stages={pingpong_stages}, persistent, TMA"},
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=65536)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--pingpong-stages", type=int, default=4)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--emit-only", type=Path, metavar="DIR", help="write the three sources to DIR and stop")
    args = parser.parse_args()
    if args.emit_only is not None:
        args.emit_only.mkdir(parents=True, exist_ok=True)
        for language, source in sources(args.m, args.n, args.k, args.stages, args.pingpong_stages).items():
            (args.emit_only / f"{language}.py").write_text(source)
        return
    if not torch.cuda.is_available():
        parser.error("the Gluon kernel runs on a Hopper GPU only (use --emit-only DIR without one)")
    report = run(args.m, args.n, args.k, args.stages, args.pingpong_stages)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
