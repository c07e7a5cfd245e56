"""The ``tiled_loop`` dialect: tiles, launch grids and loops, with tile sizes as symbols.

A fused region becomes one ``tiled_loop.kernel``. Its body computes the output tiles of one program. Offsets and
extents are sympy expressions over the program ids named by the kernel (``pid_m``), loop induction variables
(``k``), shape symbols (``B``) and tile-size symbols (``BLOCK_M``) that the autotuner binds later::

    tiled_loop.kernel @matmul_relu attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(64, BLOCK_N)]>,
        program_ids = ["pid_m", "pid_n"], strategy = "tile2d", ...} {
    ^bb0(%x: !tensor_op.tensor<[M, 32], f16>, %w: !tensor_op.tensor<[32, 64], f16>, %out: !tensor_op.tensor<[M, 64], f16>):
      %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
      %acc = tiled_loop.for "k" = 0 to 32 step BLOCK_K iter_args(%zero) : (...) -> (...) {
      ^bb1(%acc_in: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
        %a = tiled_loop.load %x <[pid_m*BLOCK_M, k]> : !tensor_op.tensor<[M, 32], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
        ...
      }
      %y = tiled_loop.unary "relu" ...
      tiled_loop.store %y, %out <[pid_m*BLOCK_M, pid_n*BLOCK_N]> : ...
    }

Tiles are 2-D: a rank-1 tensor is read as a row vector ``[1, BLOCK_N]`` or a column vector ``[BLOCK_M, 1]``, and
elementwise ops broadcast size-1 axes. Loads and stores carry no masks here: ``amk-stage`` decides where masks are
needed once tile sizes are known. ``tiled_loop.in_bounds`` names validity explicitly where values must be ignored
(padding columns entering a row reduction).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    TypeAttribute,
    UnitAttr,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, NoTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from amk.dialects.syntax import SymbolicExprList, SymbolicShapedType
from amk.dialects.tensor_op import TensorType
from amk.symbolic import Dim, provably_different


@irdl_attr_definition
class ExprsAttr(SymbolicExprList, ParametrizedAttribute):
    """A list of symbolic expressions: ``#tiled_loop.exprs<[pid_m * BLOCK_M, k]>``."""

    name = "tiled_loop.exprs"
    exprs: ArrayAttr[StringAttr]

    def __init__(self, exprs: Sequence[Dim | int | str]):
        super().__init__(SymbolicShapedType.shape_attr(exprs))


@irdl_attr_definition
class TileType(SymbolicShapedType, ParametrizedAttribute, TypeAttribute):
    """A 2-D register tile with symbolic sizes: ``!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>``."""

    name = "tiled_loop.tile"
    shape: ArrayAttr[StringAttr]
    element_type: Attribute

    def __init__(self, dims: Sequence[Dim | int | str], element_type: Attribute):
        super().__init__(self.shape_attr(dims), element_type)

    def verify(self) -> None:
        super().verify()
        if self.rank != 2:
            raise VerifyException(f"tiles are 2-D, got {self.rank} dims")


