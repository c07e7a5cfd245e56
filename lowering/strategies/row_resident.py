"""``row_resident``: a row reduction without a matmul over rows short enough to stay in registers. Each program loads
its ``BLOCK_M`` rows once, as one tile padded to a power of two (no ``BLOCK_N``), takes their statistics from that
tile and finishes the ops after the reduction on the values it holds: one read and one write of every element, every
op computed once (bias + GELU + LayerNorm over x [16384, 4096] on the H200: 0.130 ms against 0.224 for
``row_strip``, 2026-11-30-h200-library-split-AG, -library-split-row-strip-AG)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.lowering import rules
from amk.lowering.configs import KernelConfig, bounded, next_power_of_two
from amk.lowering.kernel_lowering import BLOCK_M, ColumnTile, origin_label
from amk.lowering.strategies.base import Grid, TilingStrategy
from amk.lowering.strategies.registry import register_strategy
from amk.symbolic import Dim

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering
    from amk.lowering.plan import GroupPlan

# The widest row held in registers, 32 fp32 values per thread of a 16-warp program.
MAX_RESIDENT_COLUMNS = 16384


def resident_applies(plan: GroupPlan) -> bool:
    """No matmul (nothing but the rows to load) and a static row of at most ``MAX_RESIDENT_COLUMNS``."""
    cols = plan.main.space.cols
    return plan.matmul is None and cols.is_static and cols.value <= MAX_RESIDENT_COLUMNS


@register_strategy
class RowResident(TilingStrategy):
    name = "row_resident"
    description = "Each program loads BLOCK_M whole rows once, reduces them and finishes them from registers."
    priority = 30
    row_reduction = True

    def chosen_for(self, plan: GroupPlan) -> bool:
        return plan.main.has_reductions and resident_applies(plan)

    def instead(self, plan: GroupPlan) -> str | None:
        return super().instead(plan) or (None if resident_applies(plan) else "row_strip")

    def tile_params(self, plan: GroupPlan) -> list[str]:
        return [BLOCK_M]  # the column tile is the whole row: no BLOCK_N to choose

    def grid(self, plan: GroupPlan) -> Grid:
        return self.row_strips(plan)

    def build(self, lowering: KernelLowering) -> None:
        """Rows short enough to stay in registers (a standalone chain over a static N): each program loads its
        BLOCK_M rows once, as one tile padded to a power of two, takes their statistics from that tile and finishes
        the ops after the reductions on the same values; one pass over memory, every op computed once."""
        main, b = lowering.plan.main, lowering.b
        at = ColumnTile(main, lowering.row_offset, Dim(0), str(next_power_of_two(main.space.cols.value)))
        lowering.store_outputs(at, after_reduction=False)
        for op in main.reductions:
            rule = rules.ROW_REDUCTIONS[type(op)]
            x = lowering.compute(rules.reduction_input(op), at)
            valid = lowering.valid_cols(at)
            b.origin = origin_label(op)
            lowering.stats[op] = rule.finalize(b, rule.tile_state(b, x, valid), op)
        lowering.store_outputs(at, after_reduction=True)

    def default_config(self, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
        # Whole rows in registers: about 4096 values per program, 32 per thread.
        width = next_power_of_two(cols.value)
        block_m = max(1, min(16, 4096 // width))
        return KernelConfig(BLOCK_M=bounded(rows, block_m, 1), num_warps=max(1, min(16, block_m * width // 1024)),
                            num_stages=1)

    def search_space(self, rows: Dim, has_dot: bool, contraction: Dim | None, limits,
                     warp_specialization: bool) -> dict[str, list[int]]:
        return {"BLOCK_M": [1, 2, 4, 8, 16], "num_warps": [1, 2, 4, 8, 16], "num_stages": [1]}

    def tile_width(self, config: KernelConfig, cols: Dim | None) -> int:
        return next_power_of_two(cols.value) if cols is not None and cols.is_static else config.BLOCK_N

    def priors(self, has_dot: bool) -> list[dict[str, int]]:
        # The H200's winners after a vendor GEMM (benchmarks/results/2026-11-30-h200-vendor-gemm-AC, -vendor-gemm-G).
        return [dict(BLOCK_M=1, num_warps=4), dict(BLOCK_M=1, num_warps=8), dict(BLOCK_M=2, num_warps=16)]
