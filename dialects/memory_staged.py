"""The ``memory_staged`` dialect: explicit placement in global memory (HBM), shared memory (SRAM) and registers.

``amk-stage`` produces this level from ``tiled_loop`` once tile sizes are bound: kernel operands become global
buffers, dot operands read inside a K loop are staged through shared memory with a pipeline depth, accumulators are
register-resident, and each global access states which axes need a bounds mask (none where sympy proves the extent
divisible by the tile) and whether offsets need 64-bit arithmetic. Tile compute ops (``tiled_loop.binary`` etc.)
stay as they are. The Triton emitter reads this level::

    memory_staged.kernel @k attributes {grid = #tiled_loop.exprs<[8, 1]>, program_ids = ["pid_m", "pid_n"],
        constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64}, num_warps = 4 : i64,
        num_stages = 3 : i64, num_inputs = 2 : i64} {
    ^bb0(%x: !memory_staged.buffer<global, [512, 32], f16>, %w: !memory_staged.buffer<global, [32, 64], f16>,
         %out: !memory_staged.buffer<global, [512, 64], f16>):
      %acc0 = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
      %acc = tiled_loop.for "k" = <[0, 32, 32]> iter_args(%acc0) : ... {
      ^bb1(%acc_in: !tiled_loop.tile<[64, 64], f32>):
        %a = memory_staged.stage %x <[64*pid_m, k]> {depth = 3 : i64, mask = [false, false]}
            : !memory_staged.buffer<global, [512, 32], f16> -> !memory_staged.buffer<shared, [64, 32], f16>
        ...
      }
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DictionaryAttr,
    Float32Type,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    TypeAttribute,
    UnitAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, NoTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from amk.dialects.syntax import SymbolicShapedType
from amk.dialects.tiled_loop import (
    BroadcastRows,
    ExprsAttr,
    KernelSignature,
    TileType,
    check_dot,
    check_tensor_tile,
    tile_type,
    verify_workspace,
)
from amk.dialects.tiled_loop import KernelOp as TiledKernelOp
from amk.symbolic import Dim

MEMORY_SPACES = ("global", "shared")
STRATEGIES = TiledKernelOp.STRATEGIES


@irdl_attr_definition
class BufferType(SymbolicShapedType, ParametrizedAttribute, TypeAttribute):
    """A buffer in a memory space: ``!memory_staged.buffer<global, [M, 4096], f16>`` (HBM) or
    ``!memory_staged.buffer<shared, [64, 32], f16>`` (one pipeline slot in SRAM). Register tiles keep
    ``!tiled_loop.tile``."""

    name = "memory_staged.buffer"
    space: StringAttr
    shape: ArrayAttr[StringAttr]
    element_type: Attribute

    def __init__(self, space: str, dims: Sequence[Dim | int | str], element_type: Attribute):
        super().__init__(StringAttr(space), self.shape_attr(dims), element_type)

    @classmethod
    def parse_prefix(cls, parser: AttrParser) -> list[Attribute]:
        space = parser.parse_identifier()
        parser.parse_punctuation(",")
        return [StringAttr(space)]

    def print_prefix(self, printer: Printer) -> None:
        printer.print_string(f"{self.space.data}, ")

    def verify(self) -> None:
        super().verify()
        if self.space.data not in MEMORY_SPACES:
            raise VerifyException(
                f"memory space must be one of {', '.join(MEMORY_SPACES)}, got {self.space.data!r}"
            )


def _buffer(value: SSAValue, space: str, context: str) -> BufferType:
    if not isinstance(value.type, BufferType) or value.type.space.data != space:
        raise VerifyException(f"{context}: expected a {space} buffer, got {value.type}")
    return value.type


@irdl_op_definition
class KernelOp(KernelSignature, IRDLOperation):
    """A kernel with its launch parameters: the grid (symbolic in shape symbols only), ``constants`` (the bound tile
    sizes), ``num_warps`` and ``num_stages``. Block arguments are global buffers: inputs, then outputs.

    ``persistent`` (a grid of output tiles in grouped order only): launch one program per SM, each walking the tiles
    of the grid, so that the next tile's loads are pipelined under this tile's epilogue; ``warp_specialize``: ask
    Triton to specialize warps on that tile loop (producer and consumer warps)::

        memory_staged.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)]>,
            group_size = "GROUP_M", persistent, ...} { ... }
    """

    name = "memory_staged.kernel"
    sym_name = prop_def(SymbolNameConstraint())
    grid = prop_def(ExprsAttr)
    program_ids = prop_def(ArrayAttr[StringAttr])
    constants = prop_def(DictionaryAttr)
    num_warps = prop_def(IntegerAttr)
    num_stages = prop_def(IntegerAttr)
    num_inputs = prop_def(IntegerAttr)
    arg_views = opt_prop_def(ArrayAttr[StringAttr])
    group_size = opt_prop_def(StringAttr)
    workspace = opt_prop_def(ArrayAttr[StringAttr])
    strategy = prop_def(StringAttr)
    persistent = opt_prop_def(UnitAttr)
    warp_specialize = opt_prop_def(UnitAttr)
    exact_products = opt_prop_def(UnitAttr)  # the tile-level kernel's (tiled_loop.KernelOp.exact_products)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$sym_name attr-dict-with-keyword $body"

    WARPS: ClassVar[tuple[int, ...]] = (1, 2, 4, 8, 16, 32)

    def __init__(self, name: str, *, grid: Sequence, program_ids: Sequence[str], constants: dict[str, int],
                 num_warps: int, num_stages: int, num_inputs: int, strategy: str, arg_types: Sequence[Attribute],
                 arg_views: ArrayAttr | None = None, group_size: StringAttr | None = None,
                 workspace: ArrayAttr | None = None):
        properties = {
            "sym_name": StringAttr(name),
            "grid": ExprsAttr(grid),
            "program_ids": ArrayAttr([StringAttr(p) for p in program_ids]),
            "constants": DictionaryAttr({k: IntegerAttr(v, i64) for k, v in constants.items()}),
            "num_warps": IntegerAttr(num_warps, i64),
            "num_stages": IntegerAttr(num_stages, i64),
            "num_inputs": IntegerAttr(num_inputs, i64),
            "strategy": StringAttr(strategy),
        }
        if arg_views is not None:
            properties["arg_views"] = arg_views
        if group_size is not None:
            properties["group_size"] = group_size
        if workspace is not None:
            properties["workspace"] = workspace
        super().__init__(properties=properties, regions=[Region(Block(arg_types=arg_types))])

    @property
    def constant_values(self) -> dict[str, int]:
        return {name: attr.value.data for name, attr in self.constants.data.items()}

    def verify_(self) -> None:
        for name, attr in self.constants.data.items():
            if not isinstance(attr, IntegerAttr):
                raise VerifyException(f"'{self.name}' constant {name} must be an integer, got {attr}")
        verify_workspace(self)
        if self.strategy.data not in STRATEGIES:
            raise VerifyException(
                f"'{self.name}' strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy.data!r}")
        if self.num_warps.value.data not in self.WARPS:
            raise VerifyException(
                f"'{self.name}' num_warps must be one of {', '.join(map(str, self.WARPS))}, got {self.num_warps.value.data}"
            )
        if self.num_stages.value.data < 1:
            raise VerifyException(f"'{self.name}' num_stages must be >= 1, got {self.num_stages.value.data}")
        for name, value in self.constant_values.items():
            if value < 1 or value & (value - 1):
                raise VerifyException(f"'{self.name}' tile size {name} = {value} must be a power of two")
        if len(self.grid.dims) != len(self.program_ids.data):
            raise VerifyException(
                f"'{self.name}' has {len(self.grid.dims)} grid axes but {len(self.program_ids.data)} program ids"
            )
        for index, arg in enumerate(self.body.block.args):
            _buffer(arg, "global", f"'{self.name}' argument {index}")
        if self.persistent is not None and self.group_size is None:
            raise VerifyException(f"'{self.name}' persistent needs a grid of tiles in grouped order (group_size)")
        if self.warp_specialize is not None and self.persistent is None:
            raise VerifyException(f"'{self.name}' warp_specialize applies to the tile loop of a persistent kernel")



class GlobalAccessOp(IRDLOperation):
    """Shared parts of loads, stages and stores: offsets, the axes that need a bounds mask, and the index width.

    ``mask_if_uneven`` marks, per axis, a mask that guards only the extent's remainder: the tile's offset is a multiple
    of its size, the extent a symbol that may or may not be one. The emitted kernel keeps such masks only at launches
    where some such extent is not a multiple of its tile size (the launcher checks, Triton compiles each case once):
    a bounds check against a size known only at run time cost attention's probabilities 19% on the H200."""

    offsets = prop_def(ExprsAttr)
    mask = prop_def(ArrayAttr[BoolAttr])
    index_bits = prop_def(IntegerAttr)
    mask_if_uneven = opt_prop_def(ArrayAttr[BoolAttr])
    irdl_options = (ParsePropInAttrDict(),)

    @staticmethod
    def access_properties(offsets: Sequence, mask: Sequence[bool], index_bits: int) -> dict[str, Attribute]:
        return {
            "offsets": ExprsAttr(offsets),
            "mask": ArrayAttr([BoolAttr.from_bool(m) for m in mask]),
            "index_bits": IntegerAttr(index_bits, i64),
        }

    @property
    def masked_axes(self) -> tuple[bool, ...]:
        return tuple(bool(m.value.data) for m in self.mask.data)

    @property
    def uneven_axes(self) -> tuple[bool, ...]:
        """Per axis: whether its mask is one of ``mask_if_uneven``'s."""
        if self.mask_if_uneven is None:
            return (False,) * len(self.mask.data)
        return tuple(bool(m.value.data) for m in self.mask_if_uneven.data)

    def mark_uneven(self, axes: Sequence[bool]) -> None:
        """Set ``mask_if_uneven`` to ``axes`` (left unset where no axis is one)."""
        if any(axes):
            self.mask_if_uneven = ArrayAttr([BoolAttr.from_bool(a) for a in axes])

    @property
    def wide_index(self) -> bool:
        return self.index_bits.value.data == 64

    def verify_access(self, buffer: BufferType, tile: SymbolicShapedType) -> None:
        check_tensor_tile(self, buffer, tile, self.offsets.dims)
        if len(self.mask.data) != buffer.rank:
            raise VerifyException(f"'{self.name}' needs one mask flag per buffer dim ({buffer.rank})")
        if self.mask_if_uneven is not None:
            if len(self.mask_if_uneven.data) != buffer.rank:
                raise VerifyException(f"'{self.name}' needs one mask_if_uneven flag per buffer dim ({buffer.rank})")
            if any(uneven and not masked for uneven, masked in zip(self.uneven_axes, self.masked_axes)):
                raise VerifyException(f"'{self.name}' mask_if_uneven marks an axis that has no mask")
        if self.index_bits.value.data not in (32, 64):
            raise VerifyException(f"'{self.name}' index_bits must be 32 or 64, got {self.index_bits.value.data}")


