"""Attention written op by op runs as PyTorch's fused attention (``amk.frontend.attention``): Hugging Face's eager
BERT attention, nanoGPT's causal ``masked_fill``, Llama's fp32 softmax cast back become one
``scaled_dot_product_attention`` call, the projections around it amk's kernels; what does not match keeps its ops."""

from __future__ import annotations

import copy
import math
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import DEVICE, INTERPRETER_WARNINGS

import amk
from amk.environment import initialize
from amk.errors import InvalidArgumentError

initialize()  # without CUDA, before TorchDynamo imports triton: the kernels run in its interpreter

pytestmark = INTERPRETER_WARNINGS

SDPA = "F.scaled_dot_product_attention"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class BertSelfAttention(nn.Module):
    """Hugging Face's BertSelfAttention (eager, in evaluation), with its dropout; ``returns_probs`` as with
    ``output_attentions=True``."""

    def __init__(self, hidden: int = 32, heads: int = 4, returns_probs: bool = False):
        super().__init__()
        self.heads, self.head_size, self.returns_probs = heads, hidden // heads, returns_probs
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.dropout = nn.Dropout(0.1)

    def split(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.head_size)).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = self.dropout(F.softmax(scores + mask, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size()[:-2] + (self.heads * self.head_size,))
        return (context, probs) if self.returns_probs else context


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention without flash: scores masked where a tril buffer is 0, with -inf."""

    def __init__(self, hidden: int = 32, heads: int = 4, block: int = 16):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        batch, tokens, channels = x.size()
        q, k, v = self.c_attn(x).split(channels, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, channels // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :tokens, :tokens] == 0, float("-inf"))
        return (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(batch, tokens, channels)


class LlamaStyleAttention(nn.Module):
    """Llama's eager attention core: scores times the scaling, plus the mask, softmax in fp32 cast back."""

    def forward(self, q, k, v, mask):
        weights = torch.matmul(q, k.transpose(2, 3)) * 0.25 + mask
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(weights, v)


class KeysPassedTransposed(nn.Module):
    """Keys handed over as k^T [B, H, D, T]: the call gets them transposed back."""

    def forward(self, q, keys_transposed, v):
        return torch.softmax(q @ keys_transposed, dim=-1) @ v


class QueriesChangedInPlace(nn.Module):
    """q scaled in place after the scores read it: the call, made at probs @ v, would read it changed."""

    def forward(self, q, k, v):
        q = q * 1.0
        scores = q @ k.transpose(-2, -1)
        q.mul_(3.0)
        return torch.softmax(scores, -1) @ v + q.sum()


class MaskGrowingTheScores(nn.Module):
    """A mask [B, H, S, T] over scores of a rank-3 attention [B, S, T]: the ops broadcast the scores to its shape."""

    def forward(self, q, k, v, mask):
        return torch.softmax(q @ k.transpose(-2, -1) + mask, -1) @ v


class DropoutByKeyword(nn.Module):
    def forward(self, q, k, v):
        return F.dropout(input=torch.softmax(q @ k.transpose(-2, -1), -1), p=0.1, training=False) @ v


class ProbabilitiesRounded(nn.Module):
    """The probabilities rounded to fp16 and back before the product: the call would not round them."""

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), -1).half().float() @ v


class OutputViewed(nn.Module):
    """The output viewed: where the call lays its result out otherwise than the product, the view reads a copy."""

    def forward(self, q, k, v):
        out = torch.softmax(q @ k.transpose(-2, -1), -1) @ v
        return out.view(out.shape[0], -1)


class KeptByWhere(nn.Module):
    """Scores kept where a boolean mask is True, -inf elsewhere, by torch.where: the call's own mask convention."""

    def forward(self, q, k, v, keep):
        scores = torch.where(keep, q @ k.transpose(-2, -1) * 0.25, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class BatchedMatrixProducts(nn.Module):
    """Attention over [B, S, D] written with torch.bmm."""

    def forward(self, q, k, v):
        return torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.25, dim=-1), v)


class MaskScaledToo(nn.Module):
    """The mask added before the scale: the call's attn_mask would need scaling, so the ops are kept."""

    def forward(self, q, k, v, mask):
        return torch.softmax((q @ k.transpose(-1, -2) + mask) * 0.25, dim=-1) @ v


