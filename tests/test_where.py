"""``torch.where`` and ``masked_fill`` (``tensor_op.where``): the scores of causal attention masked as nanoGPT and
Hugging Face's GPT-2 write it, a mask in a GEMM's epilogue, selections between tensors and numbers, their gradients.
A boolean mask computed by PyTorch is read by the kernel; one that compares a tensor with a number
(``tensor_op.compare``: nanoGPT's ``bias == 0``) is computed in the kernel from that tensor; a causal mask
``[1, 1, T, T]`` over a batched matmul's scores is one matrix that every batch index reads."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE, INTERPRETER_WARNINGS

import amk
from amk.verification import random_inputs

pytestmark = INTERPRETER_WARNINGS


def kernels_and_pytorch(compiled) -> tuple[list[list[str]], list[int], list[str]]:
    """Per subgraph of the one graph: its FX nodes and kernel count; and the nodes left to PyTorch."""
    (graph,) = amk.explain(compiled, print_report=False).graphs
    return ([sub.nodes for sub in graph.subgraphs], [len(sub.kernels) for sub in graph.subgraphs],
            [node.name for node in graph.pytorch])


class NanoGPTAttention(torch.nn.Module):
    """nanoGPT's causal self-attention core: a tril buffer compared with 0, masked_fill with -inf, softmax."""

    def __init__(self, block_size: int = 32):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, q, k, v):
        length = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :length, :length] == 0, float("-inf"))
        return torch.softmax(att, dim=-1) @ v


def test_nanogpts_causal_mask_is_read_by_the_attention_kernel():
    """The masked_fill was a PyTorch op between two kernels (the scores written out, masked, read back); it is now
    a select in the scores' kernel, and the buffer's comparison with 0 too: the buffer's slice [1, 1, T, T] read
    there at every batch index and head (amk's kernels: by default the attention runs as PyTorch's fused attention,
    tests/test_attention.py)."""
    model = NanoGPTAttention().to(DEVICE)
    compiled = amk.compile(model, autotune=False, sdpa_attention=False)
    generator = torch.Generator().manual_seed(0)
    for batch, length in ((2, 24), (3, 24), (2, 32)):
        q, k, v = (torch.randn(batch, 2, length, 16, generator=generator).to(DEVICE) for _ in range(3))
        torch.testing.assert_close(compiled(q, k, v), model(q, k, v), atol=1e-5, rtol=1e-5)
    nodes, kernels, pytorch = kernels_and_pytorch(compiled)
    assert nodes == [["transpose", "matmul", "att", "eq", "att_1", "softmax", "matmul_1"]] and kernels == [2], nodes
    assert "att_1" not in pytorch and "eq" not in pytorch  # the masked_fill and the comparison; the slice, a view,
    # stays in PyTorch


def dumped(directory, pattern: str) -> str:
    """The text of the files amk.compile's ``dump_ir`` wrote that match ``pattern``, one after the other."""
    return "\n".join(path.read_text() for path in sorted(directory.rglob(pattern)))


class CausalScores(torch.nn.Module):
    """nanoGPT's masked probabilities, without the product by v."""

    def __init__(self, block_size: int = 32):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, q, k):
        length = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        return torch.softmax(att.masked_fill(self.bias[:, :, :length, :length] == 0, float("-inf")), dim=-1)


def test_a_minus_infinity_fill_is_a_literal_and_the_scale_folds_into_the_exponent(tmp_path):
    """The fill of masked_fill(mask, -inf) is tensor_op.masked_fill's literal, not a one-element operand: the fp16
    kernel's exponent of the scores is then exp2 with the scale folded in (amk-fold-exponent-scales), as it is
    without the mask; its values are those of float64."""
    model = CausalScores().to(DEVICE)
    compiled = amk.compile(model, autotune=False, dump_ir=tmp_path)
    generator = torch.Generator().manual_seed(5)
    q, k = (torch.randn(2, 2, 24, 16, generator=generator).to(DEVICE, torch.float16) for _ in range(2))
    got = compiled(q, k)
    expected = model.double()(q.double(), k.double())
    assert got.dtype == torch.float16 and torch.equal(got == 0, expected == 0)  # every masked probability exactly 0
    torch.testing.assert_close(got.double(), expected, atol=1e-3, rtol=1e-3)
    imported = dumped(tmp_path, "00-input.mlir")
    assert "tensor_op.masked_fill" in imported and "tensor_op.where" not in imported, imported
    assert "exp2(" in dumped(tmp_path, "fused_*.py")


