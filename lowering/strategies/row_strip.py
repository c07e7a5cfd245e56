"""``row_strip``: a program owns ``BLOCK_M`` full rows. Phase 1 loops over the column tiles, computes the epilogue up
to the row reductions, folds each tile into running fp32 statistics and writes the pre-reduction value when phase 2
needs it; phase 2 loops again, re-reads it and applies the normalization and what follows. ``auto`` takes it for a
row reduction that no other strategy took: over longer or symbolic rows without a matmul, or after a short K with a
prologue (each row strip keeps the prologue in one program)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.lowering.configs import KernelConfig, bounded
from amk.lowering.kernel_lowering import BLOCK_N
from amk.lowering.strategies.base import Grid, TilingStrategy
from amk.lowering.strategies.registry import register_strategy

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan
    from amk.symbolic import Dim


@register_strategy
class RowStrip(TilingStrategy):
    name = "row_strip"
    description = "Each program owns BLOCK_M full rows: phase 1 computes and reduces, phase 2 normalizes."
    priority = 90
    row_reduction = True
    batches = True

    def chosen_for(self, plan: GroupPlan) -> bool:
        return plan.main.has_reductions

    def grid(self, plan: GroupPlan) -> Grid:
        return self.row_strips(plan)

    def build(self, lowering: KernelLowering) -> None:
        lowering.reduce_over_columns(lowering.plan.main, "n", BLOCK_N, lowering.strip_phase_one)
        lowering.finish_rows()

    def default_config(self, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
        has_dot = contraction is not None
        minimum = 16 if has_dot else 1
        block_k = bounded(contraction, 64 if element_bytes <= 2 else 32, 16) if has_dot else 32
        return KernelConfig(BLOCK_M=bounded(rows, 64 if has_dot else 4, minimum), BLOCK_N=bounded(cols, 128, minimum),
                            BLOCK_K=block_k, num_warps=8 if has_dot else 4, num_stages=3)

    def dot_space(self, rows: Dim, contraction: Dim | None, limits,
                  warp_specialization: bool) -> dict[str, list[int]]:
        return {"BLOCK_M": [32, 64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "num_warps": [4, 8],
                "num_stages": [2, 3, 4]}