@irdl_op_definition
class LoadOp(BroadcastRows, GlobalAccessOp):
    """Global memory to registers. ``coherent`` loads bypass the L1 cache: they read data other programs of the same
    launch wrote (after a ``tiled_loop.last_arrival``)::

        %bias = memory_staged.load %b <[64*pid_n]> {mask = [false], index_bits = 32 : i64}
            : !memory_staged.buffer<global, [256], f16> -> !tiled_loop.tile<[1, 64], f16>

    ``broadcast_rows``, ``broadcast_batch``, ``rotate_half`` and ``column_period`` as ``tiled_loop.load``'s
    (:class:`~amk.dialects.tiled_loop.BroadcastRows`): the rows' mask is then against the space's rows, its first
    expression; rotated columns stay in their row, so the columns' mask is the source's; columns read modulo the
    source's row length need none.
    """

    name = "memory_staged.load"
    source = operand_def(BufferType)
    coherent = opt_prop_def(BoolAttr)
    broadcast_rows = opt_prop_def(ExprsAttr)
    broadcast_batch = opt_prop_def(ExprsAttr)
    rotate_half = opt_prop_def(IntegerAttr)
    column_period = opt_prop_def(IntegerAttr)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$source $offsets attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, offsets: Sequence, mask: Sequence[bool], index_bits: int, tile: TileType,
                 broadcast_rows: ExprsAttr | None = None, broadcast_batch: ExprsAttr | None = None,
                 rotate_half: IntegerAttr | None = None, column_period: IntegerAttr | None = None):
        properties = self.access_properties(offsets, mask, index_bits)
        if broadcast_rows is not None:
            properties["broadcast_rows"] = broadcast_rows
        if broadcast_batch is not None:
            properties["broadcast_batch"] = broadcast_batch
        if rotate_half is not None:
            properties["rotate_half"] = rotate_half
        if column_period is not None:
            properties["column_period"] = column_period
        super().__init__(operands=[source], properties=properties, result_types=[tile])

    def verify_(self) -> None:
        source = _buffer(self.source, "global", f"'{self.name}'")
        self.verify_access(source, tile_type(self.result, f"'{self.name}'"))
        self.verify_broadcast_rows(source)


