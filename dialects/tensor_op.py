"""The ``tensor_op`` dialect: whole-tensor operations with symbolic shapes.

This is the level at which users' op chains and PyTorch graphs enter amk. Values are ``!tensor_op.tensor`` whose
dimensions are sympy expressions, so one module serves every batch size::

    func.func @mlp(%x : !tensor_op.tensor<[B*S, 4096], f16>, %w : !tensor_op.tensor<[4096, 4096], f16>)
        -> !tensor_op.tensor<[B*S, 4096], f16> {
      %y = tensor_op.matmul %x, %w : (!tensor_op.tensor<[B*S, 4096], f16>, !tensor_op.tensor<[4096, 4096], f16>)
          -> !tensor_op.tensor<[B*S, 4096], f16>
      %z = tensor_op.gelu %y {approximate = "tanh"} : !tensor_op.tensor<[B*S, 4096], f16>
      func.return %z : !tensor_op.tensor<[B*S, 4096], f16>
    }

Every op infers its result type from its operands (:meth:`TensorOp.infer_result_type`); the verifier checks the
declared type against it, so a provable mismatch (a matmul contracting 4096 with 2048) is reported with the op and
the dimension at fault.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    BoolAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TypeAttribute,
    UnitAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from amk.dialects.syntax import SymbolicShapedType
from amk.symbolic import Dim, provably_different, provably_equal

# --------------------------------------------------------------------------------------------------------------------
# The tensor type
# --------------------------------------------------------------------------------------------------------------------


@irdl_attr_definition
class TensorType(SymbolicShapedType, ParametrizedAttribute, TypeAttribute):
    """A tensor with symbolic dimensions: ``!tensor_op.tensor<[B*S, 4096], f16>``."""

    name = "tensor_op.tensor"

    shape: ArrayAttr[StringAttr]
    element_type: Attribute

    def __init__(self, dims: Sequence[Dim | int | str], element_type: Attribute):
        super().__init__(self.shape_attr(dims), element_type)


def tensor_type(value: SSAValue) -> TensorType:
    if not isinstance(value.type, TensorType):
        raise VerifyException(f"expected a !tensor_op.tensor value, got {value.type}")
    return value.type


def broadcast_dims(lhs: Sequence[Dim], rhs: Sequence[Dim], context: str) -> tuple[Dim, ...]:
    """Numpy-style broadcasting of two symbolic shapes; a provable mismatch is a VerifyException."""
    rank = max(len(lhs), len(rhs))
    lhs = (Dim(1),) * (rank - len(lhs)) + tuple(lhs)
    rhs = (Dim(1),) * (rank - len(rhs)) + tuple(rhs)
    out = []
    for axis, (a, b) in enumerate(zip(lhs, rhs)):
        if a == Dim(1):
            out.append(b)
        elif b == Dim(1) or provably_equal(a, b):
            out.append(a)
        else:
            raise VerifyException(f"{context}: dimension {axis} does not broadcast ({a} vs {b})")
    return tuple(out)


def normalize_axis(axis: int, rank: int, context: str) -> int:
    if not -rank <= axis < rank:
        raise VerifyException(f"{context}: axis {axis} is out of range for a rank-{rank} tensor")
    return axis % rank


class TensorOp(IRDLOperation):
    """Base of every value-producing tensor_op op: the result type is inferred and checked by the verifier."""

    def infer_result_type(self) -> TensorType:
        raise NotImplementedError

    def verify_(self) -> None:
        for operand in self.operands:
            tensor_type(operand)
        expected = self.infer_result_type()
        actual = self.results[0].type
        if not isinstance(actual, TensorType):
            raise VerifyException(f"'{self.name}' must return a !tensor_op.tensor, got {actual}")
        if actual.element_type != expected.element_type:
            raise VerifyException(
                f"'{self.name}' result element type {actual.element_type} should be {expected.element_type}"
            )
        if actual.rank != expected.rank:
            raise VerifyException(f"'{self.name}' result rank {actual.rank} should be {expected.rank}")
        for axis, (have, want) in enumerate(zip(actual.dims, expected.dims)):
            if provably_different(have, want) or not provably_equal(have, want):
                raise VerifyException(f"'{self.name}' result dimension {axis} is {have}, inferred {want}")


# --------------------------------------------------------------------------------------------------------------------
# Matmul
# --------------------------------------------------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(TensorOp):
    """Matrix product ``lhs @ rhs`` over the last two dims of ``lhs`` and ``rhs``.

    ``lhs`` is ``[..., M, K]`` (``[..., K, M]`` with ``transpose_lhs``); ``rhs`` is ``[K, N]`` (``[N, K]`` with
    ``transpose_rhs``, the layout of an ``nn.Linear`` weight), shared by every leading index of ``lhs``, or batched
    like it, ``[..., K, N]`` with the same leading dims (``[..., N, K]`` transposed: the keys of ``q @ k^T``). The
    result is ``[..., M, N]``::

        %y = tensor_op.matmul %x, %w {transpose_rhs = true}
            : (!tensor_op.tensor<[B, 128, 64], f16>, !tensor_op.tensor<[32, 64], f16>) -> !tensor_op.tensor<[B, 128, 32], f16>
        %s = tensor_op.matmul %q, %k {transpose_rhs = true}
            : (!tensor_op.tensor<[B, H, S, 64], f16>, !tensor_op.tensor<[B, H, S, 64], f16>) -> !tensor_op.tensor<[B, H, S, S], f16>
    """

    name = "tensor_op.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_lhs = opt_prop_def(BoolAttr)
    transpose_rhs = opt_prop_def(BoolAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($output)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, *, transpose_lhs=False, transpose_rhs=False,
                 result_type: TensorType | None = None):
        properties = {}
        if transpose_lhs:
            properties["transpose_lhs"] = BoolAttr.from_bool(True)
        if transpose_rhs:
            properties["transpose_rhs"] = BoolAttr.from_bool(True)
        if result_type is None:
            result_type = matmul_type(tensor_type(lhs), tensor_type(rhs), transpose_lhs, transpose_rhs, self.name)
        super().__init__(operands=[lhs, rhs], properties=properties, result_types=[result_type])

    @property
    def lhs_transposed(self) -> bool:
        return bool(self.transpose_lhs and self.transpose_lhs.value.data)

    @property
    def rhs_transposed(self) -> bool:
        return bool(self.transpose_rhs and self.transpose_rhs.value.data)

    @property
    def batched(self) -> bool:
        """Whether ``rhs`` has leading (batch) dims, one matrix per leading index of ``lhs``."""
        return tensor_type(self.rhs).rank > 2

    def infer_result_type(self) -> TensorType:
        return matmul_type(tensor_type(self.lhs), tensor_type(self.rhs), self.lhs_transposed, self.rhs_transposed,
                           self.name)


@irdl_op_definition
class LinearOp(TensorOp):
    """``activation(input @ weight^T + bias)`` (``input @ weight`` for a ``[K, N]`` weight), ``nn.Linear``'s product
    with its bias and an optional activation (``"relu"``, or ``"gelu_tanh"``: GELU's tanh form), as one call of the
    vendor library with the bias and the activation in the GEMM's epilogue (cuBLASLt's RELU_BIAS and GELU_BIAS)::

        %h = tensor_op.linear %x, %w, %b {activation = "gelu_tanh"} : (!tensor_op.tensor<[M, 1024], f16>,
            !tensor_op.tensor<[4096, 1024], f16>, !tensor_op.tensor<[4096], f16>) -> !tensor_op.tensor<[M, 4096], f16>

    ``input`` is ``[..., K]``, ``weight`` ``[N, K]`` (``weight_layout = "nk"``, the default: ``nn.Linear``'s) or
    ``[K, N]`` (``weight_layout = "kn"``: Hugging Face's ``Conv1D``, ``torch.addmm``'s ``mat2``; the product is then
    ``input @ weight``), ``bias`` ``[N]``; the result ``[..., N]``. No kernel computes it: ``amk-vendor-epilogues``
    makes it from a matmul, its bias and activation in the program whose matmuls run in the vendor library, and the
    runtime calls PyTorch."""

    name = "tensor_op.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    activation = opt_prop_def(StringAttr)
    weight_layout = opt_prop_def(StringAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = ("$input `,` $weight `,` $bias attr-dict `:` "
                       "`(` type($input) `,` type($weight) `,` type($bias) `)` `->` type($output)")

    ACTIVATIONS: ClassVar[tuple[str, ...]] = ("relu", "gelu_tanh")
    WEIGHT_LAYOUTS: ClassVar[tuple[str, ...]] = ("nk", "kn")

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue, activation: str | None = None,
                 weight_layout: str = "nk"):
        properties = {} if activation is None else {"activation": StringAttr(activation)}
        if weight_layout != "nk":
            properties["weight_layout"] = StringAttr(weight_layout)
        super().__init__(operands=[input, weight, bias], properties=properties, result_types=[self.linear_type(
            *(tensor_type(v) for v in (input, weight, bias)), weight_layout == "kn")])

    @property
    def activation_name(self) -> str | None:
        return None if self.activation is None else self.activation.data

    @property
    def weight_kn(self) -> bool:
        """Whether the weight is ``[K, N]`` (``weight_layout = "kn"``), not ``nn.Linear``'s ``[N, K]``."""
        return self.weight_layout is not None and self.weight_layout.data == "kn"

    def infer_result_type(self) -> TensorType:
        return self.linear_type(*(tensor_type(v) for v in (self.input, self.weight, self.bias)), self.weight_kn)

    def linear_type(self, input: TensorType, weight: TensorType, bias: TensorType, weight_kn: bool) -> TensorType:
        product = matmul_type(input, weight, False, not weight_kn, self.name)
        if weight.rank != 2 or bias.rank != 1:
            raise VerifyException(f"'{self.name}' takes a weight of rank 2 and a bias of rank 1, got ranks "
                                  f"{weight.rank} and {bias.rank}")
        if bias.element_type != input.element_type:
            raise VerifyException(f"'{self.name}' bias is {bias.element_type}, the input {input.element_type}")
        outputs, which = (weight.dims[1], "columns") if weight_kn else (weight.dims[0], "rows")
        if not provably_equal(bias.dims[0], outputs):
            raise VerifyException(f"'{self.name}' bias has {bias.dims[0]} elements, the weight {outputs} {which}")
        return product

    def verify_(self) -> None:
        if self.weight_layout is not None and self.weight_layout.data not in self.WEIGHT_LAYOUTS:
            raise VerifyException(f"'{self.name}' weight_layout must be one of {', '.join(self.WEIGHT_LAYOUTS)}, "
                                  f"got {self.weight_layout.data!r}")
        super().verify_()
        if self.activation is not None and self.activation.data not in self.ACTIVATIONS:
            raise VerifyException(f"'{self.name}' activation must be one of {', '.join(self.ACTIVATIONS)}, "
                                  f"got {self.activation.data!r}")


def bias_add(op: Operation) -> tuple[AddOp, SSAValue] | None:
    """The add of a bias vector that is the one reader of ``op``, and that bias, where ``op`` is a product
    ``F.linear`` computes (``x @ w.t()``, ``w`` of rank 2: ``nn.Linear``'s) or ``torch.addmm`` (``x @ w``: Hugging
    Face's ``Conv1D``); None otherwise. (:class:`LinearOp` is that product and sum as one op.)"""
    if not isinstance(op, MatmulOp) or op.lhs_transposed or tensor_type(op.rhs).rank != 2:
        return None
    uses = list(op.output.uses)
    if len(uses) != 1 or not isinstance(uses[0].operation, AddOp):
        return None
    add = uses[0].operation
    others = [operand for operand in add.operands if operand is not op.output]
    width = tensor_type(op.output).dims[-1]
    if len(others) != 1 or tensor_type(others[0]).dims != (width,) \
            or tensor_type(others[0]).element_type != tensor_type(op.output).element_type:
        return None
    return add, others[0]


def matmul_type(a: TensorType, b: TensorType, transpose_lhs: bool, transpose_rhs: bool, name: str) -> TensorType:
    """Result type of a matmul; a provable mismatch is a VerifyException naming the dims."""
    if a.rank < 2:
        raise VerifyException(f"'{name}' lhs must have rank >= 2, got rank {a.rank}")
    if b.rank != 2 and b.rank != a.rank:
        raise VerifyException(f"'{name}' rhs must have rank 2 (shared) or the lhs's rank {a.rank} (batched), "
                              f"got rank {b.rank}")
    if a.element_type != b.element_type:
        raise VerifyException(f"'{name}' operands have different element types ({a.element_type} vs {b.element_type})")
    *batch, m, k = a.dims
    if transpose_lhs:
        m, k = k, m
    *rhs_batch, k2, n = b.dims
    for axis, (lhs_dim, rhs_dim) in enumerate(zip(batch, rhs_batch)):
        if not provably_equal(lhs_dim, rhs_dim):
            raise VerifyException(f"'{name}' batch dimension {axis} of lhs is {lhs_dim} but rhs has {rhs_dim}")
    if transpose_rhs:
        k2, n = n, k2
    if provably_different(k, k2):
        raise VerifyException(f"'{name}' contraction dimension of lhs is {k} but rhs has {k2}")
    return TensorType([*batch, m, n], a.element_type)


# --------------------------------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------------------------------

_BINARY_FORMAT = "$lhs `,` $rhs attr-dict `:` `(` type($lhs) `,` type($rhs) `)` `->` type($output)"
_UNARY_FORMAT = "$input attr-dict `:` type($output)"


class ElementwiseBinaryOp(TensorOp):
    """Elementwise binary op with numpy broadcasting. Subclasses set ``name``."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = _BINARY_FORMAT

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        result = self.broadcast_type(tensor_type(lhs), tensor_type(rhs), self.name)
        super().__init__(operands=[lhs, rhs], result_types=[result])

    def infer_result_type(self) -> TensorType:
        return self.broadcast_type(tensor_type(self.lhs), tensor_type(self.rhs), self.name)

    @staticmethod
    def broadcast_type(a: TensorType, b: TensorType, name: str) -> TensorType:
        if a.element_type != b.element_type:
            raise VerifyException(f"'{name}' operands have different element types ({a.element_type} vs {b.element_type})")
        return TensorType(broadcast_dims(a.dims, b.dims, f"'{name}'"), a.element_type)


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    """``lhs + rhs`` with broadcasting: ``%z = tensor_op.add %x, %b : (T, !tensor_op.tensor<[N], f16>) -> T``."""

    name = "tensor_op.add"


@irdl_op_definition
class SubOp(ElementwiseBinaryOp):
    """``lhs - rhs`` with broadcasting: ``%z = tensor_op.sub %x, %y : (T, T) -> T``."""

    name = "tensor_op.sub"


@irdl_op_definition
class MulOp(ElementwiseBinaryOp):
    """``lhs * rhs`` with broadcasting: ``%z = tensor_op.mul %x, %y : (T, T) -> T``."""

    name = "tensor_op.mul"


@irdl_op_definition
class DivOp(ElementwiseBinaryOp):
    """``lhs / rhs`` with broadcasting: ``%z = tensor_op.div %x, %y : (T, T) -> T``."""

    name = "tensor_op.div"


@irdl_op_definition
class MaximumOp(ElementwiseBinaryOp):
    """``maximum(lhs, rhs)`` with broadcasting: ``%z = tensor_op.maximum %x, %y : (T, T) -> T``."""

    name = "tensor_op.maximum"


@irdl_op_definition
class MinimumOp(ElementwiseBinaryOp):
    """``minimum(lhs, rhs)`` with broadcasting: ``%z = tensor_op.minimum %x, %y : (T, T) -> T``."""

    name = "tensor_op.minimum"


@irdl_op_definition
class WhereOp(TensorOp):
    """``where(cond, true_value, false_value)`` with broadcasting, the condition a boolean (``i1``) tensor::

        %s = tensor_op.where %causal, %scores, %neg_inf : (!tensor_op.tensor<[1, 1, T, T], i1>,
            !tensor_op.tensor<[B, H, T, T], f32>, !tensor_op.tensor<[1], f32>) -> !tensor_op.tensor<[B, H, T, T], f32>

    (``torch.where`` of two tensors, and ``masked_fill`` of a tensor value: ``x.masked_fill(mask, v)`` is
    ``where(mask, v, x)``; a number in either branch is ``tensor_op.masked_fill``'s literal, ``fill_where_false`` for
    the false one, ``torch.where(valid, x, float("-inf"))``; an op's one-element operand, such as ``%neg_inf`` here,
    is a tensor of one element.)"""

    name = "tensor_op.where"
    cond = operand_def(TensorType)
    true_value = operand_def(TensorType)
    false_value = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = ("$cond `,` $true_value `,` $false_value attr-dict `:` "
                       "`(` type($cond) `,` type($true_value) `,` type($false_value) `)` `->` type($output)")

    def __init__(self, cond: SSAValue, true_value: SSAValue, false_value: SSAValue):
        super().__init__(operands=[cond, true_value, false_value],
                         result_types=[self.where_type(*(tensor_type(v) for v in (cond, true_value, false_value)))])

    def infer_result_type(self) -> TensorType:
        return self.where_type(*(tensor_type(v) for v in (self.cond, self.true_value, self.false_value)))

    def where_type(self, cond: TensorType, true_value: TensorType, false_value: TensorType) -> TensorType:
        if cond.element_type != i1:
            raise VerifyException(f"'{self.name}' condition must be a boolean (i1) tensor, got {cond.element_type}")
        values = ElementwiseBinaryOp.broadcast_type(true_value, false_value, self.name)
        return TensorType(broadcast_dims(cond.dims, values.dims, f"'{self.name}'"), values.element_type)


def _check_number_on_floats(op: MaskedFillOp | CompareOp, verb: str) -> None:
    """The checks of an op that applies a number literal to a floating-point ``input``: masked_fill, compare."""
    element_type = tensor_type(op.input).element_type
    if not isinstance(element_type, AnyFloat):
        raise VerifyException(f"'{op.name}' {verb} floating-point tensors, got {element_type}")
    if math.isnan(op.number):
        raise VerifyException(f"'{op.name}' value must be a number, got NaN")


@irdl_op_definition
class MaskedFillOp(TensorOp):
    """``input`` with ``value`` where ``mask`` (a boolean tensor) is true, with broadcasting, PyTorch's
    ``input.masked_fill(mask, value)``; the value, a number, may be infinite (printed in hexadecimal, as MLIR prints
    such floats)::

        %s = tensor_op.masked_fill %scores, %causal {value = 0xfff0000000000000 : f64} : (
            !tensor_op.tensor<[B, H, T, T], f32>, !tensor_op.tensor<[1, 1, T, T], i1>) -> !tensor_op.tensor<[B, H, T, T], f32>

    ``fill_where_false`` fills where the mask is false instead: ``torch.where(keep, x, value)``. ``tensor_op.where``
    with the number as a one-element operand computes the same; a literal lets passes see it (a ``-inf`` fill before a
    softmax keeps the scores' scale foldable, ``amk-fold-exponent-scales``). The input is a
    floating-point tensor; the kernels select in fp32 and round at the store, so a value past the element type's
    range is its infinity (the amk.compile front end rounds the number to the result's dtype first, as PyTorch
    fills it)."""

    name = "tensor_op.masked_fill"
    input = operand_def(TensorType)
    mask = operand_def(TensorType)
    value = prop_def(FloatAttr)
    fill_where_false = opt_prop_def(UnitAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input `,` $mask attr-dict `:` `(` type($input) `,` type($mask) `)` `->` type($output)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, input: SSAValue, mask: SSAValue, value: float, fill_where_false: bool = False):
        properties = {"value": FloatAttr(float(value), f64)}
        if fill_where_false:
            properties["fill_where_false"] = UnitAttr()
        super().__init__(operands=[input, mask], properties=properties,
                         result_types=[self.filled_type(tensor_type(input), tensor_type(mask))])

    @property
    def number(self) -> float:
        return self.value.value.data

    def infer_result_type(self) -> TensorType:
        return self.filled_type(tensor_type(self.input), tensor_type(self.mask))

    def filled_type(self, input: TensorType, mask: TensorType) -> TensorType:
        if mask.element_type != i1:
            raise VerifyException(f"'{self.name}' mask must be a boolean (i1) tensor, got {mask.element_type}")
        return TensorType(broadcast_dims(input.dims, mask.dims, f"'{self.name}'"), input.element_type)

    def verify_(self) -> None:
        super().verify_()
        _check_number_on_floats(self, "fills")


@irdl_op_definition
class CompareOp(TensorOp):
    """``input`` compared with a number, elementwise: a boolean tensor of its shape, PyTorch's ``x == 0`` (``eq``,
    ``ne``, ``lt``, ``le``, ``gt``, ``ge``), as a mask that a ``where`` or ``masked_fill`` reads::

        %keep = tensor_op.compare %bias {predicate = "eq", value = 0.000000e+00 : f64} :
            !tensor_op.tensor<[1, 1, T, T], f32> -> !tensor_op.tensor<[1, 1, T, T], i1>

    (nanoGPT's ``bias[:, :, :T, :T] == 0`` before its ``masked_fill``: the kernel then reads the buffer, not a mask
    PyTorch computed on every call.) The input is a floating-point tensor; the value a number, not NaN."""

    name = "tensor_op.compare"
    PREDICATES: ClassVar[tuple[str, ...]] = ("eq", "ne", "lt", "le", "gt", "ge")
    input = operand_def(TensorType)
    predicate = prop_def(StringAttr)
    value = prop_def(FloatAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($output)"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, input: SSAValue, predicate: str, value: float):
        super().__init__(operands=[input], properties={"predicate": StringAttr(predicate),
                                                       "value": FloatAttr(float(value), f64)},
                         result_types=[TensorType(tensor_type(input).dims, i1)])

    @property
    def number(self) -> float:
        return self.value.value.data

    def infer_result_type(self) -> TensorType:
        return TensorType(tensor_type(self.input).dims, i1)

    def verify_(self) -> None:
        super().verify_()
        if self.predicate.data not in self.PREDICATES:
            raise VerifyException(f"'{self.name}' predicate must be one of {', '.join(self.PREDICATES)}, got "
                                  f"{self.predicate.data!r}")
        _check_number_on_floats(self, "compares")


def _number_or(attribute: FloatAttr | None, default: float) -> float:
    """An optional float property's value, or its default where the op leaves it out."""
    return default if attribute is None else attribute.value.data


class ElementwiseUnaryOp(TensorOp):
    """Elementwise unary op; the result has the operand's type. Subclasses set ``name`` and their parameters."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    output = result_def(T)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _UNARY_FORMAT

    def __init__(self, input: SSAValue, **properties: Attribute):
        super().__init__(operands=[input], result_types=[input.type], properties=properties)

    def infer_result_type(self) -> TensorType:
        return tensor_type(self.input)


@irdl_op_definition
class ReluOp(ElementwiseUnaryOp):
    """``max(x, 0)``: ``%y = tensor_op.relu %x : T``."""

    name = "tensor_op.relu"


@irdl_op_definition
class GeluOp(ElementwiseUnaryOp):
    """GELU, exact (erf, the default) or ``approximate = "tanh"``: ``%y = tensor_op.gelu %x {approximate = "tanh"} : T``."""

    name = "tensor_op.gelu"
    approximate = opt_prop_def(StringAttr)

    APPROXIMATIONS: ClassVar[tuple[str, ...]] = ("none", "tanh")

    def verify_(self) -> None:
        super().verify_()
        if self.approximate is not None and self.approximate.data not in self.APPROXIMATIONS:
            raise VerifyException(
                f"'{self.name}' approximate must be one of {', '.join(self.APPROXIMATIONS)}, "
                f"got {self.approximate.data!r}"
            )

    @property
    def uses_tanh(self) -> bool:
        return self.approximate is not None and self.approximate.data == "tanh"


@irdl_op_definition
class SiluOp(ElementwiseUnaryOp):
    """``x * sigmoid(x)``: ``%y = tensor_op.silu %x : T``."""

    name = "tensor_op.silu"


@irdl_op_definition
class SigmoidOp(ElementwiseUnaryOp):
    """``1 / (1 + exp(-x))``: ``%y = tensor_op.sigmoid %x : T``."""

    name = "tensor_op.sigmoid"


@irdl_op_definition
class TanhOp(ElementwiseUnaryOp):
    """Hyperbolic tangent: ``%y = tensor_op.tanh %x : T``."""

    name = "tensor_op.tanh"


@irdl_op_definition
class ExpOp(ElementwiseUnaryOp):
    """``exp(x)``: ``%y = tensor_op.exp %x : T``."""

    name = "tensor_op.exp"


@irdl_op_definition
class AbsOp(ElementwiseUnaryOp):
    """``|x|``: ``%y = tensor_op.abs %x : T``."""

    name = "tensor_op.abs"


@irdl_op_definition
class SqrtOp(ElementwiseUnaryOp):
    """``sqrt(x)``: ``%y = tensor_op.sqrt %x : T``."""

    name = "tensor_op.sqrt"


@irdl_op_definition
class RsqrtOp(ElementwiseUnaryOp):
    """``1 / sqrt(x)``: ``%y = tensor_op.rsqrt %x : T``."""

    name = "tensor_op.rsqrt"


@irdl_op_definition
class LogOp(ElementwiseUnaryOp):
    """``log(x)``, the natural logarithm: ``%y = tensor_op.log %x : T``."""

    name = "tensor_op.log"


@irdl_op_definition
class ErfOp(ElementwiseUnaryOp):
    """``erf(x)``, the error function: ``%y = tensor_op.erf %x : T``."""

    name = "tensor_op.erf"


@irdl_op_definition
class MishOp(ElementwiseUnaryOp):
    """``x * tanh(softplus(x))``: ``%y = tensor_op.mish %x : T``."""

    name = "tensor_op.mish"


@irdl_op_definition
class SoftplusOp(ElementwiseUnaryOp):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold`` (defaults 1 and 20, as
    ``nn.Softplus``): ``%y = tensor_op.softplus %x {beta = 2.000000e+00 : f64, threshold = 1.000000e+01 : f64} : T``."""

    name = "tensor_op.softplus"
    beta = opt_prop_def(FloatAttr)
    threshold = opt_prop_def(FloatAttr)

    @property
    def beta_value(self) -> float:
        return _number_or(self.beta, 1.0)

    @property
    def threshold_value(self) -> float:
        return _number_or(self.threshold, 20.0)


@irdl_op_definition
class HardsigmoidOp(ElementwiseUnaryOp):
    """``min(max(x + 3, 0), 6) / 6``: ``%y = tensor_op.hardsigmoid %x : T``."""

    name = "tensor_op.hardsigmoid"


@irdl_op_definition
class HardswishOp(ElementwiseUnaryOp):
    """``x * min(max(x + 3, 0), 6) / 6`` (MobileNetV3's activation): ``%y = tensor_op.hardswish %x : T``."""

    name = "tensor_op.hardswish"


@irdl_op_definition
class RotateHalfOp(ElementwiseUnaryOp):
    """The last dim's halves swapped, the one moved first negated: ``cat(-x[..., D/2:], x[..., :D/2])`` for a last
    dim of ``D`` (rotary position embeddings' ``rotate_half``, as Llama and its relatives write it):
    ``%y = tensor_op.rotate_half %x : T``. ``D`` is a known even number. With ``group = G`` the last dim is groups of
    ``G`` columns side by side (attention heads not yet split off the projection that made them), each rotated so:
    ``%y = tensor_op.rotate_half %x {group = 128 : i64} : T``. A kernel computes it by reading ``x`` from memory at the
    rotated columns where ``x`` is one of its inputs, or in registers, from a tile that spans whole groups."""

    name = "tensor_op.rotate_half"
    group = opt_prop_def(IntegerAttr[IntegerType])

    def __init__(self, input: SSAValue, group: int | None = None):
        super().__init__(input, **({} if group is None else {"group": IntegerAttr(group, i64)}))

    @property
    def group_size(self) -> int:
        """The columns of one rotated group: ``group``, or the whole last dim."""
        return self.group.value.data if self.group is not None else tensor_type(self.input).dims[-1].value

    @staticmethod
    def shape_problem(dims: Sequence[Dim], group: int | None = None) -> str | None:
        """Why a tensor of shape ``dims`` has no rotate_half over groups of ``group`` columns (the whole last dim by
        default), or None."""
        shape = ", ".join(map(str, dims))
        if not dims or not dims[-1].is_static or dims[-1].value % 2:
            return f"swaps the halves of the last dim, which must be a known even number; got [{shape}]"
        if group is not None and (group <= 0 or group % 2 or dims[-1].value % group):
            return f"rotates groups of {group} columns, which must be an even number dividing the last dim; got [{shape}]"
        return None

    def verify_(self) -> None:
        super().verify_()
        problem = self.shape_problem(tensor_type(self.input).dims, None if self.group is None else self.group.value.data)
        if problem:
            raise VerifyException(f"'{self.name}' {problem}")


@irdl_op_definition
class RepeatColumnsOp(TensorOp):
    """The last dim repeated ``times`` times side by side, ``x.repeat(1, ..., times)``: a table of ``D`` columns read
    by every one of ``times`` groups of ``D`` columns (rotary embeddings' ``cos [B, S, D]`` over the heads of a
    projection's output ``[B, S, H * D]``)::

        %c = tensor_op.repeat_columns %cos {times = 32 : i64} : !tensor_op.tensor<[B, S, 128], bf16> -> !tensor_op.tensor<[B, S, 4096], bf16>

    A kernel reads ``x`` at column ``c % D``, so ``x`` is one of its inputs."""

    name = "tensor_op.repeat_columns"
    input = operand_def(TensorType)
    times = prop_def(IntegerAttr[IntegerType])
    output = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

    def __init__(self, input: SSAValue, times: int):
        source = tensor_type(input)
        super().__init__(operands=[input], properties={"times": IntegerAttr(times, i64)},
                         result_types=[self.repeated_type(source, times)])

    @staticmethod
    def repeated_type(source: TensorType, times: int) -> TensorType:
        *lead, last = source.dims
        return TensorType([*lead, Dim(last.expr * times)], source.element_type)

    @property
    def period(self) -> int:
        """The columns of the table repeated (its last dim)."""
        return tensor_type(self.input).dims[-1].value

    def infer_result_type(self) -> TensorType:
        return self.repeated_type(tensor_type(self.input), self.times.value.data)

    def verify_(self) -> None:
        source = tensor_type(self.input)
        if not source.rank or not source.dims[-1].is_static:
            raise VerifyException(f"'{self.name}' repeats a last dim of known size; got [{', '.join(map(str, source.dims))}]")
        if self.times.value.data < 1:
            raise VerifyException(f"'{self.name}' times must be at least 1, got {self.times.value.data}")
        super().verify_()


@irdl_op_definition
class LeakyReluOp(ElementwiseUnaryOp):
    """``x if x >= 0 else negative_slope * x`` (default slope 0.01):
    ``%y = tensor_op.leaky_relu %x {negative_slope = 2.000000e-01 : f64} : T``."""

    name = "tensor_op.leaky_relu"
    negative_slope = opt_prop_def(FloatAttr)

    @property
    def slope(self) -> float:
        return _number_or(self.negative_slope, 0.01)


@irdl_op_definition
class ClampOp(ElementwiseUnaryOp):
    """``min(max(x, min), max)``; hardtanh is ``min = -1, max = 1``:
    ``%y = tensor_op.clamp %x {min = -1.0 : f64, max = 1.0 : f64} : T``. Either bound may be left out."""

    name = "tensor_op.clamp"
    min = opt_prop_def(FloatAttr)
    max = opt_prop_def(FloatAttr)

    def verify_(self) -> None:
        super().verify_()
        if self.min is None and self.max is None:
            raise VerifyException(f"'{self.name}' needs at least one of min and max")
        if self.min is not None and self.max is not None and self.min.value.data > self.max.value.data:
            raise VerifyException(
                f"'{self.name}' min ({self.min.value.data}) is greater than max ({self.max.value.data})"
            )


@irdl_op_definition
class ScaleOp(ElementwiseUnaryOp):
    """Multiplication by a constant: ``%y = tensor_op.scale %x {factor = 8.838835e-02 : f64} : T``."""

    name = "tensor_op.scale"
    factor = prop_def(FloatAttr)


@irdl_op_definition
class CastOp(TensorOp):
    """Element type conversion: ``%y = tensor_op.cast %x : !tensor_op.tensor<[M, N], f16> -> !tensor_op.tensor<[M, N], f32>``."""

    name = "tensor_op.cast"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

    def __init__(self, input: SSAValue, element_type: Attribute):
        source = tensor_type(input)
        super().__init__(operands=[input], result_types=[TensorType(source.dims, element_type)])

    def infer_result_type(self) -> TensorType:
        return TensorType(tensor_type(self.input).dims, self.output.type.element_type)

    def verify_(self) -> None:
        super().verify_()
        if not isinstance(self.output.type.element_type, AnyFloat):
            raise VerifyException(f"'{self.name}' casts to floating-point types only, got {self.output.type.element_type}")


# --------------------------------------------------------------------------------------------------------------------
# Reductions and normalizations
# --------------------------------------------------------------------------------------------------------------------


class AxisOp(TensorOp):
    """An op that works along one axis (negative values count from the end)."""

    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[IntegerType])
    output = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)

    @property
    def normalized_axis(self) -> int:
        return normalize_axis(self.axis.value.data, tensor_type(self.input).rank, f"'{self.name}'")