class HeadsFromTheFirstDim(nn.Module):
    """Heads in the first argument's first dim (dynamic, and traced at 1 on a first call with one head), the
    attention's result viewed."""

    def forward(self, x):  # [heads, batch, tokens, 3 * 8]
        q, k, v = (t.transpose(0, 1) for t in x.split(8, dim=-1))
        context = torch.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1) @ v
        return context.view(context.shape[0], -1)


def random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.double() - expected).norm() / expected.norm()).item()


def padding_mask(batch: int, tokens: int) -> torch.Tensor:
    mask = torch.zeros(batch, 1, 1, tokens, device=DEVICE)
    mask[0, ..., tokens // 2:] = torch.finfo(torch.float32).min
    return mask


def pytorch_nodes(compiled) -> list:
    return [node for graph in amk.explain(compiled, print_report=False).graphs for node in graph.pytorch]


def test_hugging_faces_bert_attention_runs_as_one_fused_attention_call():
    model = BertSelfAttention().to(DEVICE).eval()
    reference = copy.deepcopy(model).double()
    compiled = amk.compile(model, autotune=False)
    for batch, tokens in ((2, 8), (3, 8)):
        x, mask = random(batch, tokens, 32, seed=batch), padding_mask(batch, tokens)
        assert relative_error(compiled(x, mask), reference(x.double(), mask.double())) < 1e-5
    calls = [node for node in pytorch_nodes(compiled) if node.target == SDPA]
    assert len(calls) == 1 and "never stores the probabilities" in calls[0].reason
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert [len(sub.kernels) for sub in graph.subgraphs] == [2]  # the projections: q and k a dual GEMM, then v
    assert not [node for node in graph.pytorch if node.target in ("F.softmax", "torch.matmul")]


def test_nanogpts_causal_masked_fill_is_the_calls_boolean_mask():
    """masked_fill(bias == 0, -inf): the call attends where the mask is not filled (its negation)."""
    model = CausalSelfAttention().to(DEVICE)
    reference = copy.deepcopy(model).double()
    compiled = amk.compile(model, autotune=False)
    x = random(2, 12, 32)
    assert relative_error(compiled(x), reference(x.double())) < 1e-5
    targets = [node.target for node in pytorch_nodes(compiled)]
    assert SDPA in targets and "torch.logical_not" in targets and "F.softmax" not in targets


def test_a_first_batch_of_one_compiles_once_for_every_batch():
    """The call's fake run at the trace checked its batch of 1 and guarded it (a recompile at the next batch, a
    helper's hunt); it installs no guard now."""
    model = CausalSelfAttention().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch, tokens in ((1, 5), (3, 9), (8, 16)):
        x = random(batch, tokens, 32, seed=batch)
        assert relative_error(compiled(x), copy.deepcopy(model).double()(x.double())) < 1e-5
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1
    assert SDPA in [node.target for node in pytorch_nodes(compiled)]


def test_an_fp32_softmax_cast_back_is_part_of_the_call():
    q, k, v = random(2, 2, 6, 8), random(2, 2, 9, 8, seed=1), random(2, 2, 9, 8, seed=2)
    mask = torch.zeros(2, 1, 6, 9, device=DEVICE)
    mask[..., -2:] = -1e9
    model = LlamaStyleAttention()
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(q, k, v, mask), model(q.double(), k.double(), v.double(), mask.double())) < 1e-5
    assert SDPA in [node.target for node in pytorch_nodes(compiled)]


def test_keys_passed_transposed_are_transposed_back_for_the_call():
    q, keys_transposed, v = random(2, 2, 6, 8), random(2, 2, 8, 9, seed=1), random(2, 2, 9, 8, seed=2)
    model = KeysPassedTransposed()
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(q, keys_transposed, v), model(q.double(), keys_transposed.double(), v.double())) < 1e-5
    assert SDPA in [node.target for node in pytorch_nodes(compiled)]


