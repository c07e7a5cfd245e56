"""PyTorch semantics of every ``tensor_op`` op: the reference that kernels are verified against, and the executor
of ops that were not fused."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from xdsl.ir import Operation

from amk.dialects import tensor_op
from amk.dtypes import to_torch
from amk.errors import InvalidArgumentError, UnsupportedOpError
from amk.registration import callable_name, check_registration


def _layernorm(op: tensor_op.LayerNormOp, x, *extras):
    weight = extras[0] if op.weight is not None else None
    bias = extras[-1] if op.bias is not None else None
    return F.layer_norm(x, (x.shape[-1],), weight, bias, op.eps.value.data)


def _rmsnorm(op: tensor_op.RMSNormOp, x, *extras):
    return F.rms_norm(x, (x.shape[-1],), extras[0] if extras else None, op.eps.value.data)


def _matmul(op: tensor_op.MatmulOp, a, b):
    return _bound_matmul(op)(a, b)


def _bound_matmul(op: tensor_op.MatmulOp) -> Callable:
    lhs_transposed, rhs_transposed = op.lhs_transposed, op.rhs_transposed
    if rhs_transposed and not lhs_transposed and tensor_op.tensor_type(op.rhs).rank == 2:
        return F.linear  # x @ w.t() as nn.Linear computes it, without the transposed view and matmul's dispatch

    def matmul(a, b):
        if lhs_transposed:
            a = a.transpose(-1, -2)
        if rhs_transposed:
            b = b.transpose(-1, -2)
        return a @ b

    return matmul


def _linear(op: tensor_op.LinearOp, x, w, b):
    return _bound_linear(op)(x, w, b)


def _bound_linear(op: tensor_op.LinearOp) -> Callable:
    return linear_function(op.activation_name, op.weight_kn)


def linear_function(activation: str | None, weight_kn: bool) -> Callable:
    """``tensor_op.linear`` as a function of its input, weight and bias: ``F.linear`` (a ``[K, N]`` weight read
    through its transpose, a view), or on CUDA ``torch._addmm_activation``, cuBLASLt's epilogue, where an activation
    follows."""
    if activation is None:
        return (lambda x, w, b: F.linear(x, w.t(), b)) if weight_kn else F.linear
    use_gelu = activation == "gelu_tanh"

    def linear(x, w, b):
        if not x.is_cuda:  # on the CPU, _addmm_activation's GELU is the exact one; its CUDA form is the tanh one
            y = F.linear(x, w.t() if weight_kn else w, b)
            return F.gelu(y, approximate="tanh") if use_gelu else F.relu(y)
        # cuBLASLt's epilogue applies the activation to the fp32 accumulator plus the bias, rounded once.
        mat2 = w if weight_kn else w.t()
        if x.dim() == 2:
            return torch._addmm_activation(b, x, mat2, use_gelu=use_gelu)
        rows = torch._addmm_activation(b, x.reshape(-1, x.shape[-1]), mat2, use_gelu=use_gelu)
        return rows.view(*x.shape[:-1], mat2.shape[1])

    return linear


def rotate_half(x: torch.Tensor, group: int | None = None) -> torch.Tensor:
    """``tensor_op.rotate_half``: the last dim's halves swapped, the one moved first negated; with ``group``, those
    of each group of ``group`` columns (heads side by side)."""
    if group is not None:
        return rotate_half(x.unflatten(-1, (-1, group))).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_columns(x: torch.Tensor, times: int) -> torch.Tensor:
    """``tensor_op.repeat_columns``: the last dim repeated ``times`` times side by side."""
    return x.repeat(*(1,) * (x.dim() - 1), times)


def _reduction(fn):
    return lambda op, x: fn(x, dim=op.axis.value.data, keepdim=op.keeps_dim)


def _clamp(op: tensor_op.ClampOp, x):
    return torch.clamp(x, None if op.min is None else op.min.value.data, None if op.max is None else op.max.value.data)


REFERENCE: dict[type[Operation], Callable] = {
    tensor_op.MatmulOp: _matmul,
    tensor_op.LinearOp: _linear,
    tensor_op.AddOp: lambda op, a, b: a + b,
    tensor_op.SubOp: lambda op, a, b: a - b,
    tensor_op.MulOp: lambda op, a, b: a * b,
    tensor_op.DivOp: lambda op, a, b: a / b,
    tensor_op.MaximumOp: lambda op, a, b: torch.maximum(a, b),
    tensor_op.MinimumOp: lambda op, a, b: torch.minimum(a, b),
    # The condition compared with zero: verification hands every input over as float64, a mask too.
    tensor_op.WhereOp: lambda op, cond, a, b: torch.where(cond != 0, a, b),
    tensor_op.MaskedFillOp: lambda op, x, mask: x.masked_fill((mask == 0) if op.fill_where_false else (mask != 0),
                                                              op.number),
    tensor_op.CompareOp: lambda op, x: getattr(torch, op.predicate.data)(x, op.number),
    tensor_op.ReluOp: lambda op, x: F.relu(x),
    tensor_op.GeluOp: lambda op, x: F.gelu(x, approximate="tanh" if op.uses_tanh else "none"),
    tensor_op.SiluOp: lambda op, x: F.silu(x),
    tensor_op.SigmoidOp: lambda op, x: torch.sigmoid(x),
    tensor_op.TanhOp: lambda op, x: torch.tanh(x),
    tensor_op.ExpOp: lambda op, x: torch.exp(x),
    tensor_op.AbsOp: lambda op, x: torch.abs(x),
    tensor_op.SqrtOp: lambda op, x: torch.sqrt(x),
    tensor_op.RsqrtOp: lambda op, x: torch.rsqrt(x),
    tensor_op.LogOp: lambda op, x: torch.log(x),
    tensor_op.ErfOp: lambda op, x: torch.erf(x),
    tensor_op.MishOp: lambda op, x: F.mish(x),
    tensor_op.SoftplusOp: lambda op, x: F.softplus(x, op.beta_value, op.threshold_value),
    tensor_op.HardsigmoidOp: lambda op, x: F.hardsigmoid(x),
    tensor_op.HardswishOp: lambda op, x: F.hardswish(x),
    tensor_op.RotateHalfOp: lambda op, x: rotate_half(x, None if op.group is None else op.group_size),
    tensor_op.RepeatColumnsOp: lambda op, x: repeat_columns(x, op.times.value.data),
    tensor_op.LeakyReluOp: lambda op, x: F.leaky_relu(x, op.slope),
    tensor_op.ClampOp: _clamp,
    tensor_op.ScaleOp: lambda op, x: x * op.factor.value.data,
    tensor_op.CastOp: lambda op, x: x.to(to_torch(op.output.type.element_type)),
    tensor_op.ReduceSumOp: _reduction(torch.sum),
    tensor_op.ReduceMeanOp: _reduction(torch.mean),
    tensor_op.ReduceVarOp: lambda op, x: torch.var(x, dim=op.axis.value.data, correction=op.correction_value,
                                                   keepdim=op.keeps_dim),
    tensor_op.ReduceMaxOp: lambda op, x: torch.amax(x, dim=op.axis.value.data, keepdim=op.keeps_dim),
    tensor_op.LogSumExpOp: _reduction(torch.logsumexp),
    tensor_op.SoftmaxOp: lambda op, x: torch.softmax(x, dim=op.axis.value.data),
    tensor_op.LogSoftmaxOp: lambda op, x: torch.log_softmax(x, dim=op.axis.value.data),
    tensor_op.LayerNormOp: _layernorm,
    tensor_op.RMSNormOp: _rmsnorm,
}


# amk's own references: what a build's cache key need not name (see amk.lowering.rules.BUILT_IN_ELEMENTWISE_RULES).
BUILT_IN_REFERENCE = dict(REFERENCE)


def register_reference(op_class: type[Operation], fn: Callable) -> None:
    """Give a new ``tensor_op`` op its PyTorch semantics: ``fn(op, *tensors) -> tensor``."""
    check_registration("register_reference", op_class, fn)
    replaced = REFERENCE.get(op_class)
    if replaced is not None and replaced is not fn:
        warnings.warn(f"register_reference: {callable_name(fn)} replaces {callable_name(replaced)} as the reference "
                      f"of {op_class.name}", stacklevel=2)
    REFERENCE[op_class] = fn


def semantics(op: Operation) -> Callable:
    """The PyTorch function registered for ``op``'s class; an UnsupportedOpError saying how to register one."""
    try:
        return REFERENCE[type(op)]
    except KeyError:
        raise UnsupportedOpError(f"{op.name} has no reference semantics: register them with "
                                 f"amk.reference.register_reference({type(op).__name__}, fn), fn(op, *tensors) -> "
                                 "tensor (verification and running the op in PyTorch need them)") from None


