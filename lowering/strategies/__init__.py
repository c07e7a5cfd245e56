"""Tiling strategies: one module per strategy, each a :class:`TilingStrategy` registered by name.

``auto`` (amk-tile's default) asks the registered strategies whether they take a group, in ascending ``priority``:

==========  ===================  ==============================================================================
priority    strategy             takes a group ...
==========  ===================  ==============================================================================
10          ``split_k``          as ``skinny_m``, static K >= 1024: one matmul, or a dual GEMM of few column tiles
20          ``skinny_m``         without a row reduction: a matmul over at most 64 static rows
30          ``row_resident``     with a row reduction, no matmul, static rows of at most 16384 columns
40          ``chunk_recompute``  with a row reduction after a matmul of static K <= 256, no prologue
50          ``strip_finish``     with a row reduction after a matmul of longer K, an output of >= 2^27 elements
60          ``tile_stats``       with a row reduction after a matmul of longer K
90          ``row_strip``        with a row reduction (any other)
100         ``tile2d``           without a row reduction (any other)
==========  ===================  ==============================================================================

``tile_recompute``, ``strip_recompute`` and ``strip_sync`` have no priority: they are taken when asked for by name
(``amk-tile{reduction_strategy=NAME}``). Adding a strategy is one module with a registered subclass (see
docs/tutorial-tiling-strategy.md).
"""

# isort: off
# Each module registers its strategy; this order is the order of the registry (and of its error messages).
from amk.lowering.strategies import (  # noqa: F401
    tile2d,
    row_strip,
    skinny_m,
    tile_stats,
    tile_recompute,
    strip_finish,
    strip_sync,
    split_k,
    strip_recompute,
    chunk_recompute,
    row_resident,
)
# isort: on
from amk.lowering.strategies.base import AUTO, GEMM_HOPPER_PRIORS, Grid, TilingStrategy
from amk.lowering.strategies.registry import (
    STRATEGIES,
    auto_strategy,
    choose_strategy,
    register_strategy,
    strategy_named,
    strategy_names,
)

__all__ = ["AUTO", "GEMM_HOPPER_PRIORS", "STRATEGIES", "Grid", "TilingStrategy", "auto_strategy", "choose_strategy",
           "register_strategy", "strategy_named", "strategy_names"]
