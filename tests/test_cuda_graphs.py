"""``amk.frontend.graphs.cuda_graphed``: one CUDA graph per call signature, replayed on the first call's own tensors
while calls pass them again, else captured again on the wrapper's buffers that later calls copy their tensors into;
outputs are the graph's static tensors; plain calls where a graph cannot serve (no CUDA tensor, autograd, a call that
cannot be captured). Without a GPU the wrapper calls through, which the CPU tests check; the graph tests need a GPU."""

from __future__ import annotations

import copy
import logging
import re
import types

import pytest
import torch
from conftest import DEVICE, GPU, INTERPRETER_WARNINGS
from torch import nn

import amk
from amk.errors import InvalidArgumentError
from amk.frontend.graphs import cuda_graphed

NEEDS_GPU = pytest.mark.skipif(not GPU, reason="CUDA graphs need a GPU")


class CountingMLP(nn.Module):
    """Linear, GELU, Linear; counts how often its Python runs (a replay does not run it)."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.calls = 0

    def forward(self, x, scale=1.0):
        self.calls += 1
        return self.down(torch.nn.functional.gelu(self.up(x))) * scale


def mlp(device=DEVICE) -> CountingMLP:
    torch.manual_seed(0)
    return CountingMLP().to(device).eval()


def batch(rows: int, seed: int, device=DEVICE) -> torch.Tensor:
    return torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.parametrize("fn, warmup_calls, message", [
    (42, 3, "cuda_graphed needs a callable (a compiled module, a FusedKernel, a function), got int"),
    (torch.relu, 0, "warmup_calls must be an int of at least 1"),
    (torch.relu, "3", "warmup_calls must be an int of at least 1"),
    (torch.relu, True, "warmup_calls must be an int of at least 1"),
])
def test_bad_arguments_are_refused_with_what_is_accepted(fn, warmup_calls, message):
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        cuda_graphed(fn, warmup_calls=warmup_calls)


def test_cpu_calls_go_through_unchanged():
    """CPU tensors (on any machine) are the plain call: positional, keyword and non-tensor arguments as given."""
    model = mlp("cpu")
    graphed = cuda_graphed(model)
    x = batch(4, 0, "cpu")
    with torch.no_grad():
        for call, scale in enumerate((1.0, 2.0, 2.0), start=1):
            assert torch.equal(graphed(x, scale=scale), model(x, scale=scale))
            assert model.calls == 2 * call  # the wrapper's call and the direct one: nothing cached, nothing skipped
    assert graphed.graph_count == 0


@INTERPRETER_WARNINGS
def test_a_compiled_module_under_the_wrapper_computes_the_model():
    """amk.compile's module under the wrapper, at two batch sizes: the model's outputs (on a GPU through one graph per
    batch size, on the CPU called through)."""
    torch.manual_seed(0)  # a module without CountingMLP's counter, which TorchDynamo would recompile for
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).to(DEVICE).eval()
    graphed = cuda_graphed(amk.compile(model))
    with torch.no_grad():
        for rows, seed in ((8, 1), (3, 2), (8, 3)):
            x = batch(rows, seed)
            torch.testing.assert_close(graphed(x), model(x), rtol=1e-4, atol=1e-4)
    assert graphed.graph_count == (2 if GPU else 0)


@INTERPRETER_WARNINGS
def test_amk_compile_with_cuda_graphs_computes_the_model_without_recompiling():
    """amk.compile(model, cuda_graphs=True): the model's outputs at two batch sizes, from one TorchDynamo graph (one
    CUDA graph per batch size on a GPU; on the CPU the calls go through)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).to(DEVICE).eval()
    compiled = amk.compile(model, cuda_graphs=True)
    with torch.no_grad():
        for rows, seed in ((8, 1), (3, 2), (8, 3)):
            x = batch(rows, seed)
            torch.testing.assert_close(compiled(x).clone(), model(x), rtol=1e-4, atol=1e-4)
    assert len(amk.explain(compiled, print_report=False).graphs) == 1
    assert compiled._amk_caller.graph_count == (2 if GPU else 0)


