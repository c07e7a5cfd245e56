"""``amk-vendor-epilogues``: give a matmul left to the vendor library its bias and activation, as cuBLASLt's epilogue.

In the program whose matmuls run in the vendor library (``amk-fuse{vendor_gemm=true}``), a Linear's product is one
call and the ops after it a kernel of their own: where those are only its bias and a ReLU or a tanh GELU, that kernel
is a whole pass over the product (GPT-2's MLP: its hidden activations, 32 MB at 4096 tokens) that cuBLASLt does in
the GEMM's epilogue, on the fp32 accumulator. This pass makes such a matmul, bias add and activation one
``tensor_op.linear``, and a matmul with a bias that no elementwise op or row reduction reads after it (a projection
returned, or read by the next matmul) one ``tensor_op.linear`` without activation (``F.linear``, the bias in the
epilogue, as ``nn.Linear`` runs it). Left alone: a product read by other ops too, a bias of another dtype, and a sum
that other ops read (exact GELU, whose cuBLASLt form would be the tanh one, a residual, a norm): ``amk-fuse`` makes
the bias part of their kernel, which reads the product anyway.

Input::

    %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (...) -> !tensor_op.tensor<[M, 4096], f16>
    %1 = tensor_op.add %0, %b : (...) -> !tensor_op.tensor<[M, 4096], f16>
    %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[M, 4096], f16>

Output::

    %2 = tensor_op.linear %x, %w, %b {activation = "gelu_tanh"} : (...) -> !tensor_op.tensor<[M, 4096], f16>

Runs before ``amk-fuse`` in :func:`amk.pipeline.fusion_passes` with ``vendor_gemm``. Lit test:
``tests/filecheck/passes/amk-vendor-epilogues/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from amk.dialects import tensor_op
from amk.lowering import rules
from amk.reference import bias_add


def epilogue_activation(matmul: Operation) -> str | None:
    """The name of the activation this pass puts in ``matmul``'s epilogue with its bias, or None."""
    add = bias_add(matmul)
    activation = None if add is None else _epilogue_activation(add.output)
    return None if activation is None else activation[1]


def _epilogue_activation(value) -> tuple[Operation, str] | None:
    """The activation cuBLASLt's epilogue computes that is the one reader of ``value``, and its name."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    reader = uses[0].operation
    if isinstance(reader, tensor_op.ReluOp):
        return reader, "relu"
    if isinstance(reader, tensor_op.GeluOp) and reader.uses_tanh:
        return reader, "gelu_tanh"
    return None


def _read_by_a_kernel(value) -> bool:
    """Whether an op that ``amk-fuse`` puts in a kernel reads ``value`` (with the matmuls in the vendor library)."""
    return any(rules.kind_of(use.operation) in ("elementwise", "reduction") for use in value.uses)


class LinearWithEpilogue(RewritePattern):
    """A matmul of a weight with its bias add, and the activation that alone reads that sum, to ``tensor_op.linear``;
    with the bias alone where no kernel reads the sum."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tensor_op.MatmulOp, rewriter: PatternRewriter) -> None:
        add = bias_add(op)
        if add is None or isinstance(op.parent_op(), tensor_op.FusedOp):
            return
        bias = next(operand for operand in add.operands if operand is not op.output)
        epilogue = _epilogue_activation(add.output)
        if epilogue is None and _read_by_a_kernel(add.output):
            return
        last, activation = epilogue if epilogue is not None else (add, None)
        rewriter.replace(last, tensor_op.LinearOp(op.lhs, op.rhs, bias, activation))
        if last is not add:
            rewriter.erase(add)
        rewriter.erase(op)


@dataclass(frozen=True)
class VendorEpiloguesPass(ModulePass):
    """A matmul, its bias and a ReLU or tanh GELU after it to one ``tensor_op.linear`` (module docstring)."""

    name = "amk-vendor-epilogues"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LinearWithEpilogue(), apply_recursively=False).rewrite_module(op)
