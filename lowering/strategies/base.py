"""The base class of tiling strategies: what amk-tile, amk-stage, the Triton emitter and the tuner ask a strategy.

A strategy is one way to tile a fused group (:class:`amk.lowering.plan.GroupPlan`) into a ``tiled_loop.kernel``. It
holds everything that depends on that choice: when ``auto`` takes it (``priority``, :meth:`chosen_for`), what to use
instead when it is asked for by name but cannot lower a group (:meth:`instead`), the launch grid and tile-size
symbols (:meth:`grid`), the workspace buffers (:meth:`workspace`), the kernel body (:meth:`build`), the heuristic
configuration (:meth:`default_config`), the tuner's search space, pruning rules and priors (:meth:`search_space`,
:meth:`prune_reason`, :meth:`tile_width`, :meth:`priors`), and the sentence the emitted kernel's docstring says.

The tuner's methods take its ``DeviceLimits`` as ``limits`` (shared memory, SMs, tensor descriptors; None when unknown).
The defaults here describe the common case, a grid of ``BLOCK_M x BLOCK_N`` output tiles; each strategy module
overrides what differs. Register a subclass with :func:`amk.lowering.strategies.register_strategy`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from amk.lowering.configs import GEMM_HOPPER_PRIORS, SWITCHES, TF32X3_HOPPER_PRIORS, KernelConfig, bounded
from amk.lowering.kernel_lowering import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, batch_axis

if TYPE_CHECKING:
    from amk.lowering.kernel_lowering import KernelLowering, WorkspaceBuffer
    from amk.lowering.plan import GroupPlan
    from amk.symbolic import Dim

# The name amk-tile's reduction_strategy option takes for "let the strategies decide" (amk.lowering.strategies).
AUTO = "auto"
# The kernel forms amk-emit-gluon writes (a strategy's ``gluon_form``): a persistent grid of output tiles, each a K
# loop into one accumulator and an epilogue; or row strips whose whole-K lhs tile is loaded once and multiplied by a
# chunk's column tiles one after another, each product folded or finished while the next is computed.
OUTPUT_TILES, COLUMN_SWEEP = "output_tiles", "column_sweep"


@dataclass(frozen=True)
class Grid:
    """A kernel's launch: programs per axis, the program-id names used in offsets, the tile-size symbols the
    configuration binds, and ``group_size`` (the symbol of a 2-D grid walked in groups of row tiles, or None)."""

    axes: list[str]
    program_ids: list[str]
    tile_params: list[str]
    group_size: str | None = None

    def batched(self, plan: GroupPlan) -> Grid:
        """This grid, repeated over the batch of a batched ``plan``: a last axis, ``pid_b``."""
        axes, program_ids = batch_axis(plan)
        return replace(self, axes=[*self.axes, *axes], program_ids=[*self.program_ids, *program_ids])


class TilingStrategy:
    """One tiling strategy (module docstring). Subclasses set ``name`` and ``description`` and override what differs
    from a grid of output tiles."""

    # The kernel's ``strategy`` attribute in the IR.
    name: ClassVar[str]
    # What each program does: the emitted kernel's docstring.
    description: ClassVar[str]
    # amk-tile's ``auto`` asks the strategies with a priority, lowest first, whether they take a group
    # (:meth:`chosen_for`); None: taken only when asked for by name.
    priority: ClassVar[int | None] = None
    # Lowers groups with a row reduction: amk-tile's ``reduction_strategy`` option may name it.
    row_reduction: ClassVar[bool] = False
    # The (first) launch is a grid of output tiles walked in groups of GROUP_M row tiles: the PERSISTENT and TMA
    # switches apply to it.
    tile_grid: ClassVar[bool] = False
    # The form amk-emit-gluon writes its kernels in (OUTPUT_TILES, COLUMN_SWEEP), or None.
    gluon_form: ClassVar[str | None] = None
    # The tuner offers its Gluon kernels (the GLUON switch) on Hopper; for batched kernels too with ``gluon_batches``.
    gluon: ClassVar[bool] = False
    gluon_batches: ClassVar[bool] = False
    # Below this many multiply-adds (about 50 us of tensor-core work on the H200) GLUON is not offered. Set for the
    # output-tile GEMMs when their kernels took host-side TMA descriptors (20-40 us of host time per call, which the
    # tuner's timing hides); they now make them on the device and launch as a Triton kernel does, and the bound is to
    # be measured again.
    gluon_min_macs: ClassVar[int] = 1 << 34
    # The second sweep runs the K loop again where it would re-read the pre-normalization tile (never stored).
    recomputes: ClassVar[bool] = False
    # The matmul-derived value the row reductions normalize is stored in phase one and re-read (a scratch buffer
    # when it is no output of the kernel).
    stores_pre_reduction: ClassVar[bool] = True
    # A norm prologue's per-row scale may be applied to the accumulator, its statistics gathered in the K loop.
    scales_accumulator: ClassVar[bool] = False
    # Programs are at most as many as can be resident at once (they wait for each other): the launch is persistent.
    resident_programs: ClassVar[bool] = False
    # Lowers a batched matmul's group (``q @ k^T``): its launches repeat over a last grid axis, ``pid_b``; its
    # workspace has a batch axis; it takes no per-row-strip counters and no persistent launch of resident programs.
    batches: ClassVar[bool] = False
    # The strategy to take instead for a group without a matmul, or with a prologue (None: this one lowers it).
    without_matmul: ClassVar[str | None] = None
    with_prologue: ClassVar[str | None] = None

    # -- amk-tile ----------------------------------------------------------------------------------------------------
    def chosen_for(self, plan: GroupPlan) -> bool:
        """Whether ``auto`` takes this strategy for ``plan`` (asked only when ``priority`` is not None)."""
        return False

    def instead(self, plan: GroupPlan) -> str | None:
        """The strategy to take when this one is asked for but cannot lower ``plan`` (``AUTO``: let ``auto`` choose),
        or None when it can."""
        if self.row_reduction and not plan.main.has_reductions:
            return AUTO
        if plan.batched and not self.batches:
            return AUTO
        if plan.matmul is None and self.without_matmul is not None:
            return self.without_matmul
        if plan.prologue is not None and self.with_prologue is not None:
            return self.with_prologue
        return None

    def tile_params(self, plan: GroupPlan) -> list[str]:
        """The tile-size symbols of the kernel's tiles: BLOCK_M, BLOCK_N and, with a matmul, BLOCK_K."""
        return [BLOCK_M, BLOCK_N] + ([BLOCK_K] if plan.matmul is not None else [])

    def grid(self, plan: GroupPlan) -> Grid:
        """A 2-D grid of output tiles; with a matmul, a tile-grid strategy walks it in groups of GROUP_M row tiles
        (tiles sharing the weight's column tiles run together: L2 reuse)."""
        rows, cols = plan.main.space.rows, plan.main.space.cols
        grouped = self.tile_grid and plan.matmul is not None
        return Grid([f"cdiv({rows}, {BLOCK_M})", f"cdiv({cols}, {BLOCK_N})"], ["pid_m", "pid_n"],
                    self.tile_params(plan) + ([GROUP_M] if grouped else []), GROUP_M if grouped else None)

    def row_strips(self, plan: GroupPlan) -> Grid:
        """A 1-D grid of row strips of BLOCK_M rows (for strategies whose program owns whole rows)."""
        return Grid([f"cdiv({plan.main.space.rows}, {BLOCK_M})"], ["pid_m"], self.tile_params(plan))

    def workspace(self, plan: GroupPlan) -> list[WorkspaceBuffer]:
        """Buffers besides the outputs (the pre-reduction scratch, see ``stores_pre_reduction``, comes first and is
        not listed here); a counter buffer comes last."""
        return []

    def build(self, lowering: KernelLowering) -> None:
        """The kernel body, after the prologue's statistics: one output tile per program."""
        lowering.output_tile()

    # -- amk-stage: the heuristic configuration ------------------------------------------------------------------------
    def default_config(self, rows: Dim, cols: Dim, contraction: Dim | None, element_bytes: int) -> KernelConfig:
        """A reasonable configuration over ``rows x cols`` (contracting ``contraction``), without timing anything."""
        if contraction is not None:
            block_k = bounded(contraction, 64 if element_bytes <= 2 else 32, 16)
            return KernelConfig(BLOCK_M=bounded(rows, 128, 16), BLOCK_N=bounded(cols, 128, 16), BLOCK_K=block_k,
                                GROUP_M=8, num_warps=8, num_stages=3)
        return KernelConfig(BLOCK_M=bounded(rows, 8, 1), BLOCK_N=bounded(cols, 256, 1), num_warps=4, num_stages=1)

    # -- the tuner -------------------------------------------------------------------------------------------------
    def search_space(self, rows: Dim, has_dot: bool, contraction: Dim | None, limits,
                     warp_specialization: bool) -> dict[str, list[int]]:
        """The candidates searched when no ``parameter_grid`` is given: without a dot the column tile's width; with
        one :meth:`dot_space`."""
        if not has_dot:
            return {"BLOCK_M": [1, 2, 4, 8, 16], "BLOCK_N": [128, 256, 512, 1024, 2048], "num_warps": [2, 4, 8],
                    "num_stages": [1]}
        return self.dot_space(rows, contraction, limits, warp_specialization)

    def dot_space(self, rows: Dim, contraction: Dim | None, limits,
                  warp_specialization: bool) -> dict[str, list[int]]:
        """The search space of a kernel with a K loop: GEMM tiles; for a tile-grid strategy on a device with tensor
        descriptors, the persistent and TMA variants (and warp-specialized ones when asked for), and where Gluon's
        Hopper kernels run, the Gluon-emitted variant of a strategy that has one."""
        space = {"BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "num_warps": [4, 8],
                 "num_stages": [3, 4, 5], "GROUP_M": [8]}
        if limits is not None and limits.tma and self.tile_grid:
            space |= {"PERSISTENT": [0, 1], "TMA": [0, 1]} | ({"WARP_SPECIALIZE": [0, 1]} if warp_specialization else {})
            if limits.gluon and self.gluon:
                space["GLUON"] = [0, 1]
        return space

    def prune_reason(self, config: KernelConfig, cols: Dim | None, limits) -> str | None:
        """Why ``config`` cannot run for this strategy on this device (beyond the tuner's general checks), or None."""
        return None

    def dot_shared_memory(self, config: KernelConfig, element_bytes: int, contraction: Dim | None) -> int:
        """The bytes of shared memory a kernel of this strategy with a dot needs under ``config``, for the
        contraction ``contraction`` (the tuner prunes configurations that need more than the device has):
        ``num_stages`` lhs and rhs tiles, the ring of the pipelined K loop."""
        return config.num_stages * (config.BLOCK_M * config.BLOCK_K + config.BLOCK_K * config.BLOCK_N) * element_bytes

    def tile_width(self, config: KernelConfig, cols: Dim | None) -> int:
        """The columns of the tile a program holds in registers (the tuner's register check without a dot)."""
        return config.BLOCK_N

    def priors(self, has_dot: bool) -> list[dict[str, int]]:
        """Configurations that won on Hopper, timed right after the heuristic (each over the heuristic's other
        parameters, where the search space holds it)."""
        if not has_dot:
            return []
        if self.tile_grid:
            return GEMM_HOPPER_PRIORS + TF32X3_HOPPER_PRIORS
        # persistent and TMA launches are the tile grid's: without one, the tile shapes alone, once each
        tiles = [{key: value for key, value in prior.items() if key not in SWITCHES} for prior in GEMM_HOPPER_PRIORS]
        return [dict(items) for items in dict.fromkeys(tuple(tile.items()) for tile in tiles)]
