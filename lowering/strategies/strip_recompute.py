"""``strip_recompute`` (asked for by name): ``row_strip``, but the first sweep stores nothing and the second runs the K
loop again for each tile instead of re-reading it (for a short K; measured slower than ``row_strip``,
``tile_recompute`` and ``tile_stats`` on the H200)."""

from __future__ import annotations

from amk.lowering.strategies.registry import register_strategy
from amk.lowering.strategies.row_strip import RowStrip


@register_strategy
class StripRecompute(RowStrip):
    name = "strip_recompute"
    description = ("Each program owns BLOCK_M full rows: phase 1 computes and reduces, phase 2 computes every tile "
                   "again and normalizes it.")
    priority = None
    recomputes = True
    stores_pre_reduction = False
    without_matmul = "row_strip"