@irdl_op_definition
class StageOp(GlobalAccessOp):
    """Global memory to a shared-memory slot, multi-buffered ``depth`` deep by the loop it sits in (the copy of
    iteration i+depth-1 is in flight while iteration i computes)::

        %a = memory_staged.stage %x <[64*pid_m, k]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64}
            : !memory_staged.buffer<global, [512, 256], f16> -> !memory_staged.buffer<shared, [64, 32], f16>

    With ``descriptor`` the copy goes through a tensor descriptor (TMA: the copy engine fetches the whole tile and
    fills what lies out of bounds with zeros) whenever the buffer's layout allows it at launch (rows contiguous,
    16-byte aligned); the masked pointer load stays as the fallback.
    """

    name = "memory_staged.stage"
    source = operand_def(BufferType)
    depth = prop_def(IntegerAttr)
    descriptor = opt_prop_def(UnitAttr)
    result = result_def(BufferType)
    traits = traits_def(Pure())
    assembly_format = "$source $offsets attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, offsets: Sequence, mask: Sequence[bool], index_bits: int, depth: int,
                 slot: BufferType):
        properties = self.access_properties(offsets, mask, index_bits) | {"depth": IntegerAttr(depth, i64)}
        super().__init__(operands=[source], properties=properties, result_types=[slot])

    def verify_(self) -> None:
        source = _buffer(self.source, "global", f"'{self.name}'")
        slot = _buffer(self.result, "shared", f"'{self.name}' result")
        if slot.rank != 2:
            raise VerifyException(f"'{self.name}' stages 2-D tiles, got a rank-{slot.rank} slot")
        if source.element_type != slot.element_type:
            raise VerifyException(f"'{self.name}' changes the element type ({source.element_type} -> {slot.element_type})")
        self.verify_access(source, slot)
        if self.depth.value.data < 1:
            raise VerifyException(f"'{self.name}' depth must be >= 1, got {self.depth.value.data}")
        if self.descriptor is not None and source.rank != 2:
            raise VerifyException(f"'{self.name}' descriptor copies need a 2-D buffer, got rank {source.rank}")