class ReductionOp(AxisOp):
    """Reduction over ``axis``; ``keepdim`` keeps the axis with size 1."""

    keepdim = opt_prop_def(BoolAttr)
    assembly_format = _UNARY_FORMAT.replace("type($output)", "type($input) `->` type($output)")

    def __init__(self, input: SSAValue, axis: int = -1, keepdim: bool = False):
        properties = {"axis": IntegerAttr(axis, i64)}
        if keepdim:
            properties["keepdim"] = BoolAttr.from_bool(True)
        result = self.reduced_type(tensor_type(input), axis, keepdim, self.name)
        super().__init__(operands=[input], properties=properties, result_types=[result])

    @property
    def keeps_dim(self) -> bool:
        return bool(self.keepdim and self.keepdim.value.data)

    def infer_result_type(self) -> TensorType:
        return self.reduced_type(tensor_type(self.input), self.axis.value.data, self.keeps_dim, self.name)

    @staticmethod
    def reduced_type(source: TensorType, axis: int, keepdim: bool, name: str) -> TensorType:
        axis = normalize_axis(axis, source.rank, f"'{name}'")
        dims = list(source.dims)
        if keepdim:
            dims[axis] = Dim(1)
        else:
            del dims[axis]
        return TensorType(dims, source.element_type)


