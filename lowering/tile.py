"""``amk-tile``: lower each ``tensor_op.fused`` region to a ``tiled_loop.kernel`` with symbolic tile sizes.

The fused op is replaced by a ``tiled_loop.launch`` of the new kernel. The strategy comes from the group's plan
(:mod:`amk.lowering.plan`):

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

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr, bf16, f16, f32, i32
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from amk.dialects import tensor_op, tiled_loop
from amk.dialects.tensor_op import TensorType
from amk.dialects.tiled_loop import TileType
from amk.lowering import rules
from amk.lowering.configs import TILE_GRID_STRATEGIES, is_short_contraction, next_power_of_two
from amk.lowering.plan import COL, FULL, ROW, SCALAR, GroupPlan, Section, plan_group
from amk.lowering.rules import TileBuilder
from amk.symbolic import Dim

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"


def origin_label(op: Operation) -> str:
    """How the emitted code's comments name a fused op."""
    label = op.name.split(".", 1)[1]
    if isinstance(op, tensor_op.GeluOp) and op.uses_tanh:
        label += " (tanh)"
    return label


@dataclass
class ColumnTile:
    """Where a section is being computed: the tile's row and column offsets and sizes, and validity of columns."""

    section: Section
    row_offset: Dim
    col_offset: Dim | None
    block_cols: str
    valid: SSAValue | None = None
    env: dict[SSAValue, SSAValue] = field(default_factory=dict)


