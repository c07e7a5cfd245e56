"""``amk-emit-gluon``: a warp-specialized Hopper GEMM kernel, written in Gluon, from a ``memory_staged.kernel``.

Milestone 1 of ``docs/design-gluon.md``: the kernels it takes are persistent ``tile2d`` GEMMs whose K loop stages two
operands through tensor descriptors (TMA) into one dot, followed by elementwise epilogue ops and one store of the
output tile, for example (``amk-stage{block_m=128 block_n=256 block_k=64 num_warps=8 persistent=1 tma=1}`` on a
matmul, bias and ReLU)::

    memory_staged.kernel @fused_0 attributes {strategy = "tile2d", group_size = "GROUP_M", persistent, ...} {
    ^bb0(%x: ..., %w: ..., %b: !memory_staged.buffer<global, [4096], f16>, %out0: ...):
      %acc = memory_staged.accumulator : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
      %acc_1 = tiled_loop.for "k" = <[0, 4096, BLOCK_K]> iter_args(%acc) ... {
        %x_tile = memory_staged.stage %x <[BLOCK_M*pid_m, k]> {depth = 3 : i64, descriptor, ...} : ...
        %w_tile = memory_staged.stage %w <[k, BLOCK_N*pid_n]> {depth = 3 : i64, descriptor, ...} : ...
        %acc_3 = memory_staged.dot %x_tile, %w_tile, %acc_2 : ...
        tiled_loop.yield %acc_3 : ...
      }
      %b_tile = memory_staged.load %b <[BLOCK_N*pid_n]> ... -> !tiled_loop.tile<[1, BLOCK_N], f16>
      ... tiled_loop.cast / binary "add" / binary "max" ...
      memory_staged.store %2, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> ...
    }

becomes one cooperative persistent kernel (``gluon_source`` on the kernel, with the same ``launch(...)`` as the
Triton emitter's source): a one-warp producer partition walks the output tiles in grouped order and TMA-loads the
operand tiles into a ring of ``num_stages`` shared-memory slots, each guarded by a ``ready`` and an ``empty``
mbarrier; the default partition (the kernel's ``num_warps`` warps) walks the same tiles, issues asynchronous
``warpgroup_mma`` on each ready slot with the fp32 accumulator in registers (``NVMMADistributedLayout``), releases the
slot, then applies the epilogue to the accumulator in that layout and writes the tile through shared memory and a
TMA store, which overlaps the next tile's main loop. A weight read transposed (``nn.Linear``'s ``[N, K]``, the
kernel's argument the view ``W^T``) is loaded as ``[BLOCK_N, BLOCK_K]`` tiles of its own rows, through a descriptor
of W itself, and ``wgmma`` reads each slot permuted (a K-major B). The kernel makes its TMA descriptors on the device
(``tma.make_tensor_descriptor`` in global scratch, once per program), so that a launch passes pointers and integers
only, as a Triton kernel's does: the operands' before the partitions start (the producer's first loads wait for them),
the output's in each consumer partition, where writing and fencing it overlaps the first tile's main loop instead of
delaying the first loads. Anything else is refused with what is accepted.

Milestone 3: a ``strip_finish`` kernel (a GEMM whose epilogue ends in a LayerNorm / RMSNorm over the whole row) goes
the same way up to its epilogue, which the consumer runs as the Triton emitter's handlers write it, each tile value in
a layout of its shape: the accumulator's wgmma layout for tiles of its rows and columns and their ``[BLOCK_M, 1]`` /
``[1, BLOCK_N]`` slices, a blocked layout for the strip's ``[BLOCK_M, 64]`` statistics (converted back after their
reduction). Its stores use pointers (the pre-normalization tile must be visible to the program that finishes the
strip, which a TMA store in triton 3.6 does not guarantee), and its barrier is the consumer's own warps'. Whole tiles
and vector rows go through global memory in a coalesced blocked layout (``io_layout``, 8 contiguous values a thread:
16-byte accesses where the wgmma layout's pairs of columns give 4-byte ones), converted to and from the
accumulator's; a row's statistics are stored from a layout of a row per thread (``rows_layout``); the strip's
finishing sweep, which only reads, normalizes and writes, keeps its tiles in ``io_layout`` throughout.

Milestone 4: a ``chunk_recompute`` kernel (a short K before a row reduction: workload G, attention's probabilities,
plain or batched) is a *column sweep* (its strategy's ``gluon_form``), written by :class:`GluonSweepEmitter`: each of
its launches warp-specialized, a one-warp producer TMA-loading each consumer's whole-K lhs rows once and the chunk's
rhs tiles into a ring, consumer warpgroups of 64 rows each issuing a column tile's wgmma before folding the tile
before it (``docs/design-gluon.md``).

Gluon's API moved between triton 3.6 (the GPU machine's) and 3.9: the TMA copies and the thread barrier are spelled
as the installed triton spells them (:func:`installed_gluon_api`), so emit where the kernel will be compiled.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import sympy
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, i1
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from amk.dialects import memory_staged, tiled_loop
from amk.lowering.configs import KernelConfig
from amk.lowering.emit_triton import (
    _OFFSETS_FIT_INT32,
    _SM_COUNT,
    _TMA_READABLE,
    _TMA_WORKSPACE,
    KernelSourceTarget,
    TritonEmitter,
    _Launch,
    split_launches,
    triton_name,
    unflattened_ids,
)
from amk.lowering.indented_writer import IndentedWriter
from amk.lowering.stage import element_size
from amk.lowering.strategies import strategy_named
from amk.lowering.strategies.base import COLUMN_SWEEP
from amk.symbolic import Dim

_ACCEPTED = ("amk-emit-gluon emits persistent tile-grid GEMM kernels (tile2d, strip_finish): a K loop whose body stages "
             "two fp16/bf16 operands (the rhs possibly a transposed view) through tensor descriptors into one "
             "memory_staged.dot, then an epilogue of tiled_loop "
             "ops (binary, unary, select, cast, full, reduce, in_bounds; a strip's last_arrival with an if and for "
             "loops under it) and pointer loads and stores, the output tile stored last through TMA or with pointers "
             "(lower with amk-stage{persistent=1 tma=1})")
_EPILOGUE_OPS = (tiled_loop.BinaryOp, tiled_loop.UnaryOp, tiled_loop.SelectOp, tiled_loop.CastOp, tiled_loop.FullOp,
                 tiled_loop.ReduceOp, tiled_loop.InBoundsOp, tiled_loop.LastArrivalOp, tiled_loop.IfOp,
                 tiled_loop.ForOp, tiled_loop.YieldOp, memory_staged.LoadOp, memory_staged.StoreOp)
# The producer is one warp that only issues TMA copies and waits on barriers: few registers, the rest go to the MMA warps.
_PRODUCER_WARPS, _PRODUCER_REGISTERS = 1, 40
# How the output tiles are shared between the MMA warps: "cooperative", all of the kernel's warps on each tile; or
# "pingpong", two consumer warpgroups (the kernel's num_warps = 4 each) on alternate tiles, so that one applies its
# epilogue while the other runs its main loop (CUTLASS's ping-pong kernels).
SCHEDULES = ("cooperative", "pingpong")
# Global memory is read and written in a coalesced layout, ``_IO_VECTOR`` contiguous values per thread along the row
# (16 bytes of a 16-bit type) and a warp's threads along the row: in the accumulator's wgmma layout a thread holds two adjacent columns, so a tile
# read or written there takes a 64-bit pointer per pair (a [128, 256] tile's alone fill 128 registers a thread) and
# 4-byte accesses; the strip_finish kernels spilled in their epilogue and sweep (1070 bytes a thread for C's).
_IO_VECTOR = 8
# The second consumer warpgroup is a worker partition: its register budget (the producer's warpgroup takes 40, the
# default partition what is left of the 64K registers).
_CONSUMER_REGISTERS = 232

# The head of every emitted Gluon file.
_GLUON_PREAMBLE = ["# Generated by amk from memory_staged IR: edit the IR or the passes, not this file.",
                   "import torch",
                   "import triton",
                   "import triton.language as tl",
                   "from triton.experimental import gluon",
                   "from triton.experimental.gluon import language as gl",
                   "from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, "
                   "warpgroup_mma,",
                   "                                                               warpgroup_mma_wait)"]

_TMA_OPERAND = '''def _tma_operand(tensor, transposed=False, output=False):
    """``tensor`` as the kernel's TMA descriptors can address it: its rows (or its transpose's, where the kernel reads
    it ``transposed``) as ``_tma_readable`` asks. An input that TMA cannot read as it is (a sliced, expanded or
    overlapping view) is read from a copy that it can; an output (amk allocates them so) must be readable. The
    descriptors are made on the device, where nothing checks them again."""
    rows = tensor.transpose(-1, -2) if transposed else tensor
    if not _tma_readable(rows):
        if output:
            raise ValueError(f"this Gluon kernel stores tiles with TMA, which needs contiguous rows, 16-byte aligned "
                             f"and a multiple of 16 bytes apart; got strides {tensor.stride()} of a {tensor.dtype} "
                             "tensor")
        rows = rows.clone(memory_format=torch.contiguous_format)
        if not _tma_readable(rows):  # rows whose length is not a multiple of 16 bytes
            raise ValueError(f"this Gluon kernel reads tiles with TMA, which needs rows a multiple of 16 bytes long; "
                             f"got rows of {rows.shape[-1]} {rows.dtype} values")
        return rows.transpose(-1, -2) if transposed else rows
    return tensor'''


@dataclass(frozen=True)
class GluonApi:
    """How the installed triton spells the Gluon calls that were renamed after 3.6."""

    tma_load: str
    tma_store: str
    thread_barrier: str


TRITON_3_6_API = GluonApi("tma.async_copy_global_to_shared", "tma.async_copy_shared_to_global", "gl.thread_barrier")
TRITON_3_9_API = GluonApi("tma.async_load", "tma.async_store", "gl.barrier")


@functools.cache
def installed_gluon_api() -> GluonApi:
    """The spellings of the installed triton, read once (3.6 has the old names, 3.9 the new ones)."""
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.hopper import tma
    except ImportError as error:
        raise PassFailedException(f"amk-emit-gluon needs triton's Gluon (triton >= 3.6): {error}") from error
    return GluonApi(TRITON_3_9_API.tma_load if hasattr(tma, "async_load") else TRITON_3_6_API.tma_load,
                    TRITON_3_9_API.tma_store if hasattr(tma, "async_store") else TRITON_3_6_API.tma_store,
                    TRITON_3_9_API.thread_barrier if hasattr(gl, "barrier") else TRITON_3_6_API.thread_barrier)


def wgmma_tile_problem(block_m: int, block_n: int, warps: int, schedule: str = "cooperative") -> str | None:
    """Why an output tile cannot be the accumulator of this emitter's wgmma warps, or None: it is split along M between
    the warps, 16 rows per warp per wgmma (so a warpgroup takes 64), and wgmma's N is a multiple of 8 up to 256; in
    ping-pong each tile is one warpgroup's."""
    if schedule == "pingpong" and warps != 4:
        return f"num_warps = {warps}: in the ping-pong schedule each consumer is one warpgroup (num_warps = 4)"
    if schedule == "pingpong" and block_m * block_n > 128 * 128:
        # one warpgroup holds the accumulator: above 128 fp32 values per thread it spills within its 232 registers
        return (f"a {block_m} x {block_n} tile is more than one warpgroup's accumulator holds in the ping-pong schedule "
                "(at most 128 x 128)")
    if warps % 4 or block_m % (16 * warps):
        return (f"BLOCK_M = {block_m} rows cannot be split between {warps} warps as wgmma needs (num_warps a multiple "
                "of 4, BLOCK_M a multiple of 16 * num_warps)")
    if block_n % 8 or block_n > 256:
        return f"BLOCK_N = {block_n} is not a multiple of 8 up to 256"
    return None


