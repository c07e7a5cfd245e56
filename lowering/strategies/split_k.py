"""``split_k``: few rows and a long K. ``SPLIT_K`` programs share each output tile, each running the K loop over one
chunk of K and storing its fp32 partial tile (one per matmul of a dual GEMM) to a workspace, so that enough programs
stream the weight; the last of them to arrive (``tiled_loop.last_arrival``, one counter per tile) sums the partials and
applies the epilogue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects.builtin import f32, i32

from amk.dialects import tiled_loop
from amk.dialects.tensor_op import TensorType
from amk.dialects.tiled_loop import TileType
from amk.lowering import rules
from amk.lowering.kernel_lowering import (
    BLOCK_K,
    BLOCK_M,
    BLOCK_N,
    ColumnTile,
    WorkspaceBuffer,
    origin_label,
    row_scaled_prologue,
)
from amk.lowering.strategies.base import Grid
from amk.lowering.strategies.registry import register_strategy
from amk.lowering.strategies.skinny_m import SkinnyM
from amk.symbolic import Dim

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan

SPLIT_K_MIN_CONTRACTION = 1024
# A dual GEMM (gate and up, k and v: one A, two weights) splits K only where skinny_m's column tiles, at their
# narrowest, are fewer programs than this: k's and v's 1024 columns rotated in heads of 128 were 8 programs
# (2026-12-07-h100-models-59, 0.89x), where gate's and up's 14336 columns are hundreds.
SPLIT_K_PROGRAMS = 128


@register_strategy
class SplitK(SkinnyM):
    name = "split_k"
    description = ("Few rows, long K: SPLIT_K programs share each output tile, one K chunk each; the last to finish "
                   "sums their partial tiles and applies the epilogue.")
    priority = 10
    num_warps = 2

    def chosen_for(self, plan: GroupPlan) -> bool:
        k = plan.contraction
        return (super().chosen_for(plan) and k.is_static and k.value >= SPLIT_K_MIN_CONTRACTION
                and (len(plan.matmuls) == 1 or self.few_column_tiles(plan)))

    def few_column_tiles(self, plan: GroupPlan) -> bool:
        """Whether skinny_m's narrowest column tiles (holding whole groups of a rotation in registers) are fewer than
        ``SPLIT_K_PROGRAMS``."""
        cols = plan.main.space.cols
        narrowest = max(min(SkinnyM.block_n_space), plan.register_rotation_group or 0)
        return cols.is_static and -(-cols.value // narrowest) < SPLIT_K_PROGRAMS

    def grid(self, plan: GroupPlan) -> Grid:
        rows, cols = plan.main.space.rows, plan.main.space.cols
        return Grid([f"cdiv({cols}, {BLOCK_N})", f"cdiv({rows}, {BLOCK_M})", "SPLIT_K"], ["pid_n", "pid_m", "pid_k"],
                    self.tile_params(plan) + ["SPLIT_K"])

    def workspace(self, plan: GroupPlan) -> list[WorkspaceBuffer]:
        """The partial tiles of the K splits (one buffer per matmul), the prologue state each split sums (a
        row-scaled norm), and one arrival counter per output tile."""
        rows, cols = plan.main.space.rows, plan.main.space.cols
        split_rows = f"SPLIT_K * cdiv({rows}, {BLOCK_M}) * {BLOCK_M}"
        buffers = [WorkspaceBuffer(TensorType([split_rows, cols], f32), "scratch", f"partial_acc{index or ''}")
                   for index in range(len(plan.matmuls))]
        norm = row_scaled_prologue(plan, self)
        if norm is not None:  # one buffer per statistic the K loop sums (the prologue state)
            buffers += [WorkspaceBuffer(TensorType([split_rows, f"cdiv({cols}, {BLOCK_N})"], f32), "scratch",
                                        f"partial_state{index}")
                        for index in range(len(rules.ROW_REDUCTIONS[type(norm)].column_sums))]
        tiles = f"cdiv({rows}, {BLOCK_M}) * cdiv({cols}, {BLOCK_N})"
        return buffers + [WorkspaceBuffer(TensorType([tiles], i32), "counter", "tile_counters")]

    def dot_space(self, rows: Dim, contraction: Dim | None, limits,
                  warp_specialization: bool) -> dict[str, list[int]]:
        # 16 splits: a narrow output whose column tiles must be wide (k's 8 heads of 128 columns, rotated in the
        # epilogue: 8 column tiles) still streams its weight from 128 programs.
        return super().dot_space(rows, contraction, limits, warp_specialization) | {"SPLIT_K": [2, 4, 8, 16]}

    def build(self, lowering: KernelLowering) -> None:
        """Few rows, long K: SPLIT_K programs share each output tile, each over one chunk of K. They store fp32
        partial accumulators (one per matmul); the last to arrive sums them and applies the epilogue."""
        plan, b = lowering.plan, lowering.b
        k = plan.contraction
        chunk = Dim(f"cdiv(cdiv({k}, SPLIT_K), {BLOCK_K}) * {BLOCK_K}")
        lower = Dim(f"pid_k * ({chunk})")
        upper = Dim(f"Min({k}, (pid_k + 1) * ({chunk}))")
        at = ColumnTile(plan.main, lowering.row_offset, lowering.col_offset, BLOCK_N)
        accumulators = lowering.matmul_tiles(at, (lower, upper))
        count = len(accumulators)
        rows_padded = Dim(f"cdiv({plan.rows}, {BLOCK_M}) * {BLOCK_M}")
        partials, partial_states = lowering.workspace.partials[:count], lowering.workspace.partials[count:]
        b.origin = None
        for acc, partial in zip(accumulators, partials, strict=True):
            b.add(tiled_loop.StoreOp(acc, partial, [Dim(f"pid_k * ({rows_padded}) + {lowering.row_offset}"),
                                                    lowering.col_offset]))
        # This chunk's prologue statistics, one column per column tile (programs of other tiles write the same rows).
        for component, dest in zip(lowering.prologue_state, partial_states):
            b.add(tiled_loop.StoreOp(b.widen_rows(component, BLOCK_M), dest,
                                     [Dim(f"pid_k * ({rows_padded}) + {lowering.row_offset}"), Dim("pid_n")]))
        column_tiles = Dim(f"cdiv({plan.main.space.cols}, {BLOCK_N})")
        last = b.add(tiled_loop.LastArrivalOp(lowering.workspace.counters, [Dim(f"pid_m * ({column_tiles}) + pid_n")],
                                              Dim("SPLIT_K")), "last_split")
        finisher = tiled_loop.IfOp(last)
        b.add(finisher)
        outer = b.block
        b.block = finisher.body.block
        at = ColumnTile(plan.main, lowering.row_offset, lowering.col_offset, BLOCK_N)
        # The epilogue's own inputs (a residual, a bias, rotary tables) first: from a cold L2 each load is a DRAM
        # round trip, which the loads of the partial tiles then overlap instead of following.
        lowering.load_inputs_ahead(plan.outputs, at, ready=[matmul.output for matmul in plan.matmuls])
        zeros = [b.full(0.0, [BLOCK_M, BLOCK_N], "acc_sum") for _ in accumulators]
        norm = lowering.row_scaled
        rule, states = lowering.row_scale_init()

        def add_split(carried):
            b.origin = None
            split_row = Dim(f"split * ({rows_padded}) + {lowering.row_offset}")
            loaded_partials = [b.add(tiled_loop.LoadOp(partial, [split_row, lowering.col_offset],
                                                       TileType([BLOCK_M, BLOCK_N], f32)), "partial_acc")
                               for partial in partials]
            loaded = [b.add(tiled_loop.LoadOp(source, [split_row, Dim("pid_n")], TileType([BLOCK_M, 1], f32)),
                            "partial_state") for source in partial_states]
            b.origin = "matmul"
            summed = [b.add_(total, partial, "acc_sum") for total, partial in zip(carried, loaded_partials)]
            if norm is not None:
                b.origin = origin_label(norm)
                summed += rule.combine(b, carried[count:], loaded)
            return summed

        # Not pipelined: Triton's pipeliner makes the loads cp.async copies, and those of fewer than 16 bytes (the
        # statistics, one value a row) go through L1, which their .cg loads bypass. A line of partial_state holds
        # the statistics of 32 column tiles, written by other SMs: one read here for an earlier tile may be stale.
        sums = lowering.loop("split", Dim("SPLIT_K"), 1, [*zeros, *states], add_split,
                             "sum the partial tiles of the K splits")
        totals, state = sums[:count], sums[count:]
        for matmul, total in zip(plan.matmuls, totals, strict=True):
            at.env[matmul.output] = total
        if norm is not None:
            lowering.scale_rows(at, totals, state)
        for value in plan.outputs:
            lowering.store(value, lowering.compute(value, at), at)
        b.block = outer
