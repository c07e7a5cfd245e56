# --8<-- [start:header]
"""Tutorial: a new fusion pass, end to end (docs/tutorial-fusion-pass.md walks through this file).

QuickGELU, ``x * sigmoid(1.702 * x)`` (the activation of CLIP), reaches ``tensor_op`` IR as three ops: a
``tensor_op.scale``, a ``tensor_op.sigmoid`` and a ``tensor_op.mul``. The pass ``tutorial-fuse-quick-gelu`` rewrites
them into one new op, ``tutorial.quick_gelu``; ``amk-fuse`` then fuses it into a matmul epilogue like any built-in op.

    python examples/tutorial_fusion_pass.py --small       # compile a model with the pass and verify it (CPU)
    python examples/tutorial_fusion_pass.py               # the same at full size (GPU)
    python examples/tutorial_fusion_pass.py opt FILE -p tutorial-fuse-quick-gelu   # amk-opt that knows the tutorial
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, ModuleOp, f64
from xdsl.ir import Block, Dialect, Region
from xdsl.irdl import irdl_op_definition
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

import amk
from amk.dialects import tensor_op
from amk.dtypes import to_ir
from amk.lowering import rules
from amk.opt import AMK_DIALECTS, register_pass
from amk.opt import main as amk_opt_main
from amk.pipeline import compile_module
from amk.reference import register_reference
from amk.runtime import default_device

# --8<-- [end:header]


# --8<-- [start:op]
@irdl_op_definition
class QuickGeluOp(tensor_op.ElementwiseUnaryOp):
    """``x * sigmoid(1.702 * x)``: ``%y = tutorial.quick_gelu %x : T``."""

    name = "tutorial.quick_gelu"


TutorialDialect = Dialect("tutorial", [QuickGeluOp], [])
# --8<-- [end:op]

# --8<-- [start:reference]
QUICK_GELU_FACTOR = 1.702


def quick_gelu_reference(op: QuickGeluOp, x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(QUICK_GELU_FACTOR * x)


register_reference(QuickGeluOp, quick_gelu_reference)
# --8<-- [end:reference]


# --8<-- [start:rule]
@rules.register_elementwise(QuickGeluOp)
def quick_gelu_rule(b: rules.TileBuilder, op: QuickGeluOp, x):
    """On an fp32 tile ``x``: ``x * sigmoid(1.702 * x)``."""
    return b.mul(x, b.unary("sigmoid", b.mul(x, QUICK_GELU_FACTOR)))
# --8<-- [end:rule]


# --8<-- [start:pattern]
class QuickGeluPattern(RewritePattern):
    """``mul(x, sigmoid(scale(x, 1.702)))``, in either operand order, becomes ``tutorial.quick_gelu x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tensor_op.MulOp, rewriter: PatternRewriter, /):
        for x, gate in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            sigmoid = gate.owner
            if not isinstance(sigmoid, tensor_op.SigmoidOp):
                continue
            scale = sigmoid.input.owner
            if not isinstance(scale, tensor_op.ScaleOp) or scale.input != x:
                continue
            if not math.isclose(scale.factor.value.data, QUICK_GELU_FACTOR, rel_tol=1e-6):
                continue
            if op.output.type != x.type:  # the mul broadcasts: not this pattern
                continue
            new = QuickGeluOp(x)
            new.output.name_hint = op.output.name_hint
            rewriter.replace(op, new)
            return
# --8<-- [end:pattern]


# --8<-- [start:pass]
class FuseQuickGeluPass(ModulePass):
    """Rewrite every QuickGELU pattern into ``tutorial.quick_gelu``; the sigmoid and scale die with it unless they
    have other users."""

    name = "tutorial-fuse-quick-gelu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([QuickGeluPattern()])).rewrite_module(op)


register_pass(FuseQuickGeluPass)
AMK_DIALECTS["tutorial"] = lambda: TutorialDialect
# --8<-- [end:pass]




# --8<-- [start:main]
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["opt"]:
        # amk-opt, with the tutorial dialect and pass registered above
        sys.argv = [f"{sys.argv[0]} opt", *argv[1:]]
        amk_opt_main()
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="small shapes for the CPU interpreter")
    demo(parser.parse_args(argv).small)

# --8<-- [end:main]


# --8<-- [start:model]
def mlp_module(hidden: int, ffn: int, dtype: torch.dtype) -> ModuleOp:
    """``func.func @mlp(x [M, hidden], w [hidden, ffn], b [ffn])`` computing ``quick_gelu(x @ w + b)`` as the
    three ops a front end produces. ``M`` stays symbolic: one compiled program serves every number of rows."""
    element = to_ir(dtype)
    block = Block(arg_types=[tensor_op.TensorType(["M", hidden], element),
                             tensor_op.TensorType([hidden, ffn], element),
                             tensor_op.TensorType([ffn], element)])
    x, w, b = block.args
    for arg, name in zip(block.args, ("x", "w", "b")):
        arg.name_hint = name
    matmul = tensor_op.MatmulOp(x, w)
    biased = tensor_op.AddOp(matmul.output, b)
    scaled = tensor_op.ScaleOp(biased.output, factor=FloatAttr(QUICK_GELU_FACTOR, f64))
    gate = tensor_op.SigmoidOp(scaled.output)
    y = tensor_op.MulOp(biased.output, gate.output)
    block.add_ops([matmul, biased, scaled, gate, y, func.ReturnOp(y.output)])
    function = func.FuncOp("mlp", ([a.type for a in block.args], [y.output.type]), Region(block))
    return ModuleOp([function])


def eager_mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = x @ w + b
    return h * torch.sigmoid(1.702 * h)


def demo(small: bool) -> amk.VerificationReport:
    """Compile the MLP with the tutorial pass in front of amk-fuse, run it and verify it against PyTorch."""
    rows, hidden, ffn = (48, 64, 96) if small else (8192, 1024, 4096)
    compiled = compile_module(mlp_module(hidden, ffn, torch.float16), pipeline="tutorial-fuse-quick-gelu,amk-fuse")
    print(compiled.ir["fused"])
    for kernel in compiled.kernels.values():
        print(f"kernel {kernel.name}: {kernel.config.user_view()}")
        print(f"emitted Triton source: {kernel.source_path}")
    device = default_device()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, hidden, generator=generator)
    w = torch.randn(hidden, ffn, generator=generator) / math.sqrt(hidden)
    b = torch.randn(ffn, generator=generator)
    inputs = [t.to(device=device, dtype=torch.float16) for t in (x, w, b)]
    report = amk.verify(lambda *tensors: compiled.program(*tensors)[0], eager_mlp, inputs=inputs)
    print(report)
    return report
# --8<-- [end:model]


# --8<-- [start:entry]
if __name__ == "__main__":
    main()
# --8<-- [end:entry]