# Shared memory a block may take on Hopper (227 KB on every sm_90 part, the only GPUs these kernels run on): the ring
# of operand tiles and the output tile staged for its TMA store share it.
HOPPER_SHARED_MEMORY = 232448
# The columns of each piece of an output tile stored piecewise (:func:`store_pieces`).
PIECE_COLUMNS = 64


def ring_bytes(block_m: int, block_n: int, block_k: int, stages: int, operand_bytes: int) -> int:
    """Shared memory of the ring: ``stages`` slots, each a ``block_m x block_k`` and a ``block_k x block_n`` tile."""
    return stages * (block_m + block_n) * block_k * operand_bytes


def store_pieces(block_m: int, block_n: int, block_k: int, stages: int, operand_bytes: int, output_bytes: int,
                 schedule: str = "cooperative", shared_memory: int = HOPPER_SHARED_MEMORY) -> int | None:
    """Into how many pieces of columns a kernel's output tile goes to its TMA store: 1 (staged whole) where the ring
    of ``stages`` operand tiles and the whole tile fit in ``shared_memory``; else pieces of ``PIECE_COLUMNS`` columns
    through two staging buffers, one piece being stored while the next is written (as CUTLASS's epilogues do; a
    128 x 256 tile's 4 stages then fit: 192 KB of ring and 32 KB of staging, not 64); None where neither fits. In
    ping-pong each consumer stages its tile whole."""
    ring = ring_bytes(block_m, block_n, block_k, stages, operand_bytes)
    whole = block_m * block_n * output_bytes * (2 if schedule == "pingpong" else 1)
    if ring + whole <= shared_memory:
        return 1
    pieces = block_n // PIECE_COLUMNS
    if (schedule == "cooperative" and pieces > 1 and pieces & (pieces - 1) == 0 and block_n % PIECE_COLUMNS == 0
            and ring + 2 * block_m * PIECE_COLUMNS * output_bytes <= shared_memory):
        return pieces
    return None


def _gluon(text: str) -> str:
    """Triton code printed by the inherited tile-op handlers, in Gluon: ``gl`` re-exports ``tl``'s elementwise
    functions and dtypes; ``tl.PropagateNan`` (a constant) has no ``gl`` name and stays; ``tl.math.div_rn`` is
    ``gl.div_rn``."""
    return re.sub(r"\btl\.(?!PropagateNan)", "gl.", text.replace("tl.math.div_rn(", "tl.div_rn("))


class _GluonWriter(IndentedWriter):
    """Kernel source in Gluon: what the inherited Triton handlers write is spelled with ``gl`` (:func:`_gluon`)."""

    def writeline(self, text: str) -> None:
        super().writeline(_gluon(text))


@dataclass
class _MainLoop:
    """The parts of an accepted kernel: the accumulator, the K loop with its two staged operands and its dot, the
    epilogue ops and the store of the output tile through TMA (None where the epilogue goes on after storing it, as
    strip_finish's does: its stores then all use pointers)."""

    accumulator: memory_staged.AccumulatorOp
    loop: tiled_loop.ForOp
    stages: tuple[memory_staged.StageOp, memory_staged.StageOp]
    dot: memory_staged.DotOp
    epilogue: list[Operation]
    store: memory_staged.StoreOp | None


