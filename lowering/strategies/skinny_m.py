"""``skinny_m``: few rows (decode). Programs are laid out column tile first, and ``BLOCK_M`` usually covers every row,
so each program streams one slice of the weight. A norm prologue whose value is a per-row scale times a
statistics-free tile (RMSNorm) gathers its statistics inside the K loop and scales the accumulator."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amk.lowering.configs import KernelConfig, bounded, next_power_of_two
from amk.lowering.kernel_lowering import BLOCK_M, BLOCK_N
from amk.lowering.strategies.base import Grid, TilingStrategy
from amk.lowering.strategies.registry import register_strategy

if TYPE_CHECKING:
    from amk.lowering.plan import GroupPlan
    from amk.symbolic import Dim

SKINNY_M_MAX = 64  # the most rows of a decode step


@register_strategy
class SkinnyM(TilingStrategy):
    name = "skinny_m"
    description = "Few rows (decode): each program computes a BLOCK_M x BLOCK_N tile, column tiles first."
    priority = 20
    scales_accumulator = True
    num_warps = 4
    # The column tiles searched (split_k's choice for a dual GEMM asks for the narrowest).
    block_n_space = (32, 64, 128)

    def chosen_for(self, plan: GroupPlan) -> bool:
        rows = plan.main.space.rows
        return (not plan.main.has_reductions and plan.matmul is not None and rows.is_static
                and rows.value <= SKINNY_M_MAX)

    def grid(self, plan: GroupPlan) -> Grid:
        # Column tiles vary fastest: the few row tiles (usually one) of a decode step share every weight tile.
        rows, cols = plan.main.space.rows, plan.main.space.cols
        return Grid([f"cdiv({cols}, {BLOCK_N})", f"cdiv({rows}, {BLOCK_M})"], ["pid_n", "pid_m"],
                    self.tile_params(plan))

    def default_config(self, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
        # split_k: the H200's best for an RMSNorm prologue into x[16 or 1, 4096] @ W[4096, 4096] in every tuned run
        # since the Gram-diagonal statistics (2026-11-30-h200-gram-DE, -final-DE): 2 warps, SPLIT_K 4.
        return KernelConfig(BLOCK_M=bounded(rows, 64, 16), BLOCK_N=bounded(cols, 64, 16),
                            BLOCK_K=bounded(contraction, 128, 16), num_warps=self.num_warps, num_stages=4)

    def dot_space(self, rows: Dim, contraction: Dim | None, limits,
                  warp_specialization: bool) -> dict[str, list[int]]:
        smallest = max(16, next_power_of_two(rows.value)) if rows.is_static else 16
        return {"BLOCK_M": [smallest], "BLOCK_N": list(self.block_n_space), "BLOCK_K": [64, 128, 256],
                "num_warps": [2, 4, 8], "num_stages": [3, 4, 5, 6]}

    def priors(self, has_dot: bool) -> list[dict[str, int]]:
        return []  # none measured for decode shapes
