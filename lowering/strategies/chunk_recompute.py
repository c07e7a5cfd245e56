"""``chunk_recompute``: a matmul whose static K is at most 256 followed by a row reduction, without a prologue. Two
launches over ``[row strips, chunks]``: ``SPLIT_N`` programs share each row strip, one chunk of whole column tiles
each. A short K is one tile: each launch loads its rows' A tile over all of K once, and every column tile is one dot,
so the loop over the chunk's tiles is the one whose loads are pipelined. The first launch folds the chunk into running
statistics and writes one partial state per row; the second merges the row's states and computes the chunk again
(the pre-normalization values are never stored). Softmax of q @ k^T on the H200 at 2^24 / 2^26 / 2^28 outputs:
0.033 / 0.110 / 0.423 ms against 0.040 / 0.161 / 0.690 for ``tile_stats`` and 0.052 / 0.189 / 0.641 for
``row_strip`` (2026-11-30-h200-unrounded-G, -unrounded-extra-shapes-G)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.lowering.configs import KernelConfig, bounded, is_short_contraction, whole_k_tile
from amk.lowering.kernel_lowering import (
    BLOCK_M,
    BLOCK_N,
    WorkspaceBuffer,
    chunk_columns,
    chunks_per_row,
    partial_statistics,
)
from amk.lowering.strategies.base import COLUMN_SWEEP, Grid, TilingStrategy
from amk.lowering.strategies.registry import register_strategy
from amk.symbolic import Dim

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan


@register_strategy
class ChunkRecompute(TilingStrategy):
    name = "chunk_recompute"
    description = ("SPLIT_N programs share each row strip, one chunk of column tiles each; each folds its chunk's row "
                   "statistics and writes them, and a second launch merges them and computes the chunk's tiles again "
                   "to finish them.")
    priority = 40
    row_reduction = True
    recomputes = True
    batches = True
    stores_pre_reduction = False
    without_matmul = "row_strip"
    # On Hopper each launch may be a warp-specialized Gluon kernel: a TMA producer warp, consumer warpgroups issuing a
    # column tile's product before folding the one before (benchmarks/probes/gluon_softmax_probe.py: G in 0.0852 ms
    # by hand against this strategy's Triton kernel's 0.1092, 2026-12-04-h200-gluon-softmax-G). Chosen by the tuner
    # at 2^33 and 2^35 multiply-adds (G, G3: 0.090 and 0.311 ms against Triton's 0.104 and 0.362), slower at 2^30 (G2:
    # 0.041 against 0.025, too few 128-row programs) and not chosen for attention's 2^31 (8 x 16 heads of 512 x 512 x
    # 64), whose first call its compiles took from 8.6 to 16.7 s (2026-12-05-h200-G-extra-39, -models-39).
    gluon_form = COLUMN_SWEEP
    gluon = True
    gluon_batches = True  # attention's q @ k^T: TMA descriptors over the batch of matrices, one matrix a block
    gluon_min_macs = 1 << 32
    # The second launch would need the prologue's statistics again.
    with_prologue = "tile_stats"

    def chosen_for(self, plan: GroupPlan) -> bool:
        return (plan.main.has_reductions and plan.matmul is not None and is_short_contraction(plan.contraction)
                and plan.prologue is None)

    def grid(self, plan: GroupPlan) -> Grid:
        rows, cols = plan.main.space.rows, plan.main.space.cols
        return Grid([f"cdiv({rows}, {BLOCK_M})", chunks_per_row(cols)], ["pid_m", "pid_n"],
                    self.tile_params(plan) + ["SPLIT_N"])

    def workspace(self, plan: GroupPlan) -> list[WorkspaceBuffer]:
        return partial_statistics(plan, chunks_per_row(plan.main.space.cols))

    def build(self, lowering: KernelLowering) -> None:
        """SPLIT_N programs share each row strip, one chunk of its column tiles each: the first launch folds the
        chunk's statistics in a loop over its tiles (the operand loads pipelined along it) and writes them as one
        partial state per row; a second launch merges the row's few states and sweeps the same chunk again, running
        the short K loop where it would re-read the pre-normalization tile."""
        main = lowering.plan.main
        cols = main.space.cols
        chunk = Dim(chunk_columns(cols))
        columns = (Dim(f"pid_n * ({chunk})"), Dim(f"Min({cols}, (pid_n + 1) * ({chunk}))"))
        # With a short static K each launch loads its rows' A tile over all of K once, and every column tile's
        # product is one dot, so the loop over the column tiles is the one whose loads are pipelined.
        whole_k = is_short_contraction(lowering.plan.contraction)
        if whole_k:
            lowering.load_whole_a()
        flat, sizes = lowering.fold_columns(main, "n", BLOCK_N, lowering.strip_phase_one, columns)
        lowering.store_partial_states(flat)
        chunks = Dim(chunks_per_row(cols))
        lowering.relaunch(chunks, "each program merges its rows' partial statistics and finishes its chunk of columns")
        if whole_k:
            lowering.load_whole_a()  # the second launch's own
        lowering.merge_strip_statistics(sizes, chunks, writer="chunk")
        lowering.finish_rows(columns=columns)

    def dot_shared_memory(self, config: KernelConfig, element_bytes: int, contraction: Dim | None) -> int:
        # The A tile over the whole K once, ``num_stages`` column tiles of B (the pipelined loop is the one over the
        # chunk's column tiles), and each column tile's fp32 product, which the fold reads in another layout, while
        # that ring is live: on the H100 BLOCK_M=128, BLOCK_N=256, K=64, three stages needed 245,760 bytes, this sum,
        # of the 232,448 it has, and failed at its first launch after compiling for 2 to 7 s in each model-table
        # build of the attention rows (2026-12-07-h100-build-63-causal_attention_scores.log).
        # (The Gluon form keeps its products in registers; its own check counts its ring.)
        if config.GLUON or not is_short_contraction(contraction):
            return super().dot_shared_memory(config, element_bytes, contraction)
        k_tile = whole_k_tile(contraction)  # as KernelLowering.load_whole_a loads it
        ring = config.num_stages * k_tile * config.BLOCK_N * element_bytes
        return config.BLOCK_M * k_tile * element_bytes + ring + config.BLOCK_M * config.BLOCK_N * 4

    def default_config(self, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
        # The H200's best for softmax(q[8192, 128] @ k[128, 8192]) by hand (benchmarks/chunk_recompute_probe.py): the
        # whole K in one tile, so that the loop over a chunk's column tiles is the one Triton pipelines.
        return KernelConfig(BLOCK_M=bounded(rows, 128, 16), BLOCK_N=bounded(cols, 64, 16),
                            BLOCK_K=bounded(contraction, 128, 16), SPLIT_N=8, num_warps=4, num_stages=3)

    def dot_space(self, rows: Dim, contraction: Dim | None, limits,
                  warp_specialization: bool) -> dict[str, list[int]]:
        space = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "SPLIT_N": [2, 4, 8, 16], "num_warps": [4, 8],
                 "num_stages": [2, 3]}
        if limits is not None and limits.gluon:
            space["GLUON"] = [0, 1]
        # A short static K is one tile (build): BLOCK_K is then unused.
        return space if is_short_contraction(contraction) else space | {"BLOCK_K": [32, 64, 128]}

    def priors(self, has_dot: bool) -> list[dict[str, int]]:
        # G's Triton kernel at K = 128 (its BLOCK_K: a shorter K's heuristic has another, so it is not offered there);
        # the Gluon form's best for G by hand: two consumer warpgroups of 64 rows, two chunks a row
        # (2026-12-04-h200-gluon-softmax-G), timed only where the search space holds GLUON; and what attention's
        # probabilities chose in every model-table run on the H200 and the H100 (8 x 16 heads x 512 x 512, K = 64,
        # masked or not: 2026-12-05-h200-models-39, 2026-12-07-h100-models-61), which the search had reached only in
        # its second round of compiles.
        return [dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, SPLIT_N=4, num_warps=8, num_stages=3),
                dict(BLOCK_M=128, BLOCK_N=128, SPLIT_N=2, num_warps=4, num_stages=3, GLUON=1),
                dict(BLOCK_M=128, BLOCK_N=64, SPLIT_N=2, num_warps=4, num_stages=3)]
