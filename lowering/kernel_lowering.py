"""The toolkit a tiling strategy builds a ``tiled_loop.kernel`` body with.

:class:`KernelLowering` holds one kernel being built from a group plan (:mod:`amk.lowering.plan`) and the steps that
strategies share: loading and computing tiles of the group's values through their lowering rules
(:mod:`amk.lowering.rules`), the K loop of a matmul (with its prologue), loops over column tiles folding row
statistics, writing and merging partial statistics, the second sweep that finishes rows, and relaunches. A strategy
(:mod:`amk.lowering.strategies`) composes them in its ``build``; this module names no strategy and no op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import StringAttr, UnitAttr, bf16, f16, f32, i32
from xdsl.ir import Block, Operation, SSAValue

from amk.dialects import tensor_op, tiled_loop
from amk.dialects.syntax import LOOP_VARIABLES
from amk.dialects.tensor_op import TensorType
from amk.dialects.tiled_loop import TileType
from amk.errors import CompilationError
from amk.lowering import rules
from amk.lowering.configs import whole_k_tile
from amk.lowering.plan import (
    COL,
    FULL,
    ROW,
    SCALAR,
    GroupPlan,
    Section,
    broadcast_batch_map,
    broadcast_row_map,
    row_vector_per_batch,
)
from amk.lowering.rules import TileBuilder
from amk.registration import callable_name
from amk.symbolic import Dim

if TYPE_CHECKING:
    from collections.abc import Mapping

    from amk.lowering.strategies.base import TilingStrategy

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"




def origin_label(op: Operation) -> str:
    """How the emitted code's comments name a fused op."""
    label = op.name.split(".", 1)[1]
    if isinstance(op, tensor_op.GeluOp) and op.uses_tanh:
        label += " (tanh)"
    return label


def _computed_from(op) -> list[SSAValue]:
    """The values :meth:`KernelLowering.compute` computes the tile of ``op``'s result from, in the order it takes
    them: a rotation's input, an elementwise op's operands, a norm's or softmax's input and per-column operands (a
    reduction's value is its statistic; those that keep the shape also need the tile they normalize)."""
    if isinstance(op, tensor_op.RotateHalfOp):
        return [op.input]
    kind = rules.kind_of(op)
    if kind == "elementwise":
        return list(op.operands)
    if kind == "reduction" and rules.ROW_REDUCTIONS[type(op)].keeps_shape:
        return [rules.reduction_input(op), *rules.reduction_extras(op)]
    return []


def _check_rule_result(op: Operation, rule: Callable, result, operands: list[SSAValue]) -> None:
    """An elementwise lowering rule gives a tile of its operands' broadcast shape: anything else (None, a reduced
    tile) would be stored wrongly or fail far from the rule, so a contributor's rule is checked where it is called."""
    if not isinstance(result, SSAValue) or not isinstance(result.type, TileType):
        problem = (f"returned {result!r}: a rule returns the tile of the op's value (an SSAValue of a !tiled_loop.tile "
                   "type, made with the TileBuilder)")
    elif result.type.element_type != f32:
        problem = (f"returned a tile of {result.type.element_type}: tiles hold fp32 values between ops (a rule "
                   "rounding through another type casts back, as b.cast(b.cast(x, f16), f32); a comparison selects "
                   "1.0 or 0.0 with b.select)")
    else:
        expected = tiled_loop.broadcast_tiles([value.type.dims for value in operands], op.name)
        if result.type.dims == expected:
            return
        problem = (f"returned a [{', '.join(map(str, result.type.dims))}] tile for operands of shape "
                   f"[{', '.join(map(str, expected))}]: an elementwise rule keeps its operands' (broadcast) shape")
    raise CompilationError(f"the lowering rule of {op.name} ({callable_name(rule)}) {problem}")


def _check_reduction_result(op: Operation, rule: rules.RowReduction, result, x: SSAValue | None) -> None:
    """A row reduction's ``apply`` gives a tile of its input's shape (``keeps_shape``) or a ``[rows, 1]`` statistic:
    a statistic given for a norm was stored as its first column, leaving the rest of the output unwritten."""
    dims = result.type.dims if isinstance(result, SSAValue) and isinstance(result.type, TileType) else None
    if dims is not None and (dims == x.type.dims if rule.keeps_shape else len(dims) == 2 and dims[1] == Dim(1)):
        return
    expected = (f"a tile of its input's shape [{', '.join(map(str, x.type.dims))}] (keeps_shape=True)"
                if rule.keeps_shape else "a [rows, 1] tile (keeps_shape=False)")
    got = f"a [{', '.join(map(str, dims))}] tile" if dims is not None else repr(result)
    raise CompilationError(f"the row reduction of {op.name}: its apply ({callable_name(rule.apply)}) returned {got}, "
                           f"and it must return {expected}")


