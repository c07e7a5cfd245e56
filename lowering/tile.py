"""``amk-tile``: lower each ``tensor_op.fused`` region to a ``tiled_loop.kernel`` with symbolic tile sizes.

The fused op is replaced by a ``tiled_loop.launch`` of the new kernel. How the group's plan (:mod:`amk.lowering.plan`)
is tiled is a strategy object of :mod:`amk.lowering.strategies`, one module each: ``auto`` asks the registered
strategies in priority order whether they take the group; the strategy gives the grid, the workspace and the kernel
body (built with the toolkit of :mod:`amk.lowering.kernel_lowering`). Among them:

- ``tile2d``: a grid of ``BLOCK_M x BLOCK_N`` output tiles (walked in groups of ``GROUP_M`` row tiles so that the
  weight's column tiles are reused from L2); each program runs the K loop into an fp32 accumulator and applies the
  elementwise epilogue in registers.
- ``skinny_m``: few rows (decode): programs are laid out column tile first, and ``BLOCK_M`` usually covers every
  row, so each program streams one slice of the weight.
- ``split_k``: few rows and a long K: ``SPLIT_K`` programs share an output tile, each over a chunk of K, so that
  enough programs stream the weight; the last to finish sums the fp32 partial tiles and applies the epilogue.
- ``row_strip``: a program owns ``BLOCK_M`` full rows. Phase 1 loops over the column tiles, computes the epilogue up
  to the row reductions, folds each tile into running fp32 statistics and writes the pre-reduction value; phase 2
  loops again, re-reads it and applies the normalization and what follows.
- the other strategies for a matmul followed by a row reduction (``tile_stats``, ``chunk_recompute``,
  ``strip_finish``, ...) are described on :class:`TilePass`.

A normalization feeding the matmul's A operand (the prologue) gets its statistics from a loop over K before the
main loop, and is applied to each A tile inside the K loop; in decode kernels a norm whose value is a per-row scale
times a statistics-free tile (RMSNorm) instead gathers its statistics inside the K loop and scales the accumulator.
Every op is computed through its lowering rule (:mod:`amk.lowering.rules`), so this pass names no op.

Input (after amk-fuse)::

    %y = tensor_op.fused %x, %w : (...) -> !tensor_op.tensor<[64, 32], f16> { ... matmul, relu ... }

Output::

    tiled_loop.kernel @fused_0 attributes {grid = #tiled_loop.exprs<[cdiv(64, BLOCK_M), cdiv(32, BLOCK_N)]>, ...} {
    ^bb0(%x: !tensor_op.tensor<[64, 48], f16>, %w: !tensor_op.tensor<[48, 32], f16>, %out0: !tensor_op.tensor<[64, 32], f16>):
      %acc = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
      %acc_1 = tiled_loop.for "k" = <[0, 48, BLOCK_K]> iter_args(%acc) : ... { ... tiled_loop.dot ... }
      %relu = tiled_loop.binary "max" %acc_1, %0 : ...
      tiled_loop.store %relu, %out0 <[BLOCK_M*pid_m, BLOCK_N*pid_n]> : ...
    }
    func.func ... {
      %y = tiled_loop.launch @fused_0(%x, %w) : (...) -> !tensor_op.tensor<[64, 32], f16>
    }
"""


from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from amk.dialects import tensor_op, tiled_loop
from amk.dialects.syntax import LOOP_VARIABLES, lowering_name
from amk.dialects.tensor_op import TensorType
from amk.lowering.kernel_lowering import (
    DEFAULT_MERGE_CHUNK,
    MERGE_CHUNKS,
    KernelLowering,
    Workspace,
    WorkspaceBuffer,
)
from amk.lowering.plan import (
    COL,
    FULL,
    ROW,
    SCALAR,
    GroupPlan,
    NotFusable,
    broadcast_batch_map,
    broadcast_row_map,
    plan_group,
    row_vector_per_batch,
    shared_by_every_batch,
)
from amk.lowering.strategies import AUTO, STRATEGIES, choose_strategy
from amk.symbolic import Dim


