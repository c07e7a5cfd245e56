"""``amk-duplicate-norm-prologues``: give each matmul its own copy of a LayerNorm/RMSNorm it reads.

A norm read by several matmuls (the query, key and value projections of an attention block all read the norm of
``x``) would otherwise run as a kernel of its own whose output makes a round trip through memory; cloned, it fuses
into each matmul as a prologue. A norm read by exactly two matmuls of the same shape is left alone: ``amk-fuse``
makes those a dual GEMM with the norm as their shared prologue.

Input::

    %n = tensor_op.rmsnorm %x {eps = 1.0e-05 : f64} : T -> T
    %q = tensor_op.matmul %n, %wq : (...) -> ...
    %k = tensor_op.matmul %n, %wk : (...) -> ...
    %v = tensor_op.matmul %n, %wv : (...) -> ...

Output (the last reader keeps the original)::

    %n = tensor_op.rmsnorm %x ...
    %n_1 = tensor_op.rmsnorm %x ...
    %q = tensor_op.matmul %n_1, %wq ...
    %n_2 = tensor_op.rmsnorm %x ...
    %k = tensor_op.matmul %n_2, %wk ...
    %v = tensor_op.matmul %n, %wv ...

A norm that other ops read too stays for them, and each matmul reading it gets a copy (lit test:
``tests/filecheck/passes/amk-duplicate-norm-prologues/``). A norm computed in another dtype (a bf16 model's in fp32,
as Llama's) is copied with its casts: those of its input and weight that only it reads, and the one back that is its
only reader. A norm of a matmul's result (through elementwise ops: an
attention block's output projection plus the residual, then the MLP's norm) is left alone: ``amk-fuse`` makes it that
matmul's epilogue, where copies would each be written out for their matmul, not fused into it.
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
    owner, seen = value.owner, set()
    pending = [owner]
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
    """Clone a norm per matmul that reads it (module docstring)."""

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
            if len(uses) < 2 or not readers or _computed_from_a_matmul(norm.input):
                continue
            if len(uses) == 2 and len(readers) == 2 and _dual_gemm([u.operation for u in readers]):
                continue
            block = norm.parent_block()
            for use in readers[1:] if len(readers) == len(uses) else readers:
                clones = _cloned(chain)
                for clone in clones:
                    block.insert_op_before(clone, use.operation)
                use.operation.operands[use.index] = clones[-1].results[0]
            if not result.uses:
                for each in reversed(chain):
                    each.detach()
                    each.erase()


def _with_its_casts(norm) -> list:
    """``norm`` with the casts that only it reads (its input's and weight's, up: a bf16 model's norm computed in fp32)
    and the cast that is its only reader (back down): the ops that each matmul's copy of the norm needs, in order."""
    chain = [operand.owner for operand in norm.operands
             if isinstance(operand.owner, tensor_op.CastOp) and len(list(operand.uses)) == 1]
    chain.append(norm)
    uses = list(norm.output.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, tensor_op.CastOp):
        chain.append(uses[0].operation)
    return chain


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
