"""``strip_finish``: as ``tile_stats``, for outputs of 2^27 elements or more. One launch: the tiles of ``tile_stats``'s
first launch; each counts itself in at its row strip's counter (``tiled_loop.last_arrival``) and the last tile of a
strip merges the partials and normalizes the whole strip while it is still in L2. One program streams each strip and
the last strips form a tail, which matters less as the output grows (x[32768, 8192] @ W + residual + RMSNorm on the
H200: 6.95-7.00 ms against 7.24 for ``tile_stats``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.dialects import tiled_loop
from amk.lowering.kernel_lowering import BLOCK_N, WorkspaceBuffer, partial_statistics, strip_counters
from amk.lowering.strategies.base import OUTPUT_TILES, TilingStrategy
from amk.lowering.strategies.registry import register_strategy
from amk.lowering.strategies.tile_stats import long_contraction
from amk.symbolic import Dim

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan

STRIP_FINISH_MIN_ELEMENTS = 2**27


@register_strategy
class StripFinish(TilingStrategy):
    name = "strip_finish"
    description = ("Each program computes one output tile and writes its rows' partial statistics; the last program of "
                   "a row strip merges them and finishes the strip.")
    priority = 50
    row_reduction = True
    tile_grid = True
    gluon_form = OUTPUT_TILES  # emitted on request; slower than Triton's kernel on the H200, so not offered
    without_matmul = "row_strip"

    def chosen_for(self, plan: GroupPlan) -> bool:
        elements = Dim(f"({plan.main.space.rows}) * ({plan.main.space.cols})")
        large = elements.is_static and elements.value >= STRIP_FINISH_MIN_ELEMENTS
        return plan.main.has_reductions and long_contraction(plan) and large

    def workspace(self, plan: GroupPlan) -> list[WorkspaceBuffer]:
        return partial_statistics(plan, f"cdiv({plan.main.space.cols}, {BLOCK_N})") + [strip_counters(plan)]

    def build(self, lowering: KernelLowering) -> None:
        """Output tiles in parallel, each writing its rows' partial statistics; the last tile of a row strip to
        finish merges them and normalizes the whole strip, while the strip just written is still in L2."""
        b = lowering.b
        sizes, tiles_per_row = lowering.tiles_with_statistics()
        b.origin = None
        last = b.add(tiled_loop.LastArrivalOp(lowering.workspace.counters, [Dim("pid_m")], tiles_per_row),
                     "last_in_strip")
        finisher = tiled_loop.IfOp(last)
        b.add(finisher)
        outer = b.block
        b.block = finisher.body.block
        lowering.merge_strip_statistics(sizes, tiles_per_row)
        lowering.finish_rows()
        b.block = outer