def _view_dims(value: SSAValue, cls: str, plan: GroupPlan) -> tuple[list[Dim], str]:
    """The kernel argument type of a group value: its dims as the kernel sees them and how the launcher views it.
    In a batched kernel the values with rows are rank 3, their batch dims flattened into the first (a per-row value
    ``[batch, rows, 1]``); the matmul's operands keep theirs, so that a view with a stride per batch dim (Hugging
    Face's ``view(B, S, H, D).transpose(1, 2)``, ``[B, H, S, D]``) is read in place, not copied to ``[B*H, S, D]``."""
    dims = value.type.dims
    batch = dims[:-2] if plan.batched else []
    if cls == "rhs":
        k, n = dims[-2:]
        return ([*batch, n, k], "transpose") if plan.matmul.rhs_transposed else ([*batch, k, n], "")
    if cls == "lhs":
        if plan.matmul.lhs_transposed:
            k, m = dims
            return [m, k], "transpose"
        if plan.batched:
            return list(dims), ""
        return [Dim(_product(dims[:-1])), dims[-1]], ""
    batch = plan.batch_dims
    in_prologue = plan.prologue is not None and value in plan.prologue.value_class
    space = plan.prologue.space if in_prologue and value not in plan.main.value_class else plan.main.space
    if plan.repeated_table(value):  # its own columns, which the loads read modulo their count
        return ([Dim(_product(dims[:-1])), dims[-1]] if cls == FULL else [dims[-1]]), ""
    if cls == FULL and broadcast_row_map(dims, space) is not None:  # its own rows, which the loads map the space's to
        return [Dim(_product(dims[:-1])), space.cols], ""
    if cls == FULL and shared_by_every_batch(dims, space):  # one matrix, read at every batch index
        return [space.rows, space.cols], ""
    batch_map = broadcast_batch_map(dims, space) if cls == FULL else None
    if batch_map is not None:  # its own matrices, which the loads map the kernel's batch index to
        return [batch_map[2], space.rows, space.cols], ""
    vectors = row_vector_per_batch(dims, space) if cls == ROW else None
    if vectors is not None:  # a row vector per matrix, read at the (mapped) batch index
        return [vectors.count, Dim(1), space.cols], ""
    return {FULL: [*batch, space.rows, space.cols], ROW: [space.cols],
            COL: [*batch, space.rows, Dim(1)] if batch else [space.rows], SCALAR: [Dim(1)]}[cls], ""


def _product(dims) -> str:
    return "*".join(f"({d})" for d in dims) or "1"



def _check_region(fused: tensor_op.FusedOp, name: str, ops: list) -> None:
    """Raise PassFailedException for what amk-fuse never forms and a kernel cannot be made of: a region without ops,
    an argument no op reads, a dim named as the lowering names its own symbols (:func:`lowering_name`)."""
    if not ops:
        raise PassFailedException(f"amk-tile: {name}: a tensor_op.fused region without ops has no kernel to make")
    unread = [arg for arg in fused.body.block.args if not arg.uses]
    if unread:
        raise PassFailedException(f"amk-tile: {name}: argument {unread[0].index} of its tensor_op.fused region is read "
                                  "by no op (a kernel takes the operands its ops read)")
    for value in (*fused.operands, *fused.results):
        reserved = sorted(symbol for dim in tensor_op.tensor_type(value).dims for symbol in dim.free_symbols
                          if lowering_name(symbol))
        if reserved:
            raise PassFailedException(
                f"amk-tile: {name}: dimension name {reserved[0]!r} is one amk's lowering gives its loop variables "
                f"({', '.join(sorted(LOOP_VARIABLES))}), program ids (pid_*) or tile parameters (BLOCK_*, SPLIT_*, "
                "...), which the kernel would read instead: rename the dimension")