def format_float(value: float) -> str:
    """A float as the MLIR lexer reads it back exactly: ``1.0e-05`` rather than Python's ``1e-05``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent}" if exponent else mantissa


# The program id of a batched kernel's last grid axis: the batch index its rank-3 tensors are read and written at.
BATCH_PROGRAM_ID = "pid_b"


def batch_indices(batch_dims: Sequence[Dim]) -> list[Dim]:
    """Where a batched kernel's program reads a tensor whose leading ``batch_dims`` multiply to the kernel's batch
    count: its batch index, or, over several dims (a matmul operand ``[B, H, S, D]`` that the kernel reads in place,
    with a stride per dim), that index written in row-major order over them (``[pid_b // H, pid_b % H]``)."""
    indices, inner = [], Dim(1)
    for index, dim in reversed(list(enumerate(batch_dims))):
        quotient = Dim(BATCH_PROGRAM_ID) if inner == Dim(1) else Dim(f"floor({BATCH_PROGRAM_ID} / ({inner}))")
        indices.append(quotient if index == 0 else Dim(f"Mod({quotient}, {dim})"))
        inner = Dim(f"({inner}) * ({dim})")
    return indices[::-1]


def ancestors(op: Operation):
    """The ops enclosing ``op``, innermost first."""
    parent = op.parent_op()
    while parent is not None:
        yield parent
        parent = parent.parent_op()


def tile_type(value: SSAValue, context: str) -> TileType:
    if not isinstance(value.type, TileType):
        raise VerifyException(f"{context}: expected a !tiled_loop.tile, got {value.type}")
    return value.type


class RegisteredStrategies(Sequence[str]):
    """The names of the tiling strategies registered in :mod:`amk.lowering.strategies`, in registration order, read
    each time they are used (registering a strategy extends it): what a kernel's ``strategy`` may be. The dialect
    lists no strategy of its own. The registry sits in the lowering layer above the IR, so it is named here, as
    :mod:`amk.opt` names the passes, and imported on first use."""

    REGISTRY = "amk.lowering.strategies"

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return importlib.import_module(cls.REGISTRY).strategy_names()

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    def __repr__(self) -> str:
        return f"RegisteredStrategies{self._names()!r}"


def broadcast_tiles(shapes: Sequence[tuple[Dim, Dim]], context: str) -> tuple[Dim, Dim]:
    """The common shape of tiles whose axes are equal or 1."""
    out = [Dim(1), Dim(1)]
    for shape in shapes:
        for axis, size in enumerate(shape):
            if size == Dim(1):
                continue
            if out[axis] != Dim(1) and out[axis] != size:
                raise VerifyException(f"{context}: tile axis {axis} does not broadcast ({out[axis]} vs {size})")
            out[axis] = size
    return out[0], out[1]


def _check_result_shape(op: IRDLOperation, expected: tuple[Dim, Dim]) -> None:
    result = tile_type(op.results[0], f"'{op.name}'")
    if result.dims != tuple(expected):
        raise VerifyException(
            f"'{op.name}' result tile is [{', '.join(map(str, result.dims))}], "
            f"expected [{', '.join(map(str, expected))}]"
        )


def check_tensor_tile(op: Operation, tensor: Attribute, tile: TileType, offsets: Sequence[Dim]) -> None:
    """A tile moved to/from a tensor by ``op``: one offset per tensor dim; a rank-1 tensor maps to a row or column
    vector; a tensor of rank 3 or more is a batched kernel's, read at its batch index ``pid_b`` first (written over
    its leading dims by :func:`batch_indices` where there are several)."""
    context = f"'{op.name}'"
    if not isinstance(tensor, SymbolicShapedType):
        raise VerifyException(f"{context}: expected a tensor or buffer operand, got {tensor}")
    if len(offsets) != tensor.rank:
        raise VerifyException(f"{context}: {len(offsets)} offsets for a rank-{tensor.rank} tensor")
    kernel = next((parent for parent in ancestors(op) if isinstance(parent, KernelSignature)), None)
    batched = kernel is not None and kernel.batched
    if tensor.rank < 1 or (tensor.rank >= 3 and not batched):
        raise VerifyException(f"{context}: kernels see tensors of rank 1 or 2 (3 or more in a batched kernel), got "
                              f"rank {tensor.rank}")
    if tensor.rank >= 3:
        expected = batch_indices(tensor.dims[:-2])
        if list(offsets[:-2]) != expected:
            raise VerifyException(f"{context}: a rank-{tensor.rank} tensor is accessed at the batch index "
                                  f"{BATCH_PROGRAM_ID} first ([{', '.join(map(str, expected))}] over its leading "
                                  f"dims), got [{', '.join(map(str, offsets[:-2]))}]")
    if tensor.rank == 1 and Dim(1) not in tile.dims:
        raise VerifyException(f"{context}: a rank-1 tensor moves as a [1, n] or [n, 1] tile, got {list(map(str, tile.dims))}")


# --------------------------------------------------------------------------------------------------------------------
# Kernel structure
# --------------------------------------------------------------------------------------------------------------------


class KernelSignature:
    """The argument layout shared by the tile-level and the staged kernel op: inputs, then outputs, then the
    workspace buffers the runtime provides (``scratch``: per launch; ``counter``: i32, zero at launch, left zero)."""

    @property
    def batched(self) -> bool:
        """Whether the kernel repeats over a batch (a batched matmul's): its last grid axis is ``pid_b``, and its
        rank-3 tensors ``[batch, rows, cols]`` are accessed at ``[pid_b, row, col]``."""
        return BATCH_PROGRAM_ID in [p.data for p in self.program_ids.data]

    @property
    def inputs(self) -> tuple[SSAValue, ...]:
        return self.body.block.args[: self.num_inputs.value.data]

    @property
    def workspace_kinds(self) -> list[str]:
        return [w.data for w in self.workspace.data] if self.workspace is not None else []

    @property
    def outputs(self) -> tuple[SSAValue, ...]:
        args = self.body.block.args
        return args[self.num_inputs.value.data: len(args) - len(self.workspace_kinds)]


@irdl_op_definition
class KernelOp(KernelSignature, IRDLOperation):
    """One fused kernel at the tile level. Block arguments are the kernel's tensors: inputs, then outputs.

    ``grid`` gives the number of programs per launch axis; ``program_ids`` names each program's coordinates (the names
    used in offsets); with ``group_size`` set, a 2-D grid is walked in groups of that many row tiles so that tiles
    sharing a column of the weight run together. ``tile_params`` lists the symbols the autotuner binds, and
    ``arg_views`` how the launcher views each operand (``"transpose"`` reads a [N, K] weight as [K, N] by strides);
    ``problem`` is ``[rows, cols]`` of the iteration space, plus ``K`` when there is a matmul (configurations are
    chosen from it); ``workspace`` gives the kinds of trailing buffers the runtime provides::

        tiled_loop.kernel @k attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M)]>, program_ids = ["pid_m"],
            strategy = "row_strip", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 2 : i64} {
        ^bb0(%x: !tensor_op.tensor<[M, 64], f16>, %out: !tensor_op.tensor<[M, 64], f16>):
          ...
        }
    """

    name = "tiled_loop.kernel"
    sym_name = prop_def(SymbolNameConstraint())
    grid = prop_def(ExprsAttr)
    program_ids = prop_def(ArrayAttr[StringAttr])
    strategy = prop_def(StringAttr)
    tile_params = prop_def(ArrayAttr[StringAttr])
    num_inputs = prop_def(IntegerAttr)
    arg_views = opt_prop_def(ArrayAttr[StringAttr])
    group_size = opt_prop_def(StringAttr)
    workspace = opt_prop_def(ArrayAttr[StringAttr])
    problem = opt_prop_def(ExprsAttr)
    # Products the kernel rounds before it subtracts from them (no FMA contraction: its launches pass
    # enable_fp_fusion=False): amk-fold-exponent-scales sets it where a row's extremum is taken of a scaled tile that
    # may hold a mask's lowest value, whose contracted x * c - m is the product's rounding, 1e31 at -3.4e38 * c.
    exact_products = opt_prop_def(UnitAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$sym_name attr-dict-with-keyword $body"

    # The registered tiling strategies' names: what ``strategy`` may be.
    STRATEGIES: ClassVar[Sequence[str]] = RegisteredStrategies()
    WORKSPACE_KINDS: ClassVar[tuple[str, ...]] = ("scratch", "counter")

    def __init__(self, name: str, *, grid: Sequence, program_ids: Sequence[str], strategy: str,
                 tile_params: Sequence[str], num_inputs: int, arg_types: Sequence[Attribute],
                 arg_views: Sequence[str] | None = None, group_size: str | None = None,
                 workspace: Sequence[str] = (), problem: Sequence | None = None):
        properties = {
            "sym_name": StringAttr(name),
            "grid": ExprsAttr(grid),
            "program_ids": ArrayAttr([StringAttr(p) for p in program_ids]),
            "strategy": StringAttr(strategy),
            "tile_params": ArrayAttr([StringAttr(p) for p in tile_params]),
            "num_inputs": IntegerAttr(num_inputs, i64),
        }
        if arg_views is not None:
            properties["arg_views"] = ArrayAttr([StringAttr(v) for v in arg_views])
        if group_size is not None:
            properties["group_size"] = StringAttr(group_size)
        if workspace:
            properties["workspace"] = ArrayAttr([StringAttr(w) for w in workspace])
        if problem is not None:
            properties["problem"] = ExprsAttr(problem)
        super().__init__(properties=properties, regions=[Region(Block(arg_types=arg_types))])

    def verify_(self) -> None:
        verify_workspace(self)
        if self.strategy.data not in self.STRATEGIES:
            raise VerifyException(
                f"'{self.name}' strategy must be one of {', '.join(self.STRATEGIES)}, got {self.strategy.data!r}"
            )
        if len(self.grid.dims) != len(self.program_ids.data):
            raise VerifyException(
                f"'{self.name}' has {len(self.grid.dims)} grid axes but {len(self.program_ids.data)} program ids"
            )
        if self.group_size is not None and len(self.grid.dims) != 2 + self.batched:
            raise VerifyException(f"'{self.name}' group_size needs a 2-D grid (and a batch axis when batched)")
        if self.batched and self.program_ids.data[-1].data != BATCH_PROGRAM_ID:
            raise VerifyException(f"'{self.name}' batch axis ({BATCH_PROGRAM_ID}) must be the last grid axis")
        args = self.body.block.args
        if not 0 <= self.num_inputs.value.data <= len(args):
            raise VerifyException(f"'{self.name}' num_inputs {self.num_inputs.value.data} exceeds {len(args)} arguments")
        if self.arg_views is not None and len(self.arg_views.data) != len(args):
            raise VerifyException(f"'{self.name}' needs one arg_view per argument ({len(args)})")



def verify_workspace(kernel: KernelSignature) -> None:
    kinds = kernel.workspace_kinds
    args = kernel.body.block.args
    for kind, arg in zip(kinds, args[len(args) - len(kinds):]):
        if kind == "counter" and getattr(arg.type, "element_type", None) != i32:
            raise VerifyException(f"'{kernel.name}' counter workspace must hold i32, got {arg.type}")
    unknown = [k for k in kinds if k not in KernelOp.WORKSPACE_KINDS]
    if unknown:
        raise VerifyException(
            f"'{kernel.name}' workspace kinds must be among {', '.join(KernelOp.WORKSPACE_KINDS)}, got {unknown[0]!r}")
    if kernel.num_inputs.value.data + len(kinds) > len(kernel.body.block.args):
        raise VerifyException(f"'{kernel.name}' has more inputs and workspace buffers than arguments")


@irdl_op_definition
class ForOp(IRDLOperation):
    """A sequential loop; ``iv`` names the induction variable used in offsets. Carried values are block arguments::

        %acc = tiled_loop.for "k" = 0 to K step BLOCK_K iter_args(%zero) : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>)
            -> (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) {
        ^bb0(%acc_in: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
          ...
          tiled_loop.yield %acc_next : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
        }
    """

    name = "tiled_loop.for"
    iv = prop_def(StringAttr)
    bounds = prop_def(ExprsAttr)
    inits = var_operand_def()
    results_ = var_result_def()
    body = region_def("single_block")
    assembly_format = (
        "$iv `=` $bounds `iter_args` `(` $inits `)` attr-dict `:` functional-type($inits, $results_) $body"
    )

    def __init__(self, iv: str, lower, upper, step, inits: Sequence[SSAValue]):
        block = Block(arg_types=[v.type for v in inits])
        super().__init__(
            properties={"iv": StringAttr(iv), "bounds": ExprsAttr([lower, upper, step])},
            operands=[list(inits)], result_types=[[v.type for v in inits]], regions=[Region(block)],
        )

    @property
    def lower(self) -> Dim:
        return self.bounds.dims[0]

    @property
    def upper(self) -> Dim:
        return self.bounds.dims[1]

    @property
    def step(self) -> Dim:
        return self.bounds.dims[2]

    def verify_(self) -> None:
        if len(self.bounds.dims) != 3:
            raise VerifyException(f"'{self.name}' bounds are [lower, upper, step], got {len(self.bounds.dims)} values")
        block = self.body.block
        if [a.type for a in block.args] != [v.type for v in self.inits]:
            raise VerifyException(f"'{self.name}' block arguments must match iter_args types")
        if [r.type for r in self.results] != [v.type for v in self.inits]:
            raise VerifyException(f"'{self.name}' results must match iter_args types")
        terminator = block.last_op
        if not isinstance(terminator, YieldOp):
            raise VerifyException(f"'{self.name}' body must end with tiled_loop.yield")
        if [v.type for v in terminator.values] != [v.type for v in self.inits]:
            raise VerifyException(f"'{self.name}' yields values whose types differ from its iter_args")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a ``tiled_loop.for`` body with the next carried values: ``tiled_loop.yield %acc : T``."""

    name = "tiled_loop.yield"
    values = var_operand_def()
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(ForOp)))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


# --------------------------------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------------------------------


class BroadcastRows:
    """A load's optional ``broadcast_rows``: the tile's rows are rows of the kernel's iteration space, which the
    source has fewer of, its leading dims broadcast (position embeddings ``[1, T, C]`` added over ``[B, T, C]``).
    The property lists the space's row count, then a triple ``divisor, period, stride`` per leading dim the source
    keeps: row ``r`` of the space reads the source's row ``sum((r // divisor) % period * stride)``, and the rows past
    the space's are masked (not the source's). ``[B*T, 1, T, 1]`` reads ``[1, T, C]`` as its row ``r % T``. The ops
    define the property. A batched kernel's load may map its batch index likewise (``broadcast_batch``,
    :attr:`batch_map`). With ``rotate_half = G`` the columns are rotated by half a group of ``G`` within each group,
    the first half negated: column ``c = g + j`` (``g`` a multiple of ``G``, ``j < G``) reads ``-x[g + j + G/2]`` where
    ``j < G/2``, else ``x[g + j - G/2]`` (``tensor_op.rotate_half`` of the source; ``G`` the row's length when it
    rotates whole rows). With ``column_period = D`` column ``c`` of the space reads the source's column ``c % D``
    (``tensor_op.repeat_columns`` of a source of ``D`` columns), so that the columns need no mask."""

    @property
    def row_map(self) -> tuple[Dim, list[tuple[Dim, Dim, Dim]]] | None:
        """The space's rows and the triples, or None for a load of the source's own rows."""
        if self.broadcast_rows is None:
            return None
        extent, *terms = self.broadcast_rows.dims
        return extent, [tuple(terms[i:i + 3]) for i in range(0, len(terms), 3)]

    @property
    def batch_map(self) -> tuple[Dim, list[tuple[Dim, Dim, Dim]]] | None:
        """A batched kernel's ``broadcast_batch``, as :attr:`row_map` for the batch index: the kernel's batch count
        and one triple ``divisor, period, 1`` (a mask ``[B, 1, T, S]`` over scores ``[B, H, T, S]``: batch index
        ``b`` reads the source's matrix ``b // H``), or None for a load at the kernel's own batch index."""
        if self.broadcast_batch is None:
            return None
        extent, divisor, period = self.broadcast_batch.dims
        return extent, [(divisor, period, Dim(1))]

    def verify_broadcast_rows(self, source: SymbolicShapedType) -> None:
        if self.broadcast_rows is not None:
            count = len(self.broadcast_rows.dims)
            if count < 4 or (count - 1) % 3:
                raise VerifyException(f"'{self.name}' broadcast_rows holds the space's rows, then divisor, period and "
                                      f"stride triples: got {count} expressions")
            if source.rank != 2:
                raise VerifyException(f"'{self.name}' broadcast_rows reads a rank-2 source, got rank {source.rank}")
        if self.broadcast_batch is not None:
            if len(self.broadcast_batch.dims) != 3:
                raise VerifyException(f"'{self.name}' broadcast_batch holds the kernel's batch count, a divisor and a "
                                      f"period: got {len(self.broadcast_batch.dims)} expressions")
            if source.rank != 3:
                raise VerifyException(f"'{self.name}' broadcast_batch reads a rank-3 source, got rank {source.rank}")
        columns = source.dims[-1] if source.rank else None
        if self.rotate_half is not None:
            group = self.rotate_half.value.data
            if columns is None or not columns.is_static or group <= 0 or group % 2 or columns.value % group:
                raise VerifyException(f"'{self.name}' rotate_half swaps the halves of groups of {group} columns: an "
                                      f"even number dividing the source's rows, whose length must be known; got "
                                      f"{columns}")
        if self.column_period is not None and (columns is None or columns != Dim(self.column_period.value.data)):
            raise VerifyException(f"'{self.name}' column_period {self.column_period.value.data} is the source's row "
                                  f"length, got {columns}")


@irdl_op_definition
class LoadOp(BroadcastRows, IRDLOperation):
    """Reads a tile whose top-left element is at ``offsets`` (one per tensor dim)::

        %a = tiled_loop.load %x <[pid_m * BLOCK_M, k]> : !tensor_op.tensor<[M, 64], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>

    With ``broadcast_rows`` (:class:`BroadcastRows`) the rows are those of the kernel's space, mapped to the source's::

        %p = tiled_loop.load %pos <[pid_m * BLOCK_M, 0]> {broadcast_rows = #tiled_loop.exprs<[B*T, 1, T, 1]>}
            : !tensor_op.tensor<[T, 64], f16> -> !tiled_loop.tile<[BLOCK_M, 64], f16>
    """

    name = "tiled_loop.load"
    source = operand_def(TensorType)
    offsets = prop_def(ExprsAttr)
    broadcast_rows = opt_prop_def(ExprsAttr)
    broadcast_batch = opt_prop_def(ExprsAttr)
    rotate_half = opt_prop_def(IntegerAttr[IntegerType])
    column_period = opt_prop_def(IntegerAttr[IntegerType])
    result = result_def(TileType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$source $offsets attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, offsets: Sequence, tile: TileType, broadcast_rows: Sequence | None = None,
                 broadcast_batch: Sequence | None = None, rotate_half: int | None = None,
                 column_period: int | None = None):
        properties = {"offsets": ExprsAttr(offsets)}
        if broadcast_rows is not None:
            properties["broadcast_rows"] = ExprsAttr(broadcast_rows)
        if broadcast_batch is not None:
            properties["broadcast_batch"] = ExprsAttr(broadcast_batch)
        if rotate_half is not None:
            properties["rotate_half"] = IntegerAttr(rotate_half, i64)
        if column_period is not None:
            properties["column_period"] = IntegerAttr(column_period, i64)
        super().__init__(operands=[source], properties=properties, result_types=[tile])

    def verify_(self) -> None:
        tile = tile_type(self.result, f"'{self.name}'")
        if tile.element_type != self.source.type.element_type:
            raise VerifyException(f"'{self.name}' tile element type differs from the tensor's {self.source.type.element_type}")
        check_tensor_tile(self, self.source.type, tile, self.offsets.dims)
        self.verify_broadcast_rows(self.source.type)


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Writes a tile at ``offsets``; the tile is converted to the tensor's element type::

        tiled_loop.store %y, %out <[pid_m * BLOCK_M, n]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tensor_op.tensor<[M, 64], f16>
    """

    name = "tiled_loop.store"
    value = operand_def(TileType)
    dest = operand_def(TensorType)
    offsets = prop_def(ExprsAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$value `,` $dest $offsets attr-dict `:` type($value) `->` type($dest)"

    def __init__(self, value: SSAValue, dest: SSAValue, offsets: Sequence):
        super().__init__(operands=[value, dest], properties={"offsets": ExprsAttr(offsets)})

    def verify_(self) -> None:
        check_tensor_tile(self, self.dest.type, self.value.type, self.offsets.dims)


# --------------------------------------------------------------------------------------------------------------------
# Compute
# --------------------------------------------------------------------------------------------------------------------


@irdl_op_definition
class DotOp(IRDLOperation):
    """``acc + lhs @ rhs`` on tiles, accumulated in fp32::

        %next = tiled_loop.dot %a, %b, %acc : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>,
            !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    """

    name = "tiled_loop.dot"
    lhs = operand_def(TileType)
    rhs = operand_def(TileType)
    acc = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs `,` $acc attr-dict `:` `(` type($lhs) `,` type($rhs) `,` type($acc) `)` `->` type($result)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, acc: SSAValue):
        super().__init__(operands=[lhs, rhs, acc], result_types=[acc.type])

    def verify_(self) -> None:
        check_dot(self, self.lhs.type, self.rhs.type, self.acc.type, self.result.type)


def check_dot(op: IRDLOperation, lhs: SymbolicShapedType, rhs: SymbolicShapedType, acc: Attribute, result: Attribute) -> None:
    """Shared by the tile-level and staged dot: [m, k] x [k, n] + [m, n]."""
    if lhs.rank != 2 or rhs.rank != 2:
        raise VerifyException(f"'{op.name}' operands must be 2-D, got ranks {lhs.rank} and {rhs.rank}")
    (m, k), (k2, n) = lhs.dims, rhs.dims
    if provably_different(k, k2) or k != k2:
        raise VerifyException(f"'{op.name}' contracts lhs axis of size {k} with rhs axis of size {k2}")
    if not isinstance(acc, TileType) or acc.dims != (m, n):
        raise VerifyException(f"'{op.name}' accumulator must be a [{m}, {n}] tile, got {acc}")
    if result != acc:
        raise VerifyException(f"'{op.name}' result type must equal the accumulator type")


@irdl_op_definition
class FullOp(IRDLOperation):
    """A tile filled with one constant: ``%zero = tiled_loop.full 0.000000e+00 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>``.

    ``inf`` and ``-inf`` are written as such (``tiled_loop.full -inf : ...``)."""

    name = "tiled_loop.full"
    value = prop_def(FloatAttr)
    result = result_def(TileType)
    traits = traits_def(Pure())

    def __init__(self, value: float, tile: TileType):
        super().__init__(properties={"value": FloatAttr(float(value), f64)}, result_types=[tile])

    @property
    def number(self) -> float:
        return self.value.value.data

    @classmethod
    def parse(cls, parser: Parser) -> FullOp:
        negative = parser.parse_optional_punctuation("-") is not None
        if parser.parse_optional_keyword("inf") is not None:
            number = math.inf
        elif parser.parse_optional_keyword("nan") is not None:
            number = math.nan
        else:
            number = float(parser.parse_number())
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(-number if negative else number, parser.parse_type())
        op.attributes.update(attributes)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {format_float(self.number)}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


class _TileComputeOp(IRDLOperation):
    """Base for elementwise tile ops with a function name out of ``FUNCTIONS``."""

    fn = prop_def(StringAttr)
    FUNCTIONS: ClassVar[tuple[str, ...]] = ()

    def verify_fn(self) -> None:
        if self.fn.data not in self.FUNCTIONS:
            raise VerifyException(
                f"'{self.name}' function must be one of {', '.join(self.FUNCTIONS)}, got {self.fn.data!r}"
            )


@irdl_op_definition
class UnaryOp(_TileComputeOp):
    """An elementwise math function: ``%e = tiled_loop.unary "exp" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>``."""

    name = "tiled_loop.unary"
    FUNCTIONS: ClassVar[tuple[str, ...]] = ("exp", "exp2", "log", "erf", "sqrt", "rsqrt", "abs", "neg", "sigmoid")
    T: ClassVar = VarConstraint("T", base(TileType))
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$fn $input attr-dict `:` type($result)"

    def __init__(self, fn: str, input: SSAValue):
        super().__init__(operands=[input], properties={"fn": StringAttr(fn)}, result_types=[input.type])

    def verify_(self) -> None:
        self.verify_fn()


@irdl_op_definition
class BinaryOp(_TileComputeOp):
    """Elementwise arithmetic or comparison with size-1 axes broadcast::

        %y = tiled_loop.binary "add" %acc, %bias : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>,
            !tiled_loop.tile<[1, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>

    Comparisons (``lt``, ``le``, ``gt``, ``ge``, ``eq``, ``ne``) produce ``i1`` tiles."""

    name = "tiled_loop.binary"
    ARITHMETIC: ClassVar[tuple[str, ...]] = ("add", "sub", "mul", "div", "max", "min")
    COMPARISONS: ClassVar[tuple[str, ...]] = ("lt", "le", "gt", "ge", "eq", "ne")
    FUNCTIONS: ClassVar[tuple[str, ...]] = ARITHMETIC + COMPARISONS
    lhs = operand_def(TileType)
    rhs = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$fn $lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($result)"

    def __init__(self, fn: str, lhs: SSAValue, rhs: SSAValue):
        shape = broadcast_tiles([lhs.type.dims, rhs.type.dims], f"'{self.name}'")
        element = i1 if fn in self.COMPARISONS else lhs.type.element_type
        super().__init__(operands=[lhs, rhs], properties={"fn": StringAttr(fn)},
                         result_types=[TileType(shape, element)])

    def verify_(self) -> None:
        self.verify_fn()
        if self.lhs.type.element_type != self.rhs.type.element_type:
            raise VerifyException(
                f"'{self.name}' operands have different element types "
                f"({self.lhs.type.element_type} vs {self.rhs.type.element_type})"
            )
        _check_result_shape(self, broadcast_tiles([self.lhs.type.dims, self.rhs.type.dims], f"'{self.name}'"))


@irdl_op_definition
class SelectOp(IRDLOperation):
    """``where(cond, true_value, false_value)`` with broadcasting::

        %y = tiled_loop.select %valid, %x, %zero : (!tiled_loop.tile<[1, BLOCK_N], i1>,
            !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    """

    name = "tiled_loop.select"
    cond = operand_def(TileType)
    true_value = operand_def(TileType)
    false_value = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = (
        "$cond `,` $true_value `,` $false_value attr-dict `:` "
        "`(` type($cond) `,` type($true_value) `,` type($false_value) `)` `->` type($result)"
    )

    def __init__(self, cond: SSAValue, true_value: SSAValue, false_value: SSAValue):
        shape = broadcast_tiles([cond.type.dims, true_value.type.dims, false_value.type.dims], f"'{self.name}'")
        super().__init__(operands=[cond, true_value, false_value],
                         result_types=[TileType(shape, true_value.type.element_type)])

    def verify_(self) -> None:
        if self.cond.type.element_type != i1:
            raise VerifyException(f"'{self.name}' condition must be an i1 tile, got {self.cond.type}")
        if self.true_value.type.element_type != self.false_value.type.element_type:
            raise VerifyException(f"'{self.name}' branches have different element types")
        _check_result_shape(
            self, broadcast_tiles([o.type.dims for o in self.operands], f"'{self.name}'")
        )


class _TileToTileOp(IRDLOperation):
    """Base for the ops that turn one tile into another (cast, transpose, diagonal): one operand, one result."""

    input = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"


@irdl_op_definition
class CastOp(_TileToTileOp):
    """Element type conversion of a tile: ``%y = tiled_loop.cast %x : !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f32>``."""

    name = "tiled_loop.cast"

    def __init__(self, input: SSAValue, element_type: Attribute):
        super().__init__(operands=[input], result_types=[TileType(input.type.dims, element_type)])

    def verify_(self) -> None:
        if self.input.type.dims != self.result.type.dims:
            raise VerifyException(f"'{self.name}' changes the element type only, not the tile shape")


@irdl_op_definition
class TransposeOp(_TileToTileOp):
    """A tile with its axes swapped, e.g. the right operand of ``x @ x^T``:
    ``%xt = tiled_loop.transpose %x : !tiled_loop.tile<[BLOCK_M, BLOCK_K], bf16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_M], bf16>``."""

    name = "tiled_loop.transpose"

    def __init__(self, input: SSAValue):
        rows, cols = input.type.dims
        super().__init__(operands=[input], result_types=[TileType([cols, rows], input.type.element_type)])

    def verify_(self) -> None:
        rows, cols = self.input.type.dims
        _check_result_shape(self, (cols, rows))
        if self.result.type.element_type != self.input.type.element_type:
            raise VerifyException(f"'{self.name}' keeps the element type")


@irdl_op_definition
class DiagonalOp(_TileToTileOp):
    """The diagonal of a square tile as a column, ``[N, N] -> [N, 1]`` (the rows' sums of squares are the diagonal
    of ``x @ x^T``)::

        %sumsq = tiled_loop.diagonal %gram : !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    """

    name = "tiled_loop.diagonal"

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[TileType([input.type.dims[0], 1], input.type.element_type)])

    def verify_(self) -> None:
        rows, cols = self.input.type.dims
        if rows != cols:
            raise VerifyException(f"'{self.name}' needs a square tile, got [{rows}, {cols}]")
        _check_result_shape(self, (rows, Dim(1)))
        if self.result.type.element_type != self.input.type.element_type:
            raise VerifyException(f"'{self.name}' keeps the element type")


@irdl_op_definition
class RotateHalfOp(_TileToTileOp):
    """A tile whose columns are groups of ``group`` side by side, each group's halves swapped and the one moved first
    negated (``tensor_op.rotate_half`` of a tile computed in registers: a projection's heads before they are split
    off). The tile's columns must be whole groups, a multiple of ``group`` (the tuner keeps ``BLOCK_N`` so)::

        %r = tiled_loop.rotate_half %acc {group = 128 : i64} : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    """

    name = "tiled_loop.rotate_half"
    group = prop_def(IntegerAttr[IntegerType])
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, input: SSAValue, group: int):
        super().__init__(operands=[input], properties={"group": IntegerAttr(group, i64)}, result_types=[input.type])

    def verify_(self) -> None:
        group = self.group.value.data
        if group < 2 or group & (group - 1):
            raise VerifyException(f"'{self.name}' rotates groups of a power-of-two width (whole groups of a tile of "
                                  f"power-of-two columns), got {group}")
        if self.result.type != self.input.type:
            raise VerifyException(f"'{self.name}' keeps the tile's shape and element type")
        columns = self.input.type.dims[-1]
        if columns.is_static and columns.value % group:
            raise VerifyException(f"'{self.name}' needs whole groups of {group} columns in the tile, got {columns}")


@irdl_op_definition
class ReduceOp(_TileComputeOp):
    """Reduces a tile along its columns, keeping the axis: ``[R, C] -> [R, 1]``::

        %s = tiled_loop.reduce "sum" %x : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
    """

    name = "tiled_loop.reduce"
    FUNCTIONS: ClassVar[tuple[str, ...]] = ("sum", "max", "min")
    input = operand_def(TileType)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$fn $input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, fn: str, input: SSAValue):
        rows = input.type.dims[0]
        super().__init__(operands=[input], properties={"fn": StringAttr(fn)},
                         result_types=[TileType([rows, 1], input.type.element_type)])

    def verify_(self) -> None:
        self.verify_fn()
        _check_result_shape(self, (self.input.type.dims[0], Dim(1)))