@dataclass
class ColumnTile:
    """Where a section is being computed: the tile's row and column offsets and sizes, and validity of columns."""

    section: Section
    row_offset: Dim
    col_offset: Dim | None
    block_cols: str
    valid: SSAValue | None = None
    env: dict[SSAValue, SSAValue] = field(default_factory=dict)
    # Kernel inputs loaded ahead of their use (KernelLowering.load_inputs_ahead), not yet cast to fp32.
    loaded_ahead: dict[SSAValue, SSAValue] = field(default_factory=dict)


class KernelLowering:
    """Builds the body of one ``tiled_loop.kernel`` from a group plan."""

    def __init__(self, plan: GroupPlan, strategy: TilingStrategy, kernel: tiled_loop.KernelOp,
                 arg_of: dict[SSAValue, SSAValue], output_arg: dict[SSAValue, SSAValue], workspace: Workspace,
                 merge_chunk: int = 1, size_hints: Mapping[str, int] | None = None):
        self.plan = plan
        # The values of the size bucket being built: choices that only make the kernel faster may assume them.
        self.size_hints = dict(size_hints or {})
        self.strategy = strategy
        # A norm prologue whose per-row scale is applied to the accumulator, its statistics gathered in the K loop.
        self.row_scaled = row_scaled_prologue(plan, strategy)
        self.prologue_state: list[SSAValue] = []
        self.merge_chunk = merge_chunk
        # A short K loop run again where the pre-normalization tile would be re-read, which is then never stored.
        self.recompute = strategy.recomputes
        # The A tile over all of K, loaded once per launch (load_whole_a): every column tile's product is one dot.
        self.whole_a: SSAValue | None = None
        self.kernel = kernel
        self.arg_of = arg_of
        self.output_arg = output_arg
        self.workspace = workspace
        self.b = TileBuilder(kernel.body.block)
        self.stats: dict[Operation, list[SSAValue]] = {}
        self.row_offset = Dim(f"{BLOCK_M}*pid_m")
        self.col_offset = Dim(f"{BLOCK_N}*pid_n")

    # -- values ------------------------------------------------------------------------------------------------------
    def tile_shape(self, cls: str, block_cols: str) -> list:
        rows = BLOCK_M if cls in (FULL, COL) else 1
        cols = block_cols if cls in (FULL, ROW) else 1
        return [rows, cols]

    def offsets(self, cls: str, at: ColumnTile, tensor: SSAValue) -> list:
        """Where the tile of a value of class ``cls`` lies in the kernel's ``tensor``."""
        # a batched kernel's per-row value [batch, rows, 1] and row vector per matrix [matrices, 1, cols]
        unit = [0] if tensor.type.rank == 3 else []
        offsets = {FULL: [at.row_offset, at.col_offset], ROW: [*unit, at.col_offset], COL: [at.row_offset, *unit],
                   SCALAR: [0]}[cls]
        return self.in_batch(tensor, offsets)

    @staticmethod
    def in_batch(tensor: SSAValue, offsets: list) -> list:
        """``offsets`` in ``tensor``: a batched kernel's tensor of rank 3 or more is read at this program's batch
        index (over its leading dims: :func:`amk.dialects.tiled_loop.batch_indices`)."""
        return [*tiled_loop.batch_indices(tensor.type.dims[:-2]), *offsets] if tensor.type.rank >= 3 else offsets

    def load(self, value: SSAValue, cls: str, at: ColumnTile, upcast: bool = True,
             broadcast_rows: list[Dim] | None = None, broadcast_batch: list[Dim] | None = None,
             rotate_half: int | None = None, column_period: int | None = None) -> SSAValue:
        arg = self.arg_of[value]
        tile = TileType(self.tile_shape(cls, at.block_cols), arg.type.element_type)
        self.b.origin = None
        rotated = rotate_half is not None
        loaded = self.b.add(tiled_loop.LoadOp(arg, self.offsets(cls, at, arg), tile, broadcast_rows, broadcast_batch,
                                              rotate_half, column_period),
                            f"{arg.name_hint}_{'rotated' if rotated else 'tile'}")
        name = f"{arg.name_hint}_rotated" if rotated else arg.name_hint
        return self.b.cast(loaded, f32, f"{name}_f32") if upcast else loaded

    def valid_cols(self, at: ColumnTile) -> SSAValue:
        """i1 tile marking the columns of this tile that lie inside the row (padding is excluded from reductions)."""
        if at.valid is None:
            self.b.origin = None
            at.valid = self.b.add(tiled_loop.InBoundsOp(
                [0, at.col_offset], [1, at.section.space.cols], [1, at.block_cols]), "valid_cols")
        return at.valid

    def input_tile(self, value: SSAValue, at: ColumnTile, upcast: bool = True) -> SSAValue | None:
        """The tile of ``value`` at ``at`` where it is read from a kernel input (the input itself, or a permuted read
        of one), loaded now; None where it is computed."""
        space = at.section.space
        if value in self.arg_of:
            cls = at.section.value_class[value]
            if cls == FULL:
                return self.load(value, cls, at, upcast, broadcast_rows=broadcast_row_map(value.type.dims, space),
                                 broadcast_batch=broadcast_batch_map(value.type.dims, space))
            vectors = row_vector_per_batch(value.type.dims, space) if cls == ROW else None
            return self.load(value, cls, at, upcast, broadcast_batch=vectors.batch_map if vectors else None)
        op = value.owner
        if type(op) in rules.PERMUTED_READS and op.operands[0] in self.arg_of:  # plan_group checked its class
            cls = at.section.value_class[op.results[0]]
            rows = broadcast_row_map(op.results[0].type.dims, space) if cls == FULL else None
            return self.load(op.operands[0], cls, at, upcast, broadcast_rows=rows,
                             **rules.PERMUTED_READS[type(op)](op))
        return None

    def compute(self, value: SSAValue, at: ColumnTile) -> SSAValue:
        """The fp32 tile of ``value`` at ``at``, computing what it depends on (memoized in ``at.env``)."""
        if value in at.env:
            return at.env[value]
        if value in at.loaded_ahead:
            loaded = at.loaded_ahead.pop(value)
            self.b.origin = None  # as load's own cast: no op of the chain
            result = self.b.cast(loaded, f32, f"{loaded.name_hint.removesuffix('_tile')}_f32")
        elif (result := self.input_tile(value, at)) is None:
            op = value.owner
            kind = rules.kind_of(op)
            operands = [self.compute(v, at) for v in _computed_from(op)]
            if isinstance(op, tensor_op.RotateHalfOp):  # a tile computed in registers: its registers permuted
                self.b.origin = origin_label(op)
                result = self.b.add(tiled_loop.RotateHalfOp(*operands, op.group_size), "rotated")
            elif kind == "elementwise":
                self.b.origin = origin_label(op)
                rule = rules.ELEMENTWISE_RULES[type(op)]
                result = rule(self.b, op, *operands)
                _check_rule_result(op, rule, result, operands)
            elif kind == "reduction":
                rule = rules.ROW_REDUCTIONS[type(op)]
                x, extras = (operands[0], operands[1:]) if operands else (None, [])
                self.b.origin = origin_label(op)
                result = rule.apply(self.b, op, self.stats[op], x, extras)
                _check_reduction_result(op, rule, result, x)
            else:
                raise AssertionError(f"{op.name} is not available in this phase of the kernel")
        at.env[value] = result
        return result

    def load_inputs_ahead(self, values: list[SSAValue], at: ColumnTile, ready: list[SSAValue]) -> None:
        """Load now the kernel inputs that :meth:`compute` of ``values`` at ``at`` will read, its walk stopping at
        ``ready`` (what ``at.env`` will hold by then, such as the matmuls' sums). Their loads are issued before what
        the kernel does in between, their fp32 casts left where compute uses them: a cast here would wait for its
        load."""
        seen = {*ready, *at.env, *at.loaded_ahead}
        pending = list(values)
        while pending:
            value = pending.pop()
            if value in seen:
                continue
            seen.add(value)
            loaded = self.input_tile(value, at, upcast=False)
            if loaded is not None:
                at.loaded_ahead[value] = loaded
                continue
            pending += _computed_from(value.owner)

    def store(self, value: SSAValue, tile: SSAValue, at: ColumnTile, dest: SSAValue | None = None) -> None:
        dest = dest if dest is not None else self.output_arg[value]
        cls = at.section.value_class.get(value, FULL)
        self.b.origin = None
        self.b.add(tiled_loop.StoreOp(tile, dest, self.offsets(cls, at, dest)))

    # -- loops -------------------------------------------------------------------------------------------------------
    def loop(self, iv: str, upper: Dim, step, inits: list[SSAValue], body, note: str,
             lower: Dim | int = 0, pipelined: bool = False) -> list[SSAValue]:
        """A ``tiled_loop.for`` whose body is built by ``body(carried) -> next carried``; ``note`` says what the loop
        is for (it becomes the comment above the loop in the emitted code). ``pipelined`` marks a loop whose loads do
        not depend on what it carries, so that they may be issued iterations ahead. ``iv`` is one of
        :data:`~amk.dialects.syntax.LOOP_VARIABLES`, names no tensor dim may take."""
        if iv not in LOOP_VARIABLES:
            raise CompilationError(f"loop variable {iv!r} is not one of {sorted(LOOP_VARIABLES)}: add it to "
                                   "amk.dialects.syntax.LOOP_VARIABLES, which tensor dims may not be named")
        for_op = tiled_loop.ForOp(iv, lower, upper, step, inits)
        for_op.attributes["note"] = StringAttr(note)
        if pipelined:
            for_op.attributes["pipelined"] = UnitAttr()
        self.b.origin = None
        self.b.add(for_op)
        for arg, init in zip(for_op.body.block.args, inits):
            arg.name_hint = init.name_hint
        outer = self.b.block
        self.b.block = for_op.body.block
        carried = body(list(for_op.body.block.args))
        self.b.origin = None
        self.b.add(tiled_loop.YieldOp(*carried))
        self.b.block = outer
        for result, init in zip(for_op.results, inits):
            result.name_hint = init.name_hint
        return list(for_op.results)

    def reduce_over_columns(self, section: Section, iv: str, block_cols: str, phase_one_work=None) -> None:
        """Loop over the column tiles folding every reduction of ``section``; sets ``self.stats``."""
        flat, sizes = self.fold_columns(section, iv, block_cols, phase_one_work)
        self.finalize_statistics(section.reductions, flat, sizes)

    def fold_columns(self, section: Section, iv: str, block_cols: str, phase_one_work=None,
                     columns: tuple[Dim, Dim] | None = None) -> tuple[list[SSAValue], list[int]]:
        """Loop over the column tiles in ``columns`` (default: the whole row) folding every reduction of ``section``
        into running states; returns their components and each state's size."""
        reductions = section.reductions
        self.b.origin = None
        states = [rules.ROW_REDUCTIONS[type(op)].init(self.b, BLOCK_M) for op in reductions]
        sizes = [len(s) for s in states]

        def body(carried):
            at = ColumnTile(section, self.row_offset, Dim(iv), block_cols)
            if phase_one_work is not None:
                phase_one_work(at)
            next_states = []
            for op, size in zip(reductions, sizes):
                state, carried = carried[:size], carried[size:]
                x = self.compute(rules.reduction_input(op), at)
                valid = self.valid_cols(at)
                self.b.origin = origin_label(op)
                next_states += rules.ROW_REDUCTIONS[type(op)].update(self.b, state, x, valid)
            return next_states

        lower, upper = columns if columns is not None else (Dim(0), section.space.cols)
        flat = self.loop(iv, upper, block_cols, [v for s in states for v in s], body,
                         f"row statistics over the {iv.upper()} tiles" + (" (first sweep)" if phase_one_work else ""),
                         lower=lower, pipelined=self.whole_a is not None)
        return flat, sizes

    def finalize_statistics(self, reductions: list[Operation], flat: list[SSAValue], sizes: list[int]) -> None:
        """``self.stats`` of each row reduction from its final state (``flat``, ``sizes`` components each)."""
        for op, size in zip(reductions, sizes):
            state, flat = flat[:size], flat[size:]
            self.b.origin = origin_label(op)
            self.stats[op] = rules.ROW_REDUCTIONS[type(op)].finalize(self.b, state, op)

    def matmul_tiles(self, at: ColumnTile, k_range: tuple[Dim, Dim] | None = None) -> list[SSAValue]:
        """The fp32 accumulators of the output tile at ``at`` (one per matmul: a dual GEMM shares each A tile), put
        into ``at.env``: the K loop over ``k_range`` (default all of K), with the prologue applied to A."""
        matmul = self.plan.matmul
        prologue = self.plan.prologue
        col_offset = at.col_offset
        if self.whole_a is not None:
            return self.whole_k_products(at)
        self.b.origin = "matmul"
        accumulators = [self.b.full(0.0, [BLOCK_M, BLOCK_N], "acc") for _ in self.plan.matmuls]
        norm = self.row_scaled
        rule = rules.ROW_REDUCTIONS[type(norm)] if norm is not None else None
        # A row-scaled norm's statistics are row sums: the loop adds their terms and sums each row after it.
        sums = rule.column_sums if rule is not None else ()
        gram = norm is not None and self.gram_applies(norm)
        self.b.origin = origin_label(norm) if norm is not None else None
        carried_state = [self.b.full(0.0, [BLOCK_M, BLOCK_M] if gram and each.squares
                                     else [BLOCK_M if each.per_row else 1, BLOCK_K],
                                     "gram" if gram and each.squares else f"{each.name}_terms") for each in sums]

        def body(carried):
            self.b.origin = None
            carried, state = carried[:len(accumulators)], carried[len(accumulators):]
            if prologue is None:
                at = ColumnTile(self.plan.main, self.row_offset, Dim("k"), BLOCK_K)
                a = self.load(matmul.lhs, FULL, at, upcast=False)
            elif norm is not None:
                # The norm's row statistics accumulate next to the product; its scale waits for the accumulator.
                at = ColumnTile(prologue, self.row_offset, Dim("k"), BLOCK_K)
                x = self.compute(rules.reduction_input(norm), at)
                valid = self.valid_cols(at)
                extras = [self.compute(v, at) for v in rules.reduction_extras(norm)]
                self.b.origin = origin_label(norm)
                state = [self.gram_update(x, total) if gram and each.squares
                         else self.b.add_(total, each.term(self.b, x, valid)) for each, total in zip(sums, state)]
                unscaled = rule.unscaled(self.b, norm, x, extras)
                self.b.origin = None
                a = self.b.cast(self.b.masked(unscaled, valid, 0.0), matmul.lhs.type.element_type, "a_tile")
            else:
                at = ColumnTile(prologue, self.row_offset, Dim("k"), BLOCK_K)
                normalized = self.compute(matmul.lhs, at)
                # Zero the padding columns of K so that they add nothing to the dot, whatever the prologue made.
                self.b.origin = None
                normalized = self.b.masked(normalized, self.valid_cols(at), 0.0)
                a = self.b.cast(normalized, matmul.lhs.type.element_type, "a_tile")
            updated = []
            for each, acc in zip(self.plan.matmuls, carried):
                rhs = self.arg_of[each.rhs]
                self.b.origin = None
                b_tile = self.b.add(tiled_loop.LoadOp(rhs, self.in_batch(rhs, [Dim("k"), col_offset]),
                                                      TileType([BLOCK_K, BLOCK_N], rhs.type.element_type)),
                                    f"{rhs.name_hint}_tile")
                self.b.origin = "matmul"
                updated.append(self.b.add(tiled_loop.DotOp(a, b_tile, acc), "acc"))
            return updated + state

        lower, upper = k_range if k_range is not None else (Dim(0), self.plan.contraction)
        results = self.loop("k", upper, BLOCK_K, accumulators + carried_state, body,
                            "K loop: accumulate the matmul tile in fp32 registers, operands pipelined through shared "
                            "memory", lower=lower)
        results, self.prologue_state = results[:len(accumulators)], results[len(accumulators):]
        if norm is not None:
            self.b.origin = origin_label(norm)
            self.prologue_state = [self.b.add(tiled_loop.DiagonalOp(total)) if gram and each.squares
                                   else self.b.reduce("sum", total) for each, total in zip(sums, self.prologue_state)]
        for each, result in zip(self.plan.matmuls, results):
            at.env[each.output] = result
        return results

    def load_whole_a(self) -> None:
        """This launch's A tile: the program's rows over all of K (padded to a power of two, at least 16: a GPU's
        ``tl.dot`` refuses K < 16), loaded once."""
        k_tile = str(whole_k_tile(self.plan.contraction))
        at = ColumnTile(self.plan.main, self.row_offset, Dim(0), k_tile)
        self.whole_a = self.load(self.plan.matmul.lhs, FULL, at, upcast=False)

    def whole_k_products(self, at: ColumnTile) -> list[SSAValue]:
        """The output tile at ``at`` as one dot per matmul of the preloaded A tile and a B tile over all of K."""
        k_tile = self.whole_a.type.dims[1]
        results = []
        for each in self.plan.matmuls:
            rhs = self.arg_of[each.rhs]
            self.b.origin = None
            b_tile = self.b.add(tiled_loop.LoadOp(rhs, self.in_batch(rhs, [Dim(0), at.col_offset]),
                                                  TileType([k_tile, BLOCK_N], rhs.type.element_type)),
                                f"{rhs.name_hint}_tile")
            self.b.origin = "matmul"
            zero = self.b.full(0.0, [BLOCK_M, BLOCK_N], "acc")
            results.append(self.b.add(tiled_loop.DotOp(self.whole_a, b_tile, zero), "acc"))
            at.env[each.output] = results[-1]
        return results

    def gram_applies(self, norm: Operation) -> bool:
        """Whether a row-scaled norm's sums of squares may come from ``x @ x^T``: its input is a 16-bit kernel
        operand, loaded as it is (each product is then exact in fp32 on the tensor cores; an fp32 dot would leave
        them or round to tf32), and the rows are few (timed with 1 to 32 rows; the ``[BLOCK_M, BLOCK_M]``
        accumulator and its MMAs grow with the square of the rows). Symbolic rows count as the size bucket's (its
        upper bound, ``size_hints``): the statistics are right for any row count, only their speed needs few."""
        source = rules.reduction_input(norm)
        rows = self.plan.rows.subs(self.size_hints)
        return (source in self.arg_of and source.type.element_type in (f16, bf16) and rows.is_static
                and rows.value <= GRAM_MAX_ROWS)

    def gram_update(self, x: SSAValue, gram: SSAValue) -> SSAValue:
        """``gram + x @ x^T`` on the 16-bit tile that ``x`` (its fp32 upcast) was loaded as."""
        loaded = x.owner.input
        self.b.origin = origin_label(self.row_scaled)
        transposed = self.b.add(tiled_loop.TransposeOp(loaded), f"{loaded.name_hint}_t")
        return self.b.add(tiled_loop.DotOp(loaded, transposed, gram), "gram")

    def row_scale_init(self) -> tuple[rules.RowReduction | None, list[SSAValue]]:
        """The row-scaled prologue's reduction rule and empty statistics (None and [] without one)."""
        norm = self.row_scaled
        if norm is None:
            return None, []
        rule = rules.ROW_REDUCTIONS[type(norm)]
        self.b.origin = origin_label(norm)
        return rule, rule.init(self.b, BLOCK_M)

    def scale_rows(self, at: ColumnTile, accumulators: list[SSAValue], state: list[SSAValue]) -> None:
        """Finish a row-scaled prologue: its statistics from ``state``, each accumulator's rows times the scale."""
        norm = self.row_scaled
        self.b.origin = origin_label(norm)
        scale = rules.ROW_REDUCTIONS[type(norm)].finalize(self.b, state, norm)[0]
        for each, acc in zip(self.plan.matmuls, accumulators):
            at.env[each.output] = self.b.mul(acc, scale)

    # -- what strategies compose -------------------------------------------------------------------------------------
    def build(self) -> None:
        """The kernel body: the prologue's statistics (a pass over K, unless the K loop gathers them), then what the
        strategy builds."""
        plan = self.plan
        if plan.prologue is not None and plan.prologue.has_reductions and self.row_scaled is None:
            self.reduce_over_columns(plan.prologue, "k", BLOCK_K)
        self.strategy.build(self)
        stored = {op.dest for op in self.kernel.walk() if isinstance(op, tiled_loop.StoreOp)}
        unstored = [arg.name_hint for arg in self.output_arg.values() if arg not in stored]
        if unstored:  # (a contributor's strategy: its outputs would be whatever the allocator left)
            raise CompilationError(f"tiling strategy {self.strategy.name} built kernel {self.kernel.sym_name.data} "
                                   f"without storing its output(s) {', '.join(unstored)}: its build must store every "
                                   "output (KernelLowering.store, or output_tile / finish_rows)")

    def output_tile(self) -> None:
        """This program's ``BLOCK_M x BLOCK_N`` output tile: the K loop (if any), then every output from it."""
        at = ColumnTile(self.plan.main, self.row_offset, self.col_offset, BLOCK_N)
        if self.plan.matmul is not None:
            accumulators = self.matmul_tiles(at)
            if self.row_scaled is not None:
                self.scale_rows(at, accumulators, self.prologue_state)
        for value in self.plan.outputs:
            self.store(value, self.compute(value, at), at)

    def phase_one_outputs(self, at: ColumnTile) -> None:
        """Store what is known before the row reductions: outputs computed from the tile and the value re-read later."""
        plan = self.plan
        y = plan.materialized
        if y is not None:
            at.env[y] = self.rounded(y, at)
            if y not in plan.outputs and not self.recompute:
                self.store(y, at.env[y], at, dest=self.workspace.materialized_in)
        self.store_outputs(at, after_reduction=False)

    def rounded(self, y: SSAValue, at: ColumnTile) -> SSAValue:
        """``y`` as phase 2 will see it, so that the statistics describe the values it normalizes: rounded to the
        precision of the buffer it re-reads; left in fp32 when phase 2 computes it again, which gives the same values
        (rounding them would only add two conversions per element to each sweep)."""
        value = self.compute(y, at)
        if self.recompute:
            return value
        self.b.origin = None
        stored_type = self.workspace.materialized_in.type.element_type
        return self.b.cast(self.b.cast(value, stored_type), f32, "y_rounded")

    def store_outputs(self, at: ColumnTile, after_reduction: bool) -> None:
        """Store the outputs computed before (or after) the row reductions from the tile at ``at``."""
        for value in self.plan.outputs:
            if (value in self.plan.main.after_reduction) == after_reduction:
                self.store(value, self.compute(value, at), at)

    def finish_rows(self, col_offset: Dim | None = None, columns: tuple[Dim, Dim] | None = None) -> None:
        """With ``self.stats`` known: store per-row results, then the full-size results of every column tile of the
        strip (a sweep over N, or over ``columns``), or of the one tile at ``col_offset``."""
        plan, main = self.plan, self.plan.main
        outputs_after = [v for v in plan.outputs if v in main.after_reduction]
        after = ColumnTile(main, self.row_offset, None, BLOCK_N)
        for value in outputs_after:
            if main.value_class[value] in (COL, SCALAR):
                self.store(value, self.compute(value, after), after)
        phase_two = [v for v in outputs_after if main.value_class[v] in (FULL, ROW)]
        if not phase_two:
            return
        y, y_dest = plan.materialized, self.workspace.materialized_in
        column_values = dict(after.env)

        def finish(col: Dim) -> None:
            at = ColumnTile(main, self.row_offset, col, BLOCK_N, env=dict(column_values))
            if y is not None and self.recompute:
                self.matmul_tiles(at)
                at.env[y] = self.rounded(y, at)
            elif y is not None:
                self.b.origin = None
                stored = self.b.add(tiled_loop.LoadOp(
                    y_dest, self.in_batch(y_dest, [self.row_offset, col]),
                    TileType([BLOCK_M, BLOCK_N], y_dest.type.element_type)),
                    "y_tile")
                at.env[y] = self.b.cast(stored, f32, "y_f32")
            for value in phase_two:
                self.store(value, self.compute(value, at), at)

        if col_offset is not None:
            finish(col_offset)
            return
        lower, upper = columns if columns is not None else (Dim(0), main.space.cols)
        self.loop("n", upper, BLOCK_N, [], lambda carried: finish(Dim("n")) or [],
                  "second sweep: " + ("compute" if self.recompute else "re-read")
                  + " each tile and finish the ops after the row reduction", lower=lower,
                  pipelined=self.whole_a is not None)

    def strip_phase_one(self, at: ColumnTile) -> None:
        """The first sweep's work on one column tile of a row strip, besides folding its statistics."""
        if self.plan.matmul is not None:
            self.matmul_tiles(at)
        self.phase_one_outputs(at)

    def store_partial_states(self, components: list[SSAValue]) -> None:
        """Write this program's partial row statistics, one column per program of the row strip (``pid_n``)."""
        for component, partial in zip(components, self.workspace.partials, strict=True):
            component = self.b.widen_rows(component, BLOCK_M)
            self.b.origin = None
            self.b.add(tiled_loop.StoreOp(component, partial,
                                          self.in_batch(partial, [self.row_offset, Dim("pid_n")])))

    def store_tile_statistics(self, at: ColumnTile) -> list[int]:
        """Write this tile's partial row statistics (one column per tile of the strip); returns each state's size."""
        main = self.plan.main
        valid = self.valid_cols(at)
        components, sizes = [], []
        for op in main.reductions:
            rule = rules.ROW_REDUCTIONS[type(op)]
            x = self.compute(rules.reduction_input(op), at)
            self.b.origin = origin_label(op)
            state = rule.tile_state(self.b, x, valid)
            sizes.append(len(state))
            components += state
        self.store_partial_states(components)
        return sizes

    def merge_strip_statistics(self, sizes: list[int], tiles_per_row: Dim, writer: str = "tile") -> None:
        """Merge the partial statistics of every ``writer`` (tile, or chunk of tiles) of this row strip into
        ``self.stats``: ``merge_chunk`` states per loop iteration, loaded as ``[BLOCK_M, merge_chunk]`` tiles and
        merged at once (one state per iteration when it is 1)."""
        main = self.plan.main
        chunk = self.merge_chunk
        states = [rules.ROW_REDUCTIONS[type(op)].init(self.b, BLOCK_M) for op in main.reductions]

        def merge(carried):
            partials = iter(self.workspace.partials)
            valid = None
            if chunk > 1:
                self.b.origin = None
                valid = self.b.add(tiled_loop.InBoundsOp([0, Dim("t")], [1, tiles_per_row], [1, chunk]),
                                   "valid_tiles")
            merged = []
            for op, size in zip(main.reductions, sizes):
                rule = rules.ROW_REDUCTIONS[type(op)]
                state, carried = carried[:size], carried[size:]
                loaded = []
                for _ in range(size):
                    partial = next(partials)
                    self.b.origin = None
                    loaded.append(self.b.add(tiled_loop.LoadOp(
                        partial, self.in_batch(partial, [self.row_offset, Dim("t")]),
                        TileType([BLOCK_M, chunk], f32)), "partial"))
                self.b.origin = origin_label(op)
                merged += rule.combine(self.b, state, rule.merge_states(self.b, loaded, valid) if chunk > 1 else loaded)
            return merged

        # Pipelined: each iteration's loads would otherwise wait a full L2 round trip (measured on the H200: workload A
        # 1.057 -> 0.991 ms, G's 64-tile rows 0.756 -> 0.674 ms; benchmarks/merge_loop.py).
        flat = self.loop("t", tiles_per_row, chunk, [v for s in states for v in s], merge,
                         f"merge the partial statistics written by every {writer} of this row strip", pipelined=True)
        self.finalize_statistics(main.reductions, flat, sizes)

    def tiles_with_statistics(self) -> tuple[list[int], Dim]:
        """Phase one of tile_stats and strip_finish: this program's output tile, what is stored before the row
        reductions, and its rows' partial statistics. Returns the statistics' sizes and the tiles per row strip."""
        main = self.plan.main
        at = ColumnTile(main, self.row_offset, self.col_offset, BLOCK_N)
        self.matmul_tiles(at)
        self.phase_one_outputs(at)
        sizes = self.store_tile_statistics(at)
        return sizes, Dim(f"cdiv({main.space.cols}, {BLOCK_N})")

    def relaunch(self, programs_per_row: Dim, work: str) -> None:
        """End the first launch: what follows runs as a second launch over the same ``[row strips,
        programs_per_row]`` grid (and batch, when batched) once every program of the first has finished; ``work`` says
        what each program does."""
        batch_axes, batch_ids = batch_axis(self.plan)
        finish = tiled_loop.RelaunchOp([Dim(f"cdiv({self.plan.main.space.rows}, {BLOCK_M})"), programs_per_row,
                                        *batch_axes], ["pid_m", "pid_n", *batch_ids])
        finish.attributes["note"] = StringAttr(f"Second launch, after every program of the first has finished: {work}.")
        self.b.origin = None
        self.b.add(finish)


