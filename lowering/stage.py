"""``amk-stage``: place a ``tiled_loop.kernel`` in memory, producing a ``memory_staged.kernel``.

Tile sizes are bound from the pass options (or the heuristic of :mod:`amk.lowering.configs`), and then:

- kernel tensors become ``global`` buffers;
- a load read only by a ``tiled_loop.dot`` inside a loop becomes ``memory_staged.stage`` into ``shared`` memory,
  ``num_stages`` deep; other loads go to registers (``memory_staged.load``);
- the zero tile a K loop starts from becomes a register ``memory_staged.accumulator``;
- with ``tma=1`` (a grid of output tiles) the staged copies go through tensor descriptors, with ``persistent=1`` the
  kernel walks its tiles with one program per SM;
- each global access masks only the axes whose extent sympy cannot prove to be a multiple of the tile size (marking
  ``mask_if_uneven`` those of a symbolic extent at an aligned offset, which the emitted kernel drops at launches where
  the extent is one), and ``tiled_loop.in_bounds`` that is provably all-true becomes a constant (its ``select`` then
  folds away);
- offsets use 64-bit arithmetic where a buffer may hold 2^31 elements or more;
- the batch axes of a batched kernel's buffers (``[pid_b, row, col]``) are never masked.

Input::

    %a = tiled_loop.load %x <[BLOCK_M*pid_m, k]> : !tensor_op.tensor<[64, 48], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>

Output (``amk-stage{block_m=64 block_k=32}``; 48 is not a multiple of 32, so K is masked)::

    %a = memory_staged.stage %x <[BLOCK_M*pid_m, k]> {mask = [false, true], index_bits = 32 : i64, depth = 3 : i64}
        : !memory_staged.buffer<global, [64, 48], f16> -> !memory_staged.buffer<shared, [BLOCK_M, BLOCK_K], f16>
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, ModuleOp, UnitAttr, i1
from xdsl.ir import BlockArgument, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from amk.dialects import memory_staged, tiled_loop
from amk.dialects.memory_staged import BufferType
from amk.dialects.tiled_loop import TileType
from amk.lowering.configs import KernelConfig, check_values
from amk.lowering.strategies import strategy_named
from amk.symbolic import Dim, provably_divisible

INDEX_LIMIT = 2**31


def kernel_problem(kernel: tiled_loop.KernelOp,
                   size_hints: Mapping[str, int] | None = None) -> tuple[Dim, Dim, Dim | None, int]:
    """(rows, cols, contraction or None, element bytes) of a tile-level kernel: its ``problem`` attribute, or read
    from its loops and outputs when the attribute is absent (hand-written IR); ``size_hints`` (symbol -> value) give
    symbolic sizes the values of the size bucket a kernel is configured for."""
    if size_hints:
        rows, cols, contraction, element_bytes = kernel_problem(kernel)
        return (rows.subs(size_hints), cols.subs(size_hints),
                None if contraction is None else contraction.subs(size_hints), element_bytes)
    element_bytes = max((element_size(a.type.element_type) for a in kernel.inputs), default=4)
    if kernel.problem is not None:
        rows, cols, *contraction = kernel.problem.dims
        return rows, cols, (contraction[0] if contraction else None), element_bytes
    if not kernel.outputs:
        raise PassFailedException(f"amk-stage: kernel {kernel.sym_name.data} has no outputs")
    output = kernel.outputs[0].type
    rows, cols = output.dims[0], (output.dims[1] if output.rank == 2 else Dim(1))
    loops = {op.iv.data: op.upper for op in kernel.walk() if isinstance(op, tiled_loop.ForOp)}
    contraction = loops.get("k")
    cols = loops.get("n", cols)
    return rows, cols, contraction, element_bytes


def element_size(element_type) -> int:
    """Bytes of one value of ``element_type`` (at least 1: an i1 mask takes a byte)."""
    return max(1, getattr(element_type, "bitwidth", 32) // 8)


def rotation_group(kernel: tiled_loop.KernelOp | memory_staged.KernelOp) -> int | None:
    """The widest group of columns that ``kernel`` rotates in registers (``tiled_loop.rotate_half``), whose column
    tiles must hold whole groups (a ``BLOCK_N`` multiple of it), or None. (Groups are powers of two: the widest is
    a multiple of the others.)"""
    return max((op.group.value.data for op in kernel.walk() if isinstance(op, tiled_loop.RotateHalfOp)), default=None)


def config_for(kernel: tiled_loop.KernelOp, overrides: dict[str, int],
               size_hints: Mapping[str, int] | None = None) -> KernelConfig:
    rows, cols, contraction, element_bytes = kernel_problem(kernel, size_hints)
    base = strategy_named(kernel.strategy.data).default_config(rows, cols, contraction, element_bytes).as_dict()
    group = rotation_group(kernel)
    if group is not None and base["BLOCK_N"] < group:  # column tiles of whole groups
        base["BLOCK_N"] = group
    base.update({k: v for k, v in overrides.items() if v})
    return KernelConfig(**base)


class _Staging:
    def __init__(self, constants: dict[str, int], num_stages: int, loops: list[tiled_loop.ForOp], tma: bool):
        self.bindings = constants
        self.num_stages = num_stages
        self.tma = tma
        # A loop variable is its lower bound plus a multiple of its step: write it so for sympy.
        self.iterations = {loop.iv.data: Dim(f"({loop.lower}) + ({loop.step}) * {loop.iv.data}_iteration")
                           for loop in loops}

    def bound(self, dim: Dim) -> Dim:
        return dim.subs(self.iterations).subs(self.bindings)

    def mask(self, buffer: BufferType, tile: TileType, offsets) -> tuple[list[bool], list[bool]]:
        """Per buffer axis: does the tile need a bounds mask there, and is that mask needed only when the axis' symbolic
        extent is not a multiple of the tile size (the offset being one)? (Never a batched kernel's batch axis: each
        program reads and writes at its own batch index.)"""
        tile_dims = tile.dims
        batch = max(buffer.rank - 2, 0)
        if buffer.rank == 1:
            axes = [tile_dims[1] if tile_dims[0] == Dim(1) else tile_dims[0]]
        else:
            axes = list(tile_dims)
        needs, uneven = [False] * batch, [False] * batch
        for extent, size, offset in zip(buffer.dims[batch:], axes, offsets[batch:]):
            size = self.bound(size)
            aligned = provably_divisible(self.bound(offset), size) if offset != Dim(0) else True
            divisible = provably_divisible(extent, size)
            needs.append(not (aligned and divisible))
            uneven.append(aligned and not divisible and not extent.is_static and size.is_static)
        return needs, uneven

    @staticmethod
    def index_bits(buffer: BufferType) -> int:
        size = Dim(math.prod((d.expr for d in buffer.dims), start=1))
        return 32 if size.is_static and size.value < INDEX_LIMIT else 64


class _LowerAccesses(RewritePattern):
    def __init__(self, staging: _Staging, kernel: memory_staged.KernelOp):
        self.staging = staging
        self.kernel_outputs = set(kernel.body.block.args[kernel.num_inputs.value.data:])
        self.synchronized = any(isinstance(op, tiled_loop.StripBarrierOp) for op in kernel.walk())

    def written_by_other_programs(self, op: tiled_loop.LoadOp) -> bool:
        """A load after a last arrival or a strip barrier, of a buffer the kernel writes: it must bypass L1 to see
        other programs' data."""
        inside_finisher = any(isinstance(parent, tiled_loop.IfOp) for parent in tiled_loop.ancestors(op))
        return (inside_finisher or self.synchronized) and op.source in self.kernel_outputs

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /):
        staging = self.staging
        if isinstance(op, tiled_loop.LoadOp):
            buffer = op.source.type
            row_map = op.row_map
            # a load of broadcast rows reads the space's rows, masked against their count, not the source's
            extents = buffer if row_map is None else BufferType("global", [row_map[0], *buffer.dims[1:]],
                                                                 buffer.element_type)
            mask, uneven = staging.mask(extents, op.result.type, op.offsets.dims)
            if op.column_period is not None:  # columns read modulo the source's row length: always inside it
                mask[-1] = uneven[-1] = False
            bits = staging.index_bits(buffer)
            users = [use.operation for use in op.result.uses]
            in_loop = isinstance(op.parent_op(), tiled_loop.ForOp)
            if (in_loop and users and all(isinstance(u, tiled_loop.DotOp) for u in users) and row_map is None
                    and op.batch_map is None and op.rotate_half is None and op.column_period is None):
                tile = op.result.type
                new = memory_staged.StageOp(op.source, op.offsets.dims, mask, bits, staging.num_stages,
                                            BufferType("shared", tile.dims, tile.element_type))
                if staging.tma and buffer.rank == 2:
                    new.descriptor = UnitAttr()
            else:
                new = memory_staged.LoadOp(op.source, op.offsets.dims, mask, bits, op.result.type, op.broadcast_rows,
                                           op.broadcast_batch, op.rotate_half, op.column_period)
                if self.written_by_other_programs(op):
                    new.coherent = BoolAttr.from_bool(True)
            new.results[0].name_hint = op.result.name_hint
            new.mark_uneven(uneven)
            rewriter.replace(op, new)
        elif isinstance(op, tiled_loop.StoreOp):
            buffer = op.dest.type
            mask, uneven = staging.mask(buffer, op.value.type, op.offsets.dims)
            new = memory_staged.StoreOp(op.value, op.dest, op.offsets.dims, mask, staging.index_bits(buffer))
            new.mark_uneven(uneven)
            rewriter.replace(op, new)
        elif isinstance(op, tiled_loop.InBoundsOp):
            tile = op.result.type
            provable = all(
                provably_divisible(staging.bound(extent), staging.bound(size)) or size == Dim(1)
                for extent, size in zip(op.extents.dims, tile.dims)
            )
            if provable:
                rewriter.replace(op, tiled_loop.FullOp(1.0, tile))


