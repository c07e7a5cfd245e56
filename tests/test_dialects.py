"""Python API of the amk dialects: types, op builders with inferred result types, verifiers, parse/print round trips."""

from __future__ import annotations

import io
import math
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from amk.context import make_context
from amk.dialects import memory_staged as ms
from amk.dialects import tensor_op as to
from amk.dialects import tiled_loop as tl
from amk.dialects.memory_staged import BufferType
from amk.dialects.tensor_op import TensorType
from amk.dialects.tiled_loop import ExprsAttr, TileType
from amk.opt import AMK_DIALECTS
from amk.symbolic import Dim, provably_equal

# ---------------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------------


CTX = make_context()


def parse(text: str) -> builtin.ModuleOp:
    return Parser(CTX, text).parse_module()


def generic(op) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(op)
    return stream.getvalue()


def args(*types):
    """Block arguments of the given types (values to build ops from)."""
    return Block(arg_types=list(types)).args


def tensor(*dims, element=f32) -> TensorType:
    return TensorType(list(dims), element)


# ---------------------------------------------------------------------------------------------------------------------
# Types and attributes
# ---------------------------------------------------------------------------------------------------------------------


def test_tensor_type_dims():
    t = TensorType(["S*B", 4096, "cdiv(N, 64)"], f16)
    assert t.dims == (Dim("B*S"), Dim(4096), Dim("cdiv(N, 64)"))
    assert t.rank == 3
    assert t.element_type == f16
    assert str(t) == "!tensor_op.tensor<[B*S, 4096, cdiv(N, 64)], f16>"


def test_tensor_type_equality_is_canonical():
    assert TensorType(["S*B", 64], f32) == TensorType(["B*S", 64], f32)
    assert hash(TensorType(["S*B", 64], f32)) == hash(TensorType(["B*S", 64], f32))
    assert TensorType(["M", 64], f32) != TensorType(["M", 64], f16)
    assert TensorType(["M", 64], f32) != TensorType(["N", 64], f32)


def test_rank0_tensor():
    t = TensorType([], f32)
    assert t.dims == () and t.rank == 0
    assert str(t) == "!tensor_op.tensor<[], f32>"


def test_bad_dimension_is_rejected():
    with pytest.raises((ValueError, VerifyException)):
        TensorType(["M +", 64], f32)


def test_tile_type_dims():
    t = TileType(["BLOCK_M", 1], f32)
    assert t.dims == (Dim("BLOCK_M"), Dim(1))
    assert t.rank == 2
    assert str(t) == "!tiled_loop.tile<[BLOCK_M, 1], f32>"


@pytest.mark.parametrize("dims", [[64], [2, 64, 64], []])
def test_tiles_are_2d(dims):
    with pytest.raises(VerifyException, match="tiles are 2-D"):
        TileType(dims, f32)


def test_buffer_type_dims_and_space():
    b = BufferType("shared", ["BLOCK_M", 64], f16)
    assert b.dims == (Dim("BLOCK_M"), Dim(64))
    assert b.space.data == "shared"
    assert b.rank == 2
    assert str(b) == "!memory_staged.buffer<shared, [BLOCK_M, 64], f16>"
    g = BufferType("global", ["S*B", 4096], f16)
    assert g.dims[0] == Dim("B*S")
    assert g != BufferType("shared", ["B*S", 4096], f16)


def test_buffer_type_space_is_checked():
    with pytest.raises(VerifyException, match="memory space must be one of global, shared"):
        BufferType("local", [64, 32], f16)


def test_exprs_attr_dims():
    e = ExprsAttr(["pid_m * BLOCK_M", "k", 0])
    assert e.dims == (Dim("BLOCK_M*pid_m"), Dim("k"), Dim(0))
    assert str(e) == "#tiled_loop.exprs<[BLOCK_M*pid_m, k, 0]>"


# ---------------------------------------------------------------------------------------------------------------------
# tensor_op builders and verifiers
# ---------------------------------------------------------------------------------------------------------------------


def test_matmul_infers_result():
    x, w = args(tensor("B*S", 4096, element=f16), tensor(4096, 1024, element=f16))
    op = to.MatmulOp(x, w)
    op.verify()
    assert op.output.type == tensor("B*S", 1024, element=f16)
    assert not op.lhs_transposed and not op.rhs_transposed


def test_matmul_transpose_rhs_infers_batch_m_n():
    x, w = args(tensor("B", 128, 64, element=f16), tensor(32, 64, element=f16))
    op = to.MatmulOp(x, w, transpose_rhs=True)
    op.verify()
    assert op.output.type.dims == (Dim("B"), Dim(128), Dim(32))
    assert op.rhs_transposed and not op.lhs_transposed
    assert "transpose_rhs = true" in str(op)


def test_matmul_transpose_lhs_and_both():
    y, w, v = args(tensor("B", 64, 128), tensor(32, 64), tensor(64, 32))
    lhs_t = to.MatmulOp(y, v, transpose_lhs=True)
    both = to.MatmulOp(y, w, transpose_lhs=True, transpose_rhs=True)
    for op in (lhs_t, both):
        op.verify()
        assert op.output.type == tensor("B", 128, 32)


def test_matmul_contraction_mismatch_names_dims():
    x, w = args(tensor("M", 4096), tensor(2048, 1024))
    with pytest.raises(VerifyException, match=r"'tensor_op.matmul' contraction dimension of lhs is 4096 but rhs has 2048"):
        to.MatmulOp(x, w)


def test_matmul_symbolic_contraction_is_not_an_error():
    # K vs N cannot be proven different: accepted, the result uses the lhs rows and rhs columns.
    x, w = args(tensor("M", "K"), tensor("N", 64))
    op = to.MatmulOp(x, w)
    assert op.output.type == tensor("M", 64)