class KernelLowering:
    """Builds the body of one ``tiled_loop.kernel`` from a group plan."""

    def __init__(self, plan: GroupPlan, strategy: str, kernel: tiled_loop.KernelOp, arg_of: dict[SSAValue, SSAValue],
                 output_arg: dict[SSAValue, SSAValue], workspace: Workspace, merge_chunk: int = 1):
        self.plan = plan
        self.strategy = strategy
        # A norm prologue whose per-row scale is applied to the accumulator, its statistics gathered in the K loop.
        self.row_scaled = row_scaled_prologue(plan, strategy)
        self.prologue_state: list[SSAValue] = []
        self.merge_chunk = merge_chunk
        # A short K loop run again where the pre-normalization tile would be re-read, which is then never stored.
        self.recompute = strategy in RECOMPUTING_STRATEGIES
        # chunk_recompute with a short static K: each launch loads its rows' A tile over all of K once, and every
        # column tile's product is one dot, so the loop over the column tiles is the one whose loads are pipelined.
        self.whole_k = strategy == "chunk_recompute" and is_short_contraction(plan.contraction)
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

    def offsets(self, cls: str, at: ColumnTile) -> list:
        return {FULL: [at.row_offset, at.col_offset], ROW: [at.col_offset], COL: [at.row_offset], SCALAR: [0]}[cls]

    def load(self, value: SSAValue, cls: str, at: ColumnTile, upcast: bool = True) -> SSAValue:
        arg = self.arg_of[value]
        tile = TileType(self.tile_shape(cls, at.block_cols), arg.type.element_type)
        self.b.origin = None
        loaded = self.b.add(tiled_loop.LoadOp(arg, self.offsets(cls, at), tile), f"{arg.name_hint}_tile")
        return self.b.cast(loaded, f32, f"{arg.name_hint}_f32") if upcast else loaded

    def valid_cols(self, at: ColumnTile) -> SSAValue:
        """i1 tile marking the columns of this tile that lie inside the row (padding is excluded from reductions)."""
        if at.valid is None:
            self.b.origin = None
            at.valid = self.b.add(tiled_loop.InBoundsOp(
                [0, at.col_offset], [1, at.section.space.cols], [1, at.block_cols]), "valid_cols")
        return at.valid

    def compute(self, value: SSAValue, at: ColumnTile) -> SSAValue:
        """The fp32 tile of ``value`` at ``at``, computing what it depends on (memoized in ``at.env``)."""
        if value in at.env:
            return at.env[value]
        if value in self.arg_of:
            result = self.load(value, at.section.value_class[value], at)
        else:
            op = value.owner
            kind = rules.kind_of(op)
            if kind == "elementwise":
                operands = [self.compute(v, at) for v in op.operands]
                self.b.origin = origin_label(op)
                result = rules.ELEMENTWISE_RULES[type(op)](self.b, op, *operands)
            elif kind == "reduction":
                rule = rules.ROW_REDUCTIONS[type(op)]
                # A reduction's value is its statistic; norms and softmax also need the tile they normalize.
                x = self.compute(rules.reduction_input(op), at) if rule.keeps_shape else None
                extras = [self.compute(v, at) for v in rules.reduction_extras(op)] if rule.keeps_shape else []
                self.b.origin = origin_label(op)
                result = rule.apply(self.b, op, self.stats[op], x, extras)
            else:
                raise AssertionError(f"{op.name} is not available in this phase of the kernel")
        at.env[value] = result
        return result

    def store(self, value: SSAValue, tile: SSAValue, at: ColumnTile, dest: SSAValue | None = None) -> None:
        dest = dest if dest is not None else self.output_arg[value]
        cls = at.section.value_class.get(value, FULL)
        self.b.origin = None
        self.b.add(tiled_loop.StoreOp(tile, dest, self.offsets(cls, at)))

    # -- loops -------------------------------------------------------------------------------------------------------
    def loop(self, iv: str, upper: Dim, step, inits: list[SSAValue], body, note: str,
             lower: Dim | int = 0, pipelined: bool = False) -> list[SSAValue]:
        """A ``tiled_loop.for`` whose body is built by ``body(carried) -> next carried``; ``note`` says what the loop
        is for (it becomes the comment above the loop in the emitted code). ``pipelined`` marks a loop whose loads do
        not depend on what it carries, so that they may be issued iterations ahead."""
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
                b_tile = self.b.add(tiled_loop.LoadOp(rhs, [Dim("k"), col_offset],
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
        k_tile = str(max(16, next_power_of_two(self.plan.contraction.value)))
        at = ColumnTile(self.plan.main, self.row_offset, Dim(0), k_tile)
        self.whole_a = self.load(self.plan.matmul.lhs, FULL, at, upcast=False)

    def whole_k_products(self, at: ColumnTile) -> list[SSAValue]:
        """The output tile at ``at`` as one dot per matmul of the preloaded A tile and a B tile over all of K."""
        k_tile = self.whole_a.type.dims[1]
        results = []
        for each in self.plan.matmuls:
            rhs = self.arg_of[each.rhs]
            self.b.origin = None
            b_tile = self.b.add(tiled_loop.LoadOp(rhs, [Dim(0), at.col_offset],
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
        accumulator and its MMAs grow with the square of the rows)."""
        source = rules.reduction_input(norm)
        rows = self.plan.rows
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

    # -- strategies --------------------------------------------------------------------------------------------------
    def build(self) -> None:
        plan = self.plan
        if plan.prologue is not None and plan.prologue.has_reductions and self.row_scaled is None:
            self.reduce_over_columns(plan.prologue, "k", BLOCK_K)
        if self.strategy == "row_resident":
            self.build_row_resident()
        elif self.strategy in ("row_strip", "strip_recompute"):
            self.build_row_strip()
        elif self.strategy in ("tile_stats", "tile_recompute"):
            self.build_tile_stats()
        elif self.strategy == "chunk_recompute":
            self.build_chunk_recompute()
        elif self.strategy == "strip_finish":
            self.build_strip_finish()
        elif self.strategy == "strip_sync":
            self.build_strip_sync()
        elif self.strategy == "split_k":
            self.build_split_k()
        else:
            self.build_tiles()

    def build_tiles(self) -> None:
        at = ColumnTile(self.plan.main, self.row_offset, self.col_offset, BLOCK_N)
        if self.plan.matmul is not None:
            accumulators = self.matmul_tiles(at)
            if self.row_scaled is not None:
                self.scale_rows(at, accumulators, self.prologue_state)
        for value in self.plan.outputs:
            self.store(value, self.compute(value, at), at)

    def build_split_k(self) -> None:
        """Few rows, long K: SPLIT_K programs share each output tile, each over one chunk of K. They store fp32
        partial accumulators; the last to arrive sums them and applies the epilogue."""
        plan = self.plan
        k = plan.contraction
        chunk = Dim(f"cdiv(cdiv({k}, SPLIT_K), {BLOCK_K}) * {BLOCK_K}")
        lower = Dim(f"pid_k * ({chunk})")
        upper = Dim(f"Min({k}, (pid_k + 1) * ({chunk}))")
        at = ColumnTile(plan.main, self.row_offset, self.col_offset, BLOCK_N)
        (acc,) = self.matmul_tiles(at, (lower, upper))
        rows_padded = Dim(f"cdiv({plan.rows}, {BLOCK_M}) * {BLOCK_M}")
        partials, *partial_states = self.workspace.partials
        self.b.origin = None
        self.b.add(tiled_loop.StoreOp(acc, partials, [Dim(f"pid_k * ({rows_padded}) + {self.row_offset}"),
                                                      self.col_offset]))
        # This chunk's prologue statistics, one column per column tile (programs of other tiles write the same rows).
        for component, dest in zip(self.prologue_state, partial_states):
            self.b.add(tiled_loop.StoreOp(self.b.widen_rows(component, BLOCK_M), dest,
                                          [Dim(f"pid_k * ({rows_padded}) + {self.row_offset}"), Dim("pid_n")]))
        column_tiles = Dim(f"cdiv({plan.main.space.cols}, {BLOCK_N})")
        last = self.b.add(tiled_loop.LastArrivalOp(self.workspace.counters, [Dim(f"pid_m * ({column_tiles}) + pid_n")],
                                                   Dim("SPLIT_K")), "last_split")
        finisher = tiled_loop.IfOp(last)
        self.b.add(finisher)
        outer = self.b.block
        self.b.block = finisher.body.block
        zero = self.b.full(0.0, [BLOCK_M, BLOCK_N], "acc_sum")
        norm = self.row_scaled
        rule, states = self.row_scale_init()

        def add_split(carried):
            self.b.origin = None
            split_row = Dim(f"split * ({rows_padded}) + {self.row_offset}")
            partial = self.b.add(tiled_loop.LoadOp(partials, [split_row, self.col_offset],
                                                   TileType([BLOCK_M, BLOCK_N], f32)), "partial_acc")
            loaded = [self.b.add(tiled_loop.LoadOp(source, [split_row, Dim("pid_n")], TileType([BLOCK_M, 1], f32)),
                                 "partial_state") for source in partial_states]
            self.b.origin = "matmul"
            summed = [self.b.add_(carried[0], partial, "acc_sum")]
            if norm is not None:
                self.b.origin = origin_label(norm)
                summed += rule.combine(self.b, carried[1:], loaded)
            return summed

        total, *state = self.loop("split", Dim("SPLIT_K"), 1, [zero, *states], add_split,
                                  "sum the partial tiles of the K splits")
        at = ColumnTile(plan.main, self.row_offset, self.col_offset, BLOCK_N)
        at.env[plan.matmul.output] = total
        if norm is not None:
            self.scale_rows(at, [total], state)
        for value in plan.outputs:
            self.store(value, self.compute(value, at), at)
        self.b.block = outer

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
                    y_dest, [self.row_offset, col], TileType([BLOCK_M, BLOCK_N], y_dest.type.element_type)),
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

    def build_row_strip(self) -> None:
        self.reduce_over_columns(self.plan.main, "n", BLOCK_N, self.strip_phase_one)
        self.finish_rows()

    def build_row_resident(self) -> None:
        """Rows short enough to stay in registers (a standalone chain over a static N): each program loads its
        BLOCK_M rows once, as one tile padded to a power of two, takes their statistics from that tile and finishes
        the ops after the reductions on the same values; one pass over memory, every op computed once."""
        main = self.plan.main
        at = ColumnTile(main, self.row_offset, Dim(0), str(next_power_of_two(main.space.cols.value)))
        self.store_outputs(at, after_reduction=False)
        for op in main.reductions:
            rule = rules.ROW_REDUCTIONS[type(op)]
            x = self.compute(rules.reduction_input(op), at)
            valid = self.valid_cols(at)
            self.b.origin = origin_label(op)
            self.stats[op] = rule.finalize(self.b, rule.tile_state(self.b, x, valid), op)
        self.store_outputs(at, after_reduction=True)

    def build_chunk_recompute(self) -> None:
        """SPLIT_N programs share each row strip, one chunk of its column tiles each: the first launch folds the
        chunk's statistics in a loop over its tiles (the operand loads pipelined along it) and writes them as one
        partial state per row; a second launch merges the row's few states and sweeps the same chunk again, running
        the short K loop where it would re-read the pre-normalization tile."""
        main = self.plan.main
        cols = main.space.cols
        chunk = Dim(chunk_columns(cols))
        columns = (Dim(f"pid_n * ({chunk})"), Dim(f"Min({cols}, (pid_n + 1) * ({chunk}))"))
        if self.whole_k:
            self.load_whole_a()
        flat, sizes = self.fold_columns(main, "n", BLOCK_N, self.strip_phase_one, columns)
        self.store_partial_states(flat)
        chunks = Dim(chunks_per_row(cols))
        self.relaunch(chunks, "each program merges its rows' partial statistics and finishes its chunk of columns")
        if self.whole_k:
            self.load_whole_a()  # the second launch's own
        self.merge_strip_statistics(sizes, chunks, writer="chunk")
        self.finish_rows(columns=columns)

    def store_partial_states(self, components: list[SSAValue]) -> None:
        """Write this program's partial row statistics, one column per program of the row strip (``pid_n``)."""
        for component, partial in zip(components, self.workspace.partials, strict=True):
            component = self.b.widen_rows(component, BLOCK_M)
            self.b.origin = None
            self.b.add(tiled_loop.StoreOp(component, partial, [self.row_offset, Dim("pid_n")]))

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
                        partial, [self.row_offset, Dim("t")], TileType([BLOCK_M, chunk], f32)), "partial"))
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

    def build_tile_stats(self) -> None:
        """Output tiles in parallel, each writing its rows' partial statistics; then a second launch over the same
        tiles (every program of the first has finished) merges each row's statistics and finishes its tile, reading
        the pre-normalization tile back (tile_stats) or, when the K loop is short, running it again
        (tile_recompute: the first launch then stores nothing but the statistics)."""
        sizes, tiles_per_row = self.tiles_with_statistics()
        self.relaunch(tiles_per_row, "each program merges its rows' partial statistics and finishes one output tile")
        self.merge_strip_statistics(sizes, tiles_per_row)
        self.finish_rows(self.col_offset)

    def relaunch(self, programs_per_row: Dim, work: str) -> None:
        """End the first launch: what follows runs as a second launch over the same ``[row strips,
        programs_per_row]`` grid once every program of the first has finished; ``work`` says what each program does."""
        finish = tiled_loop.RelaunchOp([Dim(f"cdiv({self.plan.main.space.rows}, {BLOCK_M})"), programs_per_row],
                                       ["pid_m", "pid_n"])
        finish.attributes["note"] = StringAttr(f"Second launch, after every program of the first has finished: {work}.")
        self.b.origin = None
        self.b.add(finish)

    def build_strip_finish(self) -> None:
        """Output tiles in parallel, each writing its rows' partial statistics; the last tile of a row strip to
        finish merges them and normalizes the whole strip, while the strip just written is still in L2."""
        sizes, tiles_per_row = self.tiles_with_statistics()
        self.b.origin = None
        last = self.b.add(tiled_loop.LastArrivalOp(self.workspace.counters, [Dim("pid_m")], tiles_per_row),
                          "last_in_strip")
        finisher = tiled_loop.IfOp(last)
        self.b.add(finisher)
        outer = self.b.block
        self.b.block = finisher.body.block
        self.merge_strip_statistics(sizes, tiles_per_row)
        self.finish_rows()
        self.b.block = outer

    def build_strip_sync(self) -> None:
        """Output tiles walked by resident programs in row-strip order; each tile writes its rows' partial
        statistics, waits for the other tiles of its strip, merges their statistics and normalizes the tile it still
        holds in registers: the pre-normalization values never leave the SM."""
        main = self.plan.main
        at = ColumnTile(main, self.row_offset, self.col_offset, BLOCK_N)
        self.matmul_tiles(at)
        self.store_outputs(at, after_reduction=False)
        sizes = self.store_tile_statistics(at)
        tiles_per_row = Dim(f"cdiv({main.space.cols}, {BLOCK_N})")
        self.b.origin = None
        self.b.add(tiled_loop.StripBarrierOp(self.workspace.counters, [Dim("pid_m")], tiles_per_row))
        self.merge_strip_statistics(sizes, tiles_per_row)
        self.store_outputs(at, after_reduction=True)


