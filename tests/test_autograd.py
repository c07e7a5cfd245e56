"""Autograd through ``build_fused_kernel`` kernels (issue 22): the forward runs the fused kernel, the backward
recomputes the op chain in PyTorch (float32 for 16-bit kernels) and differentiates it. Gradients are compared with
those of an eager float32 PyTorch computation on the same (rounded) inputs. Calls that need no grad stay on the hot
path and record nothing. A backward with ``create_graph=True`` (a gradient penalty) is itself differentiable, through
``build_fused_kernel`` kernels and ``amk.compile`` subgraphs alike."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import amk
import amk.api
from amk.errors import DTypeError, ShapeError
from amk.runtime import default_device

DEVICE = default_device()

# op list, input shapes, the same computation written in eager PyTorch
CHAINS = {
    "linear_layernorm": (["matmul", "add_bias", "layernorm"], [(2, 8, 32), (32, 16), (16,), (16,), (16,)],
                         lambda x, w, b, g, beta: F.layer_norm(x @ w + b, (16,), g, beta)),
    "linear_gelu": (["matmul", "add_bias", "gelu"], [(2, 8, 32), (32, 16), (16,)],
                    lambda x, w, b: F.gelu(x @ w + b)),
    "softmax": (["scale", "softmax"], [(2, 8, 32)], lambda x: torch.softmax(x * 0.5, dim=-1)),
    "rmsnorm_residual": (["add", "rmsnorm"], [(2, 8, 32), (2, 8, 32), (32,)],
                         lambda x, r, w: F.rms_norm(x + r, (32,), w)),
}
PARAMS = {"softmax": [("scale", {"factor": 0.5}), "softmax"]}


def ops_of(name):
    return PARAMS.get(name, CHAINS[name][0])


def build(name, dtype=torch.float16):
    _, shapes, _ = CHAINS[name]
    return amk.build_fused_kernel(ops_of(name), shapes, dtype, autotune=False)


def inputs(shapes, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(shape, generator=generator) for shape in shapes]
    if len(shapes) > 1 and len(shapes[1]) == 2:  # a matmul weight: outputs stay O(1)
        tensors[1] = tensors[1] / shapes[1][0] ** 0.5
    return [t.to(DEVICE, dtype) for t in tensors]


def relative(have: torch.Tensor, want: torch.Tensor) -> float:
    return ((have.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("name", list(CHAINS))
def test_gradients_match_pytorch(name, dtype):
    _, shapes, eager = CHAINS[name]
    kernel = build(name, dtype)
    leaves = [t.requires_grad_() for t in inputs(shapes, dtype)]
    output = kernel(*leaves)
    assert output.requires_grad and output.grad_fn is not None and output.dtype == dtype
    upstream = torch.randn(output.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    output.backward(upstream)

    reference = [t.detach().float().requires_grad_() for t in leaves]
    expected = eager(*reference)
    expected.backward(upstream.float())
    tolerance = 1e-2 if dtype == torch.float16 else 1e-4
    assert relative(output, expected) < tolerance
    for index, (leaf, want) in enumerate(zip(leaves, reference)):
        assert leaf.grad is not None and leaf.grad.dtype == dtype and leaf.grad.shape == leaf.shape, index
        assert relative(leaf.grad, want.grad) < tolerance, (index, relative(leaf.grad, want.grad))


def test_only_the_inputs_that_require_grad_get_one():
    _, shapes, eager = CHAINS["linear_gelu"]
    kernel = build("linear_gelu")
    x, w, b = inputs(shapes, torch.float16)
    w.requires_grad_()
    kernel(x, w, b).float().sum().backward()
    assert x.grad is None and b.grad is None
    reference_w = w.detach().float().requires_grad_()
    eager(x.float(), reference_w, b.float()).sum().backward()
    assert relative(w.grad, reference_w.grad) < 1e-2


def test_the_kernel_is_one_step_of_a_larger_graph():
    """Grads flow through the kernel from later ops and into earlier ones (a non-leaf input)."""
    _, shapes, eager = CHAINS["linear_layernorm"]
    kernel = build("linear_layernorm")
    raw = inputs(shapes, torch.float16)
    source = raw[0].float().requires_grad_()
    loss = (kernel(source.half() * 2, *raw[1:]).float() ** 2).mean()
    loss.backward()
    reference = raw[0].float().requires_grad_()
    (eager((reference.half() * 2).float(), *[t.float() for t in raw[1:]]) ** 2).mean().backward()
    assert relative(source.grad, reference.grad) < 1e-2


def test_forward_values_do_not_depend_on_grad_mode():
    kernel = build("linear_layernorm")
    plain = inputs(CHAINS["linear_layernorm"][1], torch.float16)
    with_grad = [t.clone().requires_grad_() for t in plain]
    assert torch.equal(kernel(*with_grad).detach(), kernel(*plain))


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_no_history_when_grad_mode_is_off(mode):
    kernel = build("linear_gelu")
    leaves = [t.requires_grad_() for t in inputs(CHAINS["linear_gelu"][1], torch.float16)]
    with mode():
        output = kernel(*leaves)
    assert not output.requires_grad and output.grad_fn is None


def test_calls_without_grad_take_the_hot_path_and_never_autograd(monkeypatch):
    shapes = [(16, 32), (32, 16), (16,), (16,), (16,)]  # 2-D rows: a program without views, which has a hot path
    kernel = amk.build_fused_kernel(CHAINS["linear_layernorm"][0], shapes, torch.float16, autotune=False)
    plain = inputs(shapes, torch.float16)
    kernel(*plain)  # makes the hot path
    assert kernel._hot is not None

    def no_autograd(*args):
        raise AssertionError("autograd was used for a call that needs no grad")

    monkeypatch.setattr(amk.api._RecomputedBackward, "apply", no_autograd)
    calls = []
    run = kernel._hot.run
    monkeypatch.setattr(kernel._hot, "run", lambda tensors: calls.append(1) or run(tensors))
    output = kernel(*plain)
    assert not output.requires_grad and calls == [1]
    weights = [plain[0]] + [t.clone().requires_grad_() for t in plain[1:]]  # parameters, under no_grad
    with torch.no_grad():
        kernel(*weights)
    assert calls == [1, 1]
    monkeypatch.undo()
    output = kernel(*weights)  # grad mode on and inputs that require grad: off the hot path, into autograd
    assert output.grad_fn is not None and kernel._hot is not None


def test_a_grad_call_then_a_plain_call_reuse_the_kernel():
    kernel = build("linear_layernorm")
    plain = inputs(CHAINS["linear_layernorm"][1], torch.float16)
    leaves = [t.clone().requires_grad_() for t in plain]
    kernel(*leaves).float().sum().backward()
    first = kernel(*plain)
    kernel(*leaves).float().sum().backward()  # grads accumulate as in PyTorch
    assert torch.equal(kernel(*plain), first)
    assert all(leaf.grad is not None for leaf in leaves)


def test_leading_dims_may_change_with_grad():
    _, shapes, eager = CHAINS["softmax"]
    kernel = build("softmax")
    (x,) = inputs([(3, 8, 32)], torch.float16)
    x.requires_grad_()
    kernel(x).float().pow(2).sum().backward()
    reference = x.detach().float().requires_grad_()
    eager(reference).pow(2).sum().backward()
    assert x.grad.shape == (3, 8, 32) and relative(x.grad, reference.grad) < 1e-2


def test_bad_arguments_that_require_grad_fail_with_amk_errors():
    kernel = build("linear_gelu")
    x, w, b = inputs(CHAINS["linear_gelu"][1], torch.float16)
    with pytest.raises(DTypeError, match="argument 0 has dtype torch.float32"):
        kernel(x.float().requires_grad_(), w, b)
    with pytest.raises(ShapeError, match="argument 1 has shape"):
        kernel(x, torch.zeros(32, 8, dtype=torch.float16, device=DEVICE, requires_grad=True), b)


def _gradient_penalty(function, leaves):
    """A WGAN-GP style loss: the output's mean plus the squared norm of its gradient with respect to the first input
    (taken with ``create_graph=True``), differentiated again; the gradient and every leaf's final gradient."""
    output = function(*leaves)
    (gradient,) = torch.autograd.grad(output.sum(), leaves[0], create_graph=True)
    (output.mean() + 10 * ((gradient.norm(dim=-1) - 1) ** 2).mean()).backward()
    return gradient, [leaf.grad for leaf in leaves]


