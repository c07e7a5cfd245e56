"""Batched matmuls through amk: attention's ``q @ k^T`` fused with its scale and softmax, ``p @ v`` as a tile grid.

One kernel repeats over the batch dims (a last grid axis, ``pid_b``), each matrix tiled as a 2-D problem; run in
Triton's interpreter and compared with PyTorch, through ``amk.compile`` (dynamic batch, heads and sequence lengths) and
through the pipeline with each tiling strategy that lowers a batched matmul.
"""

from __future__ import annotations

import ast
import copy
import math
import re

import pytest
import torch
import torch.nn as nn
from conftest import DEVICE, GPU, INTERPRETER_WARNINGS
from xdsl.parser import Parser

import amk
import amk.frontend.compile as frontend
from amk.environment import initialize
from amk.lowering.configs import KernelConfig
from amk.pipeline import compile_module, make_context
from amk.runtime import KernelArgument, ShapeFunction
from amk.symbolic import Dim

initialize()  # without CUDA, before TorchDynamo imports triton: the kernels run in its interpreter

pytestmark = INTERPRETER_WARNINGS


class AttentionProbabilities(nn.Module):
    """softmax(q k^T / sqrt(d)), as people write it."""

    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1)


class AttentionValues(nn.Module):
    def forward(self, p, v):
        return p @ v


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    return ((out.double() - expected).norm() / expected.norm()).item()


def test_attention_probabilities_run_as_one_fused_kernel():
    model = AttentionProbabilities()
    q, k = random(2, 3, 40, 16), random(2, 3, 40, 16, seed=1)
    report = amk.explain(model, (q, k), print_report=False)
    assert report.pytorch == []  # the keys' transpose is read by the kernel, the matmul is in it
    (kernel,) = report.kernels
    assert kernel.strategy == "chunk_recompute"
    out = amk.compile(model, autotune=False)(q, k)
    assert relative_error(out, model(q.double(), k.double())) < 1e-5


class MaskedAttentionProbabilities(nn.Module):
    """softmax(q k^T / sqrt(d) + mask), the mask as Hugging Face models build it (``finfo(dtype).min`` where masked)."""

    def forward(self, q, k, mask):
        return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + mask, dim=-1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_padding_masks_of_the_dtypes_lowest_value_keep_rows_finite(dtype):
    """Keys masked with ``finfo(dtype).min``, a column tile of only masked keys and rows masked whole: the kernel's
    statistics stay finite as eager's do (an exponent taken in base 2 with the shift multiplied by log2(e) overflowed
    -3.4e38 to -inf and made these rows NaN: a hunt's repro, `amk-fold-exponent-scales` no longer does it)."""
    q, k = random(2, 2, 16, 16).to(dtype), random(2, 2, 70, 16, seed=1).to(dtype)
    mask = torch.zeros(2, 2, 16, 70, dtype=dtype, device=DEVICE)
    mask[0, :, :, 30:] = torch.finfo(dtype).min  # sequence 0: 30 keys, 40 of padding
    mask[1, :, 10:, :] = torch.finfo(dtype).min  # sequence 1: its last 6 query rows padding, masked whole
    model = MaskedAttentionProbabilities()
    out = amk.compile(model, autotune=False, verify=False)(q, k, mask)
    expected = model(q.double(), k.double(), mask.double())
    assert not out.isnan().any()
    tolerance = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}[dtype]
    # rows masked whole are uniform in float64; in a 16-bit dtype the mask absorbs the scores (eager: uniform too)
    assert relative_error(out[0], expected[0]) < tolerance and relative_error(out[1, :, :10], expected[1, :, :10]) < tolerance