@dataclass
class Workspace:
    """Buffers a kernel needs besides its outputs: where the pre-reduction value is kept between phases, the partial
    statistics of each tile, and the per-row-strip arrival counters."""

    materialized_in: SSAValue | None = None
    partials: list[SSAValue] = field(default_factory=list)
    counters: SSAValue | None = None


def _view_dims(value: SSAValue, cls: str, plan: GroupPlan) -> tuple[list[Dim], str]:
    """The kernel argument type of a group value: its dims as the kernel sees them and how the launcher views it."""
    dims = value.type.dims
    if cls == "rhs":
        k, n = dims
        return ([n, k], "transpose") if plan.matmul.rhs_transposed else ([k, n], "")
    if cls == "lhs":
        if plan.matmul.lhs_transposed:
            k, m = dims
            return [m, k], "transpose"
        return [Dim(_product(dims[:-1])), dims[-1]], ""
    in_prologue = plan.prologue is not None and value in plan.prologue.value_class
    space = plan.prologue.space if in_prologue and value not in plan.main.value_class else plan.main.space
    return {FULL: [space.rows, space.cols], ROW: [space.cols], COL: [space.rows], SCALAR: [Dim(1)]}[cls], ""


def _product(dims) -> str:
    return "*".join(f"({d})" for d in dims) or "1"