@pytest.mark.parametrize(("rhs", "transposed"), [(tensor("B", "H", 64, "T"), False), (tensor("B", "H", "T", 64), True)])
def test_a_batched_matmul_multiplies_one_rhs_per_leading_index(rhs, transposed):
    q, k = args(tensor("B", "H", "S", 64), rhs)
    op = to.MatmulOp(q, k, transpose_rhs=transposed)
    assert op.batched
    assert op.output.type == tensor("B", "H", "S", "T")


def test_matmul_declared_result_is_checked():
    x, w = args(tensor("M", 64), tensor(64, 32))
    op = to.MatmulOp(x, w, result_type=tensor("M", 64))
    with pytest.raises(VerifyException, match="result dimension 1 is 64, inferred 32"):
        op.verify()


@pytest.mark.parametrize(
    ("lhs", "rhs", "message"),
    [
        (tensor(4096), tensor(4096, 8), "lhs must have rank >= 2"),
        (tensor("M", 64), tensor("B", 64, 8), "rhs must have rank 2 \\(shared\\) or the lhs's rank 2"),
        (tensor(2, "S", 64), tensor(3, 64, "T"), "batch dimension 0 of lhs is 2 but rhs has 3"),
        (tensor("M", 64, element=f16), tensor(64, 8), "different element types"),
    ],
)
def test_matmul_operand_errors(lhs, rhs, message):
    x, w = args(lhs, rhs)
    with pytest.raises(VerifyException, match=message):
        to.MatmulOp(x, w)


BINARY_OPS = [to.AddOp, to.SubOp, to.MulOp, to.DivOp, to.MaximumOp, to.MinimumOp]


@pytest.mark.parametrize("op_class", BINARY_OPS)
@pytest.mark.parametrize(
    ("lhs", "rhs", "want"),
    [
        (tensor("M", "N"), tensor("N"), tensor("M", "N")),
        (tensor("M", 1), tensor("N"), tensor("M", "N")),
        (tensor("N"), tensor("M", "N"), tensor("M", "N")),
        (tensor("B", "S", 64), tensor(64), tensor("B", "S", 64)),
        (tensor("B*S", 64), tensor("S*B", 1), tensor("B*S", 64)),
        (tensor(1, 1), tensor(1), tensor(1, 1)),
    ],
)
def test_binary_broadcasting(op_class, lhs, rhs, want):
    a, b = args(lhs, rhs)
    op = op_class(a, b)
    op.verify()
    assert op.output.type == want


@pytest.mark.parametrize("op_class", BINARY_OPS)
def test_binary_broadcast_mismatch(op_class):
    a, b = args(tensor("M", 64), tensor(32))
    with pytest.raises(VerifyException, match=r"dimension 1 does not broadcast \(64 vs 32\)"):
        op_class(a, b)


def test_binary_element_type_mismatch():
    a, b = args(tensor("M", 64), tensor("M", 64, element=f16))
    with pytest.raises(VerifyException, match=r"'tensor_op.add' operands have different element types \(f32 vs f16\)"):
        to.AddOp(a, b)


UNARY_OPS = [to.ReluOp, to.GeluOp, to.SiluOp, to.SigmoidOp, to.TanhOp, to.ExpOp, to.MishOp, to.SoftplusOp,
             to.HardsigmoidOp, to.HardswishOp, to.RotateHalfOp, to.LeakyReluOp]


@pytest.mark.parametrize("last", [63, "D"])
def test_rotate_half_needs_a_known_even_last_dim(last):
    (x,) = args(tensor("M", last))
    with pytest.raises(VerifyException, match="last dim, which must be a known even number"):
        to.RotateHalfOp(x).verify()


@pytest.mark.parametrize("op_class", UNARY_OPS)
def test_unary_keeps_type(op_class):
    (x,) = args(tensor("B*S", 768, element=f16))
    op = op_class(x)
    op.verify()
    assert op.output.type == x.type


def test_gelu_approximate():
    (x,) = args(tensor("M", 64))
    assert not to.GeluOp(x).uses_tanh
    tanh = to.GeluOp(x, approximate=StringAttr("tanh"))
    tanh.verify()
    assert tanh.uses_tanh
    to.GeluOp(x, approximate=StringAttr("none")).verify()
    with pytest.raises(VerifyException, match="'tensor_op.gelu' approximate must be one of none, tanh, got 'fast'"):
        to.GeluOp(x, approximate=StringAttr("fast")).verify()


def test_leaky_relu_slope():
    (x,) = args(tensor("M", 64))
    assert to.LeakyReluOp(x).slope == 0.01
    assert to.LeakyReluOp(x, negative_slope=builtin.FloatAttr(0.2, builtin.f64)).slope == 0.2


def test_clamp_verifier():
    (x,) = args(tensor("M", 64))
    f = lambda v: builtin.FloatAttr(v, builtin.f64)  # noqa: E731
    to.ClampOp(x, min=f(-1.0), max=f(1.0)).verify()
    to.ClampOp(x, min=f(0.0)).verify()
    with pytest.raises(VerifyException, match=r"min \(1.0\) is greater than max \(-1.0\)"):
        to.ClampOp(x, min=f(1.0), max=f(-1.0)).verify()
    with pytest.raises(VerifyException, match="needs at least one of min and max"):
        to.ClampOp(x).verify()


def test_scale_and_cast():
    (x,) = args(tensor("M", 64, element=f16))
    to.ScaleOp(x, factor=builtin.FloatAttr(0.125, builtin.f64)).verify()
    cast = to.CastOp(x, f32)
    cast.verify()
    assert cast.output.type == tensor("M", 64, element=f32)
    with pytest.raises(VerifyException, match="casts to floating-point types only"):
        to.CastOp(x, builtin.i32).verify()