def lower_fused(fused: tensor_op.FusedOp, name: str, strategy: str = AUTO, merge_chunk: int = 0,
                size_hints: Mapping[str, int] | None = None) -> tuple[tiled_loop.KernelOp, tiled_loop.LaunchOp]:
    """The kernel of one fused region, tiled by ``strategy`` (a registered name, or ``auto``, which chooses as for
    the sizes of ``size_hints``: see :func:`amk.lowering.strategies.choose_strategy`), and the launch replacing the
    region."""
    block = fused.body.block
    ops = list(block.ops)[:-1]
    outputs = list(block.last_op.values)
    _check_region(fused, name, ops)
    try:
        plan = plan_group(ops, outputs)
    except NotFusable as error:  # a region written by hand (amk-fuse forms only regions it can plan)
        raise PassFailedException(f"amk-tile: {name}: its tensor_op.fused region cannot be one kernel: {error}") from None
    arg_types, views, names = [], [], []
    for arg in block.args:
        cls = plan.input_class[arg]
        dims, view = _view_dims(arg, cls, plan)
        arg_types.append(TensorType(dims, arg.type.element_type))
        views.append(view)
        names.append(arg.name_hint or f"in{len(names)}")
    out_types = []
    for index, value in enumerate(outputs):
        cls = plan.main.value_class.get(value, FULL)
        dims, _ = _view_dims(value, cls, plan)
        out_types.append(TensorType(dims, value.type.element_type))
        names.append(f"out{index}")
    rows, cols = plan.main.space.rows, plan.main.space.cols
    tiling = choose_strategy(plan, strategy, size_hints)
    phase_two = [v for v in outputs if v in plan.main.after_reduction and plan.main.value_class[v] in (FULL, ROW)]
    # The pre-reduction values phase 2 re-reads go into an output written after them where one holds them exactly (a
    # full tile of their own type): one rounded to a narrower type would feed every output of phase 2 rounded values.
    holders = [v for v in phase_two if plan.main.value_class[v] == FULL
               and plan.materialized is not None and v.type.element_type == plan.materialized.type.element_type]
    buffers = []
    if (plan.materialized is not None and plan.materialized not in outputs and not holders
            and tiling.stores_pre_reduction):
        buffers.append(WorkspaceBuffer(TensorType([*plan.batch_dims, rows, cols], plan.materialized.type.element_type),
                                       "scratch", "y_scratch"))
    buffers += tiling.workspace(plan)
    grid = tiling.grid(plan).batched(plan)
    all_types = arg_types + out_types + [buffer.type for buffer in buffers]
    kernel = tiled_loop.KernelOp(name, grid=grid.axes, program_ids=grid.program_ids, strategy=tiling.name,
                                 tile_params=grid.tile_params, num_inputs=len(block.args), arg_types=all_types,
                                 arg_views=views + [""] * (len(out_types) + len(buffers)),
                                 group_size=grid.group_size, workspace=[buffer.kind for buffer in buffers],
                                 problem=[rows, cols] + ([plan.contraction] if plan.matmul is not None else []))
    kernel_args = kernel.body.block.args
    for arg, arg_name in zip(kernel_args, names + [buffer.name for buffer in buffers]):
        arg.name_hint = arg_name
    arg_of = dict(zip(block.args, kernel_args))
    output_arg = dict(zip(outputs, kernel_args[len(block.args):len(block.args) + len(outputs)]))
    extra = list(kernel_args[len(block.args) + len(outputs):])
    workspace = Workspace()
    if buffers and buffers[0].name == "y_scratch":
        workspace.materialized_in = extra.pop(0)
    if buffers and buffers[-1].kind == "counter":  # a counter buffer always comes last
        workspace.counters = extra.pop()
    workspace.partials = extra
    if plan.materialized is not None and workspace.materialized_in is None and (plan.materialized in output_arg
                                                                                or holders):
        workspace.materialized_in = output_arg.get(plan.materialized) or output_arg[holders[0]]
    KernelLowering(plan, tiling, kernel, arg_of, output_arg, workspace, merge_chunk or DEFAULT_MERGE_CHUNK,
                   size_hints).build()
    launch = tiled_loop.LaunchOp(name, list(fused.inputs), [r.type for r in fused.outputs])
    return kernel, launch


def size_hints_option(size_hints: Mapping[str, int]) -> str:
    """amk-tile's ``size_hints`` option text for ``size_hints`` (``s0=16,s1=1``)."""
    return ",".join(f"{symbol}={value}" for symbol, value in sorted(size_hints.items()))


def parse_size_hints(text: str, option: str = "amk-tile: size_hints", allow_zero: bool = False) -> dict[str, int]:
    """The symbol values of amk-tile's ``size_hints`` option (``s0=16,s1=1``; empty: none), or of another ``option``
    written the same way (its name heads the error), each positive (or 0, with ``allow_zero``)."""
    hints = {}
    kind = "a non-negative integer" if allow_zero else "a positive integer"
    for item in filter(None, (part.strip() for part in text.split(","))):
        symbol, _, value = item.partition("=")
        if not symbol.strip().isidentifier() or not value.strip().isdigit() or int(value) < (0 if allow_zero else 1):
            raise PassFailedException(f"{option} must be SYMBOL=VALUE pairs separated by commas, each "
                                      f"value {kind} (s0=16,s1=1); got {item!r} in {text!r}")
        if symbol.strip() in hints and hints[symbol.strip()] != int(value):  # (the last one won, silently)
            raise PassFailedException(f"{option} gives {symbol.strip()} two values ({hints[symbol.strip()]} and "
                                      f"{int(value)}) in {text!r}")
        hints[symbol.strip()] = int(value)
    return hints


def tensor_dims(module: ModuleOp) -> Iterator[Dim]:
    """Every dim of the tensor types of ``module``'s values (op results and block arguments)."""
    for operation in module.walk():
        for value in (*operation.results, *(arg for region in operation.regions for block in region.blocks
                                            for arg in block.args)):
            if isinstance(value.type, TensorType):
                yield from value.type.dims


def size_symbols(module: ModuleOp) -> set[str]:
    """The symbolic sizes of ``module``'s tensor types."""
    return {symbol for dim in tensor_dims(module) for symbol in dim.free_symbols}