MERGE_CHUNKS = (1, 2, 4, 8, 16, 32, 64)  # powers of two: a merge chunk is the width of a loaded tile

ROW_REDUCTION_STRATEGIES = ("tile_stats", "tile_recompute", "chunk_recompute", "strip_finish", "strip_sync",
                            "row_strip", "strip_recompute", "row_resident")
RECOMPUTING_STRATEGIES = ("tile_recompute", "chunk_recompute", "strip_recompute")
# Output tiles in a 2-D grid, each writing its rows' partial statistics to a workspace.
TILE_STATISTICS_STRATEGIES = ("tile_stats", "tile_recompute", "strip_finish", "strip_sync")
GRAM_MAX_ROWS = 32  # decode shapes timed with the Gram-diagonal statistics: 1, 4, 16 and 32 rows
SPLIT_K_MIN_CONTRACTION = 1024
MAX_STRIP_COLUMNS = 8192  # strip_sync: 64 tiles of 128 columns, fewer than the SMs of an A100, H100 or H200
# row_resident: the widest row held in registers, 32 fp32 values per thread of a 16-warp program.
MAX_RESIDENT_COLUMNS = 16384


STRIP_FINISH_MIN_ELEMENTS = 2**27


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


def _reduction_strategy(plan: GroupPlan) -> str:
    """Measured on the H200 (benchmarks/NOTES.md). With a short K (the GEMM is cheap) and no prologue, programs that
    each own a chunk of a row strip's columns and run the K loop again instead of storing the pre-normalization
    values (chunk_recompute, its A tile loaded once) won at every size: softmax of q @ k^T at 2^24 / 2^26 / 2^28
    outputs 0.033 / 0.110 / 0.423 ms (2026-11-30-h200-unrounded-G, -unrounded-extra-shapes-G) against 0.040 / 0.161
    / 0.690 for storing them (tile_stats) and 0.052 / 0.189 / 0.641 for owning whole rows (row_strip). With a
    long K parallel output tiles keep the GEMM efficient; how the rows are then finished depends on the output's
    size. tile_stats re-reads the whole pre-normalization output from HBM in a second launch; strip_finish reads each
    strip back from L2 but one program streams it, and the last strips' finishers form a tail. The second launch won
    on a 2^26-element output (x[16384, 4096] @ W + GELU + LayerNorm: 1.04-1.08 against 1.11-1.18 ms), the finisher on
    a 2^28-element one (x[32768, 8192] @ W + residual + RMSNorm: 6.95-7.00 against 7.24 ms). strip_sync, asked for by
    name, was slower than both. Without a matmul, a row held in registers is read once and each op before the
    reduction computed once, where row_strip reads it twice and computes them in both sweeps (bias + GELU + LayerNorm
    over x[16384, 4096]: 0.130 against 0.224 ms, 2026-11-30-h200-library-split-AG, -library-split-row-strip-AG)."""
    if plan.matmul is None:
        return "row_resident" if _row_resident_applies(plan) else "row_strip"
    elements = Dim(f"({plan.main.space.rows}) * ({plan.main.space.cols})")
    large = elements.is_static and elements.value >= STRIP_FINISH_MIN_ELEMENTS
    if is_short_contraction(plan.contraction):
        # With a prologue (not measured with a short K) each row strip keeps it in one program.
        return "chunk_recompute" if plan.prologue is None else "row_strip"
    return "strip_finish" if large else "tile_stats"