@irdl_op_definition
class ReduceSumOp(ReductionOp):
    """Sum over an axis: ``%s = tensor_op.reduce_sum %x {axis = -1 : i64} : !tensor_op.tensor<[M, N], f32> -> !tensor_op.tensor<[M], f32>``."""

    name = "tensor_op.reduce_sum"


@irdl_op_definition
class ReduceMaxOp(ReductionOp):
    """Maximum over an axis: ``%s = tensor_op.reduce_max %x {axis = -1 : i64, keepdim = true} : T -> T1``."""

    name = "tensor_op.reduce_max"


@irdl_op_definition
class ReduceMeanOp(ReductionOp):
    """Mean over an axis: ``%s = tensor_op.reduce_mean %x {axis = 1 : i64} : T -> T1``."""

    name = "tensor_op.reduce_mean"


@irdl_op_definition
class ReduceVarOp(ReductionOp):
    """Variance over an axis, ``sum((x - mean(x))^2) / max(N - correction, 0)`` (``correction`` 1 by default,
    Bessel's; 0 the population variance), as ``torch.var`` computes it:
    ``%v = tensor_op.reduce_var %x {axis = -1 : i64, correction = 0.000000e+00 : f64} : T -> T1``."""

    name = "tensor_op.reduce_var"
    correction = opt_prop_def(FloatAttr)

    def __init__(self, input: SSAValue, axis: int = -1, keepdim: bool = False, correction: float = 1.0):
        super().__init__(input, axis, keepdim)
        if correction != 1.0:
            self.properties["correction"] = FloatAttr(float(correction), f64)

    @property
    def correction_value(self) -> float:
        return _number_or(self.correction, 1.0)


