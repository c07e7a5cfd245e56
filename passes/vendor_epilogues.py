"""``amk-vendor-epilogues``: give a matmul left to the vendor library its bias and activation, as cuBLASLt's epilogue.

In the program whose matmuls run in the vendor library (``amk-fuse{vendor_gemm=true}``), a Linear's product is one
call and the ops after it a kernel of their own: where those are only its bias and a ReLU or a tanh GELU, that kernel
is a whole pass over the product (GPT-2's MLP: its hidden activations, 32 MB at 4096 tokens) that cuBLASLt does in
the GEMM's epilogue, on the fp32 accumulator. This pass makes such a matmul, bias add and activation one
``tensor_op.linear``, and a matmul with its bias alone one ``tensor_op.linear`` without activation (``F.linear``,
the bias in the epilogue, as ``nn.Linear`` runs it), where no elementwise op or row reduction reads the result (it
is returned, or read by the next matmul). Left alone: a product read by other ops too, a bias of another dtype,
exact GELU (cuBLASLt's is the tanh form; GELU written out as arithmetic is one op by then, TorchDynamo's graph
rewritten by :mod:`amk.frontend.activations`), and a sum or activation that other ops read (a residual, a norm):
``amk-fuse`` makes the bias and the activation part of their kernel, which reads the product anyway.

Input::

    %0 = tensor_op.matmul %x, %w {transpose_rhs = true} : (...) -> !tensor_op.tensor<[M, 4096], f16>
    %1 = tensor_op.add %0, %b : (...) -> !tensor_op.tensor<[M, 4096], f16>
    %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[M, 4096], f16>

Output::

    %2 = tensor_op.linear %x, %w, %b {activation = "gelu_tanh"} : (...) -> !tensor_op.tensor<[M, 4096], f16>

A product by a ``[K, N]`` weight (no ``transpose_rhs``: Hugging Face's ``Conv1D``, ``torch.addmm(b, x, w)``) gives
``tensor_op.linear`` with ``weight_layout = "kn"``.

Runs before ``amk-fuse`` in :func:`amk.pipeline.fusion_passes` with ``vendor_gemm``. Lit test:
``tests/filecheck/passes/amk-vendor-epilogues/``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from amk.dialects import tensor_op
from amk.lowering import rules


@dataclass(frozen=True)
class LinearEpilogue:
    """What a matmul's ``tensor_op.linear`` takes in: its bias add and bias, the op whose result it replaces (the
    activation, or the add) and the activation's name (None: the bias alone)."""

    bias_add: Operation
    bias: SSAValue
    last: Operation
    activation: str | None


def linear_epilogue(matmul: Operation) -> LinearEpilogue | None:
    """The bias and activation this pass puts in ``matmul``'s epilogue, or None: a matmul by ``nn.Linear``'s weight
    (or Hugging Face's ``Conv1D``'s, ``[K, N]``) outside any fused region, whose one reader adds its bias
    (:func:`amk.dialects.tensor_op.bias_add`), then the ReLU or tanh GELU that alone reads that sum, where no op that
    ``amk-fuse`` puts in a kernel reads the result (that kernel would read the product anyway, and compute the bias
    and the activation there)."""
    linear = tensor_op.bias_add(matmul)
    if linear is None or isinstance(matmul.parent_op(), tensor_op.FusedOp):
        return None
    add, bias = linear
    activation = _epilogue_activation(add.output)
    epilogue = LinearEpilogue(add, bias, add, None) if activation is None else LinearEpilogue(add, bias, *activation)
    read_by_a_kernel = any(rules.kind_of(use.operation) in ("elementwise", "reduction")
                           for use in epilogue.last.results[0].uses)
    return None if read_by_a_kernel else epilogue


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


class LinearWithEpilogue(RewritePattern):
    """A matmul with its bias add, and the activation that alone reads that sum, to ``tensor_op.linear``
    (:func:`linear_epilogue`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tensor_op.MatmulOp, rewriter: PatternRewriter) -> None:
        epilogue = linear_epilogue(op)
        if epilogue is None:
            return
        rewriter.replace(epilogue.last, tensor_op.LinearOp(op.lhs, op.rhs, epilogue.bias, epilogue.activation,
                                                           "nk" if op.rhs_transposed else "kn"))
        if epilogue.last is not epilogue.bias_add:
            rewriter.erase(epilogue.bias_add)
        rewriter.erase(op)


@dataclass(frozen=True)
class VendorEpiloguesPass(ModulePass):
    """A matmul, its bias and a ReLU or tanh GELU after it to one ``tensor_op.linear`` (module docstring)."""

    name = "amk-vendor-epilogues"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LinearWithEpilogue(), apply_recursively=False).rewrite_module(op)