def test_new_batch_head_and_sequence_sizes_reuse_the_trace():
    """Batch, heads and both sequence lengths are dynamic: one TorchDynamo graph serves them all (a size of the
    keys' sequence, the scores' columns, is its own build; the rows are bucketed). A size of 1 is dynamic in the first
    argument's batch, not in its other dims (as torch.compile, which compiles a number for it)."""
    model = AttentionProbabilities()
    compiled = amk.compile(model, autotune=False)
    before = frontend.STATS.as_dict()
    for batch, heads, queries, keys in [(2, 3, 40, 24), (1, 2, 7, 24), (3, 4, 19, 24), (2, 2, 5, 37)]:
        q, k = random(batch, heads, queries, 16), random(batch, heads, keys, 16, seed=1)
        assert relative_error(compiled(q, k), model(q.double(), k.double())) < 1e-5
    after = frontend.STATS.as_dict()
    assert after["graphs"] - before["graphs"] == 1, "a new batch or sequence length recompiled the graph"
    assert after["fallbacks"] == before["fallbacks"]
    assert after["kernel_calls"] - before["kernel_calls"] == 4


def test_the_keys_length_is_a_number_in_its_build(tmp_path):
    """The keys' length is the scores' columns: not bucketed, each value its own build, in which amk-bind-sizes
    makes it a number (constant loop bounds over the columns); the queries' length, the batch and the heads stay
    symbolic."""
    model = AttentionProbabilities()
    compiled = amk.compile(model, autotune=False, dump_ir=tmp_path)
    q, k = random(2, 3, 40, 16), random(2, 3, 24, 16, seed=1)
    assert relative_error(compiled(q, k), model(q.double(), k.double())) < 1e-5
    (directory,) = tmp_path.iterdir()
    bound = (directory / "01-amk-bind-sizes.mlir").read_text()
    assert ", 24, 16], f32>" in bound and ", 40, 16]" not in bound  # the keys bound, the queries not
    tiled = (directory / "04-amk-tile.mlir").read_text()
    assert re.search(r"problem = #tiled_loop.exprs<\[\w+, 24, 16\]>", tiled)  # rows symbolic, 24 columns, K = 16


def test_a_batched_matmul_without_a_reduction_runs_as_a_tile_grid():
    model = AttentionValues()
    p, v = random(2, 3, 33, 40), random(2, 3, 40, 24, seed=1)
    (kernel,) = amk.explain(model, (p, v), print_report=False).kernels
    assert kernel.strategy == "tile2d"
    out = amk.compile(model, autotune=False)(p, v)
    assert relative_error(out, model(p.double(), v.double())) < 1e-5


def test_operands_whose_batch_dims_broadcast_stay_in_pytorch():
    model = AttentionProbabilities()
    q, k = random(2, 3, 8, 16), random(1, 3, 8, 16, seed=1)  # one key matrix broadcast over the batch
    report = amk.explain(model, (q, k), print_report=False)
    (matmul,) = [node for node in report.pytorch if node.name == "matmul"]
    assert "batch dims differ or broadcast" in matmul.reason
    torch.testing.assert_close(amk.compile(model, autotune=False)(q, k), model(q, k), atol=1e-5, rtol=1e-5)


ATTENTION_IR = """
func.func @attention(%q : !tensor_op.tensor<[B, H, S, 16], f32>, %k : !tensor_op.tensor<[B, H, {T}, 16], f32>)
    -> !tensor_op.tensor<[B, H, S, {T}], f32> {{
  %0 = tensor_op.matmul %q, %k {{transpose_rhs = true}} : (!tensor_op.tensor<[B, H, S, 16], f32>,
      !tensor_op.tensor<[B, H, {T}, 16], f32>) -> !tensor_op.tensor<[B, H, S, {T}], f32>
  %1 = tensor_op.scale %0 {{factor = 0.25 : f64}} : !tensor_op.tensor<[B, H, S, {T}], f32>
  %2 = tensor_op.softmax %1 {{axis = -1 : i64}} : !tensor_op.tensor<[B, H, S, {T}], f32>
  func.return %2 : !tensor_op.tensor<[B, H, S, {T}], f32>
}}
"""


def SMALL_TILES(kernel) -> KernelConfig:
    """Rows of 70 keys span three column tiles of 32 (chunk_recompute: two chunks); 37 queries span three row tiles,
    the last one ragged, so that a row tile's masked rows sit right before the next batch index's rows."""
    return KernelConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, SPLIT_N=2, num_warps=4, num_stages=2)