@irdl_op_definition
class InBoundsOp(IRDLOperation):
    """True where a tile element at ``offsets`` lies inside ``extents``, axis by axis::

        %valid = tiled_loop.in_bounds <[0, n]> within <[M, 75]> : !tiled_loop.tile<[1, BLOCK_N], i1>
    """

    name = "tiled_loop.in_bounds"
    offsets = prop_def(ExprsAttr)
    extents = prop_def(ExprsAttr)
    result = result_def(TileType)
    traits = traits_def(Pure())
    assembly_format = "$offsets `within` $extents attr-dict `:` type($result)"

    def __init__(self, offsets: Sequence, extents: Sequence, shape: Sequence):
        super().__init__(properties={"offsets": ExprsAttr(offsets), "extents": ExprsAttr(extents)},
                         result_types=[TileType(shape, i1)])

    def verify_(self) -> None:
        if len(self.offsets.dims) != 2 or len(self.extents.dims) != 2:
            raise VerifyException(f"'{self.name}' needs two offsets and two extents")
        if self.result.type.element_type != i1:
            raise VerifyException(f"'{self.name}' result must be an i1 tile")


@irdl_op_definition
class LastArrivalOp(IRDLOperation):
    """Counts this program's arrival at a shared counter and tells whether it was the last of ``count`` programs.

    All stores the program made before are visible to the last arrival (a CTA barrier, then a release-acquire atomic
    at GPU scope); the last arrival resets the counter to zero, so the buffer is ready for the next launch::

        %last = tiled_loop.last_arrival %counters <[pid_m]> of <[cdiv(4096, BLOCK_N)]>
            : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32> -> i1
    """

    name = "tiled_loop.last_arrival"
    counters = operand_def()
    offsets = prop_def(ExprsAttr)
    count = prop_def(ExprsAttr)
    result = result_def(i1)
    assembly_format = "$counters $offsets `of` $count attr-dict `:` type($counters) `->` type($result)"

    def __init__(self, counters: SSAValue, offsets: Sequence, count):
        super().__init__(operands=[counters], properties={"offsets": ExprsAttr(offsets), "count": ExprsAttr([count])},
                         result_types=[i1])

    def verify_(self) -> None:
        _verify_counter(self)