def test_a_gradient_penalty_differentiates_through_a_kernel():
    """The gradient returned under ``create_graph`` carries a graph, and the second backward's gradients are
    PyTorch's (before, the recomputed gradient was returned detached: the penalty's share was silently lost)."""
    _, shapes, eager = CHAINS["linear_gelu"]
    kernel = build("linear_gelu", torch.float32)
    leaves = [t.requires_grad_() for t in inputs(shapes, torch.float32)]
    gradient, grads = _gradient_penalty(kernel, leaves)
    assert gradient.requires_grad
    reference = [t.detach().clone().requires_grad_() for t in leaves]
    want_gradient, want_grads = _gradient_penalty(eager, reference)
    assert relative(gradient, want_gradient) < 1e-4
    for index, (have, want) in enumerate(zip(grads, want_grads)):
        assert relative(have, want) < 1e-4, (index, relative(have, want))


def test_a_gradient_penalty_differentiates_through_a_compiled_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Tanh()).to(DEVICE)
    eager = copy.deepcopy(model)
    compiled = amk.compile(model, autotune=False)
    x = torch.randn(4, 32, device=DEVICE)
    gradient, (grad_x,) = _gradient_penalty(compiled, [x.clone().requires_grad_()])
    assert gradient.requires_grad and len(amk.explain(compiled).kernels) == 1
    want_gradient, (want_x,) = _gradient_penalty(eager, [x.clone().requires_grad_()])
    assert relative(gradient, want_gradient) < 1e-5 and relative(grad_x, want_x) < 1e-5
    for (name, parameter), want in zip(model.named_parameters(), eager.parameters()):
        assert relative(parameter.grad, want.grad) < 1e-5, name