REDUCTIONS = [to.ReduceSumOp, to.ReduceMaxOp, to.ReduceMeanOp, to.LogSumExpOp]


@pytest.mark.parametrize("op_class", REDUCTIONS)
@pytest.mark.parametrize(
    ("axis", "keepdim", "want"),
    [
        (-1, False, ("B", "S")),
        (-1, True, ("B", "S", 1)),
        (0, False, ("S", 64)),
        (0, True, (1, "S", 64)),
        (1, True, ("B", 1, 64)),
        (-3, False, ("S", 64)),
    ],
)
def test_reduction_result(op_class, axis, keepdim, want):
    (x,) = args(tensor("B", "S", 64))
    op = op_class(x, axis=axis, keepdim=keepdim)
    op.verify()
    assert op.output.type == tensor(*want)
    assert op.keeps_dim is keepdim
    assert op.normalized_axis == axis % 3


@pytest.mark.parametrize("op_class", REDUCTIONS)
@pytest.mark.parametrize("axis", [3, -4])
def test_reduction_axis_out_of_range(op_class, axis):
    (x,) = args(tensor("B", "S", 64))
    with pytest.raises(VerifyException, match=f"axis {axis} is out of range for a rank-3 tensor"):
        op_class(x, axis=axis)


def test_softmax():
    (x,) = args(tensor("B*H", "S", "S", element=f16))
    op = to.SoftmaxOp(x, axis=-1)
    op.verify()
    assert op.output.type == x.type
    with pytest.raises(VerifyException, match="axis 3 is out of range"):
        to.SoftmaxOp(x, axis=3).verify()


@pytest.mark.parametrize("affine", ["none", "weight", "weight+bias"])
def test_layernorm_builder(affine):
    x, g, b = args(tensor("B*S", 4096), tensor(4096), tensor(4096))
    weight = g if affine != "none" else None
    bias = b if affine == "weight+bias" else None
    op = to.LayerNormOp(x, weight, bias, eps=1e-6)
    op.verify()
    assert op.input is x
    assert op.weight is weight
    assert op.bias is bias
    assert op.output.type == x.type
    assert op.eps.value.data == 1e-6


@pytest.mark.parametrize("affine", ["none", "weight", "bias", "weight+bias"])
def test_layernorm_custom_form_round_trips(affine):
    """Regression: a bias-only layernorm once printed `(T, TB) -> T`, which parsed back with TB as the weight type."""
    x, g, b = tensor("M", 64), tensor(64), tensor(64)
    block = Block(arg_types=[x, g, b])
    weight = block.args[1] if "weight" in affine else None
    bias = block.args[2] if "bias" in affine else None
    block.add_ops([to.LayerNormOp(block.args[0], weight, bias), func.ReturnOp()])
    module = builtin.ModuleOp([func.FuncOp("f", ([x, g, b], []), Region(block))])
    module.verify()
    text = str(module)
    types = text.split("tensor_op.layernorm", 1)[1].split("f64} : ", 1)[1].splitlines()[0]
    labelled = "!tensor_op.tensor<[M, 64], f32>"
    labelled += " weight !tensor_op.tensor<[64], f32>" if weight else ""
    labelled += " bias !tensor_op.tensor<[64], f32>" if bias else ""
    assert types == f"{labelled} -> !tensor_op.tensor<[M, 64], f32>"
    again = parse(text)
    again.verify()
    assert str(again) == text
    assert again.is_structurally_equivalent(module)
    (op,) = [o for o in again.walk() if isinstance(o, to.LayerNormOp)]
    assert (op.weight is not None, op.bias is not None) == (weight is not None, bias is not None)
    assert str(parse(generic(module))) == text


@pytest.mark.parametrize("with_weight", [False, True])
def test_rmsnorm_custom_form_round_trips(with_weight):
    x, g = tensor("B*S", 4096), tensor(4096)
    block = Block(arg_types=[x, g])
    block.add_ops([to.RMSNormOp(block.args[0], block.args[1] if with_weight else None, eps=1e-6), func.ReturnOp()])
    module = builtin.ModuleOp([func.FuncOp("f", ([x, g], []), Region(block))])
    module.verify()
    text = str(module)
    weight = " weight !tensor_op.tensor<[4096], f32>" if with_weight else ""
    assert f": !tensor_op.tensor<[B*S, 4096], f32>{weight} -> !tensor_op.tensor<[B*S, 4096], f32>" in text
    assert str(parse(text)) == text
    assert str(parse(generic(module))) == text


def test_old_norm_type_syntax_is_rejected():
    with pytest.raises(ParseError):
        parse(
            "func.func @f(%x : !tensor_op.tensor<[M, 64], f32>, %g : !tensor_op.tensor<[64], f32>) {\n"
            "  %0 = tensor_op.rmsnorm %x weight %g {eps = 1.0e-05 : f64} : (!tensor_op.tensor<[M, 64], f32>,"
            " !tensor_op.tensor<[64], f32>) -> !tensor_op.tensor<[M, 64], f32>\n"
            "  func.return\n}"
        )


def test_layernorm_weight_mismatch():
    x, g = args(tensor("M", 4096), tensor(2048))
    with pytest.raises(VerifyException, match="weight has 2048 elements but the normalized axis has 4096"):
        to.LayerNormOp(x, g).verify()


def test_layernorm_verifier_on_parsed_ir():
    module = parse(
        "func.func @f(%x : !tensor_op.tensor<[M, 4096], f32>, %g : !tensor_op.tensor<[4096], f32>,"
        " %b : !tensor_op.tensor<[2048], f32>) {\n"
        "  %0 = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[M, 4096], f32>"
        " weight !tensor_op.tensor<[4096], f32> bias !tensor_op.tensor<[2048], f32> -> !tensor_op.tensor<[M, 4096], f32>\n"
        "  func.return\n}"
    )
    with pytest.raises(VerifyException, match="bias has 2048 elements but the normalized axis has 4096"):
        module.verify()