@irdl_op_definition
class LogSumExpOp(ReductionOp):
    """``log(sum(exp(x)))`` over an axis, computed stably: ``%s = tensor_op.logsumexp %x {axis = -1 : i64} : T -> T1``."""

    name = "tensor_op.logsumexp"


class RowwiseOp(AxisOp):
    """A function of each row along an axis that keeps the input's type (softmax, log-softmax)."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    output = result_def(T)
    assembly_format = _UNARY_FORMAT

    def __init__(self, input: SSAValue, axis: int = -1):
        super().__init__(operands=[input], properties={"axis": IntegerAttr(axis, i64)}, result_types=[input.type])

    def infer_result_type(self) -> TensorType:
        source = tensor_type(self.input)
        normalize_axis(self.axis.value.data, source.rank, f"'{self.name}'")  # keeps the shape; check the axis
        return source


@irdl_op_definition
class SoftmaxOp(RowwiseOp):
    """Softmax along an axis: ``%y = tensor_op.softmax %x {axis = -1 : i64} : T``."""

    name = "tensor_op.softmax"


@irdl_op_definition
class LogSoftmaxOp(RowwiseOp):
    """Log-softmax along an axis, ``(x - max) - log(sum(exp(x - max)))``: ``%y = tensor_op.log_softmax %x {axis = -1 :
    i64} : T``. Its own op rather than ``x - logsumexp(x)``, which loses ``log(sum)`` against a large ``max`` (rows of
    logits near 1e4, or masked whole with -1e9)."""

    name = "tensor_op.log_softmax"


class NormOp(TensorOp):
    """A normalization over the last axis with an optional per-column weight (and bias) and an epsilon."""

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    eps = prop_def(FloatAttr)
    output = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    DEFAULT_EPS: ClassVar[float] = 1e-5

    def _check_vector(self, value: SSAValue | None, role: str) -> None:
        if value is None:
            return
        source, vector = tensor_type(self.input), tensor_type(value)
        if vector.rank != 1:
            raise VerifyException(f"'{self.name}' {role} must have rank 1, got rank {vector.rank}")
        if vector.element_type != source.element_type:
            raise VerifyException(
                f"'{self.name}' {role} element type {vector.element_type} differs from input {source.element_type}"
            )
        if provably_different(vector.dims[0], source.dims[-1]):
            raise VerifyException(
                f"'{self.name}' {role} has {vector.dims[0]} elements but the normalized axis has {source.dims[-1]}"
            )

    def infer_result_type(self) -> TensorType:
        source = tensor_type(self.input)
        if source.rank < 1:
            raise VerifyException(f"'{self.name}' input must have rank >= 1")
        self._check_vector(self.weight, "weight")
        return source


@irdl_op_definition
class LayerNormOp(NormOp):
    """Layer normalization over the last axis, with optional affine weight and bias::

        %y = tensor_op.layernorm %x weight %g bias %b {eps = 1.0e-05 : f64}
            : !tensor_op.tensor<[M, N], f16> weight !tensor_op.tensor<[N], f16> bias !tensor_op.tensor<[N], f16>
            -> !tensor_op.tensor<[M, N], f16>
    """

    name = "tensor_op.layernorm"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = (
        "$input (`weight` $weight^)? (`bias` $bias^)? attr-dict `:` "
        "type($input) (`weight` type($weight)^)? (`bias` type($bias)^)? `->` type($output)"
    )

    def __init__(self, input: SSAValue, weight: SSAValue | None = None, bias: SSAValue | None = None,
                 eps: float = NormOp.DEFAULT_EPS):
        super().__init__(operands=[input, weight, bias], properties={"eps": FloatAttr(eps, f64)},
                         result_types=[input.type])

    def infer_result_type(self) -> TensorType:
        self._check_vector(self.bias, "bias")
        return super().infer_result_type()


@irdl_op_definition
class RMSNormOp(NormOp):
    """Root-mean-square normalization over the last axis, with an optional weight::

        %y = tensor_op.rmsnorm %x weight %g {eps = 1.0e-06 : f64}
            : !tensor_op.tensor<[M, N], bf16> weight !tensor_op.tensor<[N], bf16> -> !tensor_op.tensor<[M, N], bf16>
    """

    name = "tensor_op.rmsnorm"
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input (`weight` $weight^)? attr-dict `:` type($input) (`weight` type($weight)^)? `->` type($output)"

    def __init__(self, input: SSAValue, weight: SSAValue | None = None, eps: float = NormOp.DEFAULT_EPS):
        super().__init__(operands=[input, weight], properties={"eps": FloatAttr(eps, f64)},
                         result_types=[input.type])


# --------------------------------------------------------------------------------------------------------------------
# Fusion regions
# --------------------------------------------------------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of ``tensor_op.fused``: ``tensor_op.yield %y : T``."""

    name = "tensor_op.yield"
    values = var_operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(FusedOp)))
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[list(values)])


