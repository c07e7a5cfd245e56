"""Analysis of a fusion group: what a set of ``tensor_op`` ops needs to become one kernel.

``plan_group`` decides whether ops can share a kernel (``amk-fuse`` asks before adding an op to a group) and, for
``amk-tile``, how: the iteration space ``[rows, cols]`` (leading dims flattened into rows), the class of every value
(a full tile, a row vector broadcast over rows, a column vector of per-row statistics, or a scalar), which ops run
before the row reductions (phase 1) and after them (phase 2), and which value a matmul-led row strip writes in
phase 1 and re-reads in phase 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from xdsl.dialects.builtin import i1
from xdsl.ir import Operation, SSAValue

from amk.dialects import tensor_op
from amk.lowering import rules
from amk.symbolic import Dim, provably_equal

FULL, ROW, COL, SCALAR = "full", "row", "col", "scalar"
# A value's class gives its tile shape: (rows?, cols?) as booleans.
CLASS_AXES = {FULL: (True, True), ROW: (False, True), COL: (True, False), SCALAR: (False, False)}
AXES_CLASS = {axes: name for name, axes in CLASS_AXES.items()}



class NotFusable(Exception):
    """The ops cannot share one kernel; the message says why."""


@dataclass(frozen=True)
class Space:
    """An iteration space: leading dims (flattened into rows) and the last dim (columns), repeated over the batch dims
    of a batched matmul (``q @ k^T``: each batch index multiplies its own matrices; a row tile never spans two)."""

    lead: tuple[Dim, ...]
    cols: Dim
    batch: tuple[Dim, ...] = ()

    @property
    def rows(self) -> Dim:
        """The rows of one batch index."""
        return Dim(math.prod((d.expr for d in self.lead), start=1))

    @property
    def batches(self) -> Dim:
        return Dim(math.prod((d.expr for d in self.batch), start=1))

    @property
    def leading(self) -> tuple[Dim, ...]:
        return (*self.batch, *self.lead)

    @property
    def dims(self) -> tuple[Dim, ...]:
        return (*self.leading, self.cols)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(provably_equal(x, y) for x, y in zip(a, b))


def classify(dims: tuple[Dim, ...], space: Space) -> str | None:
    """The class of a tensor of shape ``dims`` broadcast (numpy-style) against ``space``, or None."""
    rank = len(space.dims)
    if len(dims) > rank:
        return None
    *lead, last = (Dim(1),) * (rank - len(dims)) + tuple(dims)
    if provably_equal(last, space.cols):
        has_cols = True
    elif last == Dim(1):
        has_cols = False
    else:
        return None
    if len(dims) == rank and _same(lead, space.leading):
        has_rows = True  # first: with a single row, a [1, cols] operand is the full tile, not a broadcast row
    elif all(d == Dim(1) for d in lead):
        has_rows = False
    elif _same(lead, space.leading):
        has_rows = True
    elif has_cols and broadcast_row_map(dims, space) is not None:
        return FULL  # its rows are read through the map (position embeddings [1, T, C] over [B, T, C])
    elif has_cols and shared_by_every_batch(dims, space):
        return FULL  # one matrix that every batch index reads (a causal mask [1, 1, T, S] over [B, H, T, S])
    elif has_cols and broadcast_batch_map(dims, space) is not None:
        return FULL  # its matrices are read through a map of the batch index (a mask [B, 1, T, S])
    elif has_cols and row_vector_per_batch(dims, space) is not None:
        return ROW  # one row vector per matrix of the batch (BERT's padding mask [B, 1, 1, S] over [B, H, S, S])
    else:
        return None
    return AXES_CLASS[(has_rows, has_cols)]


def broadcast_row_map(dims: tuple[Dim, ...], space: Space) -> list[Dim] | None:
    """For a full-width operand of shape ``dims`` whose leading dims broadcast over the space's, the
    ``broadcast_rows`` of its loads (:class:`amk.dialects.tiled_loop.BroadcastRows`): the space's rows, then the
    divisor, period and stride that map a row of the space to one of the operand's. The dims it keeps (the space's
    own; the others are 1) are the last ones (position embeddings ``[1, T, C]`` or ``[T, C]`` over ``[B, T, C]``, a
    bias ``[1, H, T, S]`` over ``[B, H, T, S]``: its row ``r % T``) or the first ones (a padding mask ``[B, 1, 1, S]``:
    its row ``r // (H * T)``), where a kernel's sizes give the map; None for any other operand, a batched kernel's
    too."""
    lead = (Dim(1),) * (len(space.lead) + 1 - len(dims)) + tuple(dims[:-1])
    if space.batch or len(lead) != len(space.lead):
        return None
    kept = _kept_block(lead, space.lead)  # None for a row vector too: all its leading dims 1
    return None if kept is None else [space.rows, kept[0], kept[1], Dim(1)]


def broadcast_batch_map(dims: tuple[Dim, ...], space: Space) -> list[Dim] | None:
    """For a full-width operand of a batched kernel's space that has the space's rows and broadcasts over some of its
    batch dims (a mask ``[B, 1, T, S]`` or a bias ``[1, H, T, S]`` over attention scores ``[B, H, T, S]``), the
    ``broadcast_batch`` of its loads (:attr:`amk.dialects.tiled_loop.BroadcastRows.batch_map`): the space's batch
    count, then the divisor and period that map the kernel's batch index to the operand's matrix (``b // H``,
    ``b % H``); None for any other operand."""
    batch = _batch_dims_over_the_rows(dims, space)
    kept = None if batch is None else _kept_block(batch, space.batch)
    return None if kept is None else [space.batches, kept[0], kept[1]]


class RowVectors(NamedTuple):
    """How a batched kernel reads an operand that is a row vector per matrix (:func:`row_vector_per_batch`): it has
    ``count`` of them, a ``[count, 1, cols]`` argument, read at the batch index mapped by ``batch_map`` (a load's
    ``broadcast_batch``; None: at the kernel's own batch index)."""

    count: Dim
    batch_map: list[Dim] | None


def row_vector_per_batch(dims: tuple[Dim, ...], space: Space) -> RowVectors | None:
    """For an operand of a batched kernel's space that is one row vector per matrix of some of its batch dims (a
    padding mask ``[B, 1, 1, S]`` or a per-head bias ``[1, H, 1, S]`` over scores ``[B, H, S, S]``, mapped as
    :func:`broadcast_batch_map` maps; or one per batch index, ``[B, H, 1, S]``), how the kernel reads it; None for any
    other operand (a row vector for every matrix is a plain row)."""
    split = _batch_and_rows(dims, space)
    if split is None or not all(d == Dim(1) for d in split[1]) or _same(split[1], space.lead):
        return None
    batch = split[0]
    if _same(batch, space.batch):
        return RowVectors(space.batches, None)
    kept = _kept_block(batch, space.batch)
    return None if kept is None else RowVectors(kept[1], [space.batches, kept[0], kept[1]])


def _batch_dims_over_the_rows(dims: tuple[Dim, ...], space: Space) -> tuple[Dim, ...] | None:
    """The batch dims of an operand of shape ``dims`` over a batched kernel's space, where it has the space's rows and
    columns (its leading dims aligned with the space's at the last); else None."""
    split = _batch_and_rows(dims, space)
    return split[0] if split is not None and _same(split[1], space.lead) else None


def _batch_and_rows(dims: tuple[Dim, ...], space: Space) -> tuple[tuple[Dim, ...], tuple[Dim, ...]] | None:
    """The batch dims and the row dims of a full-width operand of shape ``dims`` over a batched kernel's space (its
    leading dims aligned with the space's at the last), or None where the kernel is not batched or the operand is
    not full-width."""
    if not space.batch or not dims or len(dims) > len(space.dims) or not provably_equal(dims[-1], space.cols):
        return None  # a 0-dim operand (a scale held in a tensor) is a scalar, whatever the space's columns
    lead = (Dim(1),) * (len(space.dims) - len(dims)) + tuple(dims[:-1])
    return lead[:len(space.batch)], lead[len(space.batch):]


def _kept_block(dims: tuple[Dim, ...], spaces: tuple[Dim, ...]) -> tuple[Dim, Dim] | None:
    """Where each of ``dims`` is 1 or its space dim's, and those it keeps are one run at either end, or in the middle
    with known sizes after it (RoPE's cos ``[1, T, 1, D]`` over heads in memory order ``[B, T, H, D]``: row
    ``(r // H) % T``) (the space's dims of size 1, a decoding step's one token, count neither as kept nor as
    broadcast): the product of the space dims after the run and the run's own product, the divisor and period of a
    flat index of the space's dims. None where it keeps all (the operand is the space's own), none, a run apart, or
    one in the middle with symbolic sizes after it (the map would need sizes no kernel argument gives)."""
    if _same(dims, spaces) or not all(d == Dim(1) or provably_equal(d, s) for d, s in zip(dims, spaces)):
        return None
    sizes = [s for s in spaces if s != Dim(1)]
    kept = [d != Dim(1) for d, s in zip(dims, spaces) if s != Dim(1)]
    if True not in kept:
        return None
    first, last = kept.index(True), len(kept) - 1 - kept[::-1].index(True)
    product = math.prod((d.expr for d in sizes[first:last + 1]), start=1)
    after = Dim(math.prod((d.expr for d in sizes[last + 1:]), start=1))
    if not all(kept[first:last + 1]) or (first > 0 and last < len(kept) - 1 and not after.is_static):
        return None
    return after, Dim(product)


def shared_by_every_batch(dims: tuple[Dim, ...], space: Space) -> bool:
    """Whether a full-width operand of shape ``dims`` is one matrix that every batch index of a batched kernel's
    space reads: its batch dims 1 (or absent), its rows the space's (a causal mask ``[1, 1, T, S]`` or ``[T, S]`` over
    attention scores ``[B, H, T, S]``). The kernel takes it as a ``[rows, cols]`` argument, read without the batch
    index."""
    batch = _batch_dims_over_the_rows(dims, space)
    return batch is not None and all(d == Dim(1) for d in batch) and not _same(batch, space.batch)


def broadcast_class(classes: list[str]) -> str:
    rows = any(CLASS_AXES[c][0] for c in classes)
    cols = any(CLASS_AXES[c][1] for c in classes)
    return AXES_CLASS[(rows, cols)]


@dataclass
class Section:
    """Ops over one iteration space (the epilogue / standalone part, or the prologue on the matmul's A)."""

    space: Space
    ops: list[Operation] = field(default_factory=list)
    value_class: dict[SSAValue, str] = field(default_factory=dict)
    reductions: list[Operation] = field(default_factory=list)
    pre: list[Operation] = field(default_factory=list)
    post_col: list[Operation] = field(default_factory=list)
    post_full: list[Operation] = field(default_factory=list)
    after_reduction: set[SSAValue] = field(default_factory=set)

    @property
    def has_reductions(self) -> bool:
        return bool(self.reductions)


@dataclass
class GroupPlan:
    ops: list[Operation]
    inputs: list[SSAValue]
    outputs: list[SSAValue]
    matmul: tensor_op.MatmulOp | None
    prologue: Section | None
    main: Section
    materialized: SSAValue | None
    input_class: dict[SSAValue, str]
    contraction: Dim | None
    matmuls: list[tensor_op.MatmulOp] = field(default_factory=list)

    @property
    def rows(self) -> Dim:
        return self.main.space.rows

    def repeated_table(self, value: SSAValue) -> bool:
        """Whether ``value`` is a table that ``repeat_columns`` reads (a kernel argument of the table's own columns)."""
        return any(isinstance(op, tensor_op.RepeatColumnsOp) and op.input == value for op in self.ops)

    @property
    def register_rotation_group(self) -> int | None:
        """The widest group of columns that the kernel rotates in registers (a rotation of a tile it computes), or
        None: its column tiles hold whole groups."""
        return max((op.group_size for op in self.ops
                    if isinstance(op, tensor_op.RotateHalfOp) and op.input not in self.inputs), default=None)

    @property
    def batched(self) -> bool:
        """Whether the kernel repeats over batch dims (a batched matmul's): a third grid axis, ``pid_b``."""
        return bool(self.main.space.batch)

    @property
    def batch_dims(self) -> list[Dim]:
        """The leading dim of a batched kernel's rank-3 tensors, the product of the batch dims (none otherwise)."""
        return [self.main.space.batches] if self.batched else []


def _analyze_section(section: Section, inputs: set[SSAValue], source: dict[SSAValue, str]) -> None:
    """Classify values and split ops into phases; ``source`` gives classes of values produced outside the section."""
    classes = section.value_class
    for op in section.ops:
        kind = rules.kind_of(op)
        if isinstance(op, tensor_op.RepeatColumnsOp):  # its table is read as its result's tiles, columns modulo
            _analyze_repeated_table(op, section, inputs)
            continue
        operands = [rules.reduction_input(op), *rules.reduction_extras(op)] if kind == "reduction" else list(op.operands)
        operand_classes = []
        for operand in operands:
            if operand in classes:
                operand_classes.append(classes[operand])
            elif operand in source:
                operand_classes.append(source[operand])
            else:
                cls = classify(operand.type.dims, section.space)
                if cls is None:
                    raise NotFusable(
                        f"{op.name}: an operand of shape [{', '.join(map(str, operand.type.dims))}] over the iteration "
                        f"space [{', '.join(map(str, section.space.dims))}]: a fused kernel reads an operand whole, "
                        "as a row vector, as a column vector, as a scalar, or whole rows (its last dim the space's) "
                        "with size-1 leading dims before or after the ones it keeps (positions [1, T, C], a padding "
                        "mask [B, 1, 1, S]), and in a batched matmul's kernel matrices or row vectors per batch index "
                        "with size-1 batch dims before or after the ones they keep (masks [B, 1, S, T], [B, 1, 1, T], "
                        "a bias [1, H, S, T]); other broadcasts over leading dims (a mask's size-1 heads dim between "
                        "its batch and rows outside a batched kernel, a per-sample scale [B, 1, 1]) run in PyTorch"
                    )
                classes[operand] = cls
                operand_classes.append(cls)
        depth_inputs = [v for v in op.operands if v in section.after_reduction]
        result = op.results[0]
        if isinstance(op, tensor_op.RotateHalfOp):
            _check_rotation(op, operand_classes[0], section, inputs)
        if kind == "reduction":
            if rules.reduced_axis(op) != rules.reduction_input(op).type.rank - 1:
                raise NotFusable(f"{op.name}: only reductions over the last axis fuse")
            if operand_classes[0] != FULL or not _same(rules.reduction_input(op).type.dims, section.space.dims):
                raise NotFusable(f"{op.name}: reduces a value that is not a full [rows, cols] tile of the space (a "
                                 "value of broadcast rows reduces in a kernel of its own)")
            if depth_inputs:
                raise NotFusable(f"{op.name}: depends on another row reduction (one reduction level per kernel)")
            for extra in operand_classes[1:]:
                if extra not in (ROW, SCALAR):
                    raise NotFusable(f"{op.name}: its weight must be a per-column vector")
            rule = rules.ROW_REDUCTIONS[type(op)]
            classes[result] = FULL if rule.keeps_shape else COL
            section.reductions.append(op)
            section.after_reduction.add(result)
            expected = section.space.dims if rule.keeps_shape else None
            if expected is not None and not _same(result.type.dims, expected):
                raise NotFusable(f"{op.name}: result shape differs from the iteration space")
        elif kind == "elementwise":
            if any(cls == COL and operand.type.rank < result.type.rank
                   for operand, cls in zip(operands, operand_classes, strict=True)):
                # PyTorch aligns a [rows] result (a row reduction without keepdim) with the last dim: one value per
                # column, not per row (x * x.sum(-1) of a square x), or an outer product with a [rows, 1] one.
                raise NotFusable(f"{op.name}: a row reduction's result without keepdim broadcasts against a value of "
                                 "higher rank (PyTorch aligns it with the last dim)")
            cls = broadcast_class(operand_classes)
            classes[result] = cls
            # A full-width result of broadcast rows (a padding mask's arithmetic before it meets the scores) is
            # computed on the tiles of the rows it maps to, as its operands are read.
            if cls == FULL and classify(result.type.dims, section.space) != FULL:
                raise NotFusable(f"{op.name}: result shape differs from the iteration space")
            if depth_inputs:
                section.after_reduction.add(result)
                (section.post_full if cls in (FULL, ROW) else section.post_col).append(op)
            else:
                section.pre.append(op)
        else:
            raise NotFusable(f"{op.name}: not an elementwise op or row reduction")


def _check_rotation(op: tensor_op.RotateHalfOp, operand_class: str, section: Section, inputs: set[SSAValue]) -> None:
    """A kernel rotates a full tile of its space: an input's by reading it at the rotated columns, a computed one's
    by permuting its registers, which needs groups of a power-of-two width (whole groups in a tile of power-of-two
    columns)."""
    if operand_class != FULL or not _same(op.input.type.dims, section.space.dims):
        raise NotFusable(f"{op.name}: rotates a full tile of the iteration space, not a broadcast one")
    group = op.group_size
    if op.input not in inputs and group & (group - 1):
        raise NotFusable(f"{op.name}: a rotation of a value computed in registers permutes whole groups of a "
                         f"power-of-two width, not {group} columns (its producer's kernel stores it first)")


def _analyze_repeated_table(op: tensor_op.RepeatColumnsOp, section: Section, inputs: set[SSAValue]) -> None:
    """``repeat_columns`` of a kernel input: its tiles are the result's, each column read at its index modulo the
    table's width (``tiled_loop.load``'s ``column_period``), so the result's shape must be one a kernel reads."""
    if op.input not in inputs:
        raise NotFusable(f"{op.name}: a kernel reads the repeated table from memory, so it must be a kernel input "
                         "(its producer's kernel stores it first)")
    if section.space.batch:
        raise NotFusable(f"{op.name}: a batched matmul's kernel reads no repeated table")
    cls = classify(op.output.type.dims, section.space)
    if cls not in (FULL, ROW) or (cls == FULL and not _same(op.output.type.dims, section.space.dims)
                                  and broadcast_row_map(op.output.type.dims, section.space) is None):
        raise NotFusable(f"{op.name}: its result [{', '.join(map(str, op.output.type.dims))}] is read whole or as a "
                         "row vector of the iteration space, or as whole rows broadcast over its leading dims")
    section.value_class[op.input] = section.value_class[op.output] = cls
    section.pre.append(op)


def _matmul_space(matmul: tensor_op.MatmulOp) -> tuple[Space, Space]:
    *lead, m, n = matmul.output.type.dims
    lhs = matmul.lhs.type.dims
    k = lhs[-1] if not matmul.lhs_transposed else lhs[-2]
    if matmul.batched:
        return Space((m,), k, tuple(lead)), Space((m,), n, tuple(lead))
    return Space((*lead, m), k), Space((*lead, m), n)


def plan_group(ops: list[Operation], outputs: list[SSAValue]) -> GroupPlan:
    """Check that ``ops`` (in program order) can be one kernel producing ``outputs``, and say how."""
    produced = {r for op in ops for r in op.results}
    inputs: list[SSAValue] = []
    for op in ops:
        for operand in op.operands:
            if operand not in produced and operand not in inputs:
                inputs.append(operand)
    matmuls = [op for op in ops if rules.is_matmul(op)]
    if len(matmuls) > 2:
        raise NotFusable("a kernel holds at most two matmuls (sharing their lhs)")
    if len(matmuls) == 2:
        first, second = matmuls
        if first.lhs != second.lhs or first.lhs_transposed != second.lhs_transposed:
            raise NotFusable("two matmuls share a kernel only when they multiply the same lhs (a dual GEMM)")
        if first.output.type != second.output.type or first.rhs_transposed != second.rhs_transposed:
            raise NotFusable("the two matmuls of a dual GEMM must have the same output shape and weight layout")
    unknown = [op.name for op in ops if rules.kind_of(op) is None]
    if unknown:
        raise NotFusable(f"{unknown[0]} has no lowering rule")
    matmul = matmuls[0] if matmuls else None
    input_class: dict[SSAValue, str] = {}
    prologue = None
    contraction = None
    if matmul is not None:
        if matmul.lhs_transposed and matmul.lhs.type.rank > 2:
            raise NotFusable("a transposed batched lhs does not fuse")
        if matmul.batched and (len(matmuls) > 1 or ops.index(matmul) > 0):
            raise NotFusable("a batched matmul fuses with the ops after it only (no prologue, no second matmul)")
        if matmul.lhs_transposed and matmul.lhs in produced:
            raise NotFusable("a prologue cannot feed a transposed lhs")
        prologue_space, space = _matmul_space(matmul)
        contraction = prologue_space.cols
        index = ops.index(matmul)
        prologue_ops, main_ops = ops[:index], [op for op in ops[index + 1:] if op not in matmuls]
        feeding = _producers(matmul.lhs, set(prologue_ops))
        if set(prologue_ops) != feeding:
            raise NotFusable("only ops producing the matmul's lhs can precede it in a kernel")
        if any(m.rhs in produced for m in matmuls):
            raise NotFusable("the matmul's rhs must be a kernel input (a weight)")
        # A kernel reads each input through one view: the rhs's (its [K, N] tiles, transposed or not) cannot also
        # serve as the lhs's ([M, K] tiles, x @ x.T) or an epilogue's ([M, N] tiles, linear(x, w) + w, square w).
        if any(m.rhs == matmul.lhs and m.rhs_transposed != matmul.lhs_transposed for m in matmuls):
            raise NotFusable("the matmul's lhs is its rhs transposed (x @ x.T)")
        if any(use.operation in ops and use.operation not in matmuls for m in matmuls for use in m.rhs.uses):
            raise NotFusable("the matmul's rhs is read by another op of the kernel")
        for op in prologue_ops:
            for result in op.results:
                users = {use.operation for use in result.uses}
                if result in outputs or not users <= set(prologue_ops) | set(matmuls):
                    raise NotFusable("a prologue value is used outside the matmul's lhs")
        if any(type(op) in rules.PERMUTED_READS for op in prologue_ops):
            raise NotFusable("a matmul's lhs is read in K tiles, which no permuted read spans")
        if prologue_ops:
            prologue = Section(prologue_space, list(prologue_ops))
            _analyze_section(prologue, set(inputs), {})
            if any(not rules.ROW_REDUCTIONS[type(op)].keeps_shape for op in prologue.reductions):
                raise NotFusable("a prologue may normalize the lhs but not reduce it")
            if prologue.value_class.get(matmul.lhs, FULL) != FULL:
                raise NotFusable("the matmul's lhs must be a full [rows, K] tile")
        main = Section(space, list(main_ops))
        _analyze_section(main, set(inputs), {m.output: FULL for m in matmuls})
        if matmul.lhs_transposed and matmul.lhs in main.value_class:
            raise NotFusable("the matmul's transposed lhs is also read after it (a kernel reads an input through one "
                             "view: the lhs's [K, M] tiles cannot serve as [M, N] ones)")
        for m in matmuls:
            input_class[m.rhs] = "rhs"
        if matmul.lhs not in produced:
            input_class[matmul.lhs] = "lhs"
    else:
        dims = _standalone_space_dims(ops)
        if not dims:
            raise NotFusable("rank-0 values do not fuse")
        main = Section(Space(tuple(dims[:-1]), dims[-1]), list(ops))
        _analyze_section(main, set(inputs), {})
    for section in (prologue, main):
        if section is None:
            continue
        for value, cls in section.value_class.items():
            if value in inputs and value not in input_class:
                input_class[value] = cls
    for value in outputs:
        if value not in produced:
            raise NotFusable("an output is not produced by the group")
        if main.value_class.get(value) == FULL and not _same(value.type.dims, main.space.dims):
            raise NotFusable("a value of broadcast rows cannot be a kernel output (its tiles hold the space's rows)")
        if main.value_class.get(value) == ROW and row_vector_per_batch(value.type.dims, main.space) is not None:
            raise NotFusable("a row vector per matrix of a batched kernel cannot be a kernel output (every program "
                             "of its matrices would write it)")
        if value not in main.value_class and value not in {m.output for m in matmuls}:
            raise NotFusable("a prologue value cannot be a kernel output")
        if value.type.element_type == i1:
            raise NotFusable("a boolean value (a comparison's mask) cannot be a kernel output: kernels read masks")
    materialized = _materialized_value(main, matmuls) if matmul is not None else None
    return GroupPlan(list(ops), inputs, list(outputs), matmul, prologue, main, materialized, input_class, contraction,
                     matmuls)


def _standalone_space_dims(ops: list[Operation]) -> tuple[Dim, ...]:
    """The iteration space of a group without a matmul: its first op's (a row reduction's input, else its result),
    unless those broadcast over a later op's (a padding mask's arithmetic before the scores it is added to, a bias
    scaled before it is added to the rows): then that op's."""
    def dims_of(op: Operation) -> tuple[Dim, ...]:
        return tuple((rules.reduction_input(op) if rules.kind_of(op) == "reduction" else op.results[0]).type.dims)

    first = dims_of(ops[0])
    for op in ops[1:]:
        dims = dims_of(op)
        if dims and first and not _same(first, dims) and classify(first, Space(dims[:-1], dims[-1])) is not None:
            return dims
    return first


def _producers(value: SSAValue, candidates: set[Operation]) -> set[Operation]:
    """Ops among ``candidates`` that ``value`` (transitively) depends on."""
    found: set[Operation] = set()
    stack = [value]
    while stack:
        owner = stack.pop().owner
        if isinstance(owner, Operation) and owner in candidates and owner not in found:
            found.add(owner)
            stack.extend(owner.operands)
    return found


def depends_on(value: SSAValue, root: SSAValue, within: set[Operation]) -> bool:
    stack, seen = [value], set()
    while stack:
        current = stack.pop()
        if current == root:
            return True
        owner = current.owner
        if isinstance(owner, Operation) and owner in within and owner not in seen:
            seen.add(owner)
            stack.extend(owner.operands)
    return False


def _materialized_value(main: Section, matmuls: list[tensor_op.MatmulOp]) -> SSAValue | None:
    """The one matmul-derived value a row strip writes in phase 1 and re-reads in phase 2 (None: no phase 2)."""
    if not main.has_reductions:
        return None
    ops = set(main.ops)
    needed = set()
    phase2_consumers = main.post_full + [op for op in main.reductions if rules.ROW_REDUCTIONS[type(op)].keeps_shape]
    for op in phase2_consumers:
        for operand in [rules.reduction_input(op), *rules.reduction_extras(op)] if op in main.reductions else op.operands:
            if operand in main.after_reduction:
                continue
            if any(operand == m.output or (operand.owner in ops and depends_on(operand, m.output, ops))
                   for m in matmuls):
                needed.add(operand)
    if len(needed) > 1:
        raise NotFusable("after the row reduction, more than one matmul-derived value would be needed")
    return next(iter(needed), None)