@pytest.mark.parametrize("with_weight", [False, True])
def test_rmsnorm_builder(with_weight):
    x, g = args(tensor("M", 64, element=f16), tensor(64, element=f16))
    op = to.RMSNormOp(x, g if with_weight else None, eps=1e-6)
    op.verify()
    assert op.input is x
    assert (op.weight is g) if with_weight else op.weight is None
    assert op.output.type == x.type


def test_rmsnorm_weight_mismatch():
    x, g = args(tensor("M", 64), tensor(128))
    with pytest.raises(VerifyException, match="'tensor_op.rmsnorm' weight has 128 elements but the normalized axis has 64"):
        to.RMSNormOp(x, g).verify()


def _fused(inputs, arg_types, result_types, *, yield_index=None):
    """A fused op adding its two block arguments (or yielding one of them)."""
    block = Block(arg_types=arg_types)
    if yield_index is None:
        add = to.AddOp(block.args[0], block.args[1])
        block.add_ops([add, to.YieldOp(add.output)])
    else:
        block.add_op(to.YieldOp(block.args[yield_index]))
    return to.FusedOp(inputs, result_types, Region(block))


def test_fused_op():
    x, b = args(tensor("B*S", 32, element=f16), tensor(32, element=f16))
    op = _fused([x, b], [x.type, b.type], [x.type])
    op.verify()
    assert op.outputs[0].type == x.type
    assert isinstance(op.body.block.last_op, to.YieldOp)


def test_fused_region_argument_count():
    x, b = args(tensor("M", 32), tensor(32))
    op = _fused([x, b], [x.type], [x.type], yield_index=0)
    with pytest.raises(VerifyException, match="region has 1 arguments but the op has 2 inputs"):
        op.verify()


def test_fused_region_argument_type():
    x, b = args(tensor("M", 32), tensor(32))
    op = _fused([x, b], [x.type, tensor(32, element=f16)], [x.type], yield_index=0)
    with pytest.raises(VerifyException, match="region argument 1 has type"):
        op.verify()


def test_fused_yield_types():
    x, b = args(tensor("M", 32), tensor(32))
    op = _fused([x, b], [x.type, b.type], [x.type], yield_index=1)
    with pytest.raises(VerifyException, match="yields 1 values whose types differ from its results"):
        op.verify()


def test_fused_op_in_module_round_trips():
    x, b = tensor("B*S", 32, element=f16), tensor(32, element=f16)
    block = Block(arg_types=[x, b])
    fused = _fused(list(block.args), [x, b], [x])
    block.add_ops([fused, func.ReturnOp(fused.outputs[0])])
    module = builtin.ModuleOp([func.FuncOp("f", ([x, b], [x]), Region(block))])
    module.verify()
    text = str(module)
    assert "tensor_op.fused" in text and "tensor_op.yield" in text
    assert str(parse(text)) == text
    assert str(parse(generic(module))) == text


# ---------------------------------------------------------------------------------------------------------------------
# tiled_loop and memory_staged builders
# ---------------------------------------------------------------------------------------------------------------------


def test_tiled_loop_kernel_builders():
    kernel = tl.KernelOp("k", grid=["cdiv(M, BLOCK_M)"], program_ids=["pid_m"], strategy="row_strip",
                         tile_params=["BLOCK_M", "BLOCK_N"], num_inputs=1,
                         arg_types=[tensor("M", 64, element=f16), tensor("M", 1)])
    body = kernel.body.block
    x, out = body.args
    load = tl.LoadOp(x, ["pid_m * BLOCK_M", 0], TileType(["BLOCK_M", 64], f16))
    ninf = tl.FullOp(float("-inf"), TileType([1, 1], f32))
    cast = tl.CastOp(load.result, f32)
    gt = tl.BinaryOp("gt", cast.result, ninf.result)
    add = tl.BinaryOp("add", cast.result, ninf.result)
    sel = tl.SelectOp(gt.result, add.result, ninf.result)
    red = tl.ReduceOp("max", sel.result)
    loop = tl.ForOp("k", 0, 64, "BLOCK_K", [red.result])
    loop.body.block.add_op(tl.YieldOp(loop.body.block.args[0]))
    valid = tl.InBoundsOp([0, "n"], ["M", 64], [1, "BLOCK_N"])
    exp = tl.UnaryOp("exp", loop.results[0])
    store = tl.StoreOp(exp.result, out, ["pid_m * BLOCK_M", 0])
    body.add_ops([load, ninf, cast, gt, add, sel, red, loop, valid, exp, store])
    kernel.verify()

    assert gt.result.type == TileType(["BLOCK_M", 64], i1)
    assert add.result.type == TileType(["BLOCK_M", 64], f32)
    assert sel.result.type == TileType(["BLOCK_M", 64], f32)
    assert red.result.type == TileType(["BLOCK_M", 1], f32)
    assert (loop.lower, loop.upper, loop.step) == (Dim(0), Dim(64), Dim("BLOCK_K"))
    assert loop.results[0].type == red.result.type
    assert valid.result.type == TileType([1, "BLOCK_N"], i1)
    assert ninf.number == float("-inf")
    assert kernel.inputs == (x,) and kernel.outputs == (out,)
    text = str(kernel)
    assert "tiled_loop.full -inf" in text
    module = builtin.ModuleOp([kernel])
    assert str(parse(str(module))) == str(module)
    assert str(parse(generic(module))) == str(module)