def _verify_counter(op: LastArrivalOp | StripBarrierOp) -> None:
    counters = op.counters.type
    if not isinstance(counters, SymbolicShapedType) or counters.rank != 1:
        raise VerifyException(f"'{op.name}' counters must be a rank-1 tensor, got {counters}")
    if len(op.offsets.dims) != 1 or len(op.count.dims) != 1:
        raise VerifyException(f"'{op.name}' takes one offset and one count")


@irdl_op_definition
class StripBarrierOp(IRDLOperation):
    """Waits until ``count`` programs have arrived at a shared counter (this one included), then lets them all go.

    All stores the programs made before arriving are visible after it (a CTA barrier, a release atomic, an acquire
    spin at GPU scope). The last program to leave resets the counter to zero, so it is ready for the next launch.
    The programs must all be resident at once (a persistent launch of at most one program per SM); amk uses it in
    ``strip_sync`` kernels, where the tiles of one row strip wait for each other's row statistics::

        tiled_loop.strip_barrier %counters <[pid_m]> of <[cdiv(4096, BLOCK_N)]> : !tensor_op.tensor<[cdiv(M, BLOCK_M)], i32>
    """

    name = "tiled_loop.strip_barrier"
    counters = operand_def()
    offsets = prop_def(ExprsAttr)
    count = prop_def(ExprsAttr)
    assembly_format = "$counters $offsets `of` $count attr-dict `:` type($counters)"

    def __init__(self, counters: SSAValue, offsets: Sequence, count):
        super().__init__(operands=[counters], properties={"offsets": ExprsAttr(offsets), "count": ExprsAttr([count])})

    def verify_(self) -> None:
        _verify_counter(self)


