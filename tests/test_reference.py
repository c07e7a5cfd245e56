"""``amk.reference.as_pytorch_runs``: a function's ops as PyTorch's modules run them, which a build of ``amk.compile``
times before refining its kernels (a Linear's product and bias one ``F.linear``, as ``nn.Linear`` runs it)."""

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from xdsl.dialects import func

from amk.oplist import build_module
from amk.reference import as_pytorch_runs
from amk.verification import evaluate_function


class CalledFunctions(TorchFunctionMode):
    """The torch functions called inside, by name."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, function, types, args=(), kwargs=None):
        self.names.append(getattr(function, "__name__", str(function)))
        return function(*args, **(kwargs or {}))


def function_of(ops, shapes):
    module = build_module(ops, shapes, torch.float32)
    (function,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    return function


def run_both(ops, shapes):
    """The function's outputs as PyTorch runs it and op by op, and the torch functions the former called."""
    function = function_of(ops, shapes)
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(shape, generator=generator) for shape in shapes]
    with CalledFunctions() as called:
        (ran,) = as_pytorch_runs(function)(tensors)
    (expected,) = evaluate_function(function, tensors)
    return ran, expected, called.names


def test_a_linears_product_and_bias_are_one_linear_call():
    ran, expected, called = run_both([("matmul", {"transpose_b": True}), "add_bias", "gelu"],
                                     [(8, 16), (32, 16), (32,)])
    torch.testing.assert_close(ran, expected)
    assert called == ["linear", "gelu"]


def test_products_that_are_no_linears_bias_keep_their_add():
    """A weight not transposed (``x @ w``), and an add of a whole matrix (a residual): each op on its own."""
    for ops, shapes in (
            (["matmul", "add_bias"], [(8, 16), (16, 32), (32,)]),
            ([("matmul", {"transpose_b": True}), "add"], [(8, 16), (32, 16), (8, 32)])):
        ran, expected, called = run_both(ops, shapes)
        torch.testing.assert_close(ran, expected)
        assert any(name in ("add", "__add__") for name in called), (ops, called)


def test_a_product_read_by_another_op_too_keeps_its_add():
    """The product is an output as well as the bias add's operand: the add cannot take it over."""
    function = function_of([("matmul", {"transpose_b": True}), "add_bias"], [(8, 16), (32, 16), (32,)])
    product = next(op for op in function.body.block.ops if op.name == "tensor_op.matmul").results[0]
    returned = function.body.block.last_op
    returned.operands = [*returned.operands, product]
    x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    with CalledFunctions() as called:
        total, alone = as_pytorch_runs(function)([x, w, b])
    torch.testing.assert_close(alone, F.linear(x, w))
    torch.testing.assert_close(total, F.linear(x, w, b))
    assert any(name in ("add", "__add__") for name in called.names)