@pytest.mark.parametrize("keys,requested,strategy", [
    ("T", "chunk_recompute", "chunk_recompute"), ("T", "row_strip", "row_strip"), ("T", "tile_stats", "tile_stats"),
    ("T", "tile_recompute", "tile_recompute"), ("T", "strip_recompute", "strip_recompute"),
    # strategies with per-row-strip counters or resident programs do not batch: auto chooses instead
    ("T", "strip_finish", "chunk_recompute"), ("T", "strip_sync", "chunk_recompute"),
    # a row of a known length: the same kernel with constant loop bounds
    ("70", "auto", "chunk_recompute")])
def test_each_strategy_that_batches_matches_pytorch(keys, requested, strategy):
    module = Parser(make_context(), ATTENTION_IR.format(T=keys)).parse_module()
    compiled = compile_module(module, SMALL_TILES, reduction_strategy=requested)
    assert f'strategy = "{strategy}"' in compiled.ir["tiled_loop"]
    assert '"pid_b"]' in compiled.ir["tiled_loop"]  # the last grid axis of every launch
    # ... launched as one flat axis with the others: CUDA caps a grid's second and third axes at 65535 programs
    grids = re.findall(r"^ *grid = (.*)$", compiled.ir["triton"], re.MULTILINE)
    assert grids and all(len(ast.parse(grid, mode="eval").body.elts) == 1 for grid in grids), grids
    for seed in range(2):
        q, k = random(2, 3, 37, 16, seed=seed), random(2, 3, 70, 16, seed=seed + 10)
        expected = torch.softmax(q.double() @ k.double().transpose(-2, -1) * 0.25, dim=-1)
        assert relative_error(compiled.program(q, k)[0], expected) < 1e-5


MASKED_ATTENTION_IR = """
func.func @attention(%q : !tensor_op.tensor<[B, H, S, 16], f32>, %k : !tensor_op.tensor<[B, H, T, 16], f32>,
    %mask : !tensor_op.tensor<[{mask}], f32>) -> !tensor_op.tensor<[B, H, S, T], f32> {{
  %0 = tensor_op.matmul %q, %k {{transpose_rhs = true}} : (!tensor_op.tensor<[B, H, S, 16], f32>,
      !tensor_op.tensor<[B, H, T, 16], f32>) -> !tensor_op.tensor<[B, H, S, T], f32>
  %1 = tensor_op.scale %0 {{factor = 0.25 : f64}} : !tensor_op.tensor<[B, H, S, T], f32>
  %2 = tensor_op.add %1, %mask : (!tensor_op.tensor<[B, H, S, T], f32>, !tensor_op.tensor<[{mask}], f32>)
      -> !tensor_op.tensor<[B, H, S, T], f32>
  %3 = tensor_op.softmax %2 {{axis = -1 : i64}} : !tensor_op.tensor<[B, H, S, T], f32>
  func.return %3 : !tensor_op.tensor<[B, H, S, T], f32>
}}
"""


@pytest.mark.parametrize("strategy", ["chunk_recompute", "row_strip", "tile_stats", "tile_recompute",
                                      "strip_recompute"])