def test_tiled_loop_dot():
    a, b, c = args(TileType(["BLOCK_M", "BLOCK_K"], f16), TileType(["BLOCK_K", "BLOCK_N"], f16),
                   TileType(["BLOCK_M", "BLOCK_N"], f32))
    dot = tl.DotOp(a, b, c)
    dot.verify()
    assert dot.result.type == c.type
    bad_b, = args(TileType([32, "BLOCK_N"], f16))
    with pytest.raises(VerifyException, match="contracts lhs axis of size BLOCK_K with rhs axis of size 32"):
        tl.DotOp(a, bad_b, c).verify()


def test_tiled_loop_binary_broadcast_mismatch():
    a, b = args(TileType([16, 64], f32), TileType([16, 32], f32))
    with pytest.raises(VerifyException, match=r"tile axis 1 does not broadcast \(64 vs 32\)"):
        tl.BinaryOp("add", a, b)


def test_tiled_loop_function_names():
    (a,) = args(TileType([16, 64], f32))
    with pytest.raises(VerifyException, match="function must be one of exp, exp2, log"):
        tl.UnaryOp("tan", a).verify()
    with pytest.raises(VerifyException, match="function must be one of sum, max, min"):
        tl.ReduceOp("mean", a).verify()


def test_tiled_loop_kernel_strategy():
    kernel = tl.KernelOp("k", grid=[1], program_ids=["pid"], strategy="tile3d", tile_params=[], num_inputs=0,
                         arg_types=[])
    with pytest.raises(VerifyException, match=r"strategy must be one of tile2d, row_strip, skinny_m(, \w+)*, got 'tile3d'"):
        kernel.verify()


def test_memory_staged_builders():
    kernel = ms.KernelOp("k", grid=[8, 1], program_ids=["pid_m", "pid_n"],
                         constants={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3,
                         num_inputs=2, strategy="tile2d",
                         arg_types=[BufferType("global", [512, 32], f16), BufferType("global", [32, 64], f16),
                                    BufferType("global", [512, 64], f16)])
    x, w, out = kernel.body.block.args
    acc = ms.AccumulatorOp(TileType([64, 64], f32))
    a = ms.StageOp(x, ["64*pid_m", 0], [False, False], 32, 3, BufferType("shared", [64, 32], f16))
    b = ms.StageOp(w, [0, "64*pid_n"], [False, False], 32, 3, BufferType("shared", [32, 64], f16))
    dot = ms.DotOp(a.result, b.result, acc.result)
    bias = ms.LoadOp(x, ["64*pid_m", 0], [False, True], 64, TileType([64, 32], f16))
    store = ms.StoreOp(dot.result, out, ["64*pid_m", "64*pid_n"], [True, False], 32)
    kernel.body.block.add_ops([acc, a, b, dot, bias, store])
    kernel.verify()
    assert kernel.constant_values == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}
    assert kernel.inputs == (x, w) and kernel.outputs == (out,)
    assert bias.masked_axes == (False, True) and bias.wide_index
    assert store.masked_axes == (True, False) and not store.wide_index
    assert dot.result.type == TileType([64, 64], f32)
    module = builtin.ModuleOp([kernel])
    assert str(parse(str(module))) == str(module)
    assert str(parse(generic(module))) == str(module)


def test_memory_staged_verifiers():
    x, acc = args(BufferType("global", [512, 32], f16), TileType([64, 64], f32))
    with pytest.raises(VerifyException, match="reads operands from shared memory or registers"):
        ms.DotOp(x, x, acc).verify()
    with pytest.raises(VerifyException, match="index_bits must be 32 or 64, got 48"):
        ms.LoadOp(x, [0, 0], [False, False], 48, TileType([64, 32], f16)).verify()
    with pytest.raises(VerifyException, match="depth must be >= 1"):
        ms.StageOp(x, [0, 0], [False, False], 32, 0, BufferType("shared", [64, 32], f16)).verify()
    load = ms.LoadOp(x, [0, 0], [False, True], 32, TileType([64, 32], f16))
    load.mark_uneven([True, False])
    with pytest.raises(VerifyException, match="mask_if_uneven marks an axis that has no mask"):
        load.verify()
    load.mark_uneven([False, True, False])
    with pytest.raises(VerifyException, match="needs one mask_if_uneven flag per buffer dim"):
        load.verify()
    kernel = ms.KernelOp("k", grid=[1], program_ids=["pid"], constants={"BLOCK_M": 48}, num_warps=4, num_stages=1,
                         num_inputs=0, strategy="tile2d", arg_types=[])
    with pytest.raises(VerifyException, match="tile size BLOCK_M = 48 must be a power of two"):
        kernel.verify()


def _ms_kernel(constants=None, strategy="tile2d", arg_types=()):
    return ms.KernelOp("k", grid=[1], program_ids=["pid"], constants=constants or {}, num_warps=4, num_stages=1,
                       num_inputs=0, strategy=strategy, arg_types=list(arg_types))


def test_memory_staged_kernel_knows_the_tiling_strategies():
    assert {"tile2d", "row_strip", "skinny_m"} <= set(ms.STRATEGIES)
    assert tuple(ms.STRATEGIES) == tuple(tl.KernelOp.STRATEGIES)


@pytest.mark.parametrize("strategy", ms.STRATEGIES)
def test_memory_staged_kernel_strategies(strategy):
    _ms_kernel(strategy=strategy).verify()


@pytest.mark.parametrize("strategy", ["tile3d", "", "Tile2d"])
def test_memory_staged_kernel_rejects_unknown_strategy(strategy):
    with pytest.raises(VerifyException, match=rf"strategy must be one of tile2d, row_strip, skinny_m(, \w+)*, got '{strategy}'"):
        _ms_kernel(strategy=strategy).verify()


