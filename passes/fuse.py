"""``amk-fuse``: group producer→consumer chains of ``tensor_op`` ops into ``tensor_op.fused`` regions.

Seeds are matmuls first (each may absorb the ops producing its lhs, such as an RMSNorm prologue, and a second matmul
of the same lhs, such as the gate and up projections of a SwiGLU MLP; it then grows through its consumers: bias,
residual, activation, a row reduction and what follows it), then any remaining elementwise op or row reduction
(standalone chains). A group also takes in the elementwise ops that compute its members' other operands where it
alone reads them, such as autocast's cast of a bias, wherever the program computes them: the kernel computes them on
each tile. A comparison's mask (``tensor_op.compare``, an ``i1`` value) joins a group together with its readers: a
kernel writes no mask. An op joins a group only
if :func:`amk.lowering.plan.plan_group` can still lower the group to one kernel, and only if that creates no cycle
with ops left outside. A group value used outside the group becomes a result of the fused op, so fusion never
changes what the program computes.

Input::

    %0 = tensor_op.matmul %x, %w : (...) -> !tensor_op.tensor<[64, 32], f16>
    %1 = tensor_op.add %0, %b : (...) -> !tensor_op.tensor<[64, 32], f16>
    %2 = tensor_op.relu %1 : !tensor_op.tensor<[64, 32], f16>
    func.return %2 : !tensor_op.tensor<[64, 32], f16>

Output::

    %0 = tensor_op.fused %x, %w, %b : (...) -> !tensor_op.tensor<[64, 32], f16> {
    ^bb0(%1 : ..., %2 : ..., %3 : ...):
      %4 = tensor_op.matmul %1, %2 : (...) -> !tensor_op.tensor<[64, 32], f16>
      %5 = tensor_op.add %4, %3 : (...) -> !tensor_op.tensor<[64, 32], f16>
      %6 = tensor_op.relu %5 : !tensor_op.tensor<[64, 32], f16>
      tensor_op.yield %6 : !tensor_op.tensor<[64, 32], f16>
    }
    func.return %0 : !tensor_op.tensor<[64, 32], f16>

With ``vendor_gemm`` (``amk-fuse{vendor_gemm=true}``) matmuls join no group: they run in the vendor library (cuBLAS,
through PyTorch) and the ops after them fuse into kernels of their own, e.g. a bias, GELU and LayerNorm into one
pass over the product::

    %0 = tensor_op.matmul %x, %w : (...) -> !tensor_op.tensor<[64, 32], f16>
    %1 = tensor_op.fused %0, %b, %g, %beta : (...) -> !tensor_op.tensor<[64, 32], f16> {
      ... tensor_op.add, tensor_op.gelu, tensor_op.layernorm ...
    }

The autotuner times that program against the fused one where a row reduction follows a matmul or feeds one of many
rows, and for fp32 matmuls under "highest" (``amk.TunerConfig``'s ``vendor_gemm``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, i1
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import IsTerminator

from amk.dialects import tensor_op
from amk.lowering import rules
from amk.lowering.plan import NotFusable, plan_group


def _outputs(group: list[Operation]) -> list[SSAValue]:
    members = set(group)
    return [r for op in group for r in op.results if any(use.operation not in members for use in r.uses)]


@dataclass
class _Grouping:
    order: dict[Operation, float]  # the program's order (side inputs moved next to their readers)
    # each op of a group formed before -> that group's members
    formed: dict[Operation, tuple[Operation, ...]] = field(default_factory=dict)

    def depends_on(self, value: SSAValue, targets: set[Operation]) -> bool:
        """Whether ``value`` is computed, through ops outside ``targets``, from an op in it. A group formed before
        counts as one op, as its fused op will: it reads every operand of its members, so a value that one member
        computes from ``targets`` makes all its results depend on them (two groups each reading the other's values
        would be a cycle that no op-by-op path shows)."""
        stack, seen = [value], set()
        while stack:
            owner = stack.pop().owner
            if not isinstance(owner, Operation) or owner in seen:
                continue
            if owner in targets:
                return True
            for op in self.formed.get(owner, (owner,)):
                seen.add(op)
                stack.extend(op.operands)
        return False

    def legal(self, group: list[Operation]) -> bool:
        group = sorted(group, key=self.order.__getitem__)
        try:
            plan_group(group, _outputs(group))
        except NotFusable:
            return False
        return True

    def joins_without_cycle(self, group: list[Operation], op: Operation) -> bool:
        """Whether ``op`` may join ``group`` as far as the program's order goes: not formed elsewhere, with a lowering
        rule, and no path between them through ops outside the group (that would be a cycle)."""
        if op in self.formed or op in group or rules.kind_of(op) is None:
            return False
        members = set(group)
        produced = {r for member in group for r in member.results}
        outside_operands = [v for v in op.operands if v not in produced]
        if any(self.depends_on(v, members) for v in outside_operands):
            return False
        # Nor may a member depend on the new op through ops outside the group.
        produced |= set(op.results)
        return not any(self.depends_on(v, {op}) for member in group for v in member.operands if v not in produced)

    def try_add(self, group: list[Operation], op: Operation) -> bool:
        if not self.joins_without_cycle(group, op) or not self.legal(group + [op]):
            return False
        group.append(op)
        return True

    def try_add_mask(self, group: list[Operation], op: Operation) -> bool:
        """A comparison's mask joins with its readers, or not at all: a kernel writes no mask, so the group with the
        comparison alone is never legal (nanoGPT's ``bias == 0`` and its masked_fill)."""
        if not any(result.type.element_type == i1 for result in op.results):
            return False
        trial = list(group)
        for new in [op, *dict.fromkeys(use.operation for result in op.results for use in result.uses)]:
            if not self.joins_without_cycle(trial, new):
                return False
            trial.append(new)
        if not self.legal(trial):
            return False
        group[:] = trial
        return True

    def absorb_prologue(self, group: list[Operation], matmul: tensor_op.MatmulOp) -> None:
        frontier = [matmul.lhs]
        while frontier:
            owner = frontier.pop().owner
            if isinstance(owner, Operation) and owner.parent_block() is matmul.parent_block():
                if self.try_add(group, owner):
                    frontier.extend(owner.operands)

    def absorb_side_inputs(self, group: list[Operation]) -> None:
        """Take in the elementwise ops that compute a member's other operands and that only the group reads, such as
        the cast of a Linear's bias under autocast: the kernel computes them on each tile it loads (a vector's cast
        is a few instructions) instead of a kernel of their own writing what it reads back."""
        changed = True
        while changed:
            changed = False
            members = set(group)
            for operand in [v for op in group for v in op.operands]:
                owner = operand.owner
                if (isinstance(owner, Operation) and owner not in members and rules.kind_of(owner) == "elementwise"
                        and owner.parent_block() is group[0].parent_block()
                        and all(use.operation in members for result in owner.results for use in result.uses)
                        and self._try_add_before_readers(group, owner)):
                    changed = True
                    break

    def _try_add_before_readers(self, group: list[Operation], op: Operation) -> bool:
        """``try_add`` with ``op`` ordered just before the first member that reads it, wherever the program computes
        it: an epilogue's operand written before the matmul (``v = w * 2`` then ``relu(linear(x) + v)``) would
        otherwise stand where only the matmul's prologue may, and a standalone group's first op sets its iteration
        space. The op moves halfway between its first reader and the op ordered just before that."""
        position = self.order[op]
        first_reader = min(self.order[use.operation] for result in op.results for use in result.uses)
        before = max((order for order in self.order.values() if order < first_reader), default=first_reader - 1)
        self.order[op] = (before + first_reader) / 2
        if self.try_add(group, op):
            return True
        self.order[op] = position
        return False

    def grow(self, group: list[Operation], candidates: list[Operation]) -> None:
        changed = True
        while changed:
            changed = False
            produced = {r for op in group for r in op.results}
            for op in candidates:
                if any(v in produced for v in op.operands) and (self.try_add(group, op)
                                                                 or self.try_add_mask(group, op)):
                    changed = True
                    break


def fuse_block(block: Block, vendor_gemm: bool = False) -> list[tensor_op.FusedOp]:
    """Form the groups of one block and replace each by a ``tensor_op.fused`` op (with ``vendor_gemm``, leaving the
    matmuls out of every group)."""
    ops = list(block.ops)
    candidates = [op for op in ops if rules.kind_of(op) is not None and not (vendor_gemm and rules.is_matmul(op))]
    grouping = _Grouping({op: i for i, op in enumerate(ops)})
    seeds = [op for op in candidates if rules.is_matmul(op)] + [op for op in candidates if not rules.is_matmul(op)]
    groups = []
    for seed in seeds:
        if seed in grouping.formed or not grouping.legal([seed]):
            continue
        group = [seed]
        if rules.is_matmul(seed):
            for sibling in candidates:  # a second matmul of the same lhs makes a dual GEMM
                if sibling is not seed and rules.is_matmul(sibling) and sibling.lhs == seed.lhs:
                    grouping.try_add(group, sibling)
            grouping.absorb_prologue(group, seed)
        grouping.grow(group, candidates)
        grouping.absorb_side_inputs(group)
        grouping.formed.update(dict.fromkeys(group, tuple(group)))
        if _outputs(group):  # a group whose values nobody reads is dead code: it stays as it is
            groups.append(sorted(group, key=grouping.order.__getitem__))
    fused = [_outline(block, group) for group in groups]
    if fused:
        _sort_topologically(block)
    return fused


def _outline(block: Block, group: list[Operation]) -> tensor_op.FusedOp:
    plan = plan_group(group, _outputs(group))
    body = Block(arg_types=[v.type for v in plan.inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(plan.inputs, body.args))
    for value, arg in mapping.items():
        if value.name_hint:
            arg.name_hint = value.name_hint
    for op in group:
        body.add_op(op.clone(value_mapper=mapping))
    body.add_op(tensor_op.YieldOp(*(mapping[v] for v in plan.outputs)))
    fused = tensor_op.FusedOp(plan.inputs, [v.type for v in plan.outputs], Region(body))
    block.insert_op_before(fused, group[-1])
    for old, new in zip(plan.outputs, fused.outputs):
        old.replace_all_uses_with(new)
    for op in reversed(group):
        op.detach()
        op.erase()
    return fused


def _sort_topologically(block: Block) -> None:
    """Reorder the block so that every value is defined before use, keeping the original order where possible."""
    ops = list(block.ops)
    terminator = ops[-1] if ops and ops[-1].has_trait(IsTerminator) else None
    body = [op for op in ops if op is not terminator]
    index = {op: i for i, op in enumerate(body)}
    placed: set[Operation] = set()
    ordered: list[Operation] = []
    pending = list(body)
    while pending:
        for op in pending:
            producers = [v.owner for v in op.operands if isinstance(v.owner, Operation) and v.owner in index]
            if all(p in placed for p in producers):
                ordered.append(op)
                placed.add(op)
                pending.remove(op)
                break
        else:
            raise AssertionError("amk-fuse produced a cycle")
    for op in body:
        op.detach()
    for op in ordered:
        if terminator is not None:
            block.insert_op_before(op, terminator)
        else:
            block.add_op(op)


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Group fusable ``tensor_op`` chains into ``tensor_op.fused`` regions (see the module docstring); with
    ``vendor_gemm``, matmuls stay outside them, for the vendor library to run."""

    name = "amk-fuse"

    vendor_gemm: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        blocks = {o.parent_block() for o in op.walk() if rules.kind_of(o) is not None
                  and not isinstance(o.parent_op(), tensor_op.FusedOp)}
        for block in blocks:
            fuse_block(block, self.vendor_gemm)