def _row_resident_applies(plan: GroupPlan) -> bool:
    """No matmul (nothing but the rows to load) and a static row of at most ``MAX_RESIDENT_COLUMNS``."""
    cols = plan.main.space.cols
    return plan.matmul is None and cols.is_static and cols.value <= MAX_RESIDENT_COLUMNS


def _strip_sync_applies(plan: GroupPlan) -> bool:
    """Every result after the reduction is a full tile (each tile stores its own), and a row strip has at most
    ``MAX_STRIP_COLUMNS`` columns, so that its tiles fit on the SMs of any recent GPU at once."""
    cols = plan.main.space.cols
    after = [v for v in plan.outputs if v in plan.main.after_reduction]
    return (plan.matmul is not None and cols.is_static and cols.value <= MAX_STRIP_COLUMNS
            and all(plan.main.value_class[v] == FULL for v in after))


def row_scaled_prologue(plan: GroupPlan, strategy: str) -> Operation | None:
    """The norm of a decode kernel's prologue whose per-row scale is better applied to the accumulator: each
    program then gathers the norm's statistics over its own chunk of K inside the K loop (split_k programs merge
    theirs in the finisher) instead of a pass over all of K before it. Applies when the matmuls read the norm
    directly and it is the prologue's only reduction (RMSNorm: ``(rstd * x * g) @ W = rstd * ((x * g) @ W)``)."""
    prologue = plan.prologue
    if strategy not in ("split_k", "skinny_m") or prologue is None or len(prologue.reductions) != 1:
        return None
    (norm,) = prologue.reductions
    reads_norm = all(matmul.lhs == norm.results[0] for matmul in plan.matmuls)
    rule = rules.ROW_REDUCTIONS[type(norm)]
    return norm if reads_norm and rule.unscaled is not None and rule.column_sums is not None else None