KERNEL_OP_NAMES = ("tiled_loop.kernel", "memory_staged.kernel")  # the staged level keeps this dialect's control ops


@irdl_op_definition
class RelaunchOp(IRDLOperation):
    """Ends a launch of a kernel: the ops after it (up to the next relaunch) run as another launch over ``grid``, with
    its own ``program_ids``, once every program of the launch before has finished. Values cross it only through the
    kernel's buffers. ``label`` names the launch (its Triton function is ``<kernel>_<label>_kernel``; default
    ``finish``) and a ``note`` attribute says what its programs do. amk uses it in ``tile_stats`` kernels: output
    tiles write their rows' partial statistics, and a second, fully parallel launch merges them and normalizes every
    tile::

        tiled_loop.relaunch {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(4096, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"]}
    """

    name = "tiled_loop.relaunch"
    grid = prop_def(ExprsAttr)
    program_ids = prop_def(ArrayAttr[StringAttr])
    label = opt_prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict"

    DEFAULT_LABEL: ClassVar[str] = "finish"

    def __init__(self, grid: Sequence, program_ids: Sequence[str], label: str | None = None):
        properties = {"grid": ExprsAttr(grid), "program_ids": ArrayAttr([StringAttr(p) for p in program_ids])}
        if label is not None:
            properties["label"] = StringAttr(label)
        super().__init__(properties=properties)

    @property
    def launch_label(self) -> str:
        return self.label.data if self.label is not None else self.DEFAULT_LABEL

    def verify_(self) -> None:
        if len(self.grid.dims) != len(self.program_ids.data):
            raise VerifyException(f"'{self.name}' needs one program id per grid axis")
        if not self.launch_label.isidentifier():
            raise VerifyException(f"'{self.name}' label must be an identifier, got {self.launch_label!r}")
        block = self.parent_block()
        if block is None or block.parent_op() is None or block.parent_op().name not in KERNEL_OP_NAMES:
            raise VerifyException(f"'{self.name}' must be directly in a kernel body")
        before = set()
        for op in block.ops:
            if op is self:
                break
            before.update(op.results)
            if isinstance(op, RelaunchOp) and op.launch_label == self.launch_label:
                raise VerifyException(f"'{self.name}': two launches of one kernel are labelled "
                                      f"{self.launch_label!r}; each becomes a function of that name")
        op = self.next_op
        while op is not None and not isinstance(op, RelaunchOp):
            for inner in op.walk():
                if any(v in before for v in inner.operands):
                    raise VerifyException(f"'{self.name}': {inner.name} after it uses a value of an earlier launch; "
                                          "pass values through a buffer")
            op = op.next_op