def evaluate(op: Operation, args: list[torch.Tensor]) -> torch.Tensor:
    """Run one ``tensor_op`` op eagerly on its operand tensors. A contributor's reference that raises, or gives
    something else than a tensor of the op's rank, is named in an :class:`~amk.errors.InvalidArgumentError` (it
    surfaced as its own TypeError, or an IndexError further on)."""
    fn = semantics(op)
    if fn is BUILT_IN_REFERENCE.get(type(op)):
        return fn(op, *args)
    what = f"the reference of {op.name} ({callable_name(fn)}), fn(op, *tensors) -> tensor,"
    try:
        result = fn(op, *args)
    except Exception as error:
        raise InvalidArgumentError(f"{what} raised {type(error).__name__}: {error}") from error
    rank = len(op.results[0].type.dims) if len(op.results) == 1 and hasattr(op.results[0].type, "dims") else None
    if not isinstance(result, torch.Tensor) or (rank is not None and result.dim() != rank):
        got = f"a {result.dim()}-d tensor" if isinstance(result, torch.Tensor) else repr(type(result).__name__)
        raise InvalidArgumentError(f"{what} returned {got}; it must return a tensor of the op's value "
                                   f"({rank}-d)")
    return result


# Ops whose function of the tensors alone is worth preparing once (:func:`bound`): a vendor GEMM runs on every call of
# a program's hot path, where reading the op's attributes would cost more host time than the launch.
_BOUND: dict[type[Operation], Callable[[Operation], Callable]] = {tensor_op.MatmulOp: _bound_matmul,
                                                                  tensor_op.LinearOp: _bound_linear}


