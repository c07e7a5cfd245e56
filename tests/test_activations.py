"""GELU written out as arithmetic (Hugging Face's ``NewGELUActivation``, BLOOM's, an erf form) recognized in the graph
TorchDynamo hands the backend and rewritten as one ``F.gelu`` call (``amk.frontend.activations``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICE, INTERPRETER_WARNINGS, REPO, load_script_module
from torch import nn

import amk
from amk.frontend.activations import recognize_activations

pytestmark = INTERPRETER_WARNINGS


workloads = load_script_module("workloads", REPO / "benchmarks" / "workloads.py")
NEW_GELU = workloads.NewGELUActivation()


def hugging_face_new_gelu(x):
    return NEW_GELU(x)


def bloom_gelu(x):  # its constant rounded to eight digits
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def methods_gelu(x):
    return x.mul(0.5).mul(x.pow(3).mul(0.044715).add(x).mul(math.sqrt(2 / math.pi)).tanh().add(1))


def sigmoid_gelu(x):  # 0.5 (1 + tanh(u)) = sigmoid(2u)
    return x * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))


def erf_gelu(x):  # older BERT code, Megatron's erf_gelu
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def traced(function, x):
    """``function``'s graph as TorchDynamo hands it to a backend, after :func:`recognize_activations`: the calls it
    made, the targets left, the compiled function's output on ``x``, eager's, and the product the function reads."""
    seen = {}

    def backend(gm, example_inputs):
        seen["made"] = recognize_activations(gm)
        seen["targets"] = [node.target for node in gm.graph.nodes if node.op in ("call_function", "call_method")]
        return gm.forward

    weight = torch.randn(x.shape[-1], x.shape[-1], generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    torch._dynamo.reset()
    out = torch.compile(lambda t: function(F.linear(t, weight)), backend=backend)(x)
    torch._dynamo.reset()
    return seen["made"], seen["targets"], out, function(F.linear(x, weight)), F.linear(x, weight)


@pytest.mark.parametrize("function,approximate", [
    (hugging_face_new_gelu, "tanh"), (bloom_gelu, "tanh"), (methods_gelu, "tanh"), (sigmoid_gelu, "tanh"),
    (erf_gelu, "none")])
def test_a_gelu_written_out_becomes_one_call(function, approximate):
    x = torch.randn(6, 16, dtype=torch.float64)
    made, targets, out, expected, product = traced(function, x)
    assert len(made) == 1 and targets[-1] is F.gelu, targets
    assert len(targets) == 2  # the product, then the call: every op of the formula is gone
    torch.testing.assert_close(out, expected, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(out, F.gelu(product, approximate=approximate), rtol=1e-12, atol=0)


def not_quite_gelu(x):  # another constant: another function
    return 0.5 * x * (1.0 + torch.tanh(0.8 * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_with_its_tanh_returned(x):  # the tanh is read outside the formula: it stays
    t = torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))
    return 0.5 * x * (1.0 + t), t


def twice_gelu(x):  # the formula inside a longer chain: the formula's part is the call, the doubling stays
    return 2.0 * hugging_face_new_gelu(x)


def test_what_is_not_a_gelu_stays():
    x = torch.randn(4, 8)
    for function in (not_quite_gelu, gelu_with_its_tanh_returned):
        made, targets, out, expected, _ = traced(function, x)
        assert made == [] and F.gelu not in targets, function.__name__
        torch.testing.assert_close(out, expected)
    made, targets, out, expected, _ = traced(twice_gelu, x)
    assert len(made) == 1 and targets[1] is F.gelu and len(targets) == 3
    torch.testing.assert_close(out, expected)


def gelu_around_an_in_place_add(x):
    """The formula's first ops read ``h`` before ``add_`` changes it; a call at its last op would read it after."""
    h = x * 1.0
    inner = math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))
    half = 0.5 * h
    h.add_(1.0)
    return half * (1.0 + torch.tanh(inner)), h


def gelu_with_its_tanh_under_no_grad(x):
    """No gradient flows through the tanh: as one call, one would."""
    with torch.no_grad():
        t = torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))
    return 0.5 * x * (1.0 + t)


def test_a_formula_across_an_in_place_op_or_a_grad_mode_change_stays():
    x = torch.randn(4, 8, requires_grad=True)
    for function in (gelu_around_an_in_place_add, gelu_with_its_tanh_under_no_grad):
        made, targets, out, expected, _ = traced(function, x)
        assert made == [] and F.gelu not in targets, function.__name__
        torch.testing.assert_close(out, expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's autocast runs pow in fp32; the CPU's does not")
def test_a_formula_that_autocast_computes_in_another_dtype_stays():
    """Under CUDA's autocast ``torch.pow`` runs in fp32, so gelu_new of an fp16 tensor is fp32; ``F.gelu`` would keep
    fp16."""
    x = torch.randn(4, 8, device="cuda", dtype=torch.float16)
    seen = {}

    def backend(gm, example_inputs):
        seen["made"] = recognize_activations(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.autocast("cuda", dtype=torch.float16):
        out = torch.compile(hugging_face_new_gelu, backend=backend)(x)
        expected = hugging_face_new_gelu(x)
    torch._dynamo.reset()
    assert seen["made"] == [] and out.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(out, expected)


def test_hugging_face_gpt2_mlp_runs_its_gelu_as_one_op_in_the_products_kernel():
    torch.manual_seed(0)
    model = workloads.HuggingFaceGPT2MLP(96, 32).eval().to(DEVICE)
    compiled = amk.compile(model)
    for batch in (2, 3):
        x = torch.randn(batch, 7, 32, device=DEVICE)
        expected = model.double()(x.double())
        model.float()
        out = compiled(x)
        assert ((out.double() - expected).norm() / expected.norm()).item() < 1e-5
    text = str(amk.explain(compiled))
    assert "epilogue add(view_1), gelu(gelu)" in text and "tanh" not in text, text


def test_an_erf_gelu_after_a_linear_is_fused_with_it():
    """``tensor_op`` has no erf: written out, the GELU left the Linear's kernel and split it in two."""
    torch.manual_seed(0)

    class ErfMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(32, 64)

        def forward(self, x):
            return erf_gelu(self.dense(x))

    model = ErfMLP().eval().to(DEVICE)
    compiled = amk.compile(model)
    x = torch.randn(5, 32, device=DEVICE)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    text = str(amk.explain(compiled))
    assert "0 op(s) left to PyTorch" in text and "epilogue add(linear), gelu(gelu)" in text, text