@INTERPRETER_WARNINGS
def test_a_deep_copy_of_a_module_with_cuda_graphs_runs_graphs_of_its_own():
    """An EMA copy: its graphs read its own parameters (the original's graphs are not copied, so never replayed)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).to(DEVICE).eval()
    compiled = amk.compile(model, cuda_graphs=True)
    x = batch(8, 1)
    with torch.no_grad():
        expected = compiled(x).clone()
        copied = copy.deepcopy(compiled)
        assert copied._amk_caller.fn.module is copied._orig_mod and copied._amk_caller.graph_count == 0
        torch.testing.assert_close(copied(x).clone(), expected, rtol=1e-4, atol=1e-4)
        copied._orig_mod[0].weight.mul_(2)
        torch.testing.assert_close(copied(x).clone(), copied._orig_mod(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(compiled(x).clone(), expected, rtol=0, atol=0)
    assert copied._amk_caller.graph_count == (1 if GPU else 0)


def test_amk_compile_refuses_a_cuda_graphs_that_is_not_a_bool():
    with pytest.raises(InvalidArgumentError, match="cuda_graphs must be True or False, got 'yes'"):
        amk.compile(mlp("cpu"), cuda_graphs="yes")


@NEEDS_GPU
def test_one_graph_per_signature_replays_new_inputs():
    """Batch 8, 32, then 8 again with new values: two graphs, each call the model's output; after a signature's
    warm-up and capture (and its capture again on the wrapper's buffers, once a call passes new tensors) the Python
    of the model no longer runs."""
    model = mlp()
    graphed = cuda_graphed(model, warmup_calls=2)
    with torch.no_grad():
        for rows, seed in ((8, 1), (32, 2), (8, 3), (32, 4)):
            x = batch(rows, seed)
            out = graphed(x)
            torch.testing.assert_close(out, model(x))
    assert graphed.graph_count == 2
    # two signatures x (2 warm-ups + the capture, then 1 warm-up + the capture on the wrapper's buffers), and the 4
    # reference calls
    assert model.calls == 2 * (2 + 1 + 1 + 1) + 4


@NEEDS_GPU
def test_calls_passing_the_first_calls_tensors_replay_without_copying_them():
    """A loop that refills its input in place replays the graph captured on that very tensor: the model's output
    of the new values, in the same output tensor, with no capture again; a tensor whose storage was swapped is
    copied like any other."""
    model = mlp()
    graphed = cuda_graphed(model, warmup_calls=2)
    x = batch(8, 1)
    with torch.no_grad():
        first = graphed(x)
        x.copy_(batch(8, 2))
        again = graphed(x)
        assert again is first and graphed._graphs[next(iter(graphed._graphs))].bound
        torch.testing.assert_close(again, model(x))
        assert model.calls == 2 + 1 + 1  # warm-ups, the capture, the reference call
        x.set_(batch(8, 3))  # the same object, other memory: not what the graph reads
        torch.testing.assert_close(graphed(x), model(x))
    assert graphed.graph_count == 1


@NEEDS_GPU
def test_the_warm_up_leaves_the_callers_tensors_alone():
    """The warm-up calls run on copies: a callable that updates its input in place does so once on the first call,
    as eager does, not once per warm-up call too."""
    def bump(x):
        return x.add_(1)

    graphed = cuda_graphed(bump, warmup_calls=3)
    x = torch.zeros(4, device="cuda")
    graphed(x)
    torch.cuda.synchronize()
    assert x.tolist() == [1.0] * 4
    graphed(x)  # the graph bound to x: a replay adds one in place
    assert x.tolist() == [2.0] * 4


@NEEDS_GPU
def test_a_callable_updating_its_argument_runs_plainly_on_other_tensors(caplog):
    """A replay on the wrapper's buffers would update those, not the caller's tensor (a KV cache passed in): calls
    on other tensors than the bound ones run as the plain call, with one log line, and update what they are given."""
    def bump(x):
        return x.add_(1)

    graphed = cuda_graphed(bump)
    x, y = torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda")
    with caplog.at_level(logging.WARNING, logger="amk.frontend"):
        graphed(x)
        graphed(y)
        graphed(y)
        graphed(x)
    assert x.tolist() == [2.0] * 4 and y.tolist() == [2.0] * 4
    assert graphed.graph_count == 1
    assert sum("updates an argument in place" in r.getMessage() for r in caplog.records) == 1


@NEEDS_GPU
def test_arguments_unlike_their_copies_are_copied_in_from_the_first_call():
    """The capture may only see what the warm-up saw: a view of a wider tensor (its copy is dense) and one tensor
    passed twice (its copies are two) are not bound; the graph reads the wrapper's buffers from the first call."""
    def added(a, b):
        return a + b

    wide = batch(8, 1).repeat(1, 2)
    view = wide[:, :64]
    for args in ((view, batch(8, 2)), (wide[:, 64:].contiguous(),) * 2):
        graphed = cuda_graphed(added)
        torch.testing.assert_close(graphed(*args), added(*args))
        entry = next(iter(graphed._graphs.values()))
        assert not entry.bound and all(buffer is not arg for buffer, arg in zip(entry.static_inputs, args))
        torch.testing.assert_close(graphed(*args), added(*args))


@NEEDS_GPU
def test_a_bound_graph_stays_when_its_capture_on_the_buffers_fails(monkeypatch):
    """Other tensors then run as the plain call; the first call's tensors still replay the bound graph."""
    model = mlp()
    graphed = cuda_graphed(model)
    capture = graphed._capture
    monkeypatch.setattr(graphed, "_capture", lambda leaves, structure, bind, calls: (
        capture(leaves, structure, bind, calls) if bind else None))
    x1, x2 = batch(8, 1), batch(8, 2)
    with torch.no_grad():
        first = graphed(x1)
        torch.testing.assert_close(graphed(x2), model(x2))
        assert graphed(x1) is first
        torch.testing.assert_close(first, model(x1))
    assert graphed.graph_count == 1


@NEEDS_GPU
def test_outputs_are_overwritten_by_the_next_call_of_their_signature_only():
    model = mlp()
    graphed = cuda_graphed(model)
    x1, x2, other = batch(8, 1), batch(8, 2), batch(16, 3)
    with torch.no_grad():
        graphed(x1)
        second = graphed(x2)  # new tensors: captured again on the wrapper's own buffers
        kept = second.clone()
        third = graphed(x1)
        assert third is second  # the graph's static output, now x1's result
        torch.testing.assert_close(second, model(x1))
        assert not torch.equal(kept, second)
        graphed(other)  # another signature, another graph and memory pool
        torch.testing.assert_close(third, model(x1))
        torch.testing.assert_close(kept, model(x2))


@NEEDS_GPU
def test_parameters_are_read_in_place_and_replaced_ones_need_a_reset():
    model = mlp()
    graphed = cuda_graphed(model)
    x = batch(8, 1)
    with torch.no_grad():
        graphed(x)
        model.down.weight.mul_(2)  # in place: the graph reads the same memory
        torch.testing.assert_close(graphed(x), model(x))
        replaced = model.down.weight
        model.down.weight = nn.Parameter(replaced * 3)  # a new tensor: the graph still reads the one it replaced
        hidden = torch.nn.functional.gelu(model.up(x))
        torch.testing.assert_close(graphed(x), torch.nn.functional.linear(hidden, replaced, model.down.bias))
        graphed.reset()
        torch.testing.assert_close(graphed(x), model(x))
    assert graphed.graph_count == 1


@NEEDS_GPU
def test_non_tensor_arguments_are_part_of_the_signature():
    model = mlp()
    graphed = cuda_graphed(model)
    x = batch(8, 1)
    with torch.no_grad():
        for scale in (2.0, 3.0, 2.0):
            torch.testing.assert_close(graphed(x, scale=scale), model(x, scale=scale))
    assert graphed.graph_count == 2


@NEEDS_GPU
def test_calls_that_would_record_autograd_run_plainly_with_one_log_line(caplog):
    model = mlp()
    graphed = cuda_graphed(model)
    x = batch(8, 1)
    with caplog.at_level(logging.WARNING, logger="amk.frontend"):
        for _ in range(3):
            out = graphed(x)  # grad mode on, parameters require grad
            assert out.requires_grad
            out.sum().backward()  # a real autograd graph, as the plain call gives
    assert model.up.weight.grad is not None
    assert [r.getMessage() for r in caplog.records if "CUDA graphs are not used" in r.getMessage()] == [
        "amk: CUDA graphs are not used for calls of CountingMLP where its outputs require grad (parameters that "
        "require grad, with grad mode on: run it under torch.no_grad() or torch.inference_mode()); those calls run "
        "as plain calls"]
    with torch.no_grad():
        graphed(x)
    assert graphed.graph_count == 1  # the same tensors under no_grad: another signature, captured


@NEEDS_GPU
def test_a_call_that_cannot_be_captured_runs_plainly(caplog):
    def normalized(x):
        return x / x.abs().max().item()  # reads a value on the host: fine in warm-up, refused under capture

    graphed = cuda_graphed(normalized)
    x = batch(8, 1)
    with caplog.at_level(logging.WARNING, logger="amk.frontend"):
        torch.testing.assert_close(graphed(x), normalized(x))
        torch.testing.assert_close(graphed(2 * x), normalized(2 * x))
    assert graphed.graph_count == 0
    assert sum("it cannot be captured" in r.getMessage() for r in caplog.records) == 1
    # the failed capture left the CUDA random generator as it found it: this must not raise (before the fix, on torch
    # 2.11: "Offset increment outside graph capture encountered unexpectedly" from every later random op)
    torch.randn(16, device="cuda")


@NEEDS_GPU
def test_tensors_on_the_cpu_beside_cuda_ones_run_plainly():
    def scaled(x, factor):
        return x * factor.to(x.device)

    graphed = cuda_graphed(scaled)
    x, factor = batch(8, 1), torch.tensor(2.0)
    torch.testing.assert_close(graphed(x, factor), 2 * x)
    assert graphed.graph_count == 0


def test_a_module_unfrozen_after_capture_selects_another_graph():
    """With grad mode on, a module captured frozen (its parameters not requiring grad, so its outputs have no grad
    history to lose) and unfrozen since would replay outputs without a grad history: whether a parameter requires grad
    is part of the signature then (and costs nothing under no_grad or inference_mode)."""
    from amk.frontend.graphs import _signature

    x = torch.zeros(2, 3)
    model = nn.Linear(3, 3)
    caller = types.SimpleNamespace(module=model, training=True)  # amk.compile's, which CUDA graphs wrap
    model.requires_grad_(False)
    frozen = [_signature((x,), 1, fn) for fn in (model, caller)]
    with torch.no_grad():
        frozen_without_grad = _signature((x,), 1, model)
    model.requires_grad_(True)
    assert all(_signature((x,), 1, fn) != before for fn, before in zip((model, caller), frozen))
    with torch.no_grad():
        assert _signature((x,), 1, model) == frozen_without_grad


def test_the_modules_mode_selects_its_own_graph():
    """A replay skips TorchDynamo's guards, so the wrapped module's training flag is part of a graph's signature
    (dropout and batch-norm statistics differ between train() and eval())."""
    from amk.frontend.graphs import _signature

    x = torch.zeros(2, 3)
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    training = _signature((x,), 1, model)
    assert _signature((x,), 1, model.eval()) != training
    model.train()
    compiled = amk.compile(model, cuda_graphs=True)
    assert compiled._amk_caller.fn.training is True
    compiled.eval()
    assert compiled._amk_caller.fn.training is False
