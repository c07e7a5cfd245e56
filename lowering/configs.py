"""Kernel configurations: the values bound to a kernel's tile-size symbols plus its launch parameters.

``default_config`` is the heuristic used when nothing is tuned: it looks at the strategy and the problem size of a
``tiled_loop.kernel`` only, so it works on the CPU as well as on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amk.symbolic import Dim

# Keys as users spell them in ``parameter_grid`` and the symbols they bind.
PARAMETER_KEYS = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K",
                  "GROUP_SIZE_M": "GROUP_M", "SPLIT_K": "SPLIT_K", "SPLIT_N": "SPLIT_N", "num_warps": "num_warps",
                  "num_stages": "num_stages", "PERSISTENT": "PERSISTENT", "TMA": "TMA",
                  "WARP_SPECIALIZE": "WARP_SPECIALIZE"}
# The switches among them: 0 or 1.
SWITCHES = ("PERSISTENT", "TMA", "WARP_SPECIALIZE")
# Strategies whose (first) launch is a grid of output tiles walked in grouped order: the ones the switches apply to.
TILE_GRID_STRATEGIES = ("tile2d", "tile_stats", "tile_recompute", "strip_finish")

# A static K at most this long makes a cheap GEMM next to the row reductions around it (amk-tile's choices).
SHORT_CONTRACTION = 256


def is_short_contraction(contraction: Dim | None) -> bool:
    """A static K of at most ``SHORT_CONTRACTION``: amk-tile's short-K strategies, and chunk_recompute's single K tile
    (which the tuner's space must agree with)."""
    return contraction is not None and contraction.is_static and contraction.value <= SHORT_CONTRACTION


@dataclass(frozen=True)
class KernelConfig:
    BLOCK_M: int = 64
    BLOCK_N: int = 64
    BLOCK_K: int = 32
    GROUP_M: int = 8
    SPLIT_K: int = 4
    # chunk_recompute: programs sharing each row strip's columns.
    SPLIT_N: int = 8
    num_warps: int = 4
    num_stages: int = 3
    # Tile-grid GEMM kernels only: one program per SM walking the output tiles (so Triton can pipeline the next
    # tile's loads under this tile's epilogue) ...
    PERSISTENT: int = 0
    # ... operands staged through tensor descriptors (TMA, Hopper and newer) where their layout allows ...
    TMA: int = 0
    # ... and, on a persistent TMA kernel, Triton's warp specialization of the tile loop.
    WARP_SPECIALIZE: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def constants(self, tile_params: list[str]) -> dict[str, int]:
        """The tile-size symbols a kernel uses, bound."""
        values = self.as_dict()
        return {name: values[name] for name in tile_params}

    def user_view(self) -> dict[str, int]:
        """The configuration under the ``parameter_grid`` key names."""
        values = self.as_dict()
        return {key: values[field] for key, field in PARAMETER_KEYS.items()}

    @staticmethod
    def from_user_view(values: Mapping[str, int]) -> KernelConfig:
        """The inverse of :meth:`user_view` (raises KeyError on an unknown key, ValueError on a non-integer)."""
        return KernelConfig(**{PARAMETER_KEYS[key]: int(value) for key, value in values.items()})


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def _bounded(dim: Dim, preferred: int, minimum: int) -> int:
    """``preferred``, shrunk to the power of two covering a small static ``dim``."""
    if dim.is_static:
        return max(minimum, min(preferred, next_power_of_two(dim.value)))
    return preferred


def default_config(strategy: str, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
    """A reasonable configuration for a kernel of ``strategy`` over ``rows x cols`` (contracting ``contraction``)."""
    has_dot = contraction is not None
    minimum = 16 if has_dot else 1
    block_k = _bounded(contraction, 64 if element_bytes <= 2 else 32, 16) if has_dot else 32
    if strategy in ("skinny_m", "split_k"):
        # split_k: the H200's best for an RMSNorm prologue into x[16 or 1, 4096] @ W[4096, 4096] in every tuned run
        # since the Gram-diagonal statistics (2026-11-30-h200-gram-DE, -final-DE): 2 warps, SPLIT_K 4.
        return KernelConfig(BLOCK_M=_bounded(rows, 64, 16), BLOCK_N=_bounded(cols, 64, 16),
                            BLOCK_K=_bounded(contraction, 128, 16), num_warps=2 if strategy == "split_k" else 4,
                            num_stages=4)
    if strategy == "chunk_recompute":
        # The H200's best for softmax(q[8192, 128] @ k[128, 8192]) by hand (benchmarks/chunk_recompute_probe.py): the
        # whole K in one tile, so that the loop over a chunk's column tiles is the one Triton pipelines.
        return KernelConfig(BLOCK_M=_bounded(rows, 128, 16), BLOCK_N=_bounded(cols, 64, 16),
                            BLOCK_K=_bounded(contraction, 128, 16), SPLIT_N=8, num_warps=4, num_stages=3)
    if strategy == "row_resident":
        # Whole rows in registers: about 4096 values per program, 32 per thread.
        width = next_power_of_two(cols.value)
        block_m = max(1, min(16, 4096 // width))
        return KernelConfig(BLOCK_M=_bounded(rows, block_m, 1), num_warps=max(1, min(16, block_m * width // 1024)),
                            num_stages=1)
    if strategy in ("row_strip", "strip_recompute"):
        return KernelConfig(BLOCK_M=_bounded(rows, 64 if has_dot else 4, minimum), BLOCK_N=_bounded(cols, 128, minimum),
                            BLOCK_K=block_k, num_warps=8 if has_dot else 4, num_stages=3)
    if has_dot:
        return KernelConfig(BLOCK_M=_bounded(rows, 128, 16), BLOCK_N=_bounded(cols, 128, 16), BLOCK_K=block_k,
                            GROUP_M=8, num_warps=8, num_stages=3)
    return KernelConfig(BLOCK_M=_bounded(rows, 8, 1), BLOCK_N=_bounded(cols, 256, 1), num_warps=4, num_stages=1)