def batch_axis(plan: GroupPlan) -> tuple[list[str], list[str]]:
    """The grid axis and program id a batched kernel's launches add last (none for other kernels)."""
    return [str(dim) for dim in plan.batch_dims], [tiled_loop.BATCH_PROGRAM_ID] * plan.batched


@dataclass
class Workspace:
    """Buffers a kernel needs besides its outputs: where the pre-reduction value is kept between phases, the partial
    statistics of each tile, and the per-row-strip arrival counters."""

    materialized_in: SSAValue | None = None
    partials: list[SSAValue] = field(default_factory=list)
    counters: SSAValue | None = None


@dataclass(frozen=True)
class WorkspaceBuffer:
    """One trailing buffer of a kernel that the runtime provides: its type, kind (``scratch`` or ``counter``; a
    counter buffer comes last) and argument name."""

    type: TensorType
    kind: str
    name: str


def partial_statistics(plan: GroupPlan, programs_per_row: str) -> list[WorkspaceBuffer]:
    """One buffer per component of the row reductions' states: a partial state per row and program of its strip."""
    count = sum(len(rules.ROW_REDUCTIONS[type(op)].init(TileBuilder(Block()), BLOCK_M)) for op in plan.main.reductions)
    return [WorkspaceBuffer(TensorType([*plan.batch_dims, plan.main.space.rows, programs_per_row], f32), "scratch",
                            f"partial{index}")
            for index in range(count)]