@irdl_op_definition
class StoreOp(GlobalAccessOp):
    """Registers to global memory, converting to the buffer's element type::

        memory_staged.store %y, %out <[64*pid_m, 64*pid_n]> {mask = [true, false], index_bits = 32 : i64}
            : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [M, 64], f16>
    """

    name = "memory_staged.store"
    value = operand_def(TileType)
    dest = operand_def(BufferType)
    assembly_format = "$value `,` $dest $offsets attr-dict `:` type($value) `->` type($dest)"

    def __init__(self, value: SSAValue, dest: SSAValue, offsets: Sequence, mask: Sequence[bool], index_bits: int):
        super().__init__(operands=[value, dest], properties=self.access_properties(offsets, mask, index_bits))

    def verify_(self) -> None:
        self.verify_access(_buffer(self.dest, "global", f"'{self.name}'"), self.value.type)


@irdl_op_definition
class AccumulatorOp(IRDLOperation):
    """A zero-initialized fp32 accumulator held in registers: ``%acc = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>``."""

    name = "memory_staged.accumulator"
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, tile: TileType):
        super().__init__(result_types=[tile])

    def verify_(self) -> None:
        if not isinstance(self.result.type.element_type, Float32Type):
            raise VerifyException(f"'{self.name}' accumulates in f32, got {self.result.type.element_type}")


@irdl_op_definition
class DotOp(IRDLOperation):
    """``acc + lhs @ rhs`` with operands in shared memory (staged) or registers (computed by a prologue)::

        %next = memory_staged.dot %a, %b, %acc : (!memory_staged.buffer<shared, [64, 32], f16>,
            !memory_staged.buffer<shared, [32, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
    """

    name = "memory_staged.dot"
    lhs = operand_def(BufferType | TileType)
    rhs = operand_def(BufferType | TileType)
    acc = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs `,` $acc attr-dict `:` `(` type($lhs) `,` type($rhs) `,` type($acc) `)` `->` type($result)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, acc: SSAValue):
        super().__init__(operands=[lhs, rhs, acc], result_types=[acc.type])

    def verify_(self) -> None:
        for operand in (self.lhs, self.rhs):
            if isinstance(operand.type, BufferType) and operand.type.space.data != "shared":
                raise VerifyException(f"'{self.name}' reads operands from shared memory or registers, not {operand.type}")
        check_dot(self, self.lhs.type, self.rhs.type, self.acc.type, self.result.type)


MEMORY_STAGED_OPS = [KernelOp, LoadOp, StageOp, StoreOp, AccumulatorOp, DotOp]

MemoryStagedDialect = Dialect("memory_staged", MEMORY_STAGED_OPS, [BufferType])