@pytest.mark.parametrize(
    ("constant", "shown"),
    [(StringAttr("x"), '"x"'), (FloatAttr(64.0, f64), "6.400000e+01 : f64"), (ArrayAttr([IntegerAttr(64, i64)]), "[64 : i64]")],
)
def test_memory_staged_kernel_rejects_non_integer_constants(constant, shown):
    """Regression: these used to raise AttributeError / TypeError from constant_values instead of a VerifyException."""
    kernel = _ms_kernel()
    kernel.properties["constants"] = DictionaryAttr({"BLOCK_M": constant})
    with pytest.raises(VerifyException, match=re.escape(f"'memory_staged.kernel' constant BLOCK_M must be an integer, got {shown}")):
        kernel.verify()


@pytest.mark.parametrize("element", [f16, bf16, i32])
def test_memory_staged_accumulator_is_f32(element):
    ms.AccumulatorOp(TileType([64, 64], f32)).verify()
    with pytest.raises(VerifyException, match=f"'memory_staged.accumulator' accumulates in f32, got {element}"):
        ms.AccumulatorOp(TileType([64, 64], element)).verify()


@pytest.mark.parametrize(
    ("lhs", "rhs", "ranks"),
    [([2, 64, 32], [32, 64], "3 and 2"), ([64, 32], [2, 32, 64], "2 and 3"), ([64], [64, 64], "1 and 2")],
)
def test_memory_staged_dot_needs_2d_operands(lhs, rhs, ranks):
    """Regression: a rank-3 shared buffer made check_dot fail with "too many values to unpack"."""
    a, b, acc = args(BufferType("shared", lhs, f16), BufferType("shared", rhs, f16), TileType([64, 64], f32))
    with pytest.raises(VerifyException, match=f"'memory_staged.dot' operands must be 2-D, got ranks {ranks}"):
        ms.DotOp(a, b, acc).verify()


def test_memory_staged_dot_mixes_shared_and_registers():
    a, b, acc = args(BufferType("shared", [64, 32], f16), TileType([32, 64], f16), TileType([64, 64], f32))
    ms.DotOp(a, b, acc).verify()


# ---------------------------------------------------------------------------------------------------------------------
# tiled_loop.full prints floats the MLIR lexer reads back
# ---------------------------------------------------------------------------------------------------------------------


def _full_kernel(value: float) -> builtin.ModuleOp:
    kernel = tl.KernelOp("k", grid=[1], program_ids=["pid"], strategy="row_strip", tile_params=[], num_inputs=0,
                         arg_types=[tensor("M", 64)])
    kernel.body.block.add_op(tl.FullOp(value, TileType([1, 1], f32)))
    return builtin.ModuleOp([kernel])


def _full_value(module: builtin.ModuleOp) -> float:
    (op,) = [o for o in module.walk() if isinstance(o, tl.FullOp)]
    return op.number


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-05, "1.0e-05"),
        (1e20, "1.0e+20"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (3, "3.0"),
        (0.1, "0.1"),
        (-2.5e-300, "-2.5e-300"),
    ],
)
def test_full_prints_mlir_float_literals(value, text):
    """Regression: tiled_loop.full printed repr() (`1e-05`, `1e+20`), which MLIR's lexer does not read back."""
    module = _full_kernel(value)
    printed = str(module)
    assert f"tiled_loop.full {text} : " in printed
    again = parse(printed)
    again.verify()
    assert str(again) == printed
    assert str(parse(generic(again))) == printed


