"""Diagnostic: softmax(q @ k * scale) (workload G) as one persistent kernel that normalizes each tile a few tile
steps after computing it, while its row strip is still in L2.

    python benchmarks/probes/trailing_probe.py --out benchmarks/results/<stem>.json [--variants 1,2,3]

What this measures before the compiler builds it. amk's tile_stats runs G in two launches: the first stores the
pre-normalization logits and each tile's row statistics, the second merges the statistics and re-reads the logits
from HBM (128 MB written twice and read once: 0.09 ms of traffic at 4.3 TB/s, 0.161 ms measured). Here one launch of
resident programs walks the tiles in row-strip order. Each step a program computes one tile, stores it (the logits,
or their exponentials against the tile's own row maxima) and its rows' partial statistics, and counts itself in at
its row strip; the last tile of a strip merges the strip's statistics once and raises the strip's ready flag. The
same step the program then normalizes the tile it computed ``LAG`` steps earlier: by then every tile of that strip
has been computed (the launch walks the strips in order), so the wait is normally satisfied at once, and the tile is
read back from L2 and overwritten in place, so the output crosses HBM about once. Flags and counters reset
themselves, so the kernel replays under a CUDA graph. Every configuration's output is checked against a float64
reference first; torch.compile, eager and amk's own kernel run in the same process on the same inputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from amk.benchmarking import time_ms

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for the shared workloads module
from workloads import WORKLOADS, baseline_rows, probe_parser, probe_row, probe_shapes, run_probe  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def softmax_qk_trailing(q_ptr, k_ptr, out_ptr, tile_max_ptr, tile_sum_ptr, row_max_ptr, row_sum_ptr,
                        arrived_ptr, normalized_ptr, ready_ptr, M, N, scale_log2e,
                        K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STRIP_TILES: tl.constexpr,
                        LAG: tl.constexpr, STORE_EXP: tl.constexpr):
    tiles_per_strip = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_per_strip
    # LAG steps of every program, and never fewer tiles than a strip has: all the tiles of the strip being
    # normalized are then computed in this step of their programs or before, so no program waits for one that waits
    lag = tl.maximum(LAG * tl.num_programs(0), tiles_per_strip)
    in_tile_rows = tl.arange(0, BLOCK_M)
    in_tile_cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, K)
    for step in range(tl.program_id(0), tiles + lag, tl.num_programs(0)):
        if step < tiles:
            # compute one tile of the logits, in base 2
            strip = step // tiles_per_strip
            col_tile = step % tiles_per_strip
            rows = strip * BLOCK_M + in_tile_rows
            cols = col_tile * BLOCK_N + in_tile_cols
            q_tile = tl.load(q_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
            k_tile = tl.load(k_ptr + ks[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
            logits = tl.dot(q_tile, k_tile) * scale_log2e
            logits = tl.where(cols[None, :] < N, logits, float("-inf"))
            tile_max = tl.max(logits, 1)
            exps = tl.exp2(logits - tile_max[:, None])
            tile_sum = tl.sum(exps, 1)
            out_ptrs = out_ptr + rows[:, None] * N + cols[None, :]
            in_bounds = (rows[:, None] < M) & (cols[None, :] < N)
            if STORE_EXP:
                tl.store(out_ptrs, exps.to(out_ptr.dtype.element_ty), mask=in_bounds)
            else:
                tl.store(out_ptrs, logits.to(out_ptr.dtype.element_ty), mask=in_bounds)
            tl.store(tile_max_ptr + rows * tiles_per_strip + col_tile, tile_max, mask=rows < M)
            tl.store(tile_sum_ptr + rows * tiles_per_strip + col_tile, tile_sum, mask=rows < M)
            # count this tile in; the strip's last tile merges its statistics once and raises its ready flag
            tl.debug_barrier()
            arrived = tl.atomic_add(arrived_ptr + strip, 1, sem="acq_rel", scope="gpu")
            if arrived == tiles_per_strip - 1:
                tiles_of_strip = tl.arange(0, STRIP_TILES)
                partial = rows[:, None] * tiles_per_strip + tiles_of_strip[None, :]
                valid = (tiles_of_strip[None, :] < tiles_per_strip) & (rows[:, None] < M)
                maxima = tl.load(tile_max_ptr + partial, mask=valid, other=float("-inf"))
                sums = tl.load(tile_sum_ptr + partial, mask=valid, other=0.0)
                row_max = tl.max(maxima, 1)
                row_sum = tl.sum(sums * tl.exp2(maxima - row_max[:, None]), 1)
                tl.store(row_max_ptr + rows, row_max, mask=rows < M)
                tl.store(row_sum_ptr + rows, row_sum, mask=rows < M)
                tl.store(arrived_ptr + strip, 0)
                tl.debug_barrier()
                tl.atomic_xchg(ready_ptr + strip, 1, sem="release", scope="gpu")
        if step >= lag:
            # normalize the tile computed LAG steps ago, once its strip's statistics are merged
            earlier = step - lag
            strip = earlier // tiles_per_strip
            col_tile = earlier % tiles_per_strip
            rows = strip * BLOCK_M + in_tile_rows
            cols = col_tile * BLOCK_N + in_tile_cols
            ready = tl.atomic_add(ready_ptr + strip, 0, sem="acquire", scope="gpu")
            while ready == 0:
                ready = tl.atomic_add(ready_ptr + strip, 0, sem="acquire", scope="gpu")
            row_max = tl.load(row_max_ptr + rows, mask=rows < M, other=0.0)
            row_sum = tl.load(row_sum_ptr + rows, mask=rows < M, other=1.0)
            out_ptrs = out_ptr + rows[:, None] * N + cols[None, :]
            in_bounds = (rows[:, None] < M) & (cols[None, :] < N)
            stored = tl.load(out_ptrs, mask=in_bounds, other=0.0).to(tl.float32)
            if STORE_EXP:
                tile_max = tl.load(tile_max_ptr + rows * tiles_per_strip + col_tile, mask=rows < M, other=0.0)
                probabilities = stored * (tl.exp2(tile_max - row_max) / row_sum)[:, None]
            else:
                probabilities = tl.exp2(stored - row_max[:, None]) / row_sum[:, None]
            tl.store(out_ptrs, probabilities.to(out_ptr.dtype.element_ty), mask=in_bounds)
            # the strip's last tile normalized lowers its flag for the next launch
            tl.debug_barrier()
            normalized = tl.atomic_add(normalized_ptr + strip, 1, sem="acq_rel", scope="gpu")
            if normalized == tiles_per_strip - 1:
                tl.store(normalized_ptr + strip, 0)
                tl.store(ready_ptr + strip, 0)


def resident_programs(compiled, num_warps: int, per_sm: int) -> int:
    """Programs that can all be resident at once: at most ``per_sm`` per SM, fewer if registers or shared memory
    allow fewer (a waiting program must never wait for one that cannot start)."""
    compiled._init_handles()
    properties = torch.cuda.get_device_properties(0)
    by_registers = properties.regs_per_multiprocessor // max(1, compiled.n_regs * num_warps * 32)
    shared = compiled.metadata.shared
    by_shared = properties.shared_memory_per_multiprocessor // shared if shared else per_sm
    return properties.multi_processor_count * max(1, min(per_sm, by_registers, by_shared))


class Trailing:
    """One configuration of the probe kernel with its statistics buffers, counters and flags."""

    def __init__(self, q, k, block_m, block_n, lag, store_exp, num_warps, per_sm):
        self.q, self.k = q, k
        rows, cols = q.shape[0], k.shape[1]
        tiles_per_strip = triton.cdiv(cols, block_n)
        strips = triton.cdiv(rows, block_m)
        device = q.device
        self.out = torch.empty(rows, cols, device=device, dtype=q.dtype)
        self.tile_max = torch.empty(rows, tiles_per_strip, device=device, dtype=torch.float32)
        self.tile_sum = torch.empty_like(self.tile_max)
        self.row_max = torch.empty(rows, device=device, dtype=torch.float32)
        self.row_sum = torch.empty_like(self.row_max)
        self.flags = [torch.zeros(strips, device=device, dtype=torch.int32) for _ in range(3)]
        self.meta = dict(K=q.shape[1], BLOCK_M=block_m, BLOCK_N=block_n,
                         STRIP_TILES=triton.next_power_of_2(tiles_per_strip), LAG=lag, STORE_EXP=store_exp,
                         num_warps=num_warps, num_stages=2)
        self.args = (q, k, self.out, self.tile_max, self.tile_sum, self.row_max, self.row_sum, *self.flags,
                     rows, cols, q.shape[1] ** -0.5 * LOG2E)
        compiled = softmax_qk_trailing.warmup(*self.args, grid=(1,), **self.meta)
        self.grid = (min(strips * tiles_per_strip, resident_programs(compiled, num_warps, per_sm)),)

    def __call__(self):
        softmax_qk_trailing[self.grid](*self.args, **self.meta)
        return self.out


def measure(shapes, configs, budget: int) -> list[dict]:
    (q, k), reference, rows = baseline_rows(WORKLOADS["G"], shapes, budget)
    floor = q.shape[0] * k.shape[1] * q.element_size() / 4.3e9
    for block_m, block_n, lag, store_exp, num_warps, per_sm in configs:
        config = dict(BLOCK_M=block_m, BLOCK_N=block_n, LAG=lag, STORE_EXP=store_exp, num_warps=num_warps,
                      per_sm=per_sm)

        def run(block_m=block_m, block_n=block_n, lag=lag, store_exp=store_exp, num_warps=num_warps,
                per_sm=per_sm) -> dict:
            kernel = Trailing(q, k, block_m, block_n, lag, store_exp, num_warps, per_sm)
            out = kernel().double()
            error = ((out - reference).norm() / reference.norm()).item()
            replayed = kernel().double()  # flags and counters must have reset themselves
            again = ((replayed - reference).norm() / reference.norm()).item()
            return {"programs": kernel.grid[0], "rel_err": error, "rel_err_second_call": again,
                    "max_abs_err": (out - reference).abs().max().item(),
                    "ms": time_ms(kernel) if max(error, again) < 1e-2 else None, "floor_ms": floor}

        rows.append(probe_row(shapes, "trailing", config, run))
    return rows


def main() -> None:
    parser = probe_parser(__doc__)
    args = parser.parse_args()
    shape_sets = probe_shapes(parser, args.variants)
    configs = [(bm, bn, lag, store_exp, warps, per_sm)
               for bm, bn, warps in ((64, 128, 4), (128, 128, 8), (64, 256, 8))
               for lag in (1, 2) for store_exp in (0, 1) for per_sm in (1, 2)]
    run_probe(args, shape_sets, measure, configs)


if __name__ == "__main__":
    main()