@pytest.mark.parametrize("case", ["probabilities returned", "mask scaled", "sdpa_attention=False"])
def test_what_does_not_match_keeps_its_ops(case):
    """Probabilities the model returns too, a mask added before the scale, or the option off: no call is made, and
    amk's kernels compute the scores, their softmax and probs @ v."""
    if case == "mask scaled":
        model, options = MaskScaledToo(), {}
        arguments = (random(2, 2, 6, 8), random(2, 2, 9, 8, seed=1), random(2, 2, 9, 8, seed=2),
                     torch.zeros(2, 1, 6, 9, device=DEVICE))
    else:
        model = BertSelfAttention(returns_probs=case == "probabilities returned").to(DEVICE).eval()
        options = {"sdpa_attention": False} if case == "sdpa_attention=False" else {}
        arguments = (random(2, 8, 32), padding_mask(2, 8))
    reference = copy.deepcopy(model).double()
    compiled = amk.compile(model, autotune=False, **options)
    got, expected = compiled(*arguments), reference(*(a.double() for a in arguments))
    for have, want in zip(*((got, expected) if isinstance(got, tuple) else ((got,), (expected,))), strict=True):
        assert relative_error(have, want) < 1e-5
    assert SDPA not in [node.target for node in pytorch_nodes(compiled)]
    kernels = [str(kernel) for graph in amk.explain(compiled, print_report=False).graphs
               for sub in graph.subgraphs for kernel in sub.kernels]
    assert any("softmax" in kernel for kernel in kernels), kernels


def test_a_torch_where_mask_is_the_calls_mask_as_it_is():
    q, k, v = random(2, 2, 6, 8), random(2, 2, 9, 8, seed=1), random(2, 2, 9, 8, seed=2)
    keep = torch.ones(2, 1, 6, 9, dtype=torch.bool, device=DEVICE)
    keep[0, ..., 5:] = False
    model = KeptByWhere()
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(q, k, v, keep), model(q.double(), k.double(), v.double(), keep)) < 1e-5
    targets = [node.target for node in pytorch_nodes(compiled)]
    assert SDPA in targets and "torch.logical_not" not in targets


def test_bmm_attention_runs_as_the_call():
    q, k, v = random(3, 6, 8), random(3, 9, 8, seed=1), random(3, 9, 8, seed=2)
    model = BatchedMatrixProducts()
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(q, k, v), model(q.double(), k.double(), v.double())) < 1e-5
    assert SDPA in [node.target for node in pytorch_nodes(compiled)]


def test_heads_split_by_a_transposed_view_and_viewed_after_the_call_are_correct():
    q = random(2, 6, 2, 8).transpose(1, 2)  # Hugging Face's heads: the call's result may follow this layout
    k, v = random(2, 2, 9, 8, seed=1), random(2, 2, 9, 8, seed=2)
    model = OutputViewed()
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(q, k, v), model(q.double(), k.double(), v.double())) < 1e-5
    assert SDPA in [node.target for node in pytorch_nodes(compiled)]


def test_a_dynamic_dim_traced_at_one_gets_the_calls_layout_at_other_sizes(monkeypatch):
    """CUDA's fused kernels write the result ``[B, S, H, D]`` (transposed to ``[B, H, S, D]``); on the CPU, where the
    call's result is contiguous, that layout is made by the call here. With the heads' dim traced at 1, the result's
    metadata said contiguous (a layout made by ``contiguous()``, which judges at the traced sizes, where a dim of 1
    makes any layout contiguous; and read from the call at sizes where that dim's stride may tie with the tokens'), so
    the ``view`` after the call got no contiguous copy and failed at the next call's three heads (a helper's
    review)."""
    called_on = []  # the query's type at each call: the rewrite's fake calls, then the model's own
    if DEVICE == "cpu":
        call = F.scaled_dot_product_attention

        def laid_out_as_on_cuda(*args, **kwargs):
            called_on.append(type(args[0]))
            return call(*args, **kwargs).transpose(1, 2).contiguous().transpose(1, 2)

        monkeypatch.setattr(F, "scaled_dot_product_attention", laid_out_as_on_cuda)
    model = HeadsFromTheFirstDim()
    compiled = amk.compile(model, autotune=False)
    for heads, tokens in ((1, 5), (3, 6)):
        x = random(heads, 2, tokens, 24, seed=heads)
        assert relative_error(compiled(x), model(x.double())) < 1e-5
    if DEVICE == "cpu":
        assert called_on.count(torch.Tensor) == 2  # the call ran the attention at both sizes
    else:
        assert SDPA in [node.target for node in pytorch_nodes(compiled)]