class _LowerDots(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.DotOp, rewriter: PatternRewriter, /):
        acc = op.acc
        if isinstance(acc, BlockArgument) and isinstance(acc.owner.parent_op(), tiled_loop.ForOp):
            loop = acc.owner.parent_op()
            init = loop.inits[acc.index]
            if isinstance(init.owner, tiled_loop.FullOp) and init.owner.number == 0.0:
                accumulator = memory_staged.AccumulatorOp(init.type)
                accumulator.results[0].name_hint = init.name_hint
                rewriter.replace(init.owner, accumulator)
        new = memory_staged.DotOp(op.lhs, op.rhs, op.acc)
        new.results[0].name_hint = op.result.name_hint
        new.attributes.update(op.attributes)
        rewriter.replace(op, new)


class _FoldTrueSelect(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tiled_loop.SelectOp, rewriter: PatternRewriter, /):
        cond = op.cond.owner
        if (isinstance(cond, tiled_loop.FullOp) and cond.result.type.element_type == i1 and cond.number != 0.0
                and op.true_value.type == op.result.type):
            rewriter.replace(op, [], [op.true_value])


def stage_kernel(kernel: tiled_loop.KernelOp, config: KernelConfig) -> memory_staged.KernelOp:
    constants = config.constants([p.data for p in kernel.tile_params.data])
    # Tile sizes are now numbers, so buffers sized by them (workspace) get static shapes.
    arg_types = [BufferType("global", [d.subs(constants) for d in a.type.dims], a.type.element_type)
                 for a in kernel.body.block.args]
    staged = memory_staged.KernelOp(
        kernel.sym_name.data, grid=kernel.grid.dims, program_ids=[p.data for p in kernel.program_ids.data],
        constants=constants, num_warps=config.num_warps, num_stages=config.num_stages,
        num_inputs=kernel.num_inputs.value.data, strategy=kernel.strategy.data, arg_types=arg_types,
        arg_views=kernel.arg_views, group_size=kernel.group_size, workspace=kernel.workspace)
    # Persistence needs a grid of tiles walked in grouped order, not repeated over a batch; other kernels ignore the
    # switches.
    tile_grid = kernel.group_size is not None and not kernel.batched
    if kernel.exact_products is not None:
        staged.exact_products = UnitAttr()
    if config.PERSISTENT and tile_grid:
        staged.persistent = UnitAttr()
        if config.WARP_SPECIALIZE and config.TMA:
            staged.warp_specialize = UnitAttr()
    new_block = staged.body.block
    for old, new in zip(kernel.body.block.args, new_block.args):
        new.name_hint = old.name_hint
        old.replace_all_uses_with(new)
    for op in list(kernel.body.block.ops):
        op.detach()
        new_block.add_op(op)
    for rotation in (op for op in staged.walk() if isinstance(op, tiled_loop.RotateHalfOp)):
        columns, group = rotation.input.type.dims[-1].subs(constants), rotation.group.value.data
        if not columns.is_static or columns.value % group:
            raise PassFailedException(f"amk-stage: kernel {kernel.sym_name.data} rotates groups of {group} columns in "
                                      f"registers, which its column tiles of {columns} split: BLOCK_N must be a "
                                      f"multiple of {group}")
    loops = [op for op in staged.walk() if isinstance(op, tiled_loop.ForOp)]
    staging = _Staging(constants, config.num_stages, loops, tma=bool(config.TMA) and tile_grid)
    PatternRewriteWalker(GreedyRewritePatternApplier([_LowerAccesses(staging, staged), _LowerDots(), _FoldTrueSelect()]),
                         apply_recursively=True).rewrite_region(staged.body)
    return staged