@irdl_op_definition
class IfOp(IRDLOperation):
    """Runs its region when ``cond`` (a scalar i1) holds: ``tiled_loop.if %last { ... }``."""

    name = "tiled_loop.if"
    cond = operand_def(i1)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())
    assembly_format = "$cond attr-dict-with-keyword $body"

    def __init__(self, cond: SSAValue):
        super().__init__(operands=[cond], regions=[Region(Block())])


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """Runs a kernel on whole tensors; stands where the ``tensor_op.fused`` op was. The runtime views each operand
    as the kernel's argument type (flattening leading dims) and allocates the results::

        %y = tiled_loop.launch @fused_0(%x, %w) : (!tensor_op.tensor<[2, 16, 64], f16>, !tensor_op.tensor<[64, 32], f16>)
            -> !tensor_op.tensor<[2, 16, 32], f16>
    """

    name = "tiled_loop.launch"
    kernel = prop_def(SymbolRefAttr)
    args = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    assembly_format = "$kernel `(` $args `)` attr-dict `:` functional-type($args, $outputs)"

    def __init__(self, kernel: str, args: Sequence[SSAValue], result_types: Sequence[Attribute]):
        super().__init__(properties={"kernel": SymbolRefAttr(kernel)}, operands=[list(args)],
                         result_types=[list(result_types)])


TILED_LOOP_OPS = [KernelOp, LaunchOp, LastArrivalOp, StripBarrierOp, RelaunchOp, IfOp, ForOp, YieldOp, LoadOp, StoreOp, DotOp, FullOp, UnaryOp, BinaryOp, SelectOp, CastOp,
                  TransposeOp, DiagonalOp, RotateHalfOp, ReduceOp, InBoundsOp]

TiledLoopDialect = Dialect("tiled_loop", TILED_LOOP_OPS, [ExprsAttr, TileType])