def test_a_call_whose_fake_kernel_takes_sizes_concrete_guards_none_of_them(monkeypatch):
    """On CUDA, PyTorch's fake attention kernels take some sizes concrete: the math kernel, its guards suppressed,
    gave BERT's call a result of the trace's batch, and comparing it with the product's shape guarded the batch (a
    recompile at every batch on an H100, ``2026-12-06-h100-gpu-tests-53.log``). Emulated on any device: the call's
    result on symbolic operands has their traced sizes. The rewrite calls it on concrete sizes only."""
    call = F.scaled_dot_product_attention
    ran_on = []  # the query's type at each call: the rewrite's fake calls, then the model's own

    def at_traced_sizes(*args, **kwargs):
        ran_on.append(type(args[0]))
        result = call(*args, **kwargs)
        if any(isinstance(size, torch.SymInt) for size in result.shape):
            return result.new_empty([size.node.hint if isinstance(size, torch.SymInt) else size
                                     for size in result.shape])
        return result

    monkeypatch.setattr(F, "scaled_dot_product_attention", at_traced_sizes)
    model = BertSelfAttention().to(DEVICE).eval()
    compiled = amk.compile(model, autotune=False)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch in (2, 3, 5):
        x, mask = random(batch, 8, 32, seed=batch), padding_mask(batch, 8)
        assert relative_error(compiled(x, mask), copy.deepcopy(model).double()(x.double(), mask.double())) < 1e-5
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1
    assert ran_on.count(torch.Tensor) == 3  # the call ran the attention at every batch


@pytest.mark.parametrize("case", ["changed in place", "mask growing the scores", "dropout by keyword",
                                  "probabilities rounded"])
def test_ops_the_call_would_not_reproduce_are_kept(case):
    """A review's reproducers: each ran the call (wrong values, or a crash at the first call or while compiling);
    now each keeps its ops, and amk's kernels give eager's values."""
    q, k, v = random(2, 2, 6, 8), random(2, 2, 9, 8, seed=1), random(2, 2, 9, 8, seed=2)
    model, arguments = {
        "changed in place": (QueriesChangedInPlace(), (q, k, v)),
        "mask growing the scores": (MaskGrowingTheScores(), (q[0], k[0], v[0], random(2, 2, 6, 9, seed=3))),
        "dropout by keyword": (DropoutByKeyword(), (q, k, v)),
        "probabilities rounded": (ProbabilitiesRounded(), (q, k, v)),
    }[case]
    expected = model(*(a.clone() for a in arguments))
    compiled = amk.compile(model, autotune=False)
    assert relative_error(compiled(*(a.clone() for a in arguments)), expected.double()) < 1e-5
    assert SDPA not in [node.target for node in pytorch_nodes(compiled)]


def test_sdpa_attention_takes_a_bool():
    with pytest.raises(InvalidArgumentError, match="sdpa_attention must be True or False, got 'yes'"):
        amk.compile(nn.Linear(4, 4), sdpa_attention="yes")


def test_an_unbacked_size_has_no_example_value():
    """A size TorchDynamo could not trace a value for (a slice's length read from a tensor) says so: the attention's
    ops are then kept, with that reason in the log."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from amk.frontend.attention import _at_example

    size = ShapeEnv().create_unbacked_symint()
    with pytest.raises(ValueError, match="has no traced value .unbacked: u0"):
        _at_example(size + 1)
    assert _at_example(7) == 7


def test_the_traces_runtime_asserts_run_as_python_and_still_raise():
    """TorchDynamo's runtime asserts (torch 2.11 makes six of every call of nanoGPT's slice of its mask buffer by a
    dynamic length) and size reads run as plain Python, as Inductor's code runs them, without the dispatcher's cost;
    an assert that fails raises as ``aten._assert_scalar`` does."""
    from amk.frontend.backend import _run_checks_in_python

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    tokens = graph.call_function(torch.ops.aten.sym_size.int, (x, 1))
    within = graph.call_function(operator.le, (tokens, 16))
    graph.call_function(torch.ops.aten._assert_scalar.default, (within, "Runtime assertion failed for u0 <= 16"))
    graph.output(graph.call_function(operator.mul, (x, tokens)))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    _run_checks_in_python(gm)
    assert "torch.ops.aten" not in gm.code
    torch.testing.assert_close(gm(torch.ones(2, 5)), torch.full((2, 5), 5.0))
    with pytest.raises(RuntimeError, match="Runtime assertion failed for u0 <= 16"):
        gm(torch.ones(2, 20))
    model = CausalSelfAttention().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    compiled(random(2, 5, 32))
    for call in (model, compiled):  # tokens beyond the mask buffer
        with pytest.raises(RuntimeError):
            call(random(2, 20, 32))
