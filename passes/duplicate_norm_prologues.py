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
``tests/filecheck/passes/amk-duplicate-norm-prologues/``).
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from amk.dialects import tensor_op


def _dual_gemm(matmuls: list[tensor_op.MatmulOp]) -> bool:
    first, second = matmuls
    return first.output.type == second.output.type and first.rhs_transposed == second.rhs_transposed


class DuplicateNormProloguesPass(ModulePass):
    """Clone a norm per matmul that reads it (module docstring)."""

    name = "amk-duplicate-norm-prologues"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for norm in [o for o in op.walk() if isinstance(o, tensor_op.LayerNormOp | tensor_op.RMSNormOp)]:
            if isinstance(norm.parent_op(), tensor_op.FusedOp):
                continue
            result = norm.results[0]
            uses = list(result.uses)
            readers = [u for u in uses if isinstance(u.operation, tensor_op.MatmulOp) and u.index == 0
                       and not u.operation.lhs_transposed]
            if len(uses) < 2 or not readers:
                continue
            if len(uses) == 2 and len(readers) == 2 and _dual_gemm([u.operation for u in readers]):
                continue
            block = norm.parent_block()
            for use in readers[1:] if len(readers) == len(uses) else readers:
                clone = norm.clone()
                block.insert_op_before(clone, use.operation)
                use.operation.operands[use.index] = clone.results[0]
            if not result.uses:
                norm.detach()
                norm.erase()