@irdl_op_definition
class FusedOp(IRDLOperation):
    """A fused subgraph that becomes one kernel. The region's block arguments are the kernel's operands, in order::

        %y = tensor_op.fused %x, %w, %b : (TX, TW, TB) -> TY {
        ^bb0(%a : TX, %bw : TW, %bb : TB):
          %0 = tensor_op.matmul %a, %bw : (TX, TW) -> TY
          %1 = tensor_op.add %0, %bb : (TY, TB) -> TY
          tensor_op.yield %1 : TY
        }
    """

    name = "tensor_op.fused"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure())
    assembly_format = "$inputs attr-dict `:` functional-type($inputs, $outputs) $body"

    def __init__(self, inputs: Sequence[SSAValue], result_types: Sequence[Attribute], body: Region):
        super().__init__(operands=[list(inputs)], result_types=[list(result_types)], regions=[body])

    def verify_(self) -> None:
        block = self.body.block
        if len(block.args) != len(self.inputs):
            raise VerifyException(
                f"'{self.name}' region has {len(block.args)} arguments but the op has {len(self.inputs)} inputs"
            )
        for index, (arg, operand) in enumerate(zip(block.args, self.inputs)):
            if arg.type != operand.type:
                raise VerifyException(
                    f"'{self.name}' region argument {index} has type {arg.type} but input {index} is {operand.type}"
                )
        terminator = block.last_op
        if not isinstance(terminator, YieldOp):
            raise VerifyException(f"'{self.name}' region must end with tensor_op.yield")
        yielded = [v.type for v in terminator.values]
        if yielded != [r.type for r in self.outputs]:
            raise VerifyException(f"'{self.name}' yields {len(yielded)} values whose types differ from its results")


TENSOR_OP_OPS = [
    MatmulOp, LinearOp, AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, WhereOp, MaskedFillOp, CompareOp,
    ReluOp, GeluOp, SiluOp, SigmoidOp, TanhOp, ExpOp, AbsOp, SqrtOp, RsqrtOp, LogOp, ErfOp, MishOp, SoftplusOp,
    HardsigmoidOp, HardswishOp, RotateHalfOp, RepeatColumnsOp, LeakyReluOp, ClampOp, ScaleOp, CastOp,
    ReduceSumOp, ReduceMaxOp, ReduceMeanOp, ReduceVarOp, LogSumExpOp, SoftmaxOp, LogSoftmaxOp, LayerNormOp, RMSNormOp,
    FusedOp, YieldOp,
]

TensorOpDialect = Dialect("tensor_op", TENSOR_OP_OPS, [TensorType])
