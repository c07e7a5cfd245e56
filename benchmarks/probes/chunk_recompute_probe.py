"""Diagnostic: softmax(q @ k * scale) (workload G) with programs that each own a row block and a chunk of columns and
loop over the chunk's tiles, recomputing the short-K GEMM in the second launch instead of re-reading it.

    python benchmarks/probes/chunk_recompute_probe.py --out benchmarks/results/<stem>.json [--variants 1,2,3]
                                                      [--dot-ahead | --loads]

What this measures before the compiler builds it. amk's tile_recompute gives every program one tile: its q and k
tiles are loaded, multiplied and reduced with nothing to overlap them but other programs, and the second launch merges
the statistics of all the row's tiles before its one MMA. strip_recompute gives a program whole rows: the loads
pipeline along N, but 8192 rows make too few programs. Here a program owns BLOCK_M rows and CHUNK_TILES tiles of
columns: the first launch loads its q tile once, walks the chunk's k tiles (Triton pipelines their loads across the
loop), keeps an online max and sum, and stores one partial state per row and chunk; the second launch merges the
row's few chunk states, walks the same tiles again and stores the probabilities. The logits never cross HBM; the
output is written once. Every configuration is checked against a float64 reference first; eager, torch.compile and
amk's own kernel run in the same process on the same inputs.
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
SCALE = dict(WORKLOADS["G"].ops[1][1])["factor"]  # the workload's scale, the same for its extra shapes


@triton.jit
def k_columns(k_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, LOADS: tl.constexpr):
    """What the k tiles are loaded through: a tensor descriptor (TMA) for LOADS "tma" and "tma_ws", else pointers."""
    if LOADS == "pointers":
        source = k_ptr
    else:
        source = tl.make_tensor_descriptor(k_ptr, shape=[K, N], strides=[N, 1], block_shape=[K, BLOCK_N])
    return source


@triton.jit
def column_tile_product(q_tile, k_source, N, start, ks, BLOCK_N: tl.constexpr, LOADS: tl.constexpr):
    """q_tile @ k[:, start:start + BLOCK_N] in fp32 (columns past N are zero)."""
    if LOADS == "pointers":
        cols = start + tl.arange(0, BLOCK_N)
        k_tile = tl.load(k_source + ks[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
    else:
        k_tile = k_source.load([0, start])
    return tl.dot(q_tile, k_tile)


@triton.jit
def first_product(q_tile, k_source, N, first_col, ks, BLOCK_N: tl.constexpr, DOT_AHEAD: tl.constexpr,
                  LOADS: tl.constexpr):
    """With DOT_AHEAD, the chunk's first product, issued before the loop; else nothing to carry."""
    if DOT_AHEAD:
        product = column_tile_product(q_tile, k_source, N, first_col, ks, BLOCK_N, LOADS)
    else:
        product = 0.0
    return product


@triton.jit
def tile_logits(q_tile, k_source, N, start, ks, ahead, scale_log2e, BLOCK_N: tl.constexpr, DOT_AHEAD: tl.constexpr,
                LOADS: tl.constexpr):
    """This column tile's logits in base 2 and what the loop carries: with DOT_AHEAD, the next tile's product, issued
    before this tile's softmax arithmetic (past the chunk it is wasted, or zero past N)."""
    if DOT_AHEAD:
        product = ahead
        ahead = column_tile_product(q_tile, k_source, N, start + BLOCK_N, ks, BLOCK_N, LOADS)
    else:
        product = column_tile_product(q_tile, k_source, N, start, ks, BLOCK_N, LOADS)
    return product * scale_log2e, ahead