def lower_fused(fused: tensor_op.FusedOp, name: str, strategy: str = "",
                merge_chunk: int = 0) -> tuple[tiled_loop.KernelOp, tiled_loop.LaunchOp]:
    block = fused.body.block
    ops = list(block.ops)[:-1]
    outputs = list(block.last_op.values)
    plan = plan_group(ops, outputs)
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
    if strategy == "auto":
        strategy = _reduction_strategy(plan)
    strategy = strategy or plan.strategy
    if strategy in ROW_REDUCTION_STRATEGIES and not plan.main.has_reductions:
        strategy = plan.strategy
    if strategy == "strip_sync" and not _strip_sync_applies(plan):
        strategy = "tile_stats"
    if strategy == "row_resident" and not _row_resident_applies(plan):
        strategy = "row_strip"
    if strategy in ("tile_recompute", "chunk_recompute") and plan.prologue is not None:
        strategy = "tile_stats"  # the second launch would need the prologue's statistics again
    if (strategy in ("tile_stats", "tile_recompute", "chunk_recompute", "strip_finish", "strip_recompute")
            and plan.matmul is None):
        strategy = "row_strip"
    if (strategy == "skinny_m" and len(plan.matmuls) == 1 and plan.contraction.is_static
            and plan.contraction.value >= SPLIT_K_MIN_CONTRACTION):
        strategy = "split_k"
    phase_two = [v for v in outputs if v in plan.main.after_reduction and plan.main.value_class[v] in (FULL, ROW)]
    workspace_types, workspace_kinds, workspace_names = [], [], []
    if (plan.materialized is not None and plan.materialized not in outputs and not phase_two
            and strategy not in ("strip_sync", *RECOMPUTING_STRATEGIES)):
        workspace_types.append(TensorType([rows, cols], plan.materialized.type.element_type))
        workspace_kinds.append("scratch")
        workspace_names.append("y_scratch")
    if strategy in (*TILE_STATISTICS_STRATEGIES, "chunk_recompute"):
        partial_count = 0
        for op in plan.main.reductions:
            rule = rules.ROW_REDUCTIONS[type(op)]
            partial_count += len(rule.init(TileBuilder(Block()), BLOCK_M))
        # one partial state per row and program of its strip: a tile, or a chunk of tiles
        programs_per_row = chunks_per_row(cols) if strategy == "chunk_recompute" else f"cdiv({cols}, {BLOCK_N})"
        for index in range(partial_count):
            workspace_types.append(TensorType([rows, programs_per_row], f32))
            workspace_kinds.append("scratch")
            workspace_names.append(f"partial{index}")
    if strategy in ("strip_finish", "strip_sync"):
        workspace_types.append(TensorType([f"cdiv({rows}, {BLOCK_M})"], i32))
        workspace_kinds.append("counter")
        workspace_names.append("strip_counters")
    if strategy == "split_k":
        split_rows = f"SPLIT_K * cdiv({rows}, {BLOCK_M}) * {BLOCK_M}"
        workspace_types.append(TensorType([split_rows, cols], f32))
        workspace_kinds.append("scratch")
        workspace_names.append("partial_acc")
        norm = row_scaled_prologue(plan, strategy)
        if norm is not None:  # one buffer per statistic the K loop sums (the prologue state)
            for index in range(len(rules.ROW_REDUCTIONS[type(norm)].column_sums)):
                workspace_types.append(TensorType([split_rows, f"cdiv({cols}, {BLOCK_N})"], f32))
                workspace_kinds.append("scratch")
                workspace_names.append(f"partial_state{index}")
        workspace_types.append(TensorType([f"cdiv({rows}, {BLOCK_M}) * cdiv({cols}, {BLOCK_N})"], i32))
        workspace_kinds.append("counter")
        workspace_names.append("tile_counters")
    # row_resident's column tile is the whole row: no BLOCK_N to choose
    params = [BLOCK_M] + ([BLOCK_N] if strategy != "row_resident" else []) + ([BLOCK_K] if plan.matmul is not None
                                                                                  else [])
    group = None
    if strategy == "tile2d" or strategy in TILE_STATISTICS_STRATEGIES:
        grid, pids = [f"cdiv({rows}, {BLOCK_M})", f"cdiv({cols}, {BLOCK_N})"], ["pid_m", "pid_n"]
        # strip_sync's persistent launch walks this grid in row-strip order, not in groups.
        if plan.matmul is not None and strategy in TILE_GRID_STRATEGIES:
            params.append(GROUP_M)
            group = GROUP_M
    elif strategy == "skinny_m":
        # Column tiles vary fastest: the few row tiles (usually one) of a decode step share every weight tile.
        grid, pids = [f"cdiv({cols}, {BLOCK_N})", f"cdiv({rows}, {BLOCK_M})"], ["pid_n", "pid_m"]
    elif strategy == "split_k":
        grid, pids = [f"cdiv({cols}, {BLOCK_N})", f"cdiv({rows}, {BLOCK_M})", "SPLIT_K"], ["pid_n", "pid_m", "pid_k"]
        params.append("SPLIT_K")
    elif strategy == "chunk_recompute":
        grid, pids = [f"cdiv({rows}, {BLOCK_M})", chunks_per_row(cols)], ["pid_m", "pid_n"]
        params.append("SPLIT_N")
    else:
        grid, pids = [f"cdiv({rows}, {BLOCK_M})"], ["pid_m"]
    all_types = arg_types + out_types + workspace_types
    kernel = tiled_loop.KernelOp(name, grid=grid, program_ids=pids, strategy=strategy, tile_params=params,
                                 num_inputs=len(block.args), arg_types=all_types,
                                 arg_views=views + [""] * (len(out_types) + len(workspace_types)),
                                 group_size=group, workspace=workspace_kinds,
                                 problem=[rows, cols] + ([plan.contraction] if plan.matmul is not None else []))
    kernel_args = kernel.body.block.args
    for arg, arg_name in zip(kernel_args, names + workspace_names):
        arg.name_hint = arg_name
    arg_of = dict(zip(block.args, kernel_args))
    output_arg = dict(zip(outputs, kernel_args[len(block.args):len(block.args) + len(outputs)]))
    extra = list(kernel_args[len(block.args) + len(outputs):])
    workspace = Workspace()
    if workspace_names and workspace_names[0] == "y_scratch":
        workspace.materialized_in = extra.pop(0)
    if workspace_kinds and workspace_kinds[-1] == "counter":  # a counter buffer always comes last
        workspace.counters = extra.pop()
    workspace.partials = extra
    if plan.materialized is not None and workspace.materialized_in is None and (plan.materialized in output_arg
                                                                                or phase_two):
        workspace.materialized_in = output_arg.get(plan.materialized) or output_arg[phase_two[0]]
    KernelLowering(plan, strategy, kernel, arg_of, output_arg, workspace,
                   merge_chunk or DEFAULT_MERGE_CHUNK).build()
    launch = tiled_loop.LaunchOp(name, list(fused.inputs), [r.type for r in fused.outputs])
    return kernel, launch


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
    """

    name = "amk-tile"

    reduction_strategy: str = "auto"
    merge_chunk: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.merge_chunk not in (0, *MERGE_CHUNKS):
            raise PassFailedException(f"amk-tile: merge_chunk must be 0 (the default, {DEFAULT_MERGE_CHUNK}) or one of "
                                      f"{', '.join(map(str, MERGE_CHUNKS))}, got {self.merge_chunk!r}")
        if self.reduction_strategy not in ("auto", *ROW_REDUCTION_STRATEGIES):
            raise PassFailedException(f"amk-tile: reduction_strategy must be auto, "
                                      f"{', '.join(ROW_REDUCTION_STRATEGIES)}, got {self.reduction_strategy!r}")
        taken = {o.sym_name.data for o in op.walk() if isinstance(o, tiled_loop.KernelOp)}
        fused_ops = [o for o in op.walk() if isinstance(o, tensor_op.FusedOp)]
        module_block: Block = op.body.block
        first = module_block.first_op
        for index, fused in enumerate(fused_ops):
            name = f"fused_{index}"
            while name in taken:
                name += "_"
            taken.add(name)
            kernel, launch = lower_fused(fused, name, self.reduction_strategy, self.merge_chunk)
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