def check_size_symbols(module: ModuleOp, values: Mapping[str, int], option: str) -> None:
    """Refuse a value for a size that no tensor type of ``module`` has (a misspelt size would bind nothing, or hint
    nothing, silently), naming ``option`` and the module's symbolic sizes."""
    symbols = size_symbols(module)
    unknown = sorted(set(values) - symbols)
    if unknown:
        raise PassFailedException(f"{option}: no tensor type has the size {', '.join(unknown)}; the module's "
                                  f"symbolic sizes: {', '.join(sorted(symbols)) or 'none'}")


def reduction_strategy_names() -> list[str]:
    """What amk-tile's ``reduction_strategy`` option accepts: ``auto`` and the registered row-reduction strategies."""
    return [AUTO] + [name for name, strategy in STRATEGIES.items() if strategy.row_reduction]


@dataclass(frozen=True)
class TilePass(ModulePass):
    """Lower every ``tensor_op.fused`` region to a ``tiled_loop.kernel`` and launch it (module docstring).

    ``reduction_strategy`` picks how a matmul followed by a row reduction is tiled: ``tile_stats`` (output tiles in
    parallel write partial statistics; a second launch merges them and normalizes every tile), ``strip_finish``
    (the same tiles; the last tile of each row strip merges the statistics and normalizes the strip from L2),
    ``strip_sync`` (resident programs walk the tiles in row-strip order and the tiles of a strip wait for each
    other's statistics; GPU only: Triton's interpreter runs one program at a time), ``row_strip``,
    ``chunk_recompute`` (``SPLIT_N`` programs share each row strip, one chunk of its column tiles each: the first
    launch folds the chunk's statistics, a second merges the row's states and computes the chunk again; a static K
    of at most 256 is loaded whole, once per launch; chains without a prologue), or ``auto`` (the default:
    ``chunk_recompute`` when K is at most 256, ``row_strip`` with such a K and a prologue; else ``strip_finish`` for
    outputs of 2^27 elements or more; else ``tile_stats``). Without a matmul, ``row_resident`` keeps each row of a
    static length of at most 16384 in registers (one pass; what ``auto`` takes) and ``row_strip`` sweeps the rows'
    tiles twice (longer or symbolic rows). ``tile_recompute`` and ``strip_recompute`` are
    ``tile_stats`` and ``row_strip`` that run the K loop again where they would re-read the pre-normalization tile,
    which is then never stored (tile_recompute: chains without a prologue).

    ``merge_chunk`` is how many tiles' partial statistics the strategies that merge them (all but ``row_strip``) load
    and merge per loop iteration, as one ``[BLOCK_M, merge_chunk]`` tile; 0 (the default) takes the measured best,
    ``DEFAULT_MERGE_CHUNK`` (64: a whole row's tiles at once, up to 64).

    ``size_hints`` (``"s0=16,s1=1"``) gives symbolic sizes the values of the size bucket being built: ``auto``
    chooses the strategy those sizes would get (``split_k`` for a decode-sized row count), while the kernel stays
    symbolic and correct for every size.
    """

    name = "amk-tile"

    reduction_strategy: str = AUTO
    merge_chunk: int = 0
    size_hints: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.merge_chunk not in (0, *MERGE_CHUNKS):
            raise PassFailedException(f"amk-tile: merge_chunk must be 0 (the default, {DEFAULT_MERGE_CHUNK}) or one of "
                                      f"{', '.join(map(str, MERGE_CHUNKS))}, got {self.merge_chunk!r}")
        accepted = reduction_strategy_names()
        if self.reduction_strategy not in accepted:
            raise PassFailedException(f"amk-tile: reduction_strategy must be {', '.join(accepted)}, "
                                      f"got {self.reduction_strategy!r}")
        size_hints = parse_size_hints(self.size_hints)
        check_size_symbols(op, size_hints, "amk-tile: size_hints")
        taken = {o.sym_name.data for o in op.walk() if isinstance(getattr(o, "sym_name", None), StringAttr)}
        fused_ops = [o for o in op.walk() if isinstance(o, tensor_op.FusedOp)]
        module_block: Block = op.body.block
        first = module_block.first_op
        for index, fused in enumerate(fused_ops):
            name = f"fused_{index}"
            while name in taken:
                name += "_"
            taken.add(name)
            kernel, launch = lower_fused(fused, name, self.reduction_strategy, self.merge_chunk, size_hints)
            if first is None:
                module_block.add_op(kernel)
            else:
                module_block.insert_op_before(kernel, first)
            fused.parent_block().insert_op_before(launch, fused)
            for old, new in zip(fused.outputs, launch.outputs):
                old.replace_all_uses_with(new)
                new.name_hint = old.name_hint
            fused.detach()
            fused.erase()

