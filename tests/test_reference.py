"""``amk.reference.as_pytorch_runs``: a function's ops as PyTorch's modules run them, which a build of ``amk.compile``
times before refining its kernels (a Linear's product and bias one ``F.linear``, as ``nn.Linear`` runs it); GEMMs
alone, which such a build does not search."""

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from xdsl.dialects import func

import amk
import amk.build
from amk.frontend.reports import BucketReport
from amk.oplist import build_module
from amk.reference import as_pytorch_runs, runs_only_gemms
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


def test_a_conv1d_product_and_bias_are_one_linear_call():
    """A ``[K, N]`` weight (Hugging Face's ``Conv1D``, ``torch.addmm(b, x, w)``): its transpose, a view, in
    ``F.linear``."""
    ran, expected, called = run_both(["matmul", "add_bias"], [(8, 16), (16, 32), (32,)])
    torch.testing.assert_close(ran, expected)
    assert "linear" in called and not any(name in ("add", "__add__") for name in called), called


def test_a_products_residual_keeps_its_add():
    """An add of a whole matrix (a residual) is no bias: each op on its own."""
    ran, expected, called = run_both([("matmul", {"transpose_b": True}), "add"], [(8, 16), (32, 16), (8, 32)])
    torch.testing.assert_close(ran, expected)
    assert any(name in ("add", "__add__") for name in called), called


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


def test_gemms_alone_are_told_from_gemms_with_something_to_fuse():
    assert runs_only_gemms(function_of([("matmul", {"transpose_b": True}), "add_bias"], [(8, 16), (32, 16), (32,)]))
    assert runs_only_gemms(function_of(["matmul"], [(8, 16), (16, 32)]))
    assert not runs_only_gemms(function_of([("matmul", {"transpose_b": True}), "add_bias", "relu"],
                                           [(8, 16), (32, 16), (32,)]))
    assert runs_only_gemms(function_of(["matmul", "add_bias"], [(8, 16), (16, 32), (32,)]))  # Conv1D's addmm
    assert not runs_only_gemms(function_of(["matmul", "add"], [(8, 16), (16, 32), (8, 32)]))  # a residual


LINEAR = [("matmul", {"transpose_b": True}), "add_bias"]


def linear_request(ops=LINEAR, rows=512, dtype=torch.float16, raced=True, precision="highest", tuner_config=None,
                   columns=256):
    shapes = [(rows, 256), (columns, 256), (columns,)]
    return amk.build.BuildRequest(lambda: build_module(ops, shapes, dtype), shapes, dtype, tuner_config=tuner_config,
                                  raced_against_pytorch=raced, float32_matmul_precision=precision)


def test_gemms_alone_raced_against_pytorch_are_not_worth_a_search(monkeypatch):
    """Only where the caller races the program against PyTorch's ops, those ops are GEMMs alone of many rows, and
    PyTorch runs them on tensor cores too, and they are large every way: a Linear's activation is a pass saved,
    decode's skinny GEMMs (and a product of one column) are amk's to win, and under "highest" PyTorch's fp32 GEMM runs
    IEEE, which TF32X3 kernels beat."""
    monkeypatch.setattr(amk.build.BuildRequest, "timed", property(lambda self: True))

    def reason(request):
        return amk.build._not_worth_a_search(request, request.make_module())

    assert "GEMMs alone, of 512 rows" in reason(linear_request())
    assert reason(linear_request(dtype=torch.float32, precision="high"))
    for request in (linear_request(raced=False), linear_request(LINEAR + ["relu"]), linear_request(rows=16),
                    linear_request(columns=1), linear_request(dtype=torch.float32)):
        assert reason(request) == "", request


def test_a_build_of_gemms_alone_keeps_its_heuristic_configurations(monkeypatch, tmp_path):
    """Nothing is searched or timed while building (the race on the first call decides); the kernels' tuning log and
    the bucket's report say why. The request's race is in the key: a build that is not raced tunes its own."""
    monkeypatch.setattr(amk.build.BuildRequest, "timed", property(lambda self: True))

    def never(*args, **kwargs):
        raise AssertionError("searched or timed")

    monkeypatch.setattr(amk.build, "autotune_chooser", lambda *args, **kwargs: never)  # a chooser that searches
    monkeypatch.setattr(amk.build, "_time_pytorch_ops", never)
    monkeypatch.setattr(amk.build, "start_compile_workers", lambda: None)
    request = linear_request(tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    built = amk.build.build(request)
    assert "GEMMs alone" in built.not_searched and built.compiled.kernels
    for trials in built.tuning_log.values():
        assert [trial["status"] for trial in trials] == ["untimed"] and "GEMMs alone" in trials[0]["detail"]
    assert request.settings != linear_request(raced=False).settings
    report = BucketReport("static sizes", {}, not_searched=built.not_searched)
    assert "kernels not searched: its ops are GEMMs alone" in str(report)
