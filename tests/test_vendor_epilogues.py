"""A Linear's bias and ReLU or tanh GELU in the vendor GEMM's epilogue (``amk-vendor-epilogues``,
``tensor_op.linear``): the program whose matmuls run in the vendor library computes them as cuBLASLt does, in one
call, and the build times that program where such an epilogue exists."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import INTERPRETER_WARNINGS

from amk.build import _vendor_gemm_may_win
from amk.oplist import build_module, normalize_ops
from amk.passes.vendor_epilogues import linear_epilogue
from amk.pipeline import compile_module
from amk.runtime import Program, default_device

pytestmark = INTERPRETER_WARNINGS

LINEAR = ("matmul", {"transpose_b": True})
GPT2_MLP = ([LINEAR, "add_bias", ("gelu", {"approximate": "tanh"}), LINEAR, "add_bias"],
            [(37, 48), (96, 48), (96,), (48, 96), (48,)])


def random_inputs(shapes, dtype, device, weight_kn=False, seed=0):
    """Random inputs, each Linear's weight ([N, K], or [K, N] with ``weight_kn``: every shape of rank 2 but the
    first) scaled by 1/sqrt(K)."""
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=generator) / (shape[not weight_kn] ** 0.5 if index and len(shape) == 2
                                                         else 1)).to(device, dtype) for index, shape in enumerate(shapes)]


def gpt2_mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)


def relative_error(out, expected):
    return ((out.double() - expected).norm() / expected.norm()).item()


def test_gpt2s_mlp_runs_as_two_vendor_linears_with_their_epilogues():
    ops, shapes = GPT2_MLP
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float32), vendor_gemm=True)
    steps = compiled.program.steps
    assert [step.kind for step in steps] == ["op", "op", "return"]  # no kernel is left: no pass over the hidden
    first, second = (step.operation() for step in steps[:2])
    assert first.name == second.name == "tensor_op.linear"
    assert (first.activation_name, second.activation_name) == ("gelu_tanh", None)
    inputs = random_inputs(shapes, torch.float32, default_device())
    expected = gpt2_mlp(*(t.double() for t in inputs))
    for _ in range(2):  # the program's call, then its hot path
        assert relative_error(compiled.program(*inputs)[0], expected) < 1e-5


def conv1d_mlp(x, w1, b1, w2, b2):
    """GPT-2's MLP with Conv1D's ``[K, N]`` weights (``torch.addmm(b, x, w)`` on rows, any leading dims here)."""
    return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2


def test_hugging_face_conv1d_weights_run_as_vendor_linears():
    """GPT-2 as Hugging Face writes it: ``Conv1D``'s weights are ``[K, N]`` (``torch.addmm(b, x, w)``); its GELU,
    written out as arithmetic, is one op by the time the program is built (``amk.frontend.activations``)."""
    ops = [("matmul", {}), "add_bias", ("gelu", {"approximate": "tanh"}), ("matmul", {}), "add_bias"]
    shapes = [(37, 48), (48, 96), (96,), (96, 48), (48,)]
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float32), vendor_gemm=True)
    first, second = (step.operation() for step in compiled.program.steps[:2])
    assert [(op.name, op.activation_name, op.weight_kn) for op in (first, second)] == [
        ("tensor_op.linear", "gelu_tanh", True), ("tensor_op.linear", None, True)]
    inputs = random_inputs(shapes, torch.float32, default_device(), weight_kn=True)
    expected = conv1d_mlp(*(t.double() for t in inputs))
    assert relative_error(compiled.program(*inputs)[0], expected) < 1e-5


def test_explain_names_the_epilogue_of_a_vendor_linear():
    from amk.frontend.reports import kernel_descriptions

    ops, shapes = GPT2_MLP
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float16), vendor_gemm=True)
    assert kernel_descriptions(compiled) == ["tensor_op.linear activation=gelu_tanh [PyTorch]",
                                             "tensor_op.linear [PyTorch]"]


def test_the_cpu_computes_the_tanh_gelu_that_cuda_computes():
    """On the CPU ``torch._addmm_activation``'s GELU is the exact one (on CUDA the tanh one, as cuBLASLt's epilogue):
    the CPU's program computes the tanh form, which differs from the exact one by far more than fp32's rounding."""
    ops, shapes = GPT2_MLP[0][:3], GPT2_MLP[1][:3]
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float32), vendor_gemm=True)
    x, w, b = random_inputs(shapes, torch.float32, "cpu")
    out = compiled.program(x, w, b)[0].double()
    tanh_form = F.gelu(F.linear(x.double(), w.double(), b.double()), approximate="tanh")
    exact = F.gelu(F.linear(x.double(), w.double(), b.double()))
    assert relative_error(out, tanh_form) < 1e-6 < relative_error(exact, tanh_form) / 10


def test_a_program_of_vendor_linears_comes_back_from_its_plan():
    """The persistent cache stores an op step as its IR's text; ``tensor_op.linear`` parses back with its
    activation."""
    ops, shapes = GPT2_MLP
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float16), vendor_gemm=True)
    again = Program.from_plan(compiled.program.plan(), compiled.kernels)
    assert [step.operation().activation_name for step in again.steps[:2]] == ["gelu_tanh", None]
    inputs = random_inputs(shapes, torch.float16, default_device())
    assert torch.equal(again(*inputs)[0], compiled.program(*inputs)[0])


@pytest.mark.parametrize("activation,expected", [
    ("relu", "relu"), (("gelu", {"approximate": "tanh"}), "gelu_tanh"), ("gelu", None), ("silu", None)])
def test_the_build_times_the_vendor_program_where_the_epilogue_takes_the_activation(activation, expected):
    """cuBLASLt's epilogues: ReLU and the tanh GELU, after a Linear's bias (a weight [N, K], as nn.Linear's)."""
    module = build_module(normalize_ops([LINEAR, "add_bias", activation]), [(64, 32), (48, 32), (48,)],
                          torch.float16)
    matmul = next(op for op in module.walk() if op.name == "tensor_op.matmul")
    epilogue = linear_epilogue(matmul)  # exact GELU and SiLU: none, their kernel reads the product anyway
    assert (None if epilogue is None else epilogue.activation) == expected
    assert _vendor_gemm_may_win(module, "ieee", {}) == (expected is not None)


def test_a_bias_that_a_kernel_reads_anyway_stays_out_of_the_vendor_gemm():
    """Exact GELU and LayerNorm after the bias: their kernel reads the product, and adds the bias there."""
    ops, shapes = [LINEAR, "add_bias", "gelu", "layernorm"], [(37, 48), (80, 48), (80,), (80,), (80,)]
    compiled = compile_module(build_module(normalize_ops(ops), shapes, torch.float32), vendor_gemm=True)
    assert [step.operation().name for step in compiled.program.steps if step.kind == "op"] == ["tensor_op.matmul"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuBLASLt's epilogue runs on a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [(387,), (3, 129)], ids=["rows", "sequences"])
@pytest.mark.parametrize("weight_kn", [False, True], ids=["nn.Linear", "Conv1D"])
def test_cublaslt_computes_gpt2s_mlp_on_a_gpu_and_under_a_cuda_graph(dtype, rows, weight_kn):
    ops = GPT2_MLP[0]
    shapes = [(*rows, 256), (1024, 256), (1024,), (256, 1024), (256,)]  # sequences are flattened for the GEMM
    if weight_kn:
        ops = [("matmul", {}) if op == LINEAR else op for op in ops]
        shapes = [shapes[0], (256, 1024), (1024,), (1024, 256), (256,)]
    compiled = compile_module(build_module(normalize_ops(ops), shapes, dtype), vendor_gemm=True)
    inputs = random_inputs(shapes, dtype, "cuda", weight_kn)
    expected = (conv1d_mlp if weight_kn else gpt2_mlp)(*(t.double() for t in inputs))
    tolerance = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}[dtype]
    assert relative_error(compiled.program(*inputs)[0], expected) < tolerance
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = compiled.program(*inputs)[0]
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(captured, expected) < tolerance


def test_the_vendor_program_runs_the_registered_epilogue_pass_once(monkeypatch):
    """A user's pass registered as ``amk-vendor-epilogues`` is the one the vendor program runs, and a pipeline that
    names the pass runs it once."""
    import dataclasses
    import warnings

    from amk import opt
    from amk.passes.fuse import FusePass
    from amk.passes.vendor_epilogues import VendorEpiloguesPass
    from amk.pipeline import fusion_passes

    assert [type(p) for p in fusion_passes("amk-vendor-epilogues,amk-fuse", vendor_gemm=True)] == [
        VendorEpiloguesPass, FusePass]

    @dataclasses.dataclass(frozen=True)
    class MyEpilogues(VendorEpiloguesPass):
        pass

    monkeypatch.setitem(opt.AMK_PASSES, "amk-vendor-epilogues", opt.AMK_PASSES["amk-vendor-epilogues"])
    monkeypatch.setattr(opt, "REGISTERED_PASSES", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.register_pass(MyEpilogues)
    assert [type(p) for p in fusion_passes(None, vendor_gemm=True)] == [MyEpilogues, FusePass]
    assert [type(p) for p in fusion_passes("amk-vendor-epilogues,amk-fuse", vendor_gemm=True)] == [
        MyEpilogues, FusePass]