def bound(op: Operation) -> Callable:
    """``op`` as a function of its operand tensors alone, what it reads of the op read now: for an op run on every
    call (a program's step left to PyTorch)."""
    binder = _BOUND.get(type(op))
    return binder(op) if binder is not None else partial(semantics(op), op)


def as_pytorch_runs(function) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
    """The ops of ``function`` (a ``tensor_op`` ``func.func``) as PyTorch's modules run them, for timing them against
    kernels: each op bound once (:func:`bound`), and a matmul by a weight of rank 2 whose one reader adds a vector of
    the product's width (a Linear's bias, :func:`~amk.dialects.tensor_op.bias_add`) one ``F.linear`` with that bias,
    as ``nn.Linear`` runs it (``addmm``, the bias added in the GEMM's epilogue; op by op it is a pass of its own over
    the product). Its values may differ from :func:`evaluate`'s by the rounding of that sum."""
    steps, returned = _pytorch_steps(function)
    arguments = list(function.body.block.args)

    def run(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        values = dict(zip(arguments, tensors))
        for _, fn, operands, results in steps:
            values[results[0]] = fn(*(values[operand] for operand in operands))
        return [values[value] for value in returned]

    return run


def runs_only_gemms(function) -> bool:
    """Whether PyTorch runs ``function``'s every op as a GEMM (:func:`as_pytorch_runs`): a matmul, or a Linear's
    product with its bias in one ``F.linear``."""
    steps, _ = _pytorch_steps(function)
    return bool(steps) and all(isinstance(op, tensor_op.MatmulOp) for op, _, _, _ in steps)


def _pytorch_steps(function) -> tuple[list[tuple[Operation, Callable, list, list]], list]:
    """:func:`as_pytorch_runs`'s steps (the op that leads each, the function run, its operand and result values) and
    the values ``function`` returns."""
    from xdsl.dialects import func

    steps: list[tuple[Operation, Callable, list, list]] = []
    folded: set[Operation] = set()
    returned: list = []
    for op in function.body.block.ops:
        if isinstance(op, func.ReturnOp):
            returned = list(op.arguments)
        elif op not in folded:
            linear = tensor_op.bias_add(op)
            if linear is None:
                steps.append((op, bound(op), list(op.operands), list(op.results)))
            else:
                add, bias = linear
                steps.append((op, linear_function(None, not op.rhs_transposed), [op.lhs, op.rhs, bias],
                              list(add.results)))
                folded.add(add)
    return steps, returned