@dataclass(frozen=True)
class StagePass(ModulePass):
    """Bind tile sizes and lower ``tiled_loop.kernel`` ops to ``memory_staged.kernel`` (see the module docstring).

    Options left at 0 take the heuristic default for the kernel's strategy and problem size; ``kernel`` limits the
    pass to the kernel of that name (the runtime stages each kernel with its own tuned configuration). The switches
    ``persistent``, ``tma`` and ``warp_specialize`` (0 or 1) apply to grids of output tiles in grouped order: the
    kernel gets ``persistent`` (and ``warp_specialize``), its staged operands ``descriptor``.
    """

    name = "amk-stage"

    kernel: str = ""
    block_m: int = 0
    block_n: int = 0
    block_k: int = 0
    group_m: int = 0
    split_k: int = 0
    split_n: int = 0
    num_warps: int = 0
    num_stages: int = 0
    persistent: int = 0
    tma: int = 0
    warp_specialize: int = 0

    # KernelConfig field -> pass option
    OPTIONS: ClassVar[dict[str, str]] = {"BLOCK_M": "block_m", "BLOCK_N": "block_n", "BLOCK_K": "block_k",
                                         "GROUP_M": "group_m", "SPLIT_K": "split_k", "SPLIT_N": "split_n",
                                         "num_warps": "num_warps", "num_stages": "num_stages",
                                         "PERSISTENT": "persistent", "TMA": "tma", "WARP_SPECIALIZE": "warp_specialize"}

    @classmethod
    def for_config(cls, config: KernelConfig, kernel: str = "") -> StagePass:
        """The pass binding every field of ``config``."""
        return cls(kernel=kernel, **{option: getattr(config, field) for field, option in cls.OPTIONS.items()})

    def overrides(self) -> dict[str, int]:
        return {field: getattr(self, option) for field, option in self.OPTIONS.items()}

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for field, option in self.OPTIONS.items():  # 0: the heuristic's (or off); any other value as a configuration's
            value = getattr(self, option)
            try:
                if value:  # (check_values imports triton.language: a quarter of a second of an amk-opt run)
                    check_values({field: value})
            except ValueError as error:  # (num_warps=3 or block_m=48 reached the staged kernel's verifier)
                raise PassFailedException(f"amk-stage: {option}{str(error).removeprefix(field)}") from None
        kernels = [o for o in op.walk() if isinstance(o, tiled_loop.KernelOp)]
        if self.kernel and self.kernel not in {k.sym_name.data for k in kernels}:
            staged = {o.sym_name.data for o in op.walk() if isinstance(o, memory_staged.KernelOp)}
            if self.kernel not in staged:
                names = ", ".join(sorted({k.sym_name.data for k in kernels} | staged)) or "none"
                raise PassFailedException(f"amk-stage: no kernel named {self.kernel!r}; kernels: {names}")
        for kernel in kernels:
            if self.kernel and kernel.sym_name.data != self.kernel:
                continue
            staged = stage_kernel(kernel, config_for(kernel, self.overrides()))
            kernel.parent_block().insert_op_before(staged, kernel)
            kernel.detach()
            kernel.erase()