def test_a_head_trained_on_features_made_under_inference_mode_gets_pytorchs_gradients():
    """Features of a frozen backbone, made under ``torch.inference_mode()``, into a compiled head: autograd refuses to
    save such a tensor for backward, which the recomputing backward did with every input ("Inference tensors cannot
    be saved for backward"); eager never saves it here (its first op's output is what the weight's gradient reads)."""
    torch.manual_seed(0)
    head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(32, 10)).to(DEVICE)
    eager = copy.deepcopy(head)
    compiled = amk.compile(head, autotune=False)
    with torch.inference_mode():
        features = torch.randn(8, 32, device=DEVICE)
    compiled(features).square().mean().backward()
    eager(features).square().mean().backward()
    assert len(amk.explain(compiled).kernels) == 1
    for (name, parameter), want in zip(head.named_parameters(), eager.parameters()):
        assert relative(parameter.grad, want.grad) < 1e-5, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_create_graph_gradient_counts_each_path_once_when_inputs_depend_on_each_other(dtype):
    """kernel(x, x) and kernel(x, 2x): the recomputation starts from a view of each input, so that the gradient
    returned for one input does not also hold the path through the other (recomputing from the saved inputs themselves
    counted it twice in fp32, where no upcast separated them)."""
    kernel = amk.build_fused_kernel(["mul"], [(4, 8), (4, 8)], dtype, autotune=False)
    for second in (lambda x: x, lambda x: 2 * x):
        x = inputs([(4, 8)], dtype)[0].requires_grad_()
        (gradient,) = torch.autograd.grad(kernel(x, second(x)).sum(), x, create_graph=True)
        reference = x.detach().float().requires_grad_()
        (want,) = torch.autograd.grad((reference * second(reference)).sum(), reference, create_graph=True)
        assert gradient.requires_grad and relative(gradient, want) < 1e-3


def test_a_create_graph_gradient_through_a_subgraph_whose_inputs_depend_on_each_other():
    """tanh(linear(x) + cumsum(x)): cumsum stays in PyTorch, so the fused subgraph takes x and a tensor computed from
    it; the gradient penalty's gradients are PyTorch's."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)

        def forward(self, x):
            return torch.tanh(self.linear(x) + torch.cumsum(x, dim=-1))

    torch.manual_seed(0)
    model = Block().to(DEVICE)
    eager = copy.deepcopy(model)
    compiled = amk.compile(model, autotune=False)
    x = torch.randn(4, 16, device=DEVICE)
    gradient, (grad_x,) = _gradient_penalty(compiled, [x.clone().requires_grad_()])
    want_gradient, (want_x,) = _gradient_penalty(eager, [x.clone().requires_grad_()])
    assert relative(gradient, want_gradient) < 1e-5 and relative(grad_x, want_x) < 1e-5
    for (name, parameter), want in zip(model.named_parameters(), eager.parameters()):
        assert relative(parameter.grad, want.grad) < 1e-5, name