@settings(max_examples=200, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_full_value_round_trips_exactly(value):
    module = _full_kernel(value)
    back = _full_value(parse(str(module)))
    if math.isnan(value):
        assert math.isnan(back)
    else:
        assert back == value and math.copysign(1.0, back) == math.copysign(1.0, value)
    assert _full_value(parse(generic(module))) == back or math.isnan(back)


# ---------------------------------------------------------------------------------------------------------------------
# Parser round trips
# ---------------------------------------------------------------------------------------------------------------------

TENSOR_OP_IR = """
func.func @f(%x : !tensor_op.tensor<[B*S, 64], f16>, %w : !tensor_op.tensor<[64, 32], f16>, %b : !tensor_op.tensor<[32], f16>, %g : !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16> {
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 64], f16>, !tensor_op.tensor<[64, 32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
  %1 = tensor_op.add %0, %b : (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
  %2 = tensor_op.gelu %1 {approximate = "tanh"} : !tensor_op.tensor<[B*S, 32], f16>
  %3 = tensor_op.layernorm %2 weight %g bias %b {eps = 1.0e-05 : f64} : !tensor_op.tensor<[B*S, 32], f16> weight !tensor_op.tensor<[32], f16> bias !tensor_op.tensor<[32], f16> -> !tensor_op.tensor<[B*S, 32], f16>
  %4 = tensor_op.rmsnorm %3 {eps = 1.0e-05 : f64} : !tensor_op.tensor<[B*S, 32], f16> -> !tensor_op.tensor<[B*S, 32], f16>
  %lb = tensor_op.layernorm %4 bias %b {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 32], f16> bias !tensor_op.tensor<[32], f16> -> !tensor_op.tensor<[B*S, 32], f16>
  %rw = tensor_op.rmsnorm %lb weight %g {eps = 1.0e-06 : f64} : !tensor_op.tensor<[B*S, 32], f16> weight !tensor_op.tensor<[32], f16> -> !tensor_op.tensor<[B*S, 32], f16>
  %5 = tensor_op.reduce_sum %4 {axis = -1 : i64} : !tensor_op.tensor<[B*S, 32], f16> -> !tensor_op.tensor<[B*S], f16>
  %6 = tensor_op.fused %4, %b : (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16> {
  ^bb0(%a : !tensor_op.tensor<[B*S, 32], f16>, %c : !tensor_op.tensor<[32], f16>):
    %7 = tensor_op.add %a, %c : (!tensor_op.tensor<[B*S, 32], f16>, !tensor_op.tensor<[32], f16>) -> !tensor_op.tensor<[B*S, 32], f16>
    tensor_op.yield %7 : !tensor_op.tensor<[B*S, 32], f16>
  }
  func.return %6 : !tensor_op.tensor<[B*S, 32], f16>
}
"""

TILED_LOOP_IR = """
tiled_loop.kernel @k attributes {grid = #tiled_loop.exprs<[cdiv(M, BLOCK_M), cdiv(64, BLOCK_N)]>, program_ids = ["pid_m", "pid_n"], strategy = "tile2d", tile_params = ["BLOCK_M", "BLOCK_N", "BLOCK_K"], num_inputs = 2 : i64, group_size = "GROUP_M"} {
^bb0(%x: !tensor_op.tensor<[M, 32], f16>, %w: !tensor_op.tensor<[32, 64], f16>, %out: !tensor_op.tensor<[M, 64], f16>):
  %zero = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %acc = tiled_loop.for "k" = <[0, 32, BLOCK_K]> iter_args(%zero) : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) {
  ^bb1(%acc_in: !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>):
    %a = tiled_loop.load %x <[pid_m * BLOCK_M, k]> : !tensor_op.tensor<[M, 32], f16> -> !tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>
    %b = tiled_loop.load %w <[k, pid_n * BLOCK_N]> : !tensor_op.tensor<[32, 64], f16> -> !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>
    %next = tiled_loop.dot %a, %b, %acc_in : (!tiled_loop.tile<[BLOCK_M, BLOCK_K], f16>, !tiled_loop.tile<[BLOCK_K, BLOCK_N], f16>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
    tiled_loop.yield %next : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  }
  %e = tiled_loop.unary "exp" %acc : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %m = tiled_loop.full -inf : !tiled_loop.tile<[1, 1], f32>
  %y = tiled_loop.binary "max" %e, %m : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %v = tiled_loop.in_bounds <[0, pid_n * BLOCK_N]> within <[M, 64]> : !tiled_loop.tile<[1, BLOCK_N], i1>
  %s = tiled_loop.select %v, %y, %m : (!tiled_loop.tile<[1, BLOCK_N], i1>, !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[1, 1], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>
  %r = tiled_loop.reduce "sum" %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  %st = tiled_loop.transpose %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_N, BLOCK_M], f32>
  %zero_gram = tiled_loop.full 0.0 : !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32>
  %gram = tiled_loop.dot %s, %st, %zero_gram : (!tiled_loop.tile<[BLOCK_M, BLOCK_N], f32>, !tiled_loop.tile<[BLOCK_N, BLOCK_M], f32>, !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32>) -> !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32>
  %sumsq = tiled_loop.diagonal %gram : !tiled_loop.tile<[BLOCK_M, BLOCK_M], f32> -> !tiled_loop.tile<[BLOCK_M, 1], f32>
  %c = tiled_loop.cast %s : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f32> -> !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16>
  tiled_loop.store %c, %out <[pid_m * BLOCK_M, pid_n * BLOCK_N]> : !tiled_loop.tile<[BLOCK_M, BLOCK_N], f16> -> !tensor_op.tensor<[M, 64], f16>
}
"""

MEMORY_STAGED_IR = """
memory_staged.kernel @k attributes {grid = #tiled_loop.exprs<[8, 1]>, program_ids = ["pid_m", "pid_n"], constants = {BLOCK_M = 64 : i64, BLOCK_N = 64 : i64, BLOCK_K = 32 : i64}, num_warps = 4 : i64, num_stages = 3 : i64, num_inputs = 2 : i64, strategy = "tile2d"} {
^bb0(%x: !memory_staged.buffer<global, [512, 32], f16>, %w: !memory_staged.buffer<global, [32, 64], f16>, %out: !memory_staged.buffer<global, [512, 64], f16>):
  %acc0 = memory_staged.accumulator : !tiled_loop.tile<[64, 64], f32>
  %acc = tiled_loop.for "k" = <[0, 32, 32]> iter_args(%acc0) : (!tiled_loop.tile<[64, 64], f32>) -> (!tiled_loop.tile<[64, 64], f32>) {
  ^bb1(%acc_in: !tiled_loop.tile<[64, 64], f32>):
    %a = memory_staged.stage %x <[64*pid_m, k]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !memory_staged.buffer<shared, [64, 32], f16>
    %b = memory_staged.stage %w <[k, 64*pid_n]> {depth = 3 : i64, mask = [false, false], index_bits = 32 : i64} : !memory_staged.buffer<global, [32, 64], f16> -> !memory_staged.buffer<shared, [32, 64], f16>
    %next = memory_staged.dot %a, %b, %acc_in : (!memory_staged.buffer<shared, [64, 32], f16>, !memory_staged.buffer<shared, [32, 64], f16>, !tiled_loop.tile<[64, 64], f32>) -> !tiled_loop.tile<[64, 64], f32>
    tiled_loop.yield %next : !tiled_loop.tile<[64, 64], f32>
  }
  %bias = memory_staged.load %x <[64*pid_m, 0]> {mask = [false, true], index_bits = 64 : i64} : !memory_staged.buffer<global, [512, 32], f16> -> !tiled_loop.tile<[64, 32], f16>
  memory_staged.store %acc, %out <[64*pid_m, 64*pid_n]> {mask = [true, false], index_bits = 32 : i64} : !tiled_loop.tile<[64, 64], f32> -> !memory_staged.buffer<global, [512, 64], f16>
}
"""


@pytest.mark.parametrize("text", [TENSOR_OP_IR, TILED_LOOP_IR, MEMORY_STAGED_IR], ids=["tensor_op", "tiled_loop", "memory_staged"])
def test_parse_print_round_trip(text):
    module = parse(text)
    module.verify()
    printed = str(module)
    again = parse(printed)
    again.verify()
    assert str(again) == printed
    assert again.is_structurally_equivalent(module)
    from_generic = parse(generic(module))
    assert str(from_generic) == printed
    assert from_generic.is_structurally_equivalent(module)


def test_amk_dialects_registry():
    assert set(AMK_DIALECTS) == {"tensor_op", "tiled_loop", "memory_staged"}
    assert AMK_DIALECTS["tensor_op"]() is to.TensorOpDialect
    assert AMK_DIALECTS["tiled_loop"]() is tl.TiledLoopDialect
    assert AMK_DIALECTS["memory_staged"]() is ms.MemoryStagedDialect
    names = {op.name for op in to.TensorOpDialect.operations}
    assert {"tensor_op.matmul", "tensor_op.fused", "tensor_op.yield", "tensor_op.layernorm"} <= names


# ---------------------------------------------------------------------------------------------------------------------
# Property: symbolic dims print and re-parse to the same type
# ---------------------------------------------------------------------------------------------------------------------

SYMBOLS = ["B", "S", "M", "N", "K", "BLOCK_M", "pid_m"]


def _combine(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda ab: f"({ab[0]}) * ({ab[1]})"),
        pair.map(lambda ab: f"({ab[0]}) + ({ab[1]})"),
        st.tuples(children, st.sampled_from([1, 2, 16, 64, 128])).map(lambda ab: f"cdiv({ab[0]}, {ab[1]})"),
        st.tuples(children, st.sampled_from(SYMBOLS)).map(lambda ab: f"cdiv({ab[0]}, {ab[1]})"),
    )


