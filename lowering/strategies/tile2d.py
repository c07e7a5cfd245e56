"""``tile2d``: a grid of ``BLOCK_M x BLOCK_N`` output tiles (walked in groups of ``GROUP_M`` row tiles so that the
weight's column tiles are reused from L2); each program runs the K loop into an fp32 accumulator and applies the
elementwise epilogue in registers. ``auto`` takes it for any group without a row reduction that no decode strategy
took."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.lowering.strategies.base import OUTPUT_TILES, TilingStrategy
from amk.lowering.strategies.registry import register_strategy

if TYPE_CHECKING:
    from amk.lowering.plan import GroupPlan


@register_strategy
class Tile2d(TilingStrategy):
    name = "tile2d"
    description = "Each program computes one BLOCK_M x BLOCK_N output tile."
    priority = 100
    tile_grid = True
    gluon_form = OUTPUT_TILES
    gluon = True
    batches = True

    def chosen_for(self, plan: GroupPlan) -> bool:
        return not plan.main.has_reductions