@pytest.mark.parametrize("mask", ["B, 1, S, T", "1, H, S, T", "1, 1, S, T", "B, 1, 1, T", "1, H, 1, T", "B, H, 1, T"])
def test_a_mask_broadcast_over_the_batch_dims_is_read_by_each_strategy_that_batches(mask, strategy):
    """Hugging Face's 4-D attention mask [B, 1, S, T] (one per sequence, over the heads), a bias per head [1, H, S, T]
    (T5's) and a causal mask [1, 1, S, T] (one matrix): the batched kernel reads the mask's matrices through a map of
    its batch index (``broadcast_batch``: b // H, b % H) or, the last, at every batch index. BERT's padding mask
    [B, 1, 1, T] and an ALiBi-like bias per head [1, H, 1, T] are a row vector per sequence or head, read through the
    same map; [B, H, 1, T], one per batch index, at the kernel's own. Every output right. (21 queries: two row tiles,
    the last ragged, which is what matters here, in two thirds of the interpreter's time for 37.)"""
    module = Parser(make_context(), MASKED_ATTENTION_IR.format(mask=mask)).parse_module()
    compiled = compile_module(module, SMALL_TILES, reduction_strategy=strategy)
    assert [step.kind for step in compiled.program.steps] == ["launch", "return"]
    assert ("broadcast_batch" in compiled.ir["tiled_loop"]) == (mask.split(", ")[:2] not in (["1", "1"], ["B", "H"]))
    sizes = {"B": 2, "H": 3, "S": 21, "T": 70}
    shape = [sizes.get(dim, 1) if dim != "1" else 1 for dim in mask.split(", ")]
    for seed in range(2):
        q, k = random(2, 3, 21, 16, seed=seed), random(2, 3, 70, 16, seed=seed + 10)
        bias = random(*shape, seed=seed + 20)
        expected = torch.softmax(q.double() @ k.double().transpose(-2, -1) * 0.25 + bias.double(), dim=-1)
        assert relative_error(compiled.program(q, k, bias)[0], expected) < 1e-5


def test_a_hugging_face_4d_mask_is_added_in_the_attention_kernel():
    """The [B, 1, S, T] mask (causal and padding, one per sequence) was added in PyTorch between the scores' kernel
    and the softmax's; it is read in the one kernel now, for every batch size."""
    model = MaskedAttentionProbabilities()
    compiled = amk.compile(model, autotune=False)
    for batch in (2, 3):
        q, k = random(batch, 2, 12, 16), random(batch, 2, 12, 16, seed=1)
        mask = torch.zeros(batch, 1, 12, 12, device=DEVICE).masked_fill(
            torch.ones(12, 12, dtype=torch.bool, device=DEVICE).triu(1), torch.finfo(torch.float32).min)
        mask[-1, :, :, :3] = torch.finfo(torch.float32).min  # the last sequence padded on the left
        assert relative_error(compiled(q, k, mask), model(q.double(), k.double(), mask.double())) < 1e-5
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert [len(sub.kernels) for sub in graph.subgraphs] == [1] and not graph.pytorch, graph.pytorch


class BertSelfAttentionProbabilities(nn.Module):
    """Hugging Face's BERT eager attention probabilities: the padding mask [B, S] of ones and zeros made additive as
    ``get_extended_attention_mask`` makes it, [B, 1, 1, S] with the dtype's lowest value where masked."""

    def forward(self, q, k, attention_mask):
        extended = (1.0 - attention_mask[:, None, None, :].to(q.dtype)) * torch.finfo(q.dtype).min
        return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + extended, dim=-1)


def test_berts_padding_mask_is_added_in_the_attention_kernel():
    """BERT's [B, 1, 1, S] mask, one row vector per sequence over its heads and query rows, was added in PyTorch
    between the scores' kernel and the softmax's; the kernel reads it now, row vector b // H at batch index b."""
    model = BertSelfAttentionProbabilities()
    compiled = amk.compile(model, autotune=False)
    for batch, length in ((2, 12), (3, 20)):
        q, k = random(batch, 2, length, 16), random(batch, 2, length, 16, seed=1)
        attention_mask = torch.ones(batch, length, dtype=torch.long, device=DEVICE)
        attention_mask[0, length - 5:] = 0  # the first sequence padded at its end
        attention_mask[-1, :3] = 0  # the last at its start
        expected = model(q.double(), k.double(), attention_mask)
        assert relative_error(compiled(q, k, attention_mask), expected) < 1e-5
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert [len(sub.kernels) for sub in graph.subgraphs] == [1], graph
    assert all(node.name != "add" for node in graph.pytorch), graph.pytorch