DIM_EXPRS = st.recursive(
    st.one_of(st.sampled_from(SYMBOLS), st.integers(min_value=1, max_value=8192).map(str)),
    _combine,
    max_leaves=5,
)


# Regression: the canonical text of a Dim was not always a fixed point of parse-and-print (Dim("(M+1)*(2*cdiv(N, 64))")
# was "2*(M + 1)*cdiv(N, 64)", which re-canonicalized to "(2*M + 2)*cdiv(N, 64)"), so such a type was not equal to
# itself after printing and parsing. The explicit examples pin the spellings that used to fail.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(dims=["(M+1)*(2*cdiv(N, 64))"])
@example(dims=["cdiv(2*(N+1), 64)*(M+1)*2", "(B*S)*2"])
@given(dims=st.lists(DIM_EXPRS, min_size=0, max_size=3))
def test_random_dims_round_trip_in_tensor_type(dims):
    t = TensorType(dims, f32)
    assert t.dims == tuple(Dim(d) for d in dims)
    printed = str(t)
    parsed = Parser(CTX, printed).parse_type()
    assert parsed == t
    assert str(parsed) == printed
    for dim in t.dims:
        assert Dim(dim.text).text == dim.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dims=st.lists(DIM_EXPRS, min_size=0, max_size=3))
def test_random_dims_reparse_to_equal_values_and_settle(dims):
    """Re-parsed dims are provably equal to the originals, and a second trip changes nothing."""
    t = TensorType(dims, f32)
    assert t.rank == len(dims)
    parsed = Parser(CTX, str(t)).parse_type()
    assert isinstance(parsed, TensorType) and parsed.element_type == f32
    for original, reparsed in zip(t.dims, parsed.dims, strict=True):
        assert provably_equal(original, reparsed)
    again = Parser(CTX, str(parsed)).parse_type()
    assert again == parsed
    assert str(again) == str(parsed)


def test_transpose_swaps_the_axes_and_keeps_the_element_type():
    block = Block(arg_types=[TileType(["BLOCK_M", "BLOCK_K"], bf16)])
    transposed = tl.TransposeOp(block.args[0])
    assert transposed.result.type == TileType(["BLOCK_K", "BLOCK_M"], bf16)
    wrong = tl.TransposeOp.create(operands=[block.args[0]], result_types=[TileType(["BLOCK_M", "BLOCK_K"], bf16)])
    block.add_ops([transposed, wrong])
    with pytest.raises(VerifyException, match=r"result tile is \[BLOCK_M, BLOCK_K\], expected \[BLOCK_K, BLOCK_M\]"):
        wrong.verify()


def test_diagonal_needs_a_square_tile():
    block = Block(arg_types=[TileType(["BLOCK_M", "BLOCK_M"], f32), TileType(["BLOCK_M", "BLOCK_N"], f32)])
    diagonal = tl.DiagonalOp(block.args[0])
    assert diagonal.result.type == TileType(["BLOCK_M", 1], f32)
    not_square = tl.DiagonalOp.create(operands=[block.args[1]], result_types=[TileType(["BLOCK_M", 1], f32)])
    block.add_ops([diagonal, not_square])
    diagonal.verify()
    with pytest.raises(VerifyException, match=r"'tiled_loop.diagonal' needs a square tile, got \[BLOCK_M, BLOCK_N\]"):
        not_square.verify()


@pytest.mark.parametrize("dim", ["3/2", "M/2", "0", "2*M/3"])
def test_a_dimension_is_a_whole_number_of_at_least_one(dim):
    """``3/2`` was accepted: a launcher sized the buffer by its floor while the kernel wrote the rows it was given."""
    with pytest.raises(VerifyException, match="is not a whole number of at least 1"):
        TensorType([dim, 4], f32)


@pytest.mark.parametrize("dim", ["floor(M/2)", "cdiv(M, 2)", "M - 1", "B*S"])
def test_whole_number_dimensions_are_accepted(dim):
    assert TensorType([dim, 4], f32).rank == 2
