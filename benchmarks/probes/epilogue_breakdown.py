"""Where workload A's time goes: the fused GEMM + bias + GELU + LayerNorm kernel taken apart on the GPU.

    python benchmarks/probes/epilogue_breakdown.py --out benchmarks/results/<stem>.json

In one process on the same inputs it times the cuBLAS GEMM, amk's kernels for growing prefixes of the chain
(``matmul, add_bias`` / ``+ gelu`` / ``+ layernorm``) at several fixed tile configurations, and the LayerNorm kernel
with its finisher (the last tile of each row strip normalizing the strip) cut out of the emitted source, so that the
cost of each part shows as a difference. Diagnostic only: the cut kernel is not a correct LayerNorm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import amk
from amk.benchmarking import time_ms
from amk.runtime import load_source

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import save_rows  # noqa: E402

M, N, K = 16384, 4096, 4096
CHAINS = {
    "gemm+bias": ["matmul", "add_bias"],
    "gemm+bias+gelu": ["matmul", "add_bias", "gelu"],
    "A": ["matmul", "add_bias", "gelu", "layernorm"],
}
CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 128, 64, 8, 4),
    (128, 128, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3),
    (128, 128, 64, 4, 3),
]


def build(ops, shapes, config):
    block_m, block_n, block_k, warps, stages = config
    grid = {"BLOCK_SIZE_M": [block_m], "BLOCK_SIZE_N": [block_n], "BLOCK_SIZE_K": [block_k], "GROUP_SIZE_M": [8],
            "num_warps": [warps], "num_stages": [stages]}
    return amk.build_fused_kernel(ops=ops, input_shapes=shapes, dtype=torch.float16, parameter_grid=grid,
                                  autotune=True, tuner_config=amk.TunerConfig(search_budget=1))


def without_finisher(source: str) -> str:
    """The emitted tile_stats source with everything from the strip counter on removed."""
    head, _, rest = source.partition("    # make this program's stores visible")
    _, _, launcher = rest.partition("\n\ndef launch(")
    return head + "\n\ndef launch(" + launcher


@triton.jit
def normalize_kernel(y_ptr, count_ptr, mean_ptr, m2_ptr, gamma_ptr, beta_ptr, out_ptr, N: tl.constexpr,
                     TILES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A second kernel for the two-kernel comparison: merge each row's per-tile (count, mean, M2) and normalize one
    BLOCK_M x BLOCK_N tile of the pre-normalization output."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tiles = tl.arange(0, TILES)
    at = rows[:, None] * TILES + tiles[None, :]
    count = tl.load(count_ptr + at)
    mean = tl.load(mean_ptr + at)
    m2 = tl.load(m2_ptr + at)
    total = tl.sum(count, axis=1)
    row_mean = tl.sum(count * mean, axis=1) / total
    delta = mean - row_mean[:, None]
    row_m2 = tl.sum(m2 + count * delta * delta, axis=1)
    rstd = tl.rsqrt(row_m2 / total + 1e-5)
    y = tl.load(y_ptr + rows[:, None] * N + cols[None, :]).to(tl.float32)
    gamma = tl.load(gamma_ptr + cols).to(tl.float32)
    beta = tl.load(beta_ptr + cols).to(tl.float32)
    out = (y - row_mean[:, None]) * rstd[:, None] * gamma[None, :] + beta[None, :]
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], out.to(tl.float16))


def cut_variants(kernel, config, tensors, ref) -> list[dict]:
    """The LayerNorm kernel without its finisher, alone and followed by a separate normalize kernel."""
    x, w, bias, gamma, beta = tensors
    compiled = next(iter(kernel.compiled.kernels.values()))
    launch = load_source(without_finisher(compiled.source), "cut_" + compiled.name).launch
    tiles = -(-N // config[1])
    partials = [torch.zeros(M, tiles, device="cuda") for _ in range(3)]
    counters = torch.zeros(-(-M // config[0]), device="cuda", dtype=torch.int32)
    pre_norm = torch.empty(M, N, device="cuda", dtype=torch.float16)
    normalized = torch.empty_like(pre_norm)

    def cut():
        launch(x, w, bias, gamma, beta, pre_norm, *partials, counters)

    def two_kernels():
        cut()
        normalize_kernel[(M // 32, N // 256)](pre_norm, *partials, gamma, beta, normalized, N, tiles, 32, 256,
                                             num_warps=8)

    two_kernels()
    return [{"what": "A without finisher", "config": config, "ms": time_ms(cut)},
            {"what": "A two kernels", "config": config, "ms": time_ms(two_kernels),
             "max_abs_err": (normalized.float() - ref).abs().max().item()}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(K, N, device="cuda", dtype=torch.float16) / K ** 0.5
    bias, gamma, beta = (torch.randn(N, device="cuda", dtype=torch.float16) for _ in range(3))
    inputs = {"gemm+bias": (x, w, bias), "gemm+bias+gelu": (x, w, bias), "A": (x, w, bias, gamma, beta)}
    ref = F.layer_norm(F.gelu(x.float() @ w.float() + bias.float()), (N,), gamma.float(), beta.float())
    rows = [{"what": "cuBLAS x@w", "ms": time_ms(lambda: x @ w)},
            {"what": "eager A", "ms": time_ms(lambda: F.layer_norm(F.gelu(x @ w + bias), (N,), gamma, beta))}]
    for config in CONFIGS:
        for name, ops in CHAINS.items():
            shapes = [tuple(t.shape) for t in inputs[name]]
            try:
                kernel = build(ops, shapes, config)
            except amk.errors.AmkError as error:
                rows.append({"what": name, "config": config, "error": str(error)[:200]})
                continue
            row = {"what": name, "config": config, "ms": time_ms(lambda k=kernel, i=inputs[name]: k(*i))}
            if name == "A":
                out = kernel(*inputs[name])
                row["max_abs_err"] = (out.float() - ref).abs().max().item()
                rows += cut_variants(kernel, config, (x, w, bias, gamma, beta), ref)
            rows.append(row)
            print(json.dumps(rows[-1]), flush=True)
    save_rows(args.out, rows)
    for row in rows:
        print(f"{row['what']:<22} {str(row.get('config', '')):<26} {row.get('ms', row.get('error'))}")


if __name__ == "__main__":
    main()