class LlamaStyleAttention(nn.Module):
    """Llama's eager attention in fp16: an additive mask of the dtype's lowest value (causal, and padding from an
    attention mask [B, T]), the softmax in fp32 cast back with ``.to(q.dtype)``, then the product by v."""

    def forward(self, q, k, v, attention_mask):
        lowest = torch.finfo(q.dtype).min
        length = attention_mask.shape[-1]
        causal = torch.triu(torch.full((length, length), lowest, dtype=q.dtype, device=q.device), diagonal=1)
        causal = causal[None, None].expand(q.shape[0], 1, -1, -1).clone()
        causal = causal.masked_fill(causal + attention_mask[:, None, None, :] == 0, lowest)
        weights = torch.matmul(q, k.transpose(2, 3)) / q.shape[-1] ** 0.5 + causal
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(weights, v)


def test_a_left_padded_fp16_batch_is_checked_against_float64_through_the_models_casts():
    """Rows of a left-padded sequence mask every key: fp16 eager's scores + the lowest value round to one number (a
    uniform row) where the kernel's fp32 scores keep their differences, 0.13 apart. The check then asks float64 for
    the reference, whose run failed at ``.to(q.dtype)`` (fp16 probabilities times float64 values), so the kernels
    were judged against fp16 eager and the bucket ran PyTorch for good. The float64 run keeps the casts' results in
    float64 now, and the kernels run."""
    model = LlamaStyleAttention()
    compiled = amk.compile(model, autotune=False)
    q, k, v = (random(2, 2, 9, 8, seed=seed).half() for seed in range(3))
    attention_mask = torch.ones(2, 9, dtype=torch.long, device=DEVICE)
    attention_mask[1, :3] = 0
    compiled(q, k, v, attention_mask)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    buckets = [bucket for sub in graph.subgraphs for bucket in sub.buckets]
    assert buckets and all(bucket.runs == "amk" for bucket in buckets), [bucket.note for bucket in buckets]


class GPT2PaddedAttentionProbabilities(nn.Module):
    """Hugging Face GPT-2's padding mask: ``attention_mask.view(batch_size, -1)[:, None, None, :]``, made additive with
    the dtype's lowest value, added to the scores."""

    def forward(self, q, k, attention_mask):
        attention_mask = attention_mask.view(q.shape[0], -1)[:, None, None, :].to(dtype=q.dtype)
        attention_mask = (1.0 - attention_mask) * torch.finfo(q.dtype).min
        return torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8.0 + attention_mask, dim=-1)


def test_a_mask_whose_length_the_guards_equate_with_the_keys_fuses():
    """The view's length is ``(B*T)//B`` in TorchDynamo's trace, which its guards equate with the keys' length
    (recorded before its replacements of symbols, which its own evaluation does not apply to them): the dims did not
    broadcast for amk, and the mask's add and the softmax ran in kernels of their own."""
    model = GPT2PaddedAttentionProbabilities()
    compiled = amk.compile(model, autotune=False)
    for length in (5, 9):
        q, k = random(2, 2, length, 8), random(2, 2, length, 8, seed=1)
        attention_mask = torch.ones(2, length, dtype=torch.long, device=DEVICE)
        attention_mask[1, :2] = 0
        assert relative_error(compiled(q, k, attention_mask), model(q.double(), k.double(), attention_mask)) < 1e-5
    for graph in amk.explain(compiled, print_report=False).graphs:
        assert [len(sub.kernels) for sub in graph.subgraphs] == [1], [node.reason for node in graph.pytorch]


class OneTokenAttention(nn.Module):
    """Attention of one query over one key (a one-token prompt), scaled by a 0-dim tensor."""

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], 4.0, device=q.device)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def test_one_query_over_one_key_scaled_by_a_0_dim_tensor_compiles():
    """Scores [1, H, 1, 1]: the space's one column made a 0-dim operand look full-width, and the row-vector test read
    its last dim (IndexError: the subgraph did not compile and ran in PyTorch)."""
    model = OneTokenAttention()
    compiled = amk.compile(model, autotune=False)
    q, k, v = random(1, 2, 1, 16), random(1, 2, 1, 16, seed=1), random(1, 2, 1, 16, seed=2)
    assert relative_error(compiled(q, k, v), model(q.double(), k.double(), v.double())) < 1e-5
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert all(sub.compiled and sub.kernels for sub in graph.subgraphs), [sub.failure for sub in graph.subgraphs]
    assert all(bucket.runs == "amk" for sub in graph.subgraphs for bucket in sub.buckets)


