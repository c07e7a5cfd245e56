"""``strip_sync`` (asked for by name; GPU only: Triton's interpreter runs one program at a time). A persistent launch
of whole row strips of programs (at most one per SM) walks the output tiles in row-strip order; each tile writes its
rows' partial statistics, waits at a ``tiled_loop.strip_barrier`` for the rest of its strip, merges the statistics
and normalizes the tile still in its registers, so the pre-normalization values are never stored. Slower than
``tile_stats`` on the H200 so far (one resident program per SM leaves no second CTA to overlap a tile's epilogue and
wait with another's main loop)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.dialects import tiled_loop
from amk.lowering.kernel_lowering import (
    BLOCK_N,
    ColumnTile,
    WorkspaceBuffer,
    partial_statistics,
    strip_counters,
)
from amk.lowering.plan import FULL
from amk.lowering.strategies.base import TilingStrategy
from amk.lowering.strategies.registry import register_strategy
from amk.symbolic import Dim

if TYPE_CHECKING:
    from amk.lowering.configs import KernelConfig
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan

MAX_STRIP_COLUMNS = 8192  # 64 tiles of 128 columns, fewer than the SMs of an A100, H100 or H200


def strip_sync_applies(plan: GroupPlan) -> bool:
    """Every result after the reduction is a full tile (each tile stores its own), and a row strip has at most
    ``MAX_STRIP_COLUMNS`` columns, so that its tiles fit on the SMs of any recent GPU at once."""
    cols = plan.main.space.cols
    after = [v for v in plan.outputs if v in plan.main.after_reduction]
    return (plan.matmul is not None and cols.is_static and cols.value <= MAX_STRIP_COLUMNS
            and all(plan.main.value_class[v] == FULL for v in after))


@register_strategy
class StripSync(TilingStrategy):
    name = "strip_sync"
    description = ("Resident programs walk the output tiles in row-strip order; each tile writes its rows' partial "
                   "statistics, waits for the rest of its strip, merges them and normalizes the tile it still holds "
                   "in registers.")
    row_reduction = True
    stores_pre_reduction = False
    resident_programs = True

    def instead(self, plan: GroupPlan) -> str | None:
        return super().instead(plan) or (None if strip_sync_applies(plan) else "tile_stats")

    def workspace(self, plan: GroupPlan) -> list[WorkspaceBuffer]:
        return partial_statistics(plan, f"cdiv({plan.main.space.cols}, {BLOCK_N})") + [strip_counters(plan)]

    def build(self, lowering: KernelLowering) -> None:
        """Output tiles walked by resident programs in row-strip order; each tile writes its rows' partial
        statistics, waits for the other tiles of its strip, merges their statistics and normalizes the tile it still
        holds in registers: the pre-normalization values never leave the SM."""
        main, b = lowering.plan.main, lowering.b
        at = ColumnTile(main, lowering.row_offset, lowering.col_offset, BLOCK_N)
        lowering.matmul_tiles(at)
        lowering.store_outputs(at, after_reduction=False)
        sizes = lowering.store_tile_statistics(at)
        tiles_per_row = Dim(f"cdiv({main.space.cols}, {BLOCK_N})")
        b.origin = None
        b.add(tiled_loop.StripBarrierOp(lowering.workspace.counters, [Dim("pid_m")], tiles_per_row))
        lowering.merge_strip_statistics(sizes, tiles_per_row)
        lowering.store_outputs(at, after_reduction=True)

    def prune_reason(self, config: KernelConfig, cols: Dim | None, limits) -> str | None:
        if cols is not None and cols.is_static:
            tiles = -(-cols.value // config.BLOCK_N)
            if tiles > limits.sm_count:
                return f"strip_sync: a row strip of {tiles} tiles must be resident at once on {limits.sm_count} SMs"
        return None
