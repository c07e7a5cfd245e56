"""Diagnostic: which main-loop form Triton reaches cuBLAS with on workload B (x[65536,4096] @ W[4096,4096] + bias,
ReLU, fp16), before the emitter is taught it; with ``--epilogue gelu`` and A's shape, whether a form hides an
epilogue's arithmetic behind the next tile's MMAs.

    python benchmarks/probes/gemm_probe.py --out benchmarks/results/<stem>.json
    python benchmarks/probes/gemm_probe.py --shape 16384,4096,4096 --epilogue gelu --out ...

Times, in one process on the same inputs, the cuBLAS GEMM alone, eager, and one Triton kernel written in three
forms at several configurations: ``pointers`` (what amk emitted first: pointer arithmetic, a grouped tile order, one
tile per program), ``tma`` (the same with device-side tensor descriptors, ``tl.make_tensor_descriptor``, for both
operands and the output) and ``tma_persistent`` (one program per SM walking the tiles, ``tl.range(...,
flatten=True)``, or unflattened: Triton's Hopper warp specialization takes only an unflattened loop), each
optionally with ``warp_specialize=True`` (``--variants tma_persistent+ws``). Each row says whether the compiled
kernel really has specialized warps (``ttg.warp_specialize`` in its TTGIR). Every output is checked against eager
first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import save_rows  # noqa: E402


@triton.jit
def _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped tile order: GROUP_M row tiles share the same column tiles while they are in L2."""
    group = tile_id // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile_id % group_m), (tile_id % (GROUP_M * num_pid_n)) // group_m


@triton.jit
def _activation(y, EPILOGUE: tl.constexpr):
    """B's ReLU, or A's exact (erf) GELU: the epilogue arithmetic that a form may or may not overlap."""
    if EPILOGUE == "gelu":
        return 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    return tl.maximum(y, 0.0)


@triton.jit
def gemm_bias_act(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, FORM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                   FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EPILOGUE: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if FORM == "pointers":
        pid_m, pid_n = _tile_of(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K, warp_specialize=WARP_SPECIALIZE):
            ks = k + tl.arange(0, BLOCK_K)
            x_tile = tl.load(x_ptr + rows[:, None] * K + ks[None, :])
            w_tile = tl.load(w_ptr + ks[:, None] * N + cols[None, :])
            acc = tl.dot(x_tile, w_tile, acc)
        bias = tl.load(bias_ptr + cols).to(tl.float32)
        y = _activation(acc + bias[None, :], EPILOGUE)
        tl.store(out_ptr + rows[:, None] * N + cols[None, :], y.to(tl.float16))
    else:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        if FORM == "tma":
            start, step, num_tiles = tl.program_id(0), tl.num_programs(0), tl.program_id(0) + 1
        else:
            start, step, num_tiles = tl.program_id(0), NUM_SMS, num_pid_m * num_pid_n
        for tile_id in tl.range(start, num_tiles, step, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
            pid_m, pid_n = _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, K, BLOCK_K):
                acc = tl.dot(x_desc.load([pid_m * BLOCK_M, k]), w_desc.load([k, pid_n * BLOCK_N]), acc)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            bias = tl.load(bias_ptr + cols).to(tl.float32)
            out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], _activation(acc + bias[None, :], EPILOGUE).to(tl.float16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="65536,4096,4096", help="M,K,N")
    parser.add_argument("--epilogue", choices=("relu", "gelu"), default="relu")
    parser.add_argument("--tiles", nargs="+", default=["128x256x64:8", "128x128x64:8", "128x128x64:4", "128x256x64:4"],
                        help="BMxBNxBK:warps")
    parser.add_argument("--variants", nargs="+",
                        default=["pointers", "tma", "tma_persistent+flatten", "tma_persistent+flatten+ws"],
                        help="form[+flatten][+ws]")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split(","))
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    activation = torch.relu if args.epilogue == "relu" else torch.nn.functional.gelu
    expected = activation(x.float() @ w.float() + bias.float())
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [{"form": "cublas_gemm_alone", "ms": time_ms(lambda: x @ w)},
            {"form": "eager", "ms": time_ms(lambda: activation(x @ w + bias))}]
    print(json.dumps(rows[0]), json.dumps(rows[1]), flush=True)
    tiles = [tuple(int(v) for v in re.split("[x:]", tile)) for tile in args.tiles]
    variants = [(variant.split("+")[0], "flatten" in variant, "ws" in variant) for variant in args.variants]
    for (form, flatten, ws), (bm, bn, bk, warps), stages in itertools.product(variants, tiles, (3, 4)):
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        tiles_total = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        grid = (min(num_sms, tiles_total),) if form == "tma_persistent" else (tiles_total,)

        def launch(out=out, form=form, bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, flatten=flatten, ws=ws,
                   grid=grid):
            return gemm_bias_act[grid](x, w, bias, out, m, n, k, FORM=form, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       GROUP_M=8, NUM_SMS=num_sms, FLATTEN=flatten, WARP_SPECIALIZE=ws,
                                       EPILOGUE=args.epilogue, num_warps=warps, num_stages=stages)

        row = {"form": form, "epilogue": args.epilogue, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
               "num_warps": warps, "num_stages": stages, "flatten": flatten, "warp_specialize": ws}
        try:
            compiled = launch()
            torch.cuda.synchronize()
            row["specialized"] = "ttg.warp_specialize" in compiled.asm["ttgir"]
            row["rel_err"] = ((out.float() - expected).norm() / expected.norm()).item()
            row["ms"] = time_ms(launch) if row["rel_err"] < 1e-2 else None
        except Exception as error:  # a form this Triton cannot compile is a finding, not a crash of the probe
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