class HuggingFaceSelfAttention(nn.Module):
    """BERT's self-attention as Hugging Face writes it: q, k and v split into heads by
    ``view(B, S, H, D).transpose(1, 2)``, views whose batch dims [B, H] no single stride spans."""

    def __init__(self, hidden: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def split(self, x):
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, dim=-1)
        return (probs @ v).transpose(1, 2).reshape(x.shape)


def test_heads_split_by_a_transposed_view_are_read_in_place(monkeypatch):
    """q, k and v [B, H, S, D] with strides (S*H*D, D, H*D, 1) are kernel arguments of their own rank, read at
    [pid_b // H, pid_b % H, row, col]: the launch makes no copy of them (a [B*H, S, D] argument was a reshape that
    copied each on every call), for every batch and sequence length."""
    views = []
    viewer = KernelArgument.viewer

    def recording_viewer(self, bindings):
        view = viewer(self, bindings)

        def recorded(tensor):
            result = view(tensor)
            views.append(result.data_ptr() == tensor.data_ptr())
            return result
        return recorded

    monkeypatch.setattr(KernelArgument, "viewer", recording_viewer)
    model = HuggingFaceSelfAttention().to(DEVICE)
    reference = copy.deepcopy(model).double()
    compiled = amk.compile(model, autotune=False, sdpa_attention=False)  # amk's kernels, not PyTorch's attention
    for batch, tokens in ((2, 8), (3, 5)):
        x = random(batch, tokens, 32, seed=batch)
        mask = torch.zeros(batch, 1, 1, tokens, device=DEVICE)
        mask[0, ..., tokens // 2:] = -10000.0
        assert relative_error(compiled(x, mask), reference(x.double(), mask.double())) < 1e-5
    for graph in amk.explain(compiled, print_report=False).graphs:  # a new sequence length traces it dynamic
        matmuls = [kernel for sub in graph.subgraphs for kernel in sub.kernels if "matmul(matmul" in str(kernel)]
        assert len(matmuls) == 2, graph.subgraphs  # the scores with their softmax, then probs @ v
    assert views and all(views), views  # the keys' transposed view, and no copy


@pytest.mark.skipif(not GPU, reason="CUDA's limit on a grid's second and third axes is a GPU's")
def test_a_batch_of_more_heads_than_cuda_allows_on_a_second_grid_axis_runs():
    """batch x heads = 66000 matrices: more than the 65535 programs CUDA launches on a grid's second or third axis,
    where the batch axis was (an 'invalid argument' launch error before the grid was one flat axis)."""
    model = AttentionProbabilities()
    q, k = random(1000, 66, 8, 16), random(1000, 66, 24, 16, seed=1)
    out = amk.compile(model, autotune=False)(q, k)
    assert relative_error(out, model(q.double(), k.double())) < 1e-5


def test_a_batched_transposed_operand_is_viewed_and_timed_with_the_strides_of_its_call():
    """The keys [B*H, T, d] are read as [B*H, d, T] by strides; the tuner compiles candidates for the strides the
    calls hand the kernel (Triton specializes on them)."""
    argument = KernelArgument("transpose", ShapeFunction([Dim(6), Dim(16), Dim(40)]))
    keys = random(2, 3, 40, 16)
    viewed = argument.viewer({})(keys)
    assert viewed.shape == (6, 16, 40)
    assert viewed.stride() == argument.call_strides((6, 16, 40)) == (640, 1, 16)
    torch.testing.assert_close(viewed, keys.reshape(6, 40, 16).transpose(1, 2))
    assert KernelArgument("transpose", ShapeFunction([Dim(16), Dim(40)])).call_strides((16, 40)) == (1, 16)
