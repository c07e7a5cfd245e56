"""Diagnostic: which main-loop form Triton reaches cuBLAS with on workload B (x[65536,4096] @ W[4096,4096] + bias,
ReLU, fp16), before the emitter is taught it.

    python benchmarks/gemm_probe.py --out benchmarks/results/<stem>.json

Times, in one process on the same inputs, the cuBLAS GEMM alone, eager, and one Triton kernel written in three
forms at several configurations: ``pointers`` (what amk emits today: pointer arithmetic, a grouped tile order, one
tile per program), ``tma`` (the same with device-side tensor descriptors, ``tl.make_tensor_descriptor``, for both
operands and the output) and ``tma_persistent`` (one program per SM walking the tiles, ``tl.range(...,
flatten=True)``), each optionally with ``warp_specialize=True``. Every output is checked against eager first.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
import triton
import triton.language as tl

from amk.benchmarking import save_rows, time_ms


@triton.jit
def _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped tile order: GROUP_M row tiles share the same column tiles while they are in L2."""
    group = tile_id // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile_id % group_m), (tile_id % (GROUP_M * num_pid_n)) // group_m


@triton.jit
def gemm_bias_relu(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K, FORM: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr):
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
        y = tl.maximum(acc + bias[None, :], 0.0)
        tl.store(out_ptr + rows[:, None] * N + cols[None, :], y.to(tl.float16))
    else:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        w_desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
        if FORM == "tma":
            start, step, num_tiles = tl.program_id(0), tl.num_programs(0), tl.program_id(0) + 1
        else:
            start, step, num_tiles = tl.program_id(0), NUM_SMS, num_pid_m * num_pid_n
        for tile_id in tl.range(start, num_tiles, step, flatten=True, warp_specialize=WARP_SPECIALIZE):
            pid_m, pid_n = _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, K, BLOCK_K):
                acc = tl.dot(x_desc.load([pid_m * BLOCK_M, k]), w_desc.load([k, pid_n * BLOCK_N]), acc)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            bias = tl.load(bias_ptr + cols).to(tl.float32)
            out_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], tl.maximum(acc + bias[None, :], 0.0).to(tl.float16))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", default="65536,4096,4096", help="M,K,N")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split(","))
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    expected = torch.relu(x.float() @ w.float() + bias.float())
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [{"form": "cublas_gemm_alone", "ms": time_ms(lambda: x @ w)},
            {"form": "eager", "ms": time_ms(lambda: torch.relu(x @ w + bias))}]
    print(json.dumps(rows[0]), json.dumps(rows[1]), flush=True)
    tiles = [(128, 256, 64, 8), (128, 128, 64, 8), (128, 128, 64, 4), (128, 256, 64, 4)]
    variants = [("pointers", False), ("tma", False), ("tma_persistent", False), ("tma_persistent", True)]
    for (form, ws), (bm, bn, bk, warps), stages in itertools.product(variants, tiles, (3, 4)):
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        tiles_total = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        grid = (min(num_sms, tiles_total),) if form == "tma_persistent" else (tiles_total,)

        def launch(out=out, form=form, bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, ws=ws, grid=grid):
            gemm_bias_relu[grid](x, w, bias, out, m, n, k, FORM=form, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                                 NUM_SMS=num_sms, WARP_SPECIALIZE=ws, num_warps=warps, num_stages=stages)

        row = {"form": form, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages,
               "warp_specialize": ws}
        try:
            launch()
            torch.cuda.synchronize()
            row["rel_err"] = ((out.float() - expected).norm() / expected.norm()).item()
            row["ms"] = time_ms(launch) if row["rel_err"] < 1e-2 else None
        except Exception as error:  # a form this Triton cannot compile is a finding, not a crash of the probe
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    save_rows(args.out, rows)


if __name__ == "__main__":
    main()