class FilledNumbers(torch.nn.Module):
    """masked_fill with a finite number that fp16 rounds (0.1 becomes 0.0999756, whose triple rounds to 0.29980 where
    0.1's rounds to 0.30005), and torch.where(mask, number, x), its other spelling."""

    def forward(self, x, mask):
        return torch.where(mask, float("inf"), x.masked_fill(~mask, 0.1) * 3).clamp(max=1e4)


def test_a_number_fill_is_rounded_to_the_results_dtype_as_pytorch_fills_it(tmp_path):
    compiled = amk.compile(FilledNumbers(), autotune=False, dump_ir=tmp_path)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(6, 16, generator=generator).to(DEVICE, torch.float16)
    mask = (torch.rand(6, 16, generator=generator) > 0.5).to(DEVICE)
    assert torch.equal(compiled(x, mask), FilledNumbers()(x, mask))
    assert dumped(tmp_path, "00-input.mlir").count("tensor_op.masked_fill") == 2


class GPT2Scores(torch.nn.Module):
    """Hugging Face's GPT-2 eager attention weights: a boolean tril buffer, torch.where with the dtype's lowest value
    as a 0-dim tensor."""

    def __init__(self, block_size: int = 32):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((block_size, block_size), dtype=torch.bool))
                             .view(1, 1, block_size, block_size), persistent=False)

    def forward(self, query, key):
        weights = torch.matmul(query, key.transpose(-1, -2)) / 4.0
        query_length, key_length = query.size(-2), key.size(-2)
        causal = self.bias[:, :, key_length - query_length:key_length, :key_length]
        mask_value = torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype, device=weights.device)
        weights = torch.where(causal, weights.to(weights.dtype), mask_value)
        return torch.nn.functional.softmax(weights, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gpt2s_where_and_softmax_are_one_kernel(dtype):
    model = GPT2Scores().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(1)
    for batch in (2, 3):
        query, key = (torch.randn(batch, 2, 20, 16, generator=generator).to(DEVICE, dtype) for _ in range(2))
        expected = model(query.double(), key.double())
        tolerance = 1e-5 if dtype == torch.float32 else 2e-3
        torch.testing.assert_close(compiled(query, key).double(), expected, atol=tolerance, rtol=tolerance)
    _, kernels, _ = kernels_and_pytorch(compiled)
    assert kernels == [1]


class MaskedLogits(torch.nn.Module):
    """A classifier head whose logits of classes not allowed for a sample are -inf before log_softmax."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(32, 24)

    def forward(self, x, allowed):
        return self.head(x).masked_fill(~allowed, float("-inf")).log_softmax(-1)


def test_a_mask_in_a_gemms_epilogue():
    model = MaskedLogits().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(2)
    for rows in (4, 7):
        x = torch.randn(rows, 32, generator=generator).to(DEVICE)
        allowed = (torch.rand(rows, 24, generator=generator) > 0.4).to(DEVICE)
        allowed[:, 0] = True  # a row of only -inf is NaN in both
        expected = model(x, allowed)
        got = compiled(x, allowed)
        assert torch.equal(torch.isinf(got), torch.isinf(expected))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    nodes, kernels, _ = kernels_and_pytorch(compiled)
    assert kernels == [1] and "masked_fill" in nodes[0], nodes


class Selections(torch.nn.Module):
    """where between two tensors (the method's spelling), a tensor and a number on either side, the fp16 branch
    promoted against an fp32 one."""

    def forward(self, x, keep, y, wide):
        a = x.where(keep, y)
        b = torch.where(keep, 0.5, a) * 2
        c = torch.where(keep, b, -3)
        return torch.where(keep, c, wide).relu()


def test_selections_between_tensors_and_numbers_with_type_promotion():
    model = Selections()
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(3)
    for rows in (3, 5):
        x, y = (torch.randn(rows, 16, generator=generator).to(DEVICE, torch.float16) for _ in range(2))
        keep = (torch.rand(rows, 16, generator=generator) > 0.5).to(DEVICE)
        wide = torch.randn(16, generator=generator).to(DEVICE)
        expected = model(x, keep, y, wide)
        got = compiled(x, keep, y, wide)
        assert got.dtype == expected.dtype == torch.float32
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)
    _, kernels, _ = kernels_and_pytorch(compiled)
    assert kernels == [1]


def test_a_selection_between_numbers_only_stays_in_pytorch():
    """torch.where(mask, 1.0, 0.0) has no tensor branch: the mask's own conversion, which PyTorch computes."""
    def forward(x, keep):
        return x * torch.where(keep, 1.0, 0.0)

    compiled = amk.compile(forward, autotune=False)
    x, keep = torch.randn(4, 8).to(DEVICE), (torch.rand(4, 8) > 0.5).to(DEVICE)
    torch.testing.assert_close(compiled(x, keep), forward(x, keep))
    nodes, _, pytorch = kernels_and_pytorch(compiled)
    assert "where" in pytorch and nodes == [["mul"]], (nodes, pytorch)


def test_gradients_flow_through_the_selection():
    model = NanoGPTAttention().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(4)
    inputs = [torch.randn(2, 2, 16, 8, generator=generator).to(DEVICE) for _ in range(3)]
    grads = []
    for module in (model, compiled):
        leaves = [t.clone().requires_grad_() for t in inputs]
        module(*leaves).square().sum().backward()
        grads.append([leaf.grad for leaf in leaves])
    for want, have in zip(*grads, strict=True):
        torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5)


def test_random_boolean_inputs_hold_both_values():
    (mask,) = random_inputs([(64, 64)], torch.bool, "cpu", seed=0)
    assert mask.dtype == torch.bool and 0.4 < mask.float().mean().item() < 0.6


MASKED_SOFTMAX_IR = """
func.func @masked(%x : !tensor_op.tensor<[64, 128], f32>, %mask : !tensor_op.tensor<[64, 128], i1>) -> !tensor_op.tensor<[64, 128], f32> {
  %0 = tensor_op.masked_fill %x, %mask {value = 0xfff0000000000000 : f64} : (!tensor_op.tensor<[64, 128], f32>, !tensor_op.tensor<[64, 128], i1>) -> !tensor_op.tensor<[64, 128], f32>
  %1 = tensor_op.softmax %0 {axis = -1 : i64} : !tensor_op.tensor<[64, 128], f32>
  func.return %1 : !tensor_op.tensor<[64, 128], f32>
}
"""


def test_the_tuners_example_masks_hold_both_values():
    """The tuner's random operands converted a mask's normal draw to bool, true wherever non-zero: every element was
    masked, every row of a softmax after a -inf fill was NaN, and every candidate of nanoGPT's masked scores failed
    its comparison with the heuristic configuration's output (on the H100, session 50), which then ran untuned."""
    from xdsl.parser import Parser

    from amk.context import make_context
    from amk.dialects import tiled_loop
    from amk.lowering.tile import TilePass
    from amk.passes.fuse import FusePass
    from amk.pipeline import heuristic_config
    from amk.tuner import kernel_example_arguments

    ctx = make_context()
    module = Parser(ctx, MASKED_SOFTMAX_IR).parse_module()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    (kernel,) = [op for op in module.walk() if isinstance(op, tiled_loop.KernelOp)]
    x, mask, out = kernel_example_arguments(kernel, heuristic_config(kernel), DEVICE)[:3]
    assert mask.dtype == torch.bool and 0.4 < mask.float().mean().item() < 0.6
    expected = torch.softmax(x.masked_fill(mask, float("-inf")), dim=-1)
    assert not expected.isnan().any()


class CombinedMasks(torch.nn.Module):
    """A causal buffer and a padding mask combined with ``&`` (``operator.and_``, as Bloom combines its masks with
    ``|``) after the scores are computed, then torch.where with the dtype's lowest value."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(32, 32, dtype=torch.bool))[None, None], persistent=False)

    def forward(self, q, k, pad):
        length = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        keep = self.bias[:, :, :length, :length] & pad.bool()[:, None, None, :]
        return torch.softmax(torch.where(keep, scores, torch.finfo(scores.dtype).min), dim=-1)


def test_masks_combined_with_the_and_operator_fuse():
    """``operator.and_`` was taken for an in-place op (its name ends in ``_``), a barrier that fused subgraphs end
    at: the scores' kernel and the where's were apart, the where left to PyTorch."""
    model = CombinedMasks().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, 2, 9, 8, generator=generator).to(DEVICE) for _ in range(2))
    pad = torch.ones(2, 9, dtype=torch.long, device=DEVICE)
    pad[1, :3] = 0
    torch.testing.assert_close(compiled(q, k, pad), model(q, k, pad), atol=1e-5, rtol=1e-5)
    nodes, kernels, pytorch = kernels_and_pytorch(compiled)
    assert ["where" in sub for sub in nodes] == [True] and kernels == [1], (nodes, pytorch)


def test_a_slice_length_the_guards_pin_to_a_number_is_read_as_it():
    """GPT-2's decoding step slices its causal buffer to ``kl - ql``, which TorchDynamo traces as
    ``Max(0, -Min(64, s) + Min(64, s + 1))`` and guards equal to 1 once the slice meets the scores. Settled Min by Min,
    one length came out spelled two ways in a two-layer model (the second layer's where did not broadcast for amk,
    its softmax a kernel of its own, as a helper's hunt of Hugging Face's GPT-2 found); a sub-expression that the
    guards pin to a number is that number first."""
    import sympy
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    from torch.utils._sympy.functions import Max, Min

    from amk.frontend.nodes import dim_of
    from amk.symbolic import Dim

    shape_env = ShapeEnv()
    past, cached = (shape_env.create_symbol(value, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
                    for value, name in ((5, "past"), (9, "cached")))
    sliced = Max(0, -Min(64, past) + Min(64, past + 1))
    shape_env.evaluate_expr(sympy.Eq(sliced, 1), hint=True)  # the guard the slice's broadcast records
    assert dim_of(shape_env.create_symintnode(cached + sliced, hint=10)) == Dim(str(cached + 1))


class Comparisons(torch.nn.Module):
    """Masks made by comparing with a number (``tensor_op.compare``): on either side, several predicates, one
    returned as well; the sum compared is fp16, rounded by PyTorch before the comparison (1 + 2**-12 is 1 in fp16, not
    in fp32), and the sum and its comparison are one kernel with the selections (a comparison joins the group with
    its readers)."""

    def forward(self, x, y):
        total = x + y
        positive = 0 < x
        out = torch.where(positive, x, y).masked_fill(total == 1.0, 5.0).masked_fill(x.le(-1.0), -5.0)
        return out.masked_fill(torch.ge(y, 2.0) | (x != x), 7.0), positive


def test_masks_compared_with_numbers_are_computed_in_the_kernel():
    model = Comparisons()
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(5)
    for rows in (3, 6):
        x, y = (torch.randn(rows, 32, generator=generator).to(DEVICE, torch.float16) for _ in range(2))
        x[0, :4], y[0, :4] = 1.0, 2.0 ** -12  # their fp16 sum is 1.0
        expected = model(x, y)
        got = compiled(x, y)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert (got[0][0, :4] == 5.0).all()
    nodes, kernels, pytorch = kernels_and_pytorch(compiled)
    assert kernels == [1] and {"total", "eq", "le"} <= set(nodes[0]), (nodes, pytorch)
    # masks read outside the kernel (returned; combined by |, which amk does not fuse) and x != x (two tensors) stay
    # PyTorch's: kernels write no masks
    assert {"positive", "ge", "ne"} <= set(pytorch), pytorch


class KeptScores(torch.nn.Module):
    """The scores kept where a mask is true, -inf elsewhere, with torch.where: the number is in the false branch."""

    def forward(self, q, k, keep):
        return torch.softmax(torch.where(keep, q @ k.transpose(-2, -1) * 0.25, float("-inf")), dim=-1)


def test_a_number_in_wheres_false_branch_is_a_literal_fill(tmp_path):
    """torch.where(keep, x, -inf) is a masked_fill where the mask is false (fill_where_false): its -inf is a literal
    that amk-fold-exponent-scales sees, as masked_fill(~keep, -inf)'s (it was a one-element operand)."""
    model = KeptScores()
    compiled = amk.compile(model, autotune=False, dump_ir=tmp_path)
    generator = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 2, 6, 16, generator=generator).to(DEVICE, torch.float16) for _ in range(2))
    keep = (torch.rand(2, 1, 6, 6, generator=generator) > 0.3).to(DEVICE)
    keep[..., 0] = True  # no row masked whole
    torch.testing.assert_close(compiled(q, k, keep), model(q, k, keep), atol=1e-3, rtol=1e-3)
    _, kernels, _ = kernels_and_pytorch(compiled)
    assert kernels == [1]
    assert "fill_where_false" in dumped(tmp_path, "00-input.mlir") and "exp2(" in dumped(tmp_path, "fused_*.py")