def strip_counters(plan: GroupPlan) -> WorkspaceBuffer:
    """One arrival counter per row strip (``tiled_loop.last_arrival``, ``tiled_loop.strip_barrier``)."""
    return WorkspaceBuffer(TensorType([f"cdiv({plan.main.space.rows}, {BLOCK_M})"], i32), "counter", "strip_counters")


MERGE_CHUNKS = (1, 2, 4, 8, 16, 32, 64)  # powers of two: a merge chunk is the width of a loaded tile
GRAM_MAX_ROWS = 32  # decode shapes timed with the Gram-diagonal statistics: 1, 4, 16 and 32 rows


def chunk_columns(cols: Dim) -> str:
    """chunk_recompute: the columns of one program's chunk, whole column tiles (the last chunk may be shorter)."""
    return f"cdiv(cdiv({cols}, {BLOCK_N}), SPLIT_N) * {BLOCK_N}"


def chunks_per_row(cols: Dim) -> str:
    """chunk_recompute: the programs sharing a row strip (at most SPLIT_N: none is left without columns)."""
    return f"cdiv({cols}, {chunk_columns(cols)})"


# How many tiles' partial statistics a program merges per loop iteration when not asked: every tile of a row at once
# (up to 64; past the row's last tile the chunk is masked). The merge loop is latency-bound, each iteration waiting on
# the last, so its trip count is what costs. Profiled on the H200 (workload A, tile_stats' second launch,
# 2026-11-30-h200-kernel-times-chunks-A): 128 x 256 tiles (16 per row) 0.130 ms one tile at a time against 0.091 with
# 16; 128 x 128 tiles (32 per row) 0.389 against 0.073 with 32 and 0.084 with 64. With a short K the merge is most of
# the work (G's 64-tile rows: tile_recompute 0.676 / 0.293 / 0.203 ms with 1 / 4 / 16, 0.170 tuned with 64).
DEFAULT_MERGE_CHUNK = MERGE_CHUNKS[-1]


def row_scaled_prologue(plan: GroupPlan, strategy: TilingStrategy) -> Operation | None:
    """The norm of a decode kernel's prologue whose per-row scale is better applied to the accumulator: each
    program then gathers the norm's statistics over its own chunk of K inside the K loop (split_k programs merge
    theirs in the finisher) instead of a pass over all of K before it. Applies when the matmuls read the norm
    directly and it is the prologue's only reduction (RMSNorm: ``(rstd * x * g) @ W = rstd * ((x * g) @ W)``), and
    the unscaled tile fits the matmul's operand type: in fp16, ``x * g`` overflows where ``|x * g| > 65504`` (NaN in
    every output of the row) while PyTorch's norm, rounding only ``rstd * x * g``, stays finite."""
    prologue = plan.prologue
    if not strategy.scales_accumulator or prologue is None or len(prologue.reductions) != 1:
        return None
    (norm,) = prologue.reductions
    reads_norm = all(matmul.lhs == norm.results[0] for matmul in plan.matmuls)
    rule = rules.ROW_REDUCTIONS[type(norm)]
    fits = rule.unscaled_within_input(norm) or norm.results[0].type.element_type != f16
    return norm if reads_norm and fits and rule.unscaled is not None and rule.column_sums is not None else None