class GluonTileEmitter(TritonEmitter):
    """What the Gluon emitters share: expressions, names, origin comments and the elementwise tile ops are the Triton
    emitter's, spelled with ``gl``; every tile value is put in a layout of its shape (:meth:`layout_of`: the wgmma
    accumulator's for tiles of its rows and columns, ``tile_dims``, and their slices, a blocked one for others) and
    converted where an op reads it in another. A subclass parses its kind of kernel, then sets ``tile_dims`` and
    ``tma_stored`` (the store of the output tile that goes through TMA, or None)."""

    drops_uneven_masks = False  # its kernels are for static tile grids; their few pointer accesses keep every mask
    # What the emitter takes, said when it refuses a kernel.
    accepted: str = _ACCEPTED

    def __init__(self, kernel: memory_staged.KernelOp, api: GluonApi | None = None):
        super().__init__(kernel)
        problem = _operand_problem(kernel)
        if problem:
            raise self.refuse(problem)
        self.api = api or installed_gluon_api()
        # Where tile values live: tiles of the accumulator's rows and columns (and their [BLOCK_M, 1] / [1, BLOCK_N]
        # slices) in its wgmma layout (``tile_layout``), except in a strip's finishing sweep, which only reads and
        # writes memory and keeps them in the coalesced ``io_layout``; any other shape (a strip's [BLOCK_M, 64]
        # statistics) in a blocked layout. ``layouts`` records where each tile value was put.
        self.acc_layout, self.stats_layout = self.fresh("acc_layout"), self.fresh("stats_layout")
        self.io_layout, self.rows_layout = self.fresh("io_layout"), self.fresh("rows_layout")
        self.tile_layout = self.current_layout = self.acc_layout
        self.layouts: dict[SSAValue, str] = {}
        self.tile_dims: tuple[Dim, ...] = ()
        self.tma_stored: memory_staged.StoreOp | None = None

    @property
    def tma_store(self) -> bool:
        """Whether the output tile is stored through TMA (else every store uses pointers)."""
        return self.tma_stored is not None

    # -- what is accepted --------------------------------------------------------------------------------------------
    def refuse(self, reason: str) -> PassFailedException:
        return PassFailedException(f"kernel @{self.kernel.sym_name.data}: {reason}. {self.accepted}")

    def constant(self, dim: Dim) -> int:
        value = dim.expr.xreplace({s: sympy.Integer(self.constants[str(s)]) for s in dim.expr.free_symbols
                                   if str(s) in self.constants})
        if not value.is_Integer:
            raise self.refuse(f"tile size {dim.text} is not a constant")
        return int(value)

    # -- Gluon's versions of the inherited printers (the writers spell ``tl`` as ``gl``) ----------------------------
    def arange(self, size: str, axis: int) -> str:
        return f"gl.arange(0, {size}, gl.SliceLayout({1 - axis}, {self.current_layout}))"

    def full(self, shape: str, value: str, dtype: str) -> str:
        return f"gl.full(({shape}), {value}, gl.{dtype}, layout={self.current_layout})"

    def barrier(self) -> str:
        return f"{self.api.thread_barrier}()"

    def loop_range(self, bounds: str, stages: int | None) -> str:
        """Gluon has no pipelined range: its partitions overlap loads with the MMAs instead."""
        return f"range({bounds})"

    def layout_of(self, tile: tiled_loop.TileType) -> str:
        """The layout a tile of this shape lives in where it is made: ``tile_layout`` for the accumulator's rows and
        columns (and their ``[BLOCK_M, 1]`` / ``[1, BLOCK_N]`` slices), the blocked one for any other shape."""
        rows, cols = tile.dims
        acc_rows, acc_cols = self.tile_dims
        return self.tile_layout if rows in (Dim(1), acc_rows) and cols in (Dim(1), acc_cols) else self.stats_layout

    def layout_held(self, value: SSAValue) -> str:
        """The layout ``value`` was put in (its shape's, for a loop's block argument)."""
        return self.layouts.get(value) or self.layout_of(value.type)

    def coalesced(self, op: Operation) -> bool:
        """Whether ``op`` reads or writes a whole tile of global memory with pointers, or reads a ``[1, BLOCK_N]``
        row of a vector (a bias, a norm's weight): in ``io_layout``. Not in a kernel that stores its output through
        TMA: its staging tile takes the shared memory that converting a tile to and from ``io_layout`` needs (B's
        tiles and ring leave 14 KB of the H200's 227)."""
        if self.tma_store:
            return False
        if isinstance(op, memory_staged.LoadOp):
            tile = op.result.type
        elif isinstance(op, memory_staged.StoreOp) and op is not self.tma_stored:
            tile = op.value.type
        else:
            return False
        rows, cols = tile.dims
        whole = rows != Dim(1) or isinstance(op, memory_staged.LoadOp)
        return whole and cols != Dim(1) and self.layout_of(tile) == self.tile_layout

    def stores_row_values(self, op: Operation) -> bool:
        """Whether ``op`` stores one value per row of the tile (a ``[BLOCK_M, 1]`` statistic) with pointers: in
        ``rows_layout``, a row per thread. In the accumulator's layout every thread holding a copy of a row's value
        stores it, and triton 3.6 does not drop the copies (257 stores a thread for C's two statistics, against 5 in
        3.9)."""
        if not isinstance(op, memory_staged.StoreOp) or op is self.tma_stored:
            return False
        rows, cols = op.value.type.dims
        return cols == Dim(1) and rows != Dim(1) and self.layout_of(op.value.type) == self.tile_layout

    def emit_op(self, op: Operation) -> None:
        """An op in the layout of its result (or of the tile it stores or reduces; a whole tile's pointer load or
        store in ``io_layout``, a row statistic's store in ``rows_layout``): a tile operand that lives in another
        layout is converted first."""
        if self.coalesced(op):
            self.current_layout = self.io_layout
        elif self.stores_row_values(op):
            self.current_layout = self.rows_layout
        elif isinstance(op, memory_staged.StoreOp):
            self.current_layout = self.layout_of(op.value.type)
        elif isinstance(op, tiled_loop.ReduceOp):
            self.current_layout = self.layout_of(op.input.type)
        elif op.results and isinstance(op.results[0].type, tiled_loop.TileType) and not isinstance(op, tiled_loop.ForOp):
            self.current_layout = self.layout_of(op.results[0].type)
        else:
            super().emit_op(op)
            return
        saved: dict[SSAValue, tuple] = {}
        if (isinstance(op, memory_staged.StoreOp) and self.name(op.value).isidentifier()
                and self.layout_held(op.value) != self.current_layout):
            # cast to the buffer's type first: the conversion's shared memory then holds 16-bit values, not fp32
            self.convert_under_new_name(op.value, self.convert(op.value, op.dest.type.element_type),
                                        self.current_layout, saved, "stored")
        for operand in op.operands:
            text = self.name(operand) if isinstance(operand.type, tiled_loop.TileType) else ""
            # a literal (an inlined scalar) has no layout; an inlined name (a reduce of one column) has its input's
            if (text.isidentifier() and operand not in saved
                    and self.layout_held(operand) != self.current_layout):
                self.convert_under_new_name(operand, text, self.current_layout, saved)
        super().emit_op(op)
        if isinstance(op, memory_staged.LoadOp) and self.current_layout != self.layout_of(op.result.type):
            name = self.name(op.result)  # read coalesced, computed on where the accumulator is
            self.code.writeline(f"{name} = gl.convert_layout({name}, {self.layout_of(op.result.type)})")
        for result in op.results:
            if isinstance(result.type, tiled_loop.TileType):
                self.layouts[result] = self.layout_of(result.type)
        self.restore_names(saved)

    def convert_under_new_name(self, value: SSAValue, text: str, layout: str, saved: dict, suffix: str = "here"):
        """Write ``text`` (``value``'s name, or an expression of it) converted to ``layout`` under a fresh name,
        which the next op reads for ``value``; ``saved`` keeps the name and inline text to put back
        (:meth:`restore_names`)."""
        name = self.name(value)
        saved[value] = (self.names.get(value), self.inline.pop(value, None))
        converted = self.fresh(f"{name}_{suffix}")
        self.code.writeline(f"{converted} = gl.convert_layout({text}, {layout})")
        self.names[value] = converted

    def restore_names(self, saved: dict) -> None:
        for value, (name, inline) in saved.items():
            if name is None:
                del self.names[value]
            else:
                self.names[value] = name
            if inline is not None:
                self.inline[value] = inline

    def emit_tiled_loop_reduce(self, op: tiled_loop.ReduceOp) -> None:
        """Reduced in the layout of its input; a row statistic of a blocked tile goes to its shape's layout."""
        super().emit_tiled_loop_reduce(op)
        if op.result not in self.inline and self.layout_of(op.result.type) != self.current_layout:
            name = self.name(op.result)
            self.code.writeline(f"{name} = gl.convert_layout({name}, {self.layout_of(op.result.type)})")

    def emit_tiled_loop_for(self, op: tiled_loop.ForOp) -> None:
        """A loop's carried tiles live in their shape's layout here: an initial value held in another is converted
        first."""
        saved: dict[SSAValue, tuple] = {}
        for init, arg in zip(op.inits, op.body.block.args):
            text = self.name(init)
            if (isinstance(init.type, tiled_loop.TileType) and text.isidentifier() and init not in saved
                    and self.layout_held(init) != self.layout_of(arg.type)):
                self.convert_under_new_name(init, text, self.layout_of(arg.type), saved)
        super().emit_tiled_loop_for(op)
        self.restore_names(saved)
        for value in [*op.body.block.args, *op.results]:
            if isinstance(value.type, tiled_loop.TileType):
                self.layouts[value] = self.layout_of(value.type)

    def emit_tiled_loop_if(self, op: tiled_loop.IfOp) -> None:
        """A strip's finishing sweep (the branch of its last tile) only reads, normalizes and writes tiles: they stay
        in ``io_layout`` there, with no conversion through shared memory."""
        outer, self.tile_layout = self.tile_layout, self.io_layout
        super().emit_tiled_loop_if(op)
        self.tile_layout = outer

    def emit_tiled_loop_unary(self, op: tiled_loop.UnaryOp) -> None:
        """``gl`` has no sigmoid (SiLU's): it is written out as Triton defines it, ``1 / (1 + exp(-x))``."""
        if op.fn.data == "sigmoid":
            self.assign(op.result, f"1.0 / (1.0 + gl.exp(-{self.name(op.input)}))")
            return
        super().emit_tiled_loop_unary(op)

    def write_layouts(self, ops: list[Operation], warps: int) -> None:
        """The consumer's layouts, as constexprs: the accumulator's (wgmma's instruction tile: 16 rows, the widest N
        dividing BLOCK_N, a multiple of 8 up to 256, K of 16), and those ``ops`` put values in (a blocked layout for
        tiles of other shapes, a row a thread for stored row statistics, the coalesced one for whole tiles read or
        written with pointers and a strip's finishing sweep)."""
        code = self.code
        instr_n = max(n for n in range(8, 257, 8) if self.block_n % n == 0)
        code.writeline(f"{self.acc_layout}: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], "
                       f"warps_per_cta=[{warps}, 1], instr_shape=[16, {instr_n}, 16])")
        if any(self.layout_of(value.type) == self.stats_layout for op in ops for value in op.results
               if isinstance(value.type, tiled_loop.TileType)):
            code.writeline(f"{self.stats_layout}: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [{warps}, 1], "
                           "[1, 0])")
        if any(self.stores_row_values(op) for op in ops):
            code.writeline(f"{self.rows_layout}: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [{warps}, 1], "
                           "[0, 1])")
        if any(isinstance(op, tiled_loop.IfOp) or self.coalesced(op) for op in ops):
            # a warp's threads along a row: a power of two (the tile's columns may be 192 = 3 x 64)
            across = 1 << (min(32, self.block_n // _IO_VECTOR).bit_length() - 1)
            code.writeline(f"{self.io_layout}: gl.constexpr = gl.BlockedLayout([1, {_IO_VECTOR}], "
                           f"[{32 // across}, {across}], [{warps}, 1], [1, 0])")

    # -- kernel parameters and descriptors -----------------------------------------------------------------------
    def descriptor_stride(self, buffer: SSAValue) -> str:
        """The parameter holding the row stride of ``buffer``'s descriptor (of W itself where the kernel reads W^T)."""
        return f"{self.names[buffer]}_desc_stride"

    def shared_layout(self, buffer: SSAValue, block: list[int]) -> str:
        """The swizzled shared-memory layout of ``buffer``'s TMA blocks, which wgmma and TMA read."""
        return (f"gl.NVMMASharedLayout.get_default_for([{', '.join(map(str, block))}], "
                f"gl.{triton_name(buffer.type.element_type)})")

    def make_descriptor(self, buffer: SSAValue, block: list[int]) -> str:
        """The statement making ``buffer``'s TMA descriptor (in global scratch) for blocks of ``block``: over the
        operand's own rows (the last two dims of a transposed view swapped back), a batched buffer's matrices one
        after another (its batch stride first)."""
        shape = [self.expr(d) for d in buffer.type.dims]
        if self.read_transposed(buffer):
            shape[-2:] = shape[:-3:-1]
        strides = [param for param, _ in self.descriptor_strides(buffer)]
        return (f"{self.descriptor(buffer)} = tma.make_tensor_descriptor({self.names[buffer]}_ptr, "
                f"[{', '.join(shape)}], [{', '.join(strides)}, 1], [{', '.join(map(str, block))}], "
                f"{self.shared_layout(buffer, block)})")

    def stored_output(self) -> SSAValue | None:
        """The output stored through TMA, or None (pointer stores)."""
        raise NotImplementedError

    def buffer_arguments(self) -> list[str]:
        """What every partition is handed of the buffers: a descriptor for each TMA-read buffer (the kernel makes
        them), a pointer and the descriptor's strides for the TMA-stored output (the consumer makes its descriptor), a
        pointer for each buffer read with pointers, then those buffers' strides."""
        passed = []
        for a in self.args:
            if a is self.stored_output():  # its descriptor is made in the consumer partition
                passed += [f"{self.names[a]}_ptr", *(param for param, _ in self.descriptor_strides(a))]
            elif a in self.tma_args:
                passed.append(self.descriptor(a))
            if a in self.pointer_args:
                passed.append(f"{self.names[a]}_ptr")
        return passed + [self.stride(i, axis) for i, a in enumerate(self.args) if a in self.pointer_args
                         for axis in range(a.type.rank)]

    def runtime_parameters(self) -> list[str]:
        """The partitions' non-constexpr parameters: the buffers' (:meth:`buffer_arguments`), the symbolic dims."""
        return self.buffer_arguments() + [p for p, _, _ in self.dims.values()]

    def kernel_arguments(self) -> list[tuple[str, str]]:
        """(kernel parameter, what the launcher passes): a pointer to every buffer, in argument order (the launcher's
        tensors), the row stride of each TMA-addressed one, the pointer-read buffers' strides, the symbolic dims. The
        kernel makes its TMA descriptors on the device (in global scratch), so that a launch passes only pointers and
        integers, which PyTorch's C++ launcher takes (amk/replay.py): host-side descriptors would take Triton's
        Python launcher and a descriptor encoded per call."""
        passed = [(f"{self.names[a]}_ptr", self.names[a]) for a in self.args]
        passed += [stride for a in self.args if a in self.tma_args for stride in self.descriptor_strides(a)]
        passed += [(self.stride(i, axis), f"{self.names[a]}.stride({axis})") for i, a in enumerate(self.args)
                   if a in self.pointer_args for axis in range(a.type.rank)]
        return passed + [(p, p) for p, _, _ in self.dims.values()]

    def open_launcher(self, what: str, tma_buffers: list[SSAValue]) -> IndentedWriter:
        """The head of the ``launch`` function of ``what`` (its kernels' names): its symbolic dims read from the
        tensors, each TMA-addressed buffer as TMA can read it (:func:`_tma_operand`), the allocator of the
        descriptors' global memory; the caller writes the launches, one level deeper."""
        code = self.launcher_head(what)
        with code.indent():
            self.emit_narrow_input_copies(code, tma_buffers)
            for buffer in tma_buffers:
                options = [", transposed=True"] * self.read_transposed(buffer)
                options += [", output=True"] * (buffer is self.stored_output())
                code.writeline(f"{self.names[buffer]} = _tma_operand({self.names[buffer]}{''.join(options)})")
            code.writeline("triton.set_allocator(_tma_workspace)  # the descriptors' global memory")
        return code

    def descriptor_batch_stride(self, buffer: SSAValue, axis: int = 0) -> str:
        """The parameter holding a batch stride of a batched buffer's descriptor (one per batch dim: ``[B, H, S, D]``
        read in place has two)."""
        return f"{self.names[buffer]}_desc_batch_stride" + (f"_{axis}" if axis else "")

    def descriptor_strides(self, buffer: SSAValue) -> list[tuple[str, str]]:
        """(kernel parameter, what the launcher passes) for the strides of ``buffer``'s descriptor: the batch strides
        of a batched buffer, then the row stride (of the operand's own rows where the kernel reads a transposed
        view)."""
        rank = buffer.type.rank
        row_axis = rank - 1 if self.read_transposed(buffer) else rank - 2
        batch = [(self.descriptor_batch_stride(buffer, axis), f"{self.names[buffer]}.stride({axis})")
                 for axis in range(rank - 2)]
        return [*batch, (self.descriptor_stride(buffer), f"{self.names[buffer]}.stride({row_axis})")]

    def function_header(self, name: str, params: list[str], constexprs: tuple[str, ...] = ()) -> None:
        self.code.writeline("@gluon.jit")
        self.code.writeline(f"def {name}(")
        with self.code.indent():
            self.code.writelines(f"{p}," for p in params)
            self.code.writelines(f"{c}: gl.constexpr," for c in [*self.constants, "STAGES", *constexprs])
        self.code.writeline("):")

    def descriptor(self, buffer: SSAValue) -> str:
        """The name of the TMA descriptor of a staged operand or of the output."""
        return f"{self.names[buffer]}_desc"


class GluonEmitter(GluonTileEmitter):
    """Generates the Gluon source of one tile-grid GEMM kernel and its launcher (module docstring)."""

    def __init__(self, kernel: memory_staged.KernelOp, api: GluonApi | None = None, schedule: str = "cooperative"):
        if schedule not in SCHEDULES:
            raise PassFailedException(f"amk-emit-gluon: schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
        super().__init__(kernel, api)
        self.pingpong = schedule == "pingpong"
        self.main = self.main_loop()
        self.tile_dims, self.tma_stored = self.main.accumulator.result.type.dims, self.main.store
        self.block_m, self.block_n = (self.constant(d) for d in self.tile_dims)
        self.check_warps()
        # Names of the shared buffers and barriers, reserved before any tile value is named.
        self.rings = {stage: self.fresh(f"{self.names[stage.source]}_ring") for stage in self.main.stages}
        self.output_tile, self.ready, self.empty = self.fresh("output_tile"), self.fresh("ready"), self.fresh("empty")
        self.pieces = self.output_pieces() if self.tma_store else 1
        # ping-pong: turn[c] completes when the other consumer has issued its main loop, so that the two consumers'
        # main loops alternate (their epilogues overlap the other's main loop) and each consumer waits on the ring's
        # barriers at most one phase ahead of them, as their parity-only waits require
        self.turn = self.fresh("turn") if self.pingpong else None
        self.tile, self.step, self.slot, self.phase = (self.fresh(n) for n in ("tile", "step", "slot", "phase"))
        if self.pingpong:  # a consumer's own tiles, and its ring position from the tile's place in the walk
            self.walked, self.k_tiles, self.program_tiles = (self.fresh(n) for n in ("walked", "k_tiles",
                                                                                       "program_tiles"))
        # the consumer's own staging tile for its TMA stores (one per consumer warpgroup in ping-pong)
        self.staging = f"{self.output_tile}.index(WARP_GROUP)" if self.pingpong else self.output_tile
        self.tma_args = {stage.source for stage in self.main.stages} | ({self.main.store.dest} if self.tma_store
                                                                         else set())
        # buffers read or written with pointers (bias vectors, a residual tile, a strip's statistics and its sweep; a
        # TMA-staged operand may be one too)
        self.pointer_args = ({a for a in self.args if a not in self.tma_args}
                             | {op.source for op in self.epilogue_ops() if isinstance(op, memory_staged.LoadOp)})

    def main_loop(self) -> _MainLoop:
        kernel = self.kernel
        if not strategy_named(kernel.strategy.data).tile_grid:
            raise self.refuse(f"its strategy, {kernel.strategy.data}, does not give each program output tiles")
        if kernel.persistent is None or kernel.group_size is None:
            raise self.refuse("it is not persistent with a grouped tile order")
        ops = list(kernel.body.block.ops)
        if len(ops) < 3 or not isinstance(ops[0], memory_staged.AccumulatorOp) or not isinstance(ops[1], tiled_loop.ForOp):
            raise self.refuse("its body does not start with an accumulator and the K loop")
        accumulator, loop = ops[0], ops[1]
        body = list(loop.body.block.ops)
        stages = [op for op in body if isinstance(op, memory_staged.StageOp)]
        if (len(body) != 4 or len(stages) != 2 or not isinstance(body[2], memory_staged.DotOp)
                or list(loop.inits) != [accumulator.result]):
            raise self.refuse("its K loop is not two staged operands and one dot into the accumulator")
        dot, yielded = body[2], body[3]
        if ((dot.lhs, dot.rhs, dot.acc) != (stages[0].result, stages[1].result, loop.body.block.args[0])
                or stages[0].source == stages[1].source or list(yielded.operands) != [dot.result]):
            raise self.refuse("its dot does not accumulate the product of the two staged tiles")
        if any(stage.descriptor is None for stage in stages):
            raise self.refuse("an operand is not staged through a tensor descriptor")
        if self.read_transposed(stages[0].source):
            raise self.refuse("its lhs is read transposed (only the weight, the dot's rhs, may be)")
        if triton_name(dot.lhs.type.element_type) not in ("float16", "bfloat16"):
            raise self.refuse(f"its operands are {triton_name(dot.lhs.type.element_type)}, not fp16 or bf16")
        if kernel.num_stages.value.data < 2:
            raise self.refuse("num_stages is 1: the ring needs a slot in use by the MMA and one being loaded")
        epilogue, tile = ops[2:], accumulator.result.type.dims
        stores = [op for top in epilogue for op in top.walk() if isinstance(op, memory_staged.StoreOp)
                  and op.dest in kernel.outputs]
        if not stores or stores[0].value.type.dims != tile:
            raise self.refuse("it does not store an output tile")
        # the output tile goes through TMA where nothing follows its store; a strip's finishing sweep reads it back
        store = epilogue.pop() if epilogue[-1] is stores[0] and len(stores) == 1 else None
        for op in epilogue:
            for nested in op.walk():
                self.check_epilogue_op(nested)
        return _MainLoop(accumulator, loop, (stages[0], stages[1]), dot, epilogue, store)

    def check_epilogue_op(self, op: Operation) -> None:
        if not isinstance(op, _EPILOGUE_OPS):
            raise self.refuse(f"its epilogue has {op.name}")
        if isinstance(op, memory_staged.LoadOp | memory_staged.StoreOp):
            buffer, tile = ((op.source, op.result.type) if isinstance(op, memory_staged.LoadOp)
                            else (op.dest, op.value.type))
            if buffer.type.rank == 1 and Dim(1) not in tile.dims:
                raise self.refuse("its epilogue reads or writes a vector as a tile of more than one row and column")

    def epilogue_ops(self) -> list[Operation]:
        """The epilogue's ops, those inside its branches and loops included."""
        return [nested for op in self.main.epilogue for nested in op.walk()]

    def check_warps(self) -> None:
        problem = wgmma_tile_problem(self.block_m, self.block_n, self.kernel.num_warps.value.data,
                                     "pingpong" if self.pingpong else "cooperative")
        if problem:
            raise self.refuse(problem)

    def output_pieces(self) -> int:
        """:func:`store_pieces` of this kernel's output tile (refused where even pieces leave no room)."""
        main = self.main
        block_k = self.constant(main.stages[0].result.type.dims[1])
        stages = self.kernel.num_stages.value.data
        operand_bytes = element_size(main.dot.lhs.type.element_type)
        output_bytes = element_size(main.store.dest.type.element_type)
        schedule = "pingpong" if self.pingpong else "cooperative"
        pieces = store_pieces(self.block_m, self.block_n, block_k, stages, operand_bytes, output_bytes, schedule)
        if pieces is None:
            raise self.refuse(f"{stages} stages of {self.block_m} x {block_k} and {block_k} x {self.block_n} tiles "
                              f"leave no room in Hopper's {HOPPER_SHARED_MEMORY} bytes of shared memory for the "
                              "output tile's staging")
        return pieces

    # -- kernel ------------------------------------------------------------------------------------------------------
    def descriptor_blocks(self) -> list[tuple[SSAValue, list[int]]]:
        """Each TMA-addressed buffer and the block its descriptor moves, in the descriptor's own axes (W's rows
        where the kernel reads W^T; a piece of the output tile where the tile is stored in pieces)."""
        tiles = {stage.source: stage.result.type.dims for stage in self.main.stages}
        if self.tma_store:
            tiles[self.main.store.dest] = self.main.store.value.type.dims
        blocks = []
        for buffer, dims in tiles.items():
            block = [self.constant(d) for d in dims]
            if self.tma_store and buffer is self.main.store.dest:  # the TMA store moves one piece at a time
                block[-1] //= self.pieces
            blocks.append((buffer, block[::-1] if self.read_transposed(buffer) else block))
        return blocks

    def stored_output(self) -> SSAValue | None:
        """The output stored through TMA, or None (pointer stores)."""
        return self.main.store.dest if self.tma_store else None

    def shared_buffers(self) -> list[str]:
        """What the kernel allocates in shared memory and hands to every partition."""
        return [*self.rings.values(), self.ready, self.empty, *([self.output_tile] if self.tma_store else []),
                *([self.turn] if self.pingpong else [])]

    def partition_header(self, role: str, constexprs: tuple[str, ...] = ()) -> None:
        """Every partition takes the kernel's parameters and its shared buffers."""
        self.function_header(f"{self.kernel.sym_name.data}_{role}_partition",
                             self.runtime_parameters() + self.shared_buffers(), constexprs)

    def open_tile_loop(self, own_tiles: bool = False) -> None:
        """The grouped persistent tile walk, and the ring position ``step``: every tile of the program in order (the
        producer; the consumer of the cooperative schedule), or with ``own_tiles`` every other one, starting at
        ``WARP_GROUP`` (a ping-pong consumer), whose ring position follows from the tile's place in the walk."""
        launch, tile, code = self.launches()[0], self.tile, self.code
        self.emit_tile_counts(launch.grid)
        code.writeline(f"num_pid_in_group = {launch.group_size} * num_pid_n")
        if own_tiles:
            loop = self.main.loop
            code.writeline(f"{self.k_tiles} = gl.cdiv({self.expr(loop.upper)} - {self.expr(loop.lower)}, "
                           f"{self.expr(loop.step)})")
            code.writeline(f"{self.program_tiles} = gl.cdiv(num_pid_m * num_pid_n - gl.program_id(0), "
                           "gl.num_programs(0))")
            code.writeline(f"for {self.walked} in range(WARP_GROUP, {self.program_tiles}, 2):")
            with code.indent():
                code.writeline(f"{tile} = gl.program_id(0) + {self.walked} * gl.num_programs(0)")
                code.writeline(f"{self.step} = {self.walked} * {self.k_tiles}")
                self.emit_grouped_ids(tile, launch)
            return
        code.writeline(f"{self.step} = 0")
        code.writeline(f"for {tile} in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):")
        with code.indent():
            self.emit_grouped_ids(tile, launch)

    def ring_position(self) -> None:
        """The slot of ``step`` in the ring, and the phase of its barriers in this round of the ring."""
        self.code.writeline(f"{self.slot} = {self.step} % STAGES")
        self.code.writeline(f"{self.phase} = ({self.step} // STAGES) & 1")

    def k_loop_header(self) -> None:
        loop = self.main.loop
        self.code.writeline(f"for {loop.iv.data} in range({self.expr(loop.lower)}, {self.expr(loop.upper)}, "
                            f"{self.expr(loop.step)}):")

    def emit_producer(self) -> IndentedWriter:
        code = self.code = _GluonWriter()
        self.partition_header("load")
        with code.indent():
            code.writeline('"""The producer (one warp): TMA loads of the operand tiles into the ring, up to STAGES '
                           'steps ahead of the MMAs."""')
            self.open_tile_loop()
            with code.indent():
                self.k_loop_header()
                with code.indent():
                    self.ring_position()
                    code.writeline("# wait until the MMAs have released the slot (a fresh barrier passes phase 1)")
                    code.writeline(f"mbarrier.wait({self.empty}.index({self.slot}), {self.phase} ^ 1)")
                    nbytes = " + ".join(f"{self.descriptor(s.source)}.block_type.nbytes" for s in self.main.stages)
                    code.writeline(f"mbarrier.expect({self.ready}.index({self.slot}), {nbytes})")
                    for stage in self.main.stages:
                        code.writeline(f"{self.api.tma_load}({self.descriptor(stage.source)}, "
                                       f"[{self.descriptor_offsets(stage)}], {self.ready}.index({self.slot}), "
                                       f"{self.rings[stage]}.index({self.slot}))")
                    code.writeline(f"{self.step} += 1")
        return code

    def emit_consumer(self) -> IndentedWriter:
        code = self.code = _GluonWriter()
        main = self.main
        warps = self.kernel.num_warps.value.data
        # wgmma's instruction tile: 16 rows, the widest N (a multiple of 8, at most 256) dividing BLOCK_N, K of 32
        # bytes (16 fp16/bf16 values)
        self.partition_header("mma", ("WARP_GROUP",) if self.pingpong else ())
        store = "a TMA store" if self.tma_store else "pointer stores"
        with code.indent():
            if self.pingpong:
                code.writeline('"""A consumer warpgroup (WARP_GROUP 0: the default partition, 1: a worker) on every other '
                               'output tile: asynchronous wgmma on each ready slot, then the epilogue on the accumulator\'s '
                               f'registers and {store} of the tile, while the other consumer runs its main loop."""')
            else:
                code.writeline('"""The default partition (the kernel\'s warps): asynchronous wgmma on each ready slot, '
                               f'then the epilogue on the accumulator\'s registers and {store} of the tile."""')
            if self.tma_store:
                out = self.stored_output()
                code.writeline(self.make_descriptor(out, dict(self.descriptor_blocks())[out]))
            self.write_layouts(self.epilogue_ops(), warps)
            self.open_tile_loop(own_tiles=self.pingpong)
            with code.indent():
                self.last_origin = None
                self.emit_op(main.accumulator)
                self.emit_mma_loop()
                for op in main.epilogue:
                    self.emit_op(op)
                if self.tma_store:
                    self.emit_op(main.store)
            if self.tma_store:
                code.writeline("tma.store_wait(0)")
        return code

    def emit_mma_loop(self) -> None:
        code, main = self.code, self.main
        acc = self.name(main.loop.results[0])
        self.names[main.loop.body.block.args[0]] = acc
        self.layouts[main.loop.results[0]] = self.acc_layout  # where it is, whichever region reads it
        code.writeline(f"{acc} = {self.name(main.accumulator.result)}")
        if "note" in main.loop.attributes:
            code.writeline(f"# {main.loop.attributes['note'].data}")
        if self.pingpong:
            code.writeline(f"if {self.walked} > 0:  # the previous tile's consumer has issued its main loop")
            with code.indent():
                code.writeline(f"mbarrier.wait({self.turn}.index(WARP_GROUP), (({self.walked} - 1) // 2) & 1)")
        self.k_loop_header()
        with code.indent():
            self.ring_position()
            code.writeline(f"mbarrier.wait({self.ready}.index({self.slot}), {self.phase})")
            self.comment_origin(main.dot)
            lhs, rhs = (f"{self.rings[s]}.index({self.slot})" for s in main.stages)
            if self.read_transposed(main.stages[1].source):
                # W's [BLOCK_N, BLOCK_K] tile viewed as the [BLOCK_K, BLOCK_N] operand: wgmma reads a K-major B
                rhs = f"{rhs}.permute((1, 0))"
            code.writeline(f"{acc} = warpgroup_mma({lhs}, {rhs}, {acc}, is_async=True)")
            code.writeline("# one wgmma stays in flight: once the previous one is done, its slot goes back to the "
                           "producer")
            code.writeline(f"{acc}, _, _ = warpgroup_mma_wait(1, deps=({acc}, {lhs}, {rhs}))")
            code.writeline(f"mbarrier.arrive({self.empty}.index(({self.step} + STAGES - 1) % STAGES), "
                           f"pred={main.loop.iv.data} > {self.expr(main.loop.lower)})")
            code.writeline(f"{self.step} += 1")
        if self.pingpong:
            code.writeline(f"mbarrier.arrive({self.turn}.index(1 - WARP_GROUP))  # the other consumer's turn")
        code.writeline(f"{acc} = warpgroup_mma_wait(0, deps=({acc},))")
        # the tile's last slot (a K loop of no step, possible only for a symbolic K, loaded none)
        lower, upper = main.loop.lower, main.loop.upper
        steps = "" if lower.is_static and upper.is_static else f", pred={self.expr(upper)} > {self.expr(lower)}"
        code.writeline(f"mbarrier.arrive({self.empty}.index(({self.step} + STAGES - 1) % STAGES){steps})")
        self.last_origin = None

    def emit_memory_staged_accumulator(self, op: memory_staged.AccumulatorOp) -> None:
        shape = ", ".join(self.expr(d) for d in op.result.type.dims)
        self.assign(op.result, f"gl.zeros(({shape}), dtype=gl.float32, layout={self.acc_layout})")

    def emit_memory_staged_store(self, op: memory_staged.StoreOp) -> None:
        """The output tile stored last goes through shared memory and TMA; other stores use pointers."""
        if op is not self.main.store:
            super().emit_memory_staged_store(op)
            return
        code = self.code
        row, column = (self.expr(d) for d in op.offsets.dims)
        value = _gluon(self.convert(op.value, op.dest.type.element_type))
        if self.pieces == 1:
            code.writeline("# the previous tile's TMA store must have read the staging tile (only its issuing thread "
                           "waits, hence the barrier)")
            code.writeline("tma.store_wait(0)")
            code.writeline(f"{self.api.thread_barrier}()")
            code.writeline(f"{self.staging}.store({value})")
            code.writeline("fence_async_shared()")
            code.writeline(f"{self.api.tma_store}({self.descriptor(op.dest)}, [{row}, {column}], {self.staging})")
            return
        pieces, width = [self.fresh("piece")], self.block_n
        code.writeline(f"{pieces[0]} = {value}")
        code.writeline(f"# stored in {self.pieces} pieces of {self.block_n // self.pieces} columns (the whole tile "
                       "leaves the ring too little shared memory), each cut in halves of columns")
        while len(pieces) < self.pieces:
            width //= 2
            halves = []
            for piece in pieces:
                halves += [f"{piece}_0", f"{piece}_1"]
                code.writeline(f"{halves[-2]}, {halves[-1]} = {piece}.reshape([{self.block_m}, 2, {width}])"
                               ".permute(0, 2, 1).split()")
            pieces = halves
        code.writeline("# the pieces alternate between two buffers: before writing one, the store that read it two "
                       "stores back must be done (only its issuing thread waits, hence the barrier)")
        for index, piece in enumerate(pieces):
            buffer = f"{self.staging}.index({index % 2})"
            code.writeline("tma.store_wait(1)")
            code.writeline(f"{self.api.thread_barrier}()")
            code.writeline(f"{buffer}.store({piece})")
            code.writeline("fence_async_shared()")
            offset = f"{column} + {index * width}" if index else column
            code.writeline(f"{self.api.tma_store}({self.descriptor(op.dest)}, [{row}, {offset}], {buffer})")

    def emit_gluon_kernel(self) -> IndentedWriter:
        code = self.code = _GluonWriter()
        name = self.kernel.sym_name.data
        self.function_header(self.kernel_name, [param for param, _ in self.kernel_arguments()])
        with code.indent():
            code.writeline(f'"""{self.describe()} Warp-specialized: a TMA producer warp feeds a ring of STAGES '
                           'shared-memory slots to the wgmma warps."""')
            # The operands' descriptors, which the producer's first loads wait for; the output's is made by the
            # consumer, where its fence overlaps the first tile's main loop.
            blocks = dict(self.descriptor_blocks())
            for buffer, block in blocks.items():
                if buffer is not self.stored_output():
                    code.writeline(self.make_descriptor(buffer, block))
            for stage, ring in self.rings.items():
                desc = self.descriptor(stage.source)
                code.writeline(f"{ring} = gl.allocate_shared_memory({desc}.dtype, [STAGES] + {desc}.block_type.shape, "
                               f"{desc}.layout)")
            if self.tma_store:
                out = self.stored_output()
                block = blocks[out]
                # one staging tile per consumer in ping-pong; two buffers for a tile stored in pieces
                shape = [2, *block] if self.pingpong or self.pieces > 1 else block
                code.writeline(f"{self.output_tile} = gl.allocate_shared_memory("
                               f"gl.{triton_name(out.type.element_type)}, [{', '.join(map(str, shape))}], "
                               f"{self.shared_layout(out, block)})")
            code.writeline("# ready[s]: slot s holds its operand tiles; empty[s]: the MMAs are done reading it")
            for barriers in (self.ready, self.empty):
                code.writeline(f"{barriers} = gl.allocate_shared_memory(gl.int64, [STAGES, 1], "
                               "mbarrier.MBarrierLayout())")
            code.writeline("for i in gl.static_range(STAGES):")
            with code.indent():
                code.writelines(f"mbarrier.init({barriers}.index(i), count=1)" for barriers in (self.ready, self.empty))
            if self.pingpong:
                code.writeline(f"{self.turn} = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())")
                code.writeline("for i in gl.static_range(2):")
                with code.indent():
                    code.writeline(f"mbarrier.init({self.turn}.index(i), count=1)")
            code.writeline("fence_async_shared()")
            arguments = ", ".join(self.runtime_parameters() + self.shared_buffers() + [*self.constants, "STAGES"])
            code.writeline("gl.warp_specialize([")
            with code.indent():
                if self.pingpong:
                    code.writeline(f"({name}_mma_partition, ({arguments}, 0)),")
                    code.writeline(f"({name}_mma_partition, ({arguments}, 1)),")
                else:
                    code.writeline(f"({name}_mma_partition, ({arguments})),")
                code.writeline(f"({name}_load_partition, ({arguments})),")
            if self.pingpong:
                warps = self.kernel.num_warps.value.data
                code.writeline(f"], [{warps}, {_PRODUCER_WARPS}], [{_CONSUMER_REGISTERS}, {_PRODUCER_REGISTERS}])")
            else:
                code.writeline(f"], [{_PRODUCER_WARPS}], [{_PRODUCER_REGISTERS}])")
            code.writeline("for i in gl.static_range(STAGES):")
            with code.indent():
                code.writelines(f"mbarrier.invalidate({barriers}.index(i))" for barriers in (self.ready, self.empty))
            if self.pingpong:
                code.writeline("for i in gl.static_range(2):")
                with code.indent():
                    code.writeline(f"mbarrier.invalidate({self.turn}.index(i))")
        return code

    # -- launcher ----------------------------------------------------------------------------------------------------
    def emit_gluon_launcher(self) -> IndentedWriter:
        code = self.open_launcher(self.kernel_name, [buffer for buffer, _ in self.descriptor_blocks()])
        with code.indent():
            axes = [self.substitute_constants(self.expr(d, "triton.cdiv")) for d in self.kernel.grid.dims]
            code.writeline(f"grid = (min({' * '.join(axes)}, _sm_count()),)")
            args = [value for _, value in self.kernel_arguments()]
            args += [f"{c}={v}" for c, v in self.constants.items()]
            args += [f"STAGES={self.kernel.num_stages.value.data}", f"num_warps={self.kernel.num_warps.value.data}"]
            self.write_launch(code, self.kernel_name, args)
        return code

    def emit(self) -> str:
        functions = [self.emit_producer(), self.emit_consumer(), self.emit_gluon_kernel(), self.emit_gluon_launcher()]
        code = IndentedWriter()
        code.writelines(_GLUON_PREAMBLE)
        for helper in (_SM_COUNT, *[_OFFSETS_FIT_INT32] * bool(self.narrow_inputs), _TMA_READABLE, _TMA_OPERAND,
                       _TMA_WORKSPACE):
            code.writelines(["", ""])
            code.writelines(helper.splitlines())
        for function in functions:
            code.writelines(["", ""])
            code.splice(function)
        return code.getvalue()


_SWEEP_ACCEPTED = ("amk-emit-gluon emits column-sweep kernels (chunk_recompute) whose every launch loads its rows' "
                   "whole-K fp16/bf16 lhs tile once and then, in one loop over a chunk of column tiles, stages each "
                   "rhs tile and multiplies the two into a fresh fp32 tile, followed by tiled_loop ops and pointer "
                   "loads and stores (the output tile of the loop stored through TMA); matrices, or batches of matrices "
                   "in a batched kernel")
# The ops a column sweep runs besides its lhs load, its rhs tiles and their products (loads and stores of a tile-level
# kernel or of the staged kernel).
_LOADS = (tiled_loop.LoadOp, memory_staged.LoadOp)
_STORES = (tiled_loop.StoreOp, memory_staged.StoreOp)
_SWEEP_OPS = (tiled_loop.BinaryOp, tiled_loop.UnaryOp, tiled_loop.SelectOp, tiled_loop.CastOp, tiled_loop.FullOp,
              tiled_loop.ReduceOp, tiled_loop.InBoundsOp, tiled_loop.ForOp, tiled_loop.YieldOp, *_LOADS, *_STORES)
# The rows a consumer warpgroup of a column sweep takes: wgmma's 16 rows a warp, four warps.
SWEEP_CONSUMER_ROWS = 64
# Registers a thread of a consumer warpgroup may give its two in-flight products (fp32 values): with one or two
# consumers (232 registers each) two 64 x 128 products fit; with four (112 each, the producer's given back) two 64 x 64
# (benchmarks/probes/gluon_softmax_probe.py: two 64 x 128 products spilled there).
_SWEEP_PRODUCT_REGISTERS = {1: 128, 2: 128, 4: 64}
_SWEEP_WORKER_REGISTERS = {2: 232, 4: 112}
# Shared memory a column sweep keeps besides its tiles: its barriers and the scratch of its layout conversions (the
# merge of the chunks' statistics; a few KB at most).
_SWEEP_SHARED_RESERVE = 4096


def sweep_staging_buffers(block_m: int, block_n: int, contraction: int, stages: int, operand_bytes: int,
                          output_bytes: int, shared_memory: int = HOPPER_SHARED_MEMORY) -> int:
    """How many staging tiles each consumer of a column sweep writes its output tiles through (2: one is written
    while the other's TMA store is in flight; 1 where two do not fit beside the lhs tiles and the ring; 0 where not
    even one does)."""
    operands = (block_m + stages * block_n) * contraction * operand_bytes
    for staged in (2, 1):
        if operands + staged * block_m * block_n * output_bytes + _SWEEP_SHARED_RESERVE <= shared_memory:
            return staged
    return 0


def sweep_config_problem(block_m: int, block_n: int, contraction: int | None, warps: int, stages: int,
                         operand_bytes: int, output_bytes: int, shared_memory: int = HOPPER_SHARED_MEMORY) -> str | None:
    """Why a column-sweep kernel of these tiles cannot be emitted in Gluon (or would spill), or None."""
    consumers = block_m // SWEEP_CONSUMER_ROWS
    if warps != 4 or block_m % SWEEP_CONSUMER_ROWS or consumers not in _SWEEP_PRODUCT_REGISTERS:
        return (f"BLOCK_M = {block_m} with num_warps = {warps}: a Gluon column sweep gives each consumer warpgroup "
                f"(num_warps = 4) {SWEEP_CONSUMER_ROWS} rows, 1, 2 or 4 consumers")
    if block_n % 8 or 2 * block_n * SWEEP_CONSUMER_ROWS // 128 > _SWEEP_PRODUCT_REGISTERS[consumers]:
        return (f"BLOCK_N = {block_n}: each of {consumers} consumers keeps two {SWEEP_CONSUMER_ROWS} x {block_n} "
                f"products in flight, at most {_SWEEP_PRODUCT_REGISTERS[consumers]} fp32 registers a thread")
    if contraction is None or contraction > 256 or contraction % 16:
        return "a Gluon column sweep loads the whole K once: K a multiple of 16 up to 256"
    if stages < 2:
        return "num_stages is 1: the ring needs a slot in use by the MMA and one being loaded"
    if not sweep_staging_buffers(block_m, block_n, contraction, stages, operand_bytes, output_bytes, shared_memory):
        return (f"shared memory: the lhs tiles, {stages} stages of {contraction} x {block_n} rhs tiles and a staging "
                f"tile per consumer exceed {shared_memory} bytes")
    return None


@dataclass
class _Sweep:
    """One launch of a column sweep (of a tile-level or a staged kernel): its lhs tile loaded once (``lhs``), the loop
    over its chunk's column tiles (``loop``: the rhs tile's load or stage ``stage``, a zero tile, their product
    ``dot``, then ``body``), the ops before the loop (the lhs load left out) and after it, the output tile stored in
    the loop (or None); the emitter adds the ``launch`` it writes."""

    lhs: tiled_loop.LoadOp | memory_staged.LoadOp
    loop: tiled_loop.ForOp
    stage: tiled_loop.LoadOp | memory_staged.StageOp
    dot: tiled_loop.DotOp | memory_staged.DotOp
    before: list[Operation]
    body: list[Operation]
    after: list[Operation]
    store: tiled_loop.StoreOp | memory_staged.StoreOp | None
    launch: _Launch | None = None


def column_sweeps(kernel: tiled_loop.KernelOp | memory_staged.KernelOp) -> list[_Sweep] | str:
    """Each launch of a column-sweep strategy's kernel (tile-level, as the tuner sees it, or staged, as
    :class:`GluonSweepEmitter` writes it) as a :class:`_Sweep`, or why the kernel is not what the emitter writes
    whatever its configuration: every launch one loop over the column tiles, whose body loads or stages an rhs tile
    and multiplies the launch's lhs tile by it into a zero tile (a logsumexp's finishing launch has no such loop),
    with loop bounds and rhs offsets that do not depend on the row strip (the producer walks the tiles for all its
    consumers' strips at once); every launch multiplying the same operands and storing at most the same output tile
    through TMA; matrices (or batches of them)."""
    sweeps = []
    for number, (relaunch, ops) in enumerate(split_launches(kernel), 1):
        row_id = (relaunch or kernel).program_ids.data[0].data
        sweep = _column_sweep(kernel, ops, row_id)
        if isinstance(sweep, str):
            return f"its launch {number} {sweep}"
        sweeps.append(sweep)
    if len({(sweep.lhs.source, sweep.stage.source) for sweep in sweeps}) != 1:
        return "its launches multiply different operands"
    if len({sweep.store.dest for sweep in sweeps if sweep.store is not None}) > 1:
        return "its launches store different output tiles through TMA"
    if any(arg.type.rank < 3 if kernel.batched else arg.type.rank != 2 for arg in kernel.body.block.args):
        return "its buffers are not all matrices (or, batched, all batches of matrices)"
    return sweeps


def _column_sweep(kernel, ops: list[Operation], row_id: str) -> _Sweep | str:
    """One launch's :class:`_Sweep` (see :func:`column_sweeps`), or what it lacks."""
    loops = [op for op in ops if isinstance(op, tiled_loop.ForOp)
             and any(isinstance(inner, tiled_loop.DotOp | memory_staged.DotOp) for inner in op.body.block.ops)]
    if len(loops) != 1:
        return f"has {len(loops)} loops over column tiles with a product, not one"
    loop = loops[0]
    body = list(loop.body.block.ops)
    if (len(body) < 4 or not isinstance(body[0], tiled_loop.LoadOp | memory_staged.StageOp)
            or not isinstance(body[1], tiled_loop.FullOp)
            or not isinstance(body[2], tiled_loop.DotOp | memory_staged.DotOp)):
        return "has a column loop that does not start with an rhs tile, a zero tile and their product"
    stage, zero, dot = body[:3]
    lhs = dot.lhs.owner
    if (not isinstance(lhs, _LOADS) or lhs not in ops or dot.rhs is not stage.result or dot.acc is not zero.result
            or zero.number != 0.0):
        return "has a product that is not of its lhs tile and the loop's rhs tile into a zero tile"
    if len(list(zero.result.uses)) != 1:
        return "uses its zero tile beyond the product"
    bounds = (loop.lower, loop.upper, loop.step, *stage.offsets.dims)
    if any(row_id in map(str, dim.expr.free_symbols) for dim in bounds):
        return f"has column tiles that depend on the row strip ({row_id})"
    index = ops.index(loop)
    before = [op for op in ops[:index] if op is not lhs]
    after, rest = ops[index + 1:], body[3:]
    for op in [*before, *after, *rest]:
        for nested in op.walk():
            if not isinstance(nested, _SWEEP_OPS):
                return f"has {nested.name} besides the column loop's product"
    if any(op.operands and dot.lhs in op.operands for top in [*before, *after, *rest] for op in top.walk()):
        return "reads its lhs tile for more than the product"
    stores = [op for op in rest if isinstance(op, _STORES) and op.dest in kernel.outputs
              and op.value.type.dims == dot.result.type.dims]
    if len(stores) > 1:
        return "stores more than one output tile in its column loop"
    return _Sweep(lhs, loop, stage, dot, before, rest, after, stores[0] if stores else None)


def _operand_problem(kernel) -> str | None:
    """Why a kernel (either level's) cannot be emitted in Gluon for how it reads an operand: rows mapped to the
    space's (``broadcast_rows``), matrices mapped to a batched kernel's batch index (``broadcast_batch``), columns
    rotated (``rotate_half``, in memory or in registers) or read modulo a table's width (``column_period``), a boolean
    mask, or, in a batched kernel, one matrix read at every batch index (a causal mask) or a row vector per matrix
    (a padding mask [B, H, 1, T]). The Gluon kernels' pointer accesses have run on a GPU for none of these."""
    loads = [op for op in kernel.walk() if isinstance(op, _LOADS)]
    if any(op.broadcast_rows is not None for op in loads):
        return "it reads an operand whose rows broadcast over the space's (broadcast_rows)"
    if any(op.broadcast_batch is not None for op in loads):
        return "it reads an operand whose matrices broadcast over the kernel's batch (broadcast_batch)"
    if any(getattr(op, "rotate_half", None) is not None for op in loads) or any(
            isinstance(op, tiled_loop.RotateHalfOp) for op in kernel.walk()):
        return "it rotates the halves of groups of columns (rotate_half)"
    if any(getattr(op, "column_period", None) is not None for op in loads):
        return "it reads an operand's columns modulo its width (column_period)"
    if any(op.result.type.element_type == i1 for op in loads):
        return "it reads a boolean mask"
    if kernel.batched and any(op.source.type.rank == 2 for op in loads):
        return "it reads one matrix at every batch index of a batched kernel"
    if any(op.source.type.rank == 3 and op.source.type.dims[1] == Dim(1) and op.result.type.dims[0] == Dim(1)
           for op in loads):
        return "it reads a row vector per matrix of a batched kernel"
    return None


def gluon_kernel_problem(form: str | None, kernel: tiled_loop.KernelOp) -> str | None:
    """Why a tile-level kernel of a strategy whose Gluon form is ``form`` cannot be emitted in Gluon whatever its
    configuration, or None (the output-tile form's checks are of the staged kernel and its configuration)."""
    problem = _operand_problem(kernel)
    if problem is None and kernel.exact_products is not None:
        problem = "it needs its products rounded before a subtraction (exact_products), which its launches do not ask"
    if problem or form != COLUMN_SWEEP:
        return problem
    sweeps = column_sweeps(kernel)
    return sweeps if isinstance(sweeps, str) else None


class GluonSweepEmitter(GluonTileEmitter):
    """The Gluon source of a column-sweep kernel (``chunk_recompute``'s two launches: the statistics of a chunk of
    columns, then the chunk finished) and its launcher. Each launch is warp-specialized: a one-warp producer TMA-loads
    the lhs tile of every consumer once, then the chunk's rhs tiles into a ring of ``num_stages`` slots; each consumer
    warpgroup takes 64 of the program's ``BLOCK_M`` rows (the kernel's ``BLOCK_M`` is its own there, and its program
    id counts such strips) and issues the product of column tile j + 1 before it folds tile j (two products in
    flight, the loop unrolled by two so that neither is copied into the other: ptxas serializes every wgmma whose
    registers a loop-carried swap reads). The tensor cores work on one tile while the exponential unit works on the
    other (benchmarks/probes/gluon_softmax_probe.py, which measured this form by hand first)."""

    accepted = _SWEEP_ACCEPTED

    def __init__(self, kernel: memory_staged.KernelOp, api: GluonApi | None = None):
        super().__init__(kernel, api)
        sweeps = column_sweeps(kernel)
        if isinstance(sweeps, str):
            raise self.refuse(sweeps)
        if kernel.persistent is not None:
            raise self.refuse("it is persistent: a column sweep runs a program per row strip and chunk")
        self.sweeps = [replace(sweep, launch=launch) for sweep, launch in zip(sweeps, self.launches(), strict=True)]
        first = self.sweeps[0]
        self.tile_dims = first.dot.result.type.dims
        self.block_m, self.block_n = (self.constant(d) for d in self.tile_dims)
        self.contraction = self.constant(first.lhs.result.type.dims[1])
        self.lhs_buffer, self.rhs_buffer = first.lhs.source, first.stage.source
        operand_bytes = element_size(first.dot.lhs.type.element_type)
        if triton_name(first.dot.lhs.type.element_type) not in ("float16", "bfloat16"):
            raise self.refuse(f"its operands are {triton_name(first.dot.lhs.type.element_type)}, not fp16 or bf16")
        if self.read_transposed(self.lhs_buffer):
            raise self.refuse("its lhs is read transposed (only the rhs may be)")
        stored = [sweep.store for sweep in self.sweeps if sweep.store is not None]
        self.output = stored[0].dest if stored else None
        output_bytes = element_size(self.output.type.element_type) if self.output is not None else 2
        self.stages = kernel.num_stages.value.data
        problem = sweep_config_problem(self.block_m, self.block_n, self.contraction, kernel.num_warps.value.data,
                                       self.stages, operand_bytes, output_bytes)
        if problem:
            raise self.refuse(problem)
        self.consumers = self.block_m // SWEEP_CONSUMER_ROWS
        self.staged = sweep_staging_buffers(self.block_m, self.block_n, self.contraction, self.stages, operand_bytes,
                                            output_bytes)
        self.tma_args = {self.lhs_buffer, self.rhs_buffer} | ({self.output} if self.output is not None else set())
        # buffers read or written with pointers: the workspace, an output stored outside the loop, ...
        by_tma = {sweep.lhs for sweep in self.sweeps} | {sweep.store for sweep in self.sweeps}
        accessed = [op.source if isinstance(op, memory_staged.LoadOp) else op.dest for op in kernel.walk()
                    if isinstance(op, memory_staged.LoadOp | memory_staged.StoreOp) and op not in by_tma]
        self.pointer_args = [a for a in self.args if a in accessed]
        moved = [(self.lhs_buffer, operand_bytes), (self.rhs_buffer, operand_bytes), (self.output, output_bytes)]
        for buffer, element_bytes in [(buffer, size) for buffer, size in moved if buffer is not None]:
            # TMA's rows: the buffer's own, or the rows of the tensor a transposed view was taken of
            length = buffer.type.dims[-2 if self.read_transposed(buffer) else -1]
            if length.is_static and length.value * element_bytes % 16:
                raise self.refuse(f"TMA moves rows a multiple of 16 bytes long; {self.names[buffer]}'s are "
                                  f"{length.value * element_bytes} bytes")
        names = ("lhs_tiles", "rhs_ring", "lhs_ready", "ready", "empty", "output_tiles", "tiles", "pair", "j", "slot",
                 "flat", "strip")
        (self.lhs_tiles, self.ring, self.lhs_ready, self.ready, self.empty, self.staging, self.tiles, self.pair,
         self.index, self.slot, self.flat, self.strip) = (self.fresh(n) for n in names)
        # the two products in flight (asynchronous wgmma results), and the one waited for
        self.products = (self.fresh("product_a"), self.fresh("product_b"))
        self.finished = self.fresh("product")
        self.column = "0"  # the column tile being finished (which staging tile its TMA store takes)

    # -- kernel parameters -------------------------------------------------------------------------------------------
    def shared_buffers(self, sweep: _Sweep) -> list[str]:
        """What a launch allocates in shared memory and hands to every partition (the staging tiles where it stores
        an output tile)."""
        return [self.lhs_tiles, self.ring, self.lhs_ready, self.ready, self.empty,
                *([self.staging] if sweep.store is not None else [])]

    def blocks(self) -> dict[SSAValue, list[int]]:
        """The block each TMA descriptor moves, in the descriptor's own axes: a consumer's lhs rows over the whole
        K, a column tile of the rhs (of its own rows where it is read transposed), a consumer's output tile."""
        rhs = [self.contraction, self.block_n]
        blocks = {self.lhs_buffer: [SWEEP_CONSUMER_ROWS, self.contraction],
                  self.rhs_buffer: rhs[::-1] if self.read_transposed(self.rhs_buffer) else rhs}
        if self.output is not None:
            blocks[self.output] = [SWEEP_CONSUMER_ROWS, self.block_n]
        # a batched buffer's blocks are one matrix's: TMA stays within it (zero-filling, clipping at its edges)
        return {buffer: [1] * (buffer.type.rank - 2) + block for buffer, block in blocks.items()}

    def matrix(self, slot: str, block: list[int]) -> str:
        """A shared-memory slot holding a ``block`` as the matrix wgmma reads and writes (a batched block, [1, rows,
        columns] or [1, 1, rows, columns], reshaped to its matrix)."""
        return f"{slot}.reshape([{', '.join(map(str, block[-2:]))}])" if len(block) > 2 else slot

    # -- partitions --------------------------------------------------------------------------------------------------
    def partition_header(self, sweep: _Sweep, role: str, constexprs: tuple[str, ...] = ()) -> None:
        self.function_header(f"{sweep.launch.name}_{role}", self.runtime_parameters() + self.shared_buffers(sweep),
                             constexprs)

    def strip_id(self, sweep: _Sweep, consumer: str) -> None:
        """The row program id as the IR reads it, for the strip of ``consumer``: it counts strips of ``BLOCK_M`` (a
        consumer's 64 rows); ``program_ids`` wrote the program's own strip."""
        self.code.writeline(f"{sweep.launch.program_ids[0]} = {self.strip} * {self.consumers} + {consumer}")

    def program_ids(self, sweep: _Sweep) -> None:
        """The program's strip (of all its consumers' rows) and its other program ids, from the one flat grid axis
        the launcher gives (CUDA caps a grid's other axes at 65535 programs)."""
        self.code.writeline(f"{self.flat} = gl.program_id(0)")
        # counted in the launcher's BLOCK_M (all consumers' rows), not the kernels' own
        extents = [f"({self.substitute_constants(self.expr(dim))})" for dim in sweep.launch.grid[:-1]]
        self.code.writelines(unflattened_ids(self.flat, [self.strip, *sweep.launch.program_ids[1:]], extents))

    def tile_count(self, sweep: _Sweep) -> str:
        loop = sweep.loop
        lower = self.fresh("lower")
        self.code.writeline(f"{lower} = {self.expr(loop.lower)}")
        self.code.writeline(f"{self.tiles} = gl.cdiv({self.expr(loop.upper)} - {lower}, {self.expr(loop.step)})")
        return lower

    def emit_producer(self, sweep: _Sweep) -> IndentedWriter:
        code = self.code = _GluonWriter()
        self.partition_header(sweep, "load_partition")
        with code.indent():
            code.writeline('"""The producer (one warp): each consumer\'s lhs tile once, then the chunk\'s rhs tiles into '
                           'the ring, up to STAGES ahead of the products."""')
            lhs = self.descriptor(self.lhs_buffer)
            self.program_ids(sweep)
            code.writeline(f"mbarrier.expect({self.lhs_ready}.index(0), {self.consumers} * {lhs}.block_type.nbytes)")
            code.writeline(f"for consumer in gl.static_range({self.consumers}):")
            with code.indent():
                self.strip_id(sweep, "consumer")
                offsets = ", ".join(self.expr(d) for d in sweep.lhs.offsets.dims)
                code.writeline(f"{self.api.tma_load}({lhs}, [{offsets}], {self.lhs_ready}.index(0), "
                               f"{self.lhs_tiles}.index(consumer))")
            lower = self.tile_count(sweep)
            code.writeline(f"for {self.index} in range({self.tiles}):")
            with code.indent():
                code.writeline(f"{sweep.loop.iv.data} = {lower} + {self.index} * {self.expr(sweep.loop.step)}")
                code.writeline(f"{self.slot} = {self.index} % STAGES")
                code.writeline("# wait until every consumer has released the slot (a fresh barrier passes phase 1)")
                code.writeline(f"mbarrier.wait({self.empty}.index({self.slot}), (({self.index} // STAGES) & 1) ^ 1)")
                rhs = self.descriptor(self.rhs_buffer)
                code.writeline(f"mbarrier.expect({self.ready}.index({self.slot}), {rhs}.block_type.nbytes)")
                code.writeline(f"{self.api.tma_load}({rhs}, [{self.descriptor_offsets(sweep.stage)}], "
                               f"{self.ready}.index({self.slot}), {self.ring}.index({self.slot}))")
        return code

    def issue(self, product: str, index: str) -> None:
        """The product of column tile ``index``, asynchronous, once its rhs tile is in the ring."""
        slot = f"({index}) % STAGES"
        blocks = self.blocks()
        rhs = self.matrix(f"{self.ring}.index({slot})", blocks[self.rhs_buffer])
        if self.read_transposed(self.rhs_buffer):
            rhs = f"{rhs}.permute((1, 0))"  # the rhs's own [BLOCK_N, K] rows read as a K-major B
        lhs = self.matrix(f"{self.lhs_tiles}.index(WARP_GROUP)", blocks[self.lhs_buffer])
        self.code.writeline(f"mbarrier.wait({self.ready}.index({slot}), (({index}) // STAGES) & 1)")
        self.code.writeline(f"{product} = warpgroup_mma({lhs}, {rhs}, zero, use_acc=False, is_async=True)")

    def consume(self, sweep: _Sweep, product: str, index: str, in_flight: int, lower: str) -> None:
        """Column tile ``index`` once its product is done (``in_flight`` products issued after it may still run):
        its ring slot released, then the loop body on it."""
        code = self.code
        code.writeline(f"{self.finished} = warpgroup_mma_wait({in_flight}, deps=({product},))")
        code.writeline(f"mbarrier.arrive({self.empty}.index(({index}) % STAGES))")
        code.writeline(f"{sweep.loop.iv.data} = {lower} + ({index}) * {self.expr(sweep.loop.step)}")
        self.column = index
        self.names[sweep.dot.result] = self.finished
        self.layouts[sweep.dot.result] = self.acc_layout
        self.last_origin = None
        for op in sweep.body:
            self.emit_op(op)

    def emit_consumer(self, sweep: _Sweep) -> IndentedWriter:
        code = self.code = _GluonWriter()
        self.tma_stored = sweep.store
        self.partition_header(sweep, "mma_partition", ("WARP_GROUP",))
        with code.indent():
            code.writeline(f'"""Consumer warpgroup WARP_GROUP: {SWEEP_CONSUMER_ROWS} of the program\'s rows, the '
                           'product of each column tile issued before the tile before it is folded."""')
            if sweep.store is not None:
                code.writeline(self.make_descriptor(self.output, self.blocks()[self.output]))
            self.write_layouts([op for top in [*sweep.before, *sweep.body, *sweep.after] for op in top.walk()], 4)
            self.program_ids(sweep)
            self.strip_id(sweep, "WARP_GROUP")
            self.last_origin = None
            for op in sweep.before:
                self.emit_op(op)
            loop = sweep.loop
            for result, init, arg in zip(loop.results, loop.inits, loop.body.block.args, strict=True):
                text, layout = self.name(init), self.layout_of(arg.type)
                if text.isidentifier() and self.layout_held(init) != layout:
                    text = f"gl.convert_layout({text}, {layout})"
                code.writeline(f"{self.name(result)} = {text}")
                self.names[arg] = self.name(result)
                self.layouts[arg] = self.layouts[result] = layout
            code.writeline(f"zero = gl.zeros(({self.block_m // self.consumers}, {self.block_n}), dtype=gl.float32, "
                           f"layout={self.acc_layout})")
            lower = self.tile_count(sweep)
            if "note" in loop.attributes:
                code.writeline(f"# {loop.attributes['note'].data}")
            code.writeline(f"mbarrier.wait({self.lhs_ready}.index(0), 0)")
            first, second = self.products
            code.writeline("# two products in flight: tile j + 1's is issued before tile j is folded, and the loop is "
                           "unrolled by two so that neither product is copied into the other")
            code.writeline(f"if {self.tiles} > 0:  # (an empty chunk, as the IR's loop, does nothing)")
            with code.indent():
                self.issue(first, "0")
                code.writeline(f"for {self.pair} in range(({self.tiles} - 1) // 2):")
                with code.indent():
                    code.writeline(f"{self.index} = 1 + 2 * {self.pair}")
                    self.issue(second, self.index)
                    self.consume(sweep, first, f"{self.index} - 1", 1, lower)
                    self.issue(first, f"{self.index} + 1")
                    self.consume(sweep, second, self.index, 1, lower)
                code.writeline(f"if {self.tiles} % 2 == 0:")
                with code.indent():
                    self.issue(second, f"{self.tiles} - 1")
                    self.consume(sweep, first, f"{self.tiles} - 2", 1, lower)
                    self.consume(sweep, second, f"{self.tiles} - 1", 0, lower)
                code.writeline("else:")
                with code.indent():
                    self.consume(sweep, first, f"{self.tiles} - 1", 0, lower)
            self.last_origin = None
            for op in sweep.after:
                self.emit_op(op)
            if sweep.store is not None:
                code.writeline("tma.store_wait(0)")
        return code

    def emit_memory_staged_store(self, op: memory_staged.StoreOp) -> None:
        """The loop's output tile goes through one of the consumer's staging tiles and a TMA store (which clips what
        lies outside the output); other stores use pointers."""
        if op is not self.tma_stored:
            super().emit_memory_staged_store(op)
            return
        code = self.code
        buffer = self.fresh("staged")
        code.writeline(f"{buffer} = {self.staging}.index(WARP_GROUP * {self.staged} + ({self.column}) % {self.staged})")
        code.writeline("# the store that last read this staging tile must be done (only its issuing thread waits, "
                       "hence the barrier)")
        code.writeline(f"tma.store_wait({self.staged - 1})")
        code.writeline(f"{self.api.thread_barrier}()")
        staged = self.matrix(buffer, self.blocks()[op.dest])
        code.writeline(f"{staged}.store({_gluon(self.convert(op.value, op.dest.type.element_type))})")
        code.writeline("fence_async_shared()")
        offsets = ", ".join(self.expr(d) for d in op.offsets.dims)
        code.writeline(f"{self.api.tma_store}({self.descriptor(op.dest)}, [{offsets}], {buffer})")

    def emit_kernel_function(self, sweep: _Sweep) -> IndentedWriter:
        code = self.code = _GluonWriter()
        self.function_header(sweep.launch.name, [param for param, _ in self.kernel_arguments()])
        blocks = self.blocks()
        with code.indent():
            code.writeline(f'"""{sweep.launch.description} Warp-specialized: a TMA producer warp feeds '
                           f'{self.consumers} consumer warpgroup(s) of {SWEEP_CONSUMER_ROWS} rows each."""')
            for buffer in (self.lhs_buffer, self.rhs_buffer):
                code.writeline(self.make_descriptor(buffer, blocks[buffer]))
            lhs, rhs = self.descriptor(self.lhs_buffer), self.descriptor(self.rhs_buffer)
            code.writeline(f"{self.lhs_tiles} = gl.allocate_shared_memory({lhs}.dtype, [{self.consumers}] + "
                           f"{lhs}.block_type.shape, {lhs}.layout)")
            code.writeline(f"{self.ring} = gl.allocate_shared_memory({rhs}.dtype, [STAGES] + {rhs}.block_type.shape, "
                           f"{rhs}.layout)")
            if sweep.store is not None:
                block = blocks[self.output]
                code.writeline(f"{self.staging} = gl.allocate_shared_memory(gl.{triton_name(self.output.type.element_type)}, "
                               f"[{self.consumers * self.staged}, {', '.join(map(str, block))}], "
                               f"{self.shared_layout(self.output, block)})")
            code.writeline(f"# {self.lhs_ready}: the lhs tiles are in; ready[s]: slot s holds a rhs tile; empty[s]: "
                           "every consumer's product is done reading it")
            code.writeline(f"{self.lhs_ready} = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())")
            for barriers in (self.ready, self.empty):
                code.writeline(f"{barriers} = gl.allocate_shared_memory(gl.int64, [STAGES, 1], "
                               "mbarrier.MBarrierLayout())")
            code.writeline(f"mbarrier.init({self.lhs_ready}.index(0), count=1)")
            code.writeline("for i in gl.static_range(STAGES):")
            with code.indent():
                code.writeline(f"mbarrier.init({self.ready}.index(i), count=1)")
                code.writeline(f"mbarrier.init({self.empty}.index(i), count={self.consumers})")
            code.writeline("fence_async_shared()")
            arguments = ", ".join(self.runtime_parameters() + self.shared_buffers(sweep) + [*self.constants, "STAGES"])
            code.writeline("gl.warp_specialize([")
            with code.indent():
                code.writelines(f"({sweep.launch.name}_mma_partition, ({arguments}, {group})),"
                                for group in range(self.consumers))
                code.writeline(f"({sweep.launch.name}_load_partition, ({arguments})),")
            workers = [4] * (self.consumers - 1) + [_PRODUCER_WARPS]
            registers = [_SWEEP_WORKER_REGISTERS.get(self.consumers, 0)] * (self.consumers - 1) + [_PRODUCER_REGISTERS]
            code.writeline(f"], {workers}, {registers})")
            code.writeline(f"mbarrier.invalidate({self.lhs_ready}.index(0))")
            code.writeline("for i in gl.static_range(STAGES):")
            with code.indent():
                code.writelines(f"mbarrier.invalidate({barriers}.index(i))" for barriers in (self.ready, self.empty))
        return code

    def stored_output(self) -> SSAValue | None:
        return self.output

    def emit_sweep_launcher(self) -> IndentedWriter:
        what = " then ".join(sweep.launch.name for sweep in self.sweeps)
        code = self.open_launcher(what, [buffer for buffer in self.args if buffer in self.tma_args])
        with code.indent():
            args = [value for _, value in self.kernel_arguments()]
            # the kernels' BLOCK_M is a consumer warpgroup's rows; the grid counts programs of all its consumers' rows
            args += [f"{c}={SWEEP_CONSUMER_ROWS if c == 'BLOCK_M' else v}" for c, v in self.constants.items()]
            args += [f"STAGES={self.stages}", "num_warps=4"]
            for sweep in self.sweeps:
                axes = [self.substitute_constants(self.expr(d, "triton.cdiv")) for d in sweep.launch.grid]
                code.writeline(f"grid = ({' * '.join(axes)},)")
                self.write_launch(code, sweep.launch.name, args)
        return code

    def emit(self) -> str:
        functions = []
        for sweep in self.sweeps:
            functions += [self.emit_producer(sweep), self.emit_consumer(sweep), self.emit_kernel_function(sweep)]
        code = IndentedWriter()
        code.writelines(_GLUON_PREAMBLE)
        for helper in (*[_OFFSETS_FIT_INT32] * bool(self.narrow_inputs), _TMA_READABLE, _TMA_OPERAND, _TMA_WORKSPACE):
            code.writelines(["", ""])
            code.writelines(helper.splitlines())
        for function in [*functions, self.emit_sweep_launcher()]:
            code.writelines(["", ""])
            code.splice(function)
        return code.getvalue()


def emit_gluon(kernel: memory_staged.KernelOp, api: GluonApi | None = None, schedule: str = "cooperative") -> str:
    """The Gluon source (kernel, partitions and ``launch`` function) of one staged kernel in ``schedule`` (one of
    ``SCHEDULES``), with ``api``'s spellings (by default the installed triton's); raises :class:`PassFailedException`
    for a kernel it does not take. A column-sweep kernel (its strategy's ``gluon_form``) has one form, whatever the
    schedule."""
    if strategy_named(kernel.strategy.data).gluon_form == COLUMN_SWEEP:
        return GluonSweepEmitter(kernel, api).emit()
    return GluonEmitter(kernel, api, schedule).emit()


def gluon_config_problem(form: str | None, config: KernelConfig, operand_bytes: int, output_bytes: int,
                         contraction: int | None, shared_memory: int = HOPPER_SHARED_MEMORY) -> str | None:
    """Why ``config`` cannot be emitted as a Gluon kernel of ``form`` (a strategy's ``gluon_form``) with operands and
    output of these element sizes (``contraction``: the whole K a column sweep loads at once), or None."""
    if form == COLUMN_SWEEP:
        if config.PERSISTENT or config.TMA or config.WARP_SPECIALIZE:
            return ("a Gluon column sweep runs a program per row strip and chunk, warp-specialized and loading through "
                    "TMA by construction (PERSISTENT=0, TMA=0, WARP_SPECIALIZE=0)")
        return sweep_config_problem(config.BLOCK_M, config.BLOCK_N, contraction, config.num_warps, config.num_stages,
                                    operand_bytes, output_bytes, shared_memory)
    if not (config.PERSISTENT and config.TMA) or config.WARP_SPECIALIZE:
        return ("GLUON kernels are persistent TMA kernels (PERSISTENT=1, TMA=1) and warp-specialized by construction "
                "(WARP_SPECIALIZE=0)")
    # the ring of operand tiles and the output tile staged for its TMA store, whole or in pieces
    if store_pieces(config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.num_stages, operand_bytes, output_bytes,
                    shared_memory=shared_memory) is None:
        ring = ring_bytes(config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.num_stages, operand_bytes)
        return (f"shared memory: {config.num_stages} stages x tiles = {ring} bytes leave too little of "
                f"{shared_memory} for the output tile's staging, even in pieces")
    return wgmma_tile_problem(config.BLOCK_M, config.BLOCK_N, config.num_warps)


@dataclass(frozen=True)
class EmitGluonPass(ModulePass):
    """Attach the Gluon source of every ``memory_staged.kernel`` as its ``gluon_source`` attribute; fails on a kernel
    that is not a persistent tile-grid GEMM (tile2d, strip_finish) with TMA-staged operands. ``schedule``:
    ``cooperative`` (the kernel's warps on each tile) or ``pingpong`` (two 4-warp consumers on alternate tiles)."""

    name = "amk-emit-gluon"

    schedule: str = "cooperative"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.schedule not in SCHEDULES:
            raise PassFailedException(f"amk-emit-gluon: schedule must be {' or '.join(SCHEDULES)}, got {self.schedule!r}")
        for kernel in op.walk():
            if isinstance(kernel, memory_staged.KernelOp):
                kernel.attributes["gluon_source"] = StringAttr(emit_gluon(kernel, schedule=self.schedule))


@dataclass(frozen=True)
class GluonTarget(KernelSourceTarget):
    """``amk-opt -t gluon``: print the Gluon source of every kernel (emitting it if the pass has not run)."""

    name = "gluon"
    attribute = "gluon_source"

    def emit_source(self, kernel: memory_staged.KernelOp) -> str:
        return emit_gluon(kernel)
