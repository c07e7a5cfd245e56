"""``amk-duplicate-norm-prologues``: give a matmul its own copy of a LayerNorm/RMSNorm that other ops read too.

A norm read by a matmul and by other ops (a residual add, a projection of another shape) would otherwise run as a
kernel of its own whose output makes a round trip through memory; copied, it fuses into the matmul as a prologue.

Input::

    %n = tensor_op.rmsnorm %x {eps = 1.0e-05 : f64} : T -> T
    %y = tensor_op.matmul %n, %w : (...) -> ...
    %r = tensor_op.add %y, %n : (...) -> ...

Output (the add keeps the original)::

    %n = tensor_op.rmsnorm %x ...
    %n_1 = tensor_op.rmsnorm %x ...
    %y = tensor_op.matmul %n_1, %w ...
    %r = tensor_op.add %y, %n ...

A norm computed in another dtype (a bf16 model's in fp32, as Llama's) is copied with its casts: those of its input and
weight that only it reads, and the one back that is its only reader; a weight computed for it alone (Gemma's
``1 + w.float()``) is computed again in each copy. Left alone:

- a norm read by exactly two matmuls of the same shape: ``amk-fuse`` makes those a dual GEMM with the norm as their
  shared prologue (where other ops read the norm too, the two matmuls share one copy);
- a norm read by three matmuls or more (an attention block's query, key and value projections): its own kernel and
  the projections (two of them a dual GEMM) took 0.037 ms on the H200 for Llama-3-8B's at 16 decode rows, a copy in
  each projection 0.050, and 0.290 against 0.291 ms at 4096 rows (``benchmarks/results/2026-12-06-h200-qkv-ab-48.json``);
- a norm of a matmul's result (through elementwise ops: an output projection plus the residual, then the next norm):
  ``amk-fuse`` makes it that matmul's epilogue, where copies would each be written out for their matmul, not fused
  into it.

Lit test: ``tests/filecheck/passes/amk-duplicate-norm-prologues/``.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from amk.dialects import tensor_op
from amk.lowering import rules


def _dual_gemm(matmuls: list[tensor_op.MatmulOp]) -> bool:
    first, second = matmuls
    return first.output.type == second.output.type and first.rhs_transposed == second.rhs_transposed


def _computed_from_a_matmul(value) -> bool:
    """Whether ``value`` is a matmul's result or computed from one by elementwise ops."""
    pending, seen = [value.owner], set()
    while pending:
        op = pending.pop()
        if op in seen or not isinstance(op, tensor_op.TensorOp):
            continue
        seen.add(op)
        if rules.is_matmul(op):
            return True
        if rules.kind_of(op) == "elementwise":
            pending.extend(operand.owner for operand in op.operands)
    return False


class DuplicateNormProloguesPass(ModulePass):
    """Copy a norm for a matmul that reads it (module docstring)."""

    name = "amk-duplicate-norm-prologues"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for norm in [o for o in op.walk() if isinstance(o, tensor_op.LayerNormOp | tensor_op.RMSNormOp)]:
            if isinstance(norm.parent_op(), tensor_op.FusedOp):
                continue
            chain = _with_its_casts(norm)
            result = chain[-1].results[0]
            uses = list(result.uses)
            readers = [u for u in uses if isinstance(u.operation, tensor_op.MatmulOp) and u.index == 0
                       and not u.operation.lhs_transposed]
            if len(uses) < 2 or not readers or len(readers) > 2 or _computed_from_a_matmul(norm.input):
                continue
            dual = len(readers) == 2 and _dual_gemm([u.operation for u in readers])
            if dual and len(uses) == 2:
                continue
            block = norm.parent_block()
            if dual:  # one copy that both read, their shared prologue; the original for the other readers
                groups = [readers]
            else:
                groups = [[use] for use in (readers[1:] if len(readers) == len(uses) else readers)]
            for group in groups:
                readers_ops = {use.operation for use in group}
                clones = _cloned(chain)
                first = next(o for o in block.ops if o in readers_ops)
                for clone in clones:
                    block.insert_op_before(clone, first)
                for use in group:
                    use.operation.operands[use.index] = clones[-1].results[0]
            if not result.uses:
                for each in reversed(chain):
                    each.detach()
                    each.erase()


def _with_its_casts(norm) -> list:
    """``norm`` with the casts that only it reads (its input's and weight's, up: a bf16 model's norm computed in fp32),
    the elementwise ops that compute its weight and bias for it alone (Gemma's ``1 + w.float()``), and the cast that is
    its only reader (back down): the ops that each matmul's copy of the norm needs, in order."""
    chain = []
    for position, operand in enumerate(norm.operands):
        if position == 0:  # the input: its cast up only, not what computes it (a residual stream's add)
            owner = operand.owner
            if isinstance(owner, tensor_op.CastOp) and len(list(operand.uses)) == 1:
                chain.append(owner)
        else:
            chain += _computed_for_it_alone(operand)
    chain.append(norm)
    uses = list(norm.output.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, tensor_op.CastOp):
        chain.append(uses[0].operation)
    return chain


def _computed_for_it_alone(value) -> list:
    """The elementwise ops that compute ``value`` and whose results only that computation reads, producers first."""
    owner = value.owner
    if not isinstance(owner, tensor_op.TensorOp) or rules.kind_of(owner) != "elementwise" or len(list(value.uses)) != 1:
        return []
    return [op for operand in owner.operands for op in _computed_for_it_alone(operand)] + [owner]


def _cloned(chain: list) -> list:
    """Copies of the ops of ``chain``, each reading the copies of those before it."""
    copies: dict = {}
    clones = []
    for original in chain:
        clone = original.clone()
        for index, operand in enumerate(original.operands):
            clone.operands[index] = copies.get(operand, operand)
        copies[original.results[0]] = clone.results[0]
        clones.append(clone)
    return clones