@triton.jit
def chunk_operands(q_ptr, k_ptr, rows, chunk, M, N, K: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK_TILES: tl.constexpr,
                   DOT_AHEAD: tl.constexpr, LOADS: tl.constexpr):
    """What both launches start a chunk with: the rows' q tile over all of K, the k source, the chunk's first column
    and, with DOT_AHEAD, its first product."""
    ks = tl.arange(0, K)
    q_tile = tl.load(q_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
    first_col = chunk * CHUNK_TILES * BLOCK_N
    k_source = k_columns(k_ptr, N, K, BLOCK_N, LOADS)
    return q_tile, ks, k_source, first_col, first_product(q_tile, k_source, N, first_col, ks, BLOCK_N, DOT_AHEAD, LOADS)


@triton.jit
def chunk_statistics(q_ptr, k_ptr, chunk_max_ptr, chunk_sum_ptr, M, N, scale_log2e, K: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK_TILES: tl.constexpr,
                     NUM_STAGES: tl.constexpr, DOT_AHEAD: tl.constexpr, LOADS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    chunk = tl.program_id(1)
    chunks = tl.num_programs(1)
    q_tile, ks, k_source, first_col, ahead = chunk_operands(q_ptr, k_ptr, rows, chunk, M, N, K, BLOCK_N, CHUNK_TILES,
                                                            DOT_AHEAD, LOADS)
    running_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    running_sum = tl.zeros((BLOCK_M,), tl.float32)
    for tile in tl.range(0, CHUNK_TILES, num_stages=NUM_STAGES, warp_specialize=LOADS == "tma_ws"):
        start = first_col + tile * BLOCK_N
        cols = start + tl.arange(0, BLOCK_N)
        logits, ahead = tile_logits(q_tile, k_source, N, start, ks, ahead, scale_log2e, BLOCK_N, DOT_AHEAD, LOADS)
        logits = tl.where(cols[None, :] < N, logits, float("-inf"))
        # online softmax statistics, base 2
        new_max = tl.maximum(running_max, tl.max(logits, 1))
        running_sum = running_sum * tl.exp2(running_max - new_max) + tl.sum(tl.exp2(logits - new_max[:, None]), 1)
        running_max = new_max
    tl.store(chunk_max_ptr + rows * chunks + chunk, running_max, mask=rows < M)
    tl.store(chunk_sum_ptr + rows * chunks + chunk, running_sum, mask=rows < M)


@triton.jit
def chunk_probabilities(q_ptr, k_ptr, out_ptr, chunk_max_ptr, chunk_sum_ptr, M, N, scale_log2e, K: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK_TILES: tl.constexpr,
                        CHUNKS_POW2: tl.constexpr, NUM_STAGES: tl.constexpr, DOT_AHEAD: tl.constexpr,
                        LOADS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    chunk = tl.program_id(1)
    chunks = tl.num_programs(1)
    # merge the row's chunk states at once
    all_chunks = tl.arange(0, CHUNKS_POW2)
    states = rows[:, None] * chunks + all_chunks[None, :]
    valid = (rows[:, None] < M) & (all_chunks[None, :] < chunks)
    maxima = tl.load(chunk_max_ptr + states, mask=valid, other=float("-inf"))
    sums = tl.load(chunk_sum_ptr + states, mask=valid, other=0.0)
    row_max = tl.max(maxima, 1)
    inverse_sum = 1.0 / tl.sum(sums * tl.exp2(maxima - row_max[:, None]), 1)
    q_tile, ks, k_source, first_col, ahead = chunk_operands(q_ptr, k_ptr, rows, chunk, M, N, K, BLOCK_N, CHUNK_TILES,
                                                            DOT_AHEAD, LOADS)
    for tile in tl.range(0, CHUNK_TILES, num_stages=NUM_STAGES, warp_specialize=LOADS == "tma_ws"):
        start = first_col + tile * BLOCK_N
        cols = start + tl.arange(0, BLOCK_N)
        logits, ahead = tile_logits(q_tile, k_source, N, start, ks, ahead, scale_log2e, BLOCK_N, DOT_AHEAD, LOADS)
        probabilities = tl.exp2(logits - row_max[:, None]) * inverse_sum[:, None]
        tl.store(out_ptr + rows[:, None] * N + cols[None, :], probabilities.to(out_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def descriptor_workspace(size, alignment, stream):
    """Global memory for the tensor descriptors that the "tma" loads build on the device."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


class ChunkRecompute:
    """One configuration of the two probe launches with their statistics buffers."""

    def __init__(self, q, k, block_m, block_n, chunk_tiles, num_warps, num_stages, dot_ahead=0, loads="pointers"):
        rows, cols = q.shape[0], k.shape[1]
        chunks = triton.cdiv(triton.cdiv(cols, block_n), chunk_tiles)
        self.out = torch.empty(rows, cols, device=q.device, dtype=q.dtype)
        chunk_max = torch.empty(rows, chunks, device=q.device, dtype=torch.float32)
        chunk_sum = torch.empty_like(chunk_max)
        self.grid = (triton.cdiv(rows, block_m), chunks)
        common = dict(K=q.shape[1], BLOCK_M=block_m, BLOCK_N=block_n, CHUNK_TILES=chunk_tiles,
                      NUM_STAGES=num_stages, DOT_AHEAD=dot_ahead, LOADS=loads, num_warps=num_warps)
        scale_log2e = SCALE * LOG2E
        self.statistics_args = (q, k, chunk_max, chunk_sum, rows, cols, scale_log2e)
        self.statistics_meta = common
        self.probabilities_args = (q, k, self.out, chunk_max, chunk_sum, rows, cols, scale_log2e)
        self.probabilities_meta = dict(common, CHUNKS_POW2=triton.next_power_of_2(chunks))

    def statistics(self):
        # Triton keeps its allocator per thread (a context variable): set it where the launches are made, as amk's
        # emitted launchers do. The statistics launch comes first in every use of the probe.
        triton.set_allocator(descriptor_workspace)
        return chunk_statistics[self.grid](*self.statistics_args, **self.statistics_meta)

    def __call__(self):
        self.statistics()
        chunk_probabilities[self.grid](*self.probabilities_args, **self.probabilities_meta)
        return self.out

    def specialized(self) -> bool:
        """Whether Triton really specialized the warps of the statistics launch (they are compiled by now)."""
        return "ttg.warp_specialize" in self.statistics().asm["ttgir"]


def measure(shapes, configs, budget: int) -> list[dict]:
    (q, k), reference, rows = baseline_rows(WORKLOADS["G"], shapes, budget)
    floor = q.shape[0] * k.shape[1] * q.element_size() / 4.3e9
    for block_m, block_n, chunk_tiles, num_warps, num_stages, dot_ahead, loads in configs:
        config = dict(BLOCK_M=block_m, BLOCK_N=block_n, CHUNK_TILES=chunk_tiles, num_warps=num_warps,
                      num_stages=num_stages, DOT_AHEAD=dot_ahead, LOADS=loads)
        if triton.cdiv(k.shape[1], block_n) < chunk_tiles:
            continue

        def run(block_m=block_m, block_n=block_n, chunk_tiles=chunk_tiles, num_warps=num_warps,
                num_stages=num_stages, dot_ahead=dot_ahead, loads=loads) -> dict:
            kernel = ChunkRecompute(q, k, block_m, block_n, chunk_tiles, num_warps, num_stages, dot_ahead, loads)
            out = kernel().double()
            error = ((out - reference).norm() / reference.norm()).item()
            good = error < 1e-2
            return {"grid": list(kernel.grid), "rel_err": error, "max_abs_err": (out - reference).abs().max().item(),
                    "ms": time_ms(kernel) if good else None,
                    "statistics_ms": time_ms(kernel.statistics) if good else None, "floor_ms": floor,
                    "specialized": kernel.specialized()}

        rows.append(probe_row(shapes, "chunk_recompute", config, run))
    return rows


def main() -> None:
    parser = probe_parser(__doc__)
    parser.add_argument("--dot-ahead", action="store_true",
                        help="only the best configurations, each with and without the next tile's product issued "
                             "before this tile's softmax arithmetic")
    parser.add_argument("--loads", action="store_true",
                        help="only the best configurations, each with pointer loads, tensor-descriptor (TMA) loads of "
                             "the k tiles, and TMA loads with warp_specialize=True on the column loop")
    args = parser.parse_args()
    shape_sets = probe_shapes(parser, args.variants)
    best = ((128, 64, 16, 4, 3), (128, 64, 8, 4, 2), (64, 128, 16, 4, 3), (128, 128, 8, 8, 3))
    if args.dot_ahead or args.loads:
        variants = [(0, "pointers"), (1, "pointers")] if args.dot_ahead else [(0, "pointers"), (0, "tma"),
                                                                               (0, "tma_ws")]
        configs = [(bm, bn, chunk, warps, stages, ahead, loads)
                   for bm, bn, chunk, warps, stages in best for ahead, loads in variants]
    else:
        configs = [(bm, bn, chunk, warps, stages, 0, "pointers")
                   for bm, bn, warps in ((64, 128, 4), (128, 128, 8), (128, 64, 4), (64, 256, 8), (128, 256, 8))
                   for chunk in (2, 4, 8, 16) for stages in (2, 3)]
    run_probe(args, shape_sets, measure, configs)


if __name__ == "__main__":
    main()
