"""Size buckets (issue 18): a symbolic program built per bucket of the row count M, with the strategy and the
configuration chosen (tuned on a GPU) for the bucket's sizes; ``amk.compile`` picks the bucket per call without
TorchDynamo recompiling, builds a bucket on its first call (or ahead, ``tune_sizes``), and records per bucket what
runs and why (timed against PyTorch on a GPU, "not timed" here)."""

from __future__ import annotations

import numpy
import pytest
import torch
from conftest import DEVICE, GPU
from xdsl.parser import Parser

import amk
import amk.build
import amk.frontend.compile as frontend
import amk.oplist
import amk.pipeline
from amk.build import BuildRequest, build
from amk.context import make_context
from amk.dialects import tiled_loop
from amk.errors import InvalidArgumentError
from amk.frontend.backend import _off_device_reason
from amk.frontend.buckets import MAX_EXACT_VALUES, SharedValues, SizeBuckets, bucket_label, bucket_of, check_tune_sizes
from amk.frontend.reports import AMK, PYTORCH, BucketReport, decide
from amk.frontend.subgraph import SymbolSource, _size_reader
from amk.lowering.tile import TilePass
from amk.passes.fuse import FusePass
from amk.symbolic import Dim
from amk.tuner import KernelConfig, TunerConfig, call_arguments, config_key, tune

K = 1024  # long enough for split_k, the decode strategy of a long contraction
LINEAR_RELU = f"""
func.func @linear_relu(%x : !tensor_op.tensor<[s0, {K}], f32>, %w : !tensor_op.tensor<[{K}, 32], f32>) -> !tensor_op.tensor<[s0, 32], f32> {{
  %0 = tensor_op.matmul %x, %w : (!tensor_op.tensor<[s0, {K}], f32>, !tensor_op.tensor<[{K}, 32], f32>) -> !tensor_op.tensor<[s0, 32], f32>
  %1 = tensor_op.relu %0 : !tensor_op.tensor<[s0, 32], f32>
  func.return %1 : !tensor_op.tensor<[s0, 32], f32>
}}
"""


def symbolic_module():
    return Parser(make_context(), LINEAR_RELU).parse_module()


def strategy_of(built) -> str:
    (kernel,) = [line for line in built.compiled.ir["tiled_loop"].splitlines() if "tiled_loop.kernel @" in line]
    return kernel.split('strategy = "')[1].split('"')[0]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------------------------------------------------
# The buckets
# --------------------------------------------------------------------------------------------------------------------


def test_buckets_of_the_row_count():
    assert [bucket_of(m) for m in (1, 2, 16, 17, 64, 65, 128, 129, 4096, 4097)] == \
        [1, 16, 16, 64, 64, 128, 128, 256, 4096, 8192]
    assert [bucket_label(b) for b in (1, 16, 64, 128, 4096)] == \
        ["M = 1", "2 <= M <= 16", "17 <= M <= 64", "65 <= M <= 128", "2049 <= M <= 4096"]


def test_row_symbols_are_bucketed_and_feature_symbols_kept_exact():
    rows = SizeBuckets.of([[Dim("s0"), Dim("s1"), Dim(64)], [Dim(64)]], [[Dim("s0"), Dim("s1"), Dim(64)]])  # x, a bias
    assert rows == SizeBuckets(("s1", "s0"), 2)  # innermost first
    assert rows.key((3, 5)) == 16 and rows.key((1, 1)) == 1 and rows.key((9, 9)) == 128
    assert rows.hints(16) == {"s1": 16, "s0": 1}  # the bucket's largest M, as the kernels see the product
    features = SizeBuckets.of([[Dim("s0"), Dim("s1")]], [[Dim("s0"), Dim("s1")]])  # dynamic=True: the last dim too
    assert features == SizeBuckets(("s0", "s1"), 1)
    assert features.key((3, 4096)) == (16, 4096) and features.hints((16, 4096)) == {"s0": 16, "s1": 4096}
    assert features.label((16, 4096)) == "2 <= M <= 16, s1 = 4096"
    assert SizeBuckets.of([[Dim(4), Dim(8)]], [[Dim(4), Dim(8)]]).label(1) == "static sizes"
    # A reduction over the features: a vector of one value per row.
    assert SizeBuckets.of([[Dim("s0"), Dim(64)]], [[Dim("s0")]]) == SizeBuckets(("s0",), 1)
    # ... of a 3-D input without keepdim, with a padding mask of the same dims: the sequence length is rows too.
    per_token = SizeBuckets.of([[Dim("b"), Dim("t"), Dim(64)], [Dim("b"), Dim("t")]], [[Dim("b"), Dim("t")]])
    assert per_token == SizeBuckets(("t", "b"), 2)
    # Attention's scores q @ k^T: a batched matmul's kernel repeats over batch and heads, its rows are the queries,
    # which take the bucket's rows; the keys' length is the scores' columns, kept exact.
    scores = SizeBuckets.of([[Dim("b"), Dim("h"), Dim("s"), Dim(64)], [Dim("b"), Dim("h"), Dim("t"), Dim(64)]],
                            [[Dim("b"), Dim("h"), Dim("s"), Dim("t")]])
    assert scores == SizeBuckets(("s", "h", "b", "t"), 3)
    assert scores.hints((512, 512)) == {"s": 512, "h": 1, "b": 1, "t": 512}
    # Built for a call of 8 x 16 heads x 512 queries (M = 65536): the batch and heads as called, the queries the rest
    # (a batched kernel is tuned for the call's batch); a bucket of fewer rows than the outer dims make keeps them 1.
    call = (512, 16, 8, 512)
    assert scores.hints(scores.key(call), call) == {"s": 512, "h": 16, "b": 8, "t": 512}
    assert scores.hints(scores.key_for_rows(16, call), call) == {"s": 16, "h": 1, "b": 1, "t": 512}
    assert rows.hints(rows.key((5, 4)), (5, 4)) == {"s1": 16, "s0": 4}  # 20 rows, bucket 17..64: 4 x 16
    # Never past the bound: 16 rows as 3 x 5, not 3 x 6 (18), and 64 as 5 x 12, not 5 x 13 (65, past skinny_m's 64)
    assert rows.hints(rows.key((5, 3)), (5, 3)) == {"s1": 5, "s0": 3}
    assert rows.hints(rows.key((12, 5)), (12, 5)) == {"s1": 12, "s0": 5}
    twelve_heads = (512, 12, 8)  # GPT-2 or BERT attention: 49152 rows, bucket 65536, tuned for the call's batch
    assert scores.hints(scores.key((*twelve_heads, 512)), (*twelve_heads, 512)) == {"s": 682, "h": 12, "b": 8, "t": 512}


def test_values_of_exact_symbols_past_the_last_exact_build_share_buckets():
    """A subgraph builds for MAX_EXACT_VALUES values of its exact symbols; a new value after them shares the build
    of its bucket, in which the symbol is not bound; values built exact before stay exact."""
    features = SizeBuckets(("s0", "s1"), 1)
    built = [features.key((3, value)) for value in range(100, 100 + MAX_EXACT_VALUES)]
    assert built == [(16, value) for value in range(100, 100 + MAX_EXACT_VALUES)]
    assert features.key((3, 100), built) == (16, 100)  # built exact already
    assert features.key((3, 100 + MAX_EXACT_VALUES), built[:-1]) == (16, 100 + MAX_EXACT_VALUES)
    shared = features.key((3, 100 + MAX_EXACT_VALUES), built)
    assert shared == (16, SharedValues(128))
    assert features.key((70, 127), [*built, shared]) == (128, SharedValues(128))  # shared buckets do not count
    assert features.label(shared) == "2 <= M <= 16, 65 <= s1 <= 128"
    assert features.bound_sizes(shared) == {} and features.bound_sizes(built[0]) == {"s1": 100}
    # Built at the bucket's bound where the symbol is only ever a whole dim; for the call that asks for it where a
    # dim computes with it (a causal mask's slice [S - T:S] of a buffer): the bounds of several such symbols
    # together need not be the sizes of a call.
    whole = SizeBuckets.of([[Dim("s0"), Dim("s1")]], [[Dim("s0"), Dim("s1")]])
    assert whole == features and whole.hints(shared, (3, 104)) == {"s0": 16, "s1": 128}
    sliced = SizeBuckets.of([[Dim("s0"), Dim("s1")], [Dim("Min(128, s1 + 1)")]], [[Dim("s0"), Dim("s1")]])
    assert sliced.whole_dims == {"s0"} and sliced.hints(shared, (3, 104)) == {"s0": 16, "s1": 104}
    assert sliced.hints(shared) == {"s0": 16, "s1": 128}
    assert SizeBuckets(("s0",), 1).bound_sizes(16) == {}
    assert bucket_label(64, "s1") == "17 <= s1 <= 64"
    # A symbol with one value in every exact build stays a number: a feature size beside a changing length.
    two = SizeBuckets(("s0", "k", "t"), 1)
    built = [two.key((3, 24, length)) for length in range(5, 5 + MAX_EXACT_VALUES)]
    assert two.key((3, 24, 40), built) == (16, 24, SharedValues(64))
    assert two.bound_sizes((16, 24, SharedValues(64))) == {"k": 24}
    assert two.key((3, 25, 40), built) == (16, SharedValues(64), SharedValues(64))


def test_a_value_one_away_from_one_built_shares_its_bucket_at_once():
    """A length stepping by one, as a decoding step's keys do, shares its bucket from its second value on, however few
    exact builds there are; a value that is not next to one built is built exact, and a symbol that keeps its value
    stays a number beside one that steps."""
    lengths = SizeBuckets(("s0", "s1"), 1)
    first = lengths.key((3, 129))
    assert first == (16, 129)
    assert lengths.key((3, 130), [first]) == (16, SharedValues(256))
    assert lengths.key((3, 128), [first]) == (16, SharedValues(128))
    assert lengths.key((3, 512), [first]) == (16, 512)
    # 130 was shared, not built exact: the length's later values share too
    assert lengths.key((3, 131), [first, (16, SharedValues(256))]) == (16, SharedValues(256))
    assert lengths.key((3, 300), [first, (16, SharedValues(256))]) == (16, SharedValues(512))
    two = SizeBuckets(("s0", "k", "t"), 1)
    assert two.key((3, 24, 6), [two.key((3, 24, 5))]) == (16, 24, SharedValues(16))
    assert two.key((3, 25, 9), [two.key((3, 24, 5))]) == (16, SharedValues(64), 9)


class DecodeAttention(torch.nn.Module):
    """Attention probabilities of one new token over a cache of keys that grows by one each step."""

    def __init__(self):
        super().__init__()
        self.query = torch.nn.Linear(32, 32)
        self.key = torch.nn.Linear(32, 32)

    def forward(self, x, cache):
        return (self.query(x) @ self.key(cache).transpose(-1, -2) / 32 ** 0.5).softmax(-1)


def test_a_growing_key_length_is_built_exact_once_then_shares_buckets(tmp_path):
    """Decoding with a cache: the keys' length, a column of the scores, is kept exact (a number in its build); one
    build per decoding step would build and tune kernels on every step. The second length, one more than the first,
    and every one after it share a build per bucket of lengths, symbolic in the length, every output right (on a GPU
    too, untuned: the kernels run rather than lose a race to PyTorch)."""
    torch.manual_seed(0)
    model = DecodeAttention().to(DEVICE)
    compiled = amk.compile(model, autotune=False, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    before = frontend.STATS.as_dict()
    generator = torch.Generator().manual_seed(0)
    lengths = range(2, 24)
    with torch.no_grad():
        for length in lengths:
            x = torch.randn(2, 1, 32, generator=generator).to(DEVICE)
            cache = torch.randn(2, length, 32, generator=generator).to(DEVICE)
            torch.testing.assert_close(compiled(x, cache), model(x, cache), atol=1e-5, rtol=1e-5)
    after = frontend.STATS.as_dict()
    assert after["graphs"] - before["graphs"] == 1 and after["fallbacks"] == before["fallbacks"]
    labels = [bucket.sizes.split(", ")[1] for bucket in only_subgraph(compiled).buckets]
    symbol = labels[0].split(" = ")[0]
    assert labels == [f"{symbol} = 2"] + [f"{low} <= {symbol} <= {high}" for low, high in ((2, 16), (17, 64))]
    assert after["pipeline_runs"] - before["pipeline_runs"] == len(labels)
    assert after["kernel_calls"] - before["kernel_calls"] == len(lengths)


def test_a_shared_length_bucket_is_found_in_the_cache_from_another_prompt_length(tmp_path):
    """A decoding loop's shared bucket of cache lengths is built at the call's length, which its dims show only inside
    s + 1 (the caches grown by torch.cat), and its cache key held those hints: the same loop from another prompt
    length, in a new process, built the same symbolic bucket again (on a GPU, tuned again). The key names the bucket
    now; only the first length of the new loop is a new (exact) build."""
    config = TunerConfig(target_cache_dir=tmp_path)
    generator = torch.Generator().manual_seed(0)
    builds = []
    for prompt in (4, 6):
        torch._dynamo.reset()
        model = CachedAttention()
        compiled = amk.compile(model, autotune=False, tuner_config=config, sdpa_attention=False)
        before = frontend.STATS.as_dict()
        k_cache, v_cache = (torch.randn(2, 2, prompt, 16, generator=generator).to(DEVICE) for _ in range(2))
        with torch.no_grad():
            for _ in range(4):
                q, k, v = (torch.randn(2, 2, 1, 16, generator=generator).to(DEVICE) for _ in range(3))
                expected = model(q, k, v, k_cache, v_cache)
                got = compiled(q, k, v, k_cache, v_cache)
                for have, want in zip(got, expected, strict=True):
                    torch.testing.assert_close(have, want, atol=1e-5, rtol=1e-5)
                _, k_cache, v_cache = got
        builds.append(frontend.STATS.as_dict()["pipeline_runs"] - before["pipeline_runs"])
    assert builds[1] == 1 < builds[0], builds


class CachedAttention(torch.nn.Module):
    """An attention step whose key and value caches grow by torch.cat, passed back in (benchmarks/decode_loop.py's);
    compiled with ``sdpa_attention=False``, its scores and softmax are amk's kernel."""

    def forward(self, q, k, v, k_cache, v_cache):
        k_cache, v_cache = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        probs = (q @ k_cache.transpose(-1, -2) * 0.25).softmax(-1)
        return probs @ v_cache, k_cache, v_cache


def test_a_prefill_from_empty_caches_fuses_its_attention():
    """Prompts prefilled from empty caches (length 0): the caches' length is 0, but the keys the attention reads are
    as long as the prompt (0 + T). Such a subgraph was left to PyTorch for "an empty dim", and TorchDynamo traces
    empty caches in a graph of their own, so every prefill's attention ran unfused; amk-bind-sizes refused the value
    0. A dim that is empty at the example still leaves its subgraph to PyTorch."""
    model = CachedAttention()
    compiled = amk.compile(model, autotune=False, sdpa_attention=False)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prompt in (5, 7):
            q, k, v = (torch.randn(2, 2, prompt, 16, generator=generator).to(DEVICE) for _ in range(3))
            empty = torch.zeros(2, 2, 0, 16, device=DEVICE)
            for got, want in zip(compiled(q, k, v, empty, empty), model(q, k, v, empty, empty), strict=True):
                torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert [sub.compiled for sub in graph.subgraphs] == [True], [sub.failure for sub in graph.subgraphs]


class Embeddings(torch.nn.Module):
    """BERT's embeddings: word, token-type and position embeddings summed, then LayerNorm; the positions a buffer
    sliced to the input's length."""

    def __init__(self):
        super().__init__()
        self.words, self.positions, self.token_types = (torch.nn.Embedding(100, 32), torch.nn.Embedding(64, 32),
                                                        torch.nn.Embedding(2, 32))
        self.register_buffer("position_ids", torch.arange(64).expand((1, -1)), persistent=False)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, ids):
        positions = self.position_ids[:, :ids.shape[1]]
        return self.norm(self.words(ids) + self.token_types(torch.zeros_like(ids)) + self.positions(positions))


def test_a_buffer_sliced_to_the_length_is_as_long_as_the_length():
    """The positions' slice has the length Min(64, L), which the size-oblivious trace does not bound: added to the
    [B, L, C] sum it did not broadcast in amk's IR ("s27 vs Min(64, s27)"), so the add ran in PyTorch and cut the
    chain in two subgraphs. TorchDynamo's guards settle Min(64, L) == L once the two are added: one dim, one
    subgraph, and one kernel (the positions [1, L, C] read through a map of the rows), every output right."""
    torch.manual_seed(0)
    model = Embeddings().to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in (8, 12, 20):
            ids = torch.randint(0, 100, (2, length), generator=generator).to(DEVICE)
            torch.testing.assert_close(compiled(ids), model(ids), atol=1e-5, rtol=1e-5)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    (subgraph,) = graph.subgraphs
    assert len(subgraph.nodes) == 3, subgraph.nodes
    assert not [node for node in graph.pytorch if "broadcast" in node.reason]
    assert len(subgraph.kernels) == 1 and not subgraph.unfused, (subgraph.kernels, subgraph.unfused)


class ExtendedMaskSoftmax(torch.nn.Module):
    """BERT's extended attention mask, computed from a [B, S] padding mask, added to the scaled scores."""

    def forward(self, scores, mask):
        return (scores / 8.0 + (1.0 - mask[:, None, None, :]) * -10000.0).softmax(-1)


def test_a_masks_arithmetic_before_it_meets_the_scores_is_in_the_softmaxs_kernel():
    """(1 - mask) * -10000 over the mask's [B, 1, 1, S] was a kernel of its own, its result written out for the
    softmax's (an op whose result had the mask's broadcast shape did not fuse, and a group began with it); it is now
    computed on the tiles of the rows it maps to, in the one kernel."""
    compiled = amk.compile(ExtendedMaskSoftmax(), autotune=False)
    generator = torch.Generator().manual_seed(0)
    for batch in (2, 3):
        scores = torch.randn(batch, 3, 5, 24, generator=generator).to(DEVICE)
        mask = (torch.rand(batch, 24, generator=generator) > 0.3).float().to(DEVICE)
        torch.testing.assert_close(compiled(scores, mask), ExtendedMaskSoftmax()(scores, mask), atol=1e-5, rtol=1e-5)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    (subgraph,) = graph.subgraphs
    assert len(subgraph.kernels) == 1 and not subgraph.unfused, subgraph.kernels


class MaskAndItsSum(torch.nn.Module):
    """A mask's arithmetic added to the scores and also reduced over its keys (returned beside them)."""

    def forward(self, scores, mask):
        extended = (1.0 - mask[:, None, None, :]) * -10000.0
        return scores / 8.0 + extended, extended.sum(-1, keepdim=True)


class BiasSoftmax(torch.nn.Module):
    """A per-column bias, scaled, added to the rows, then softmax: the group's first op is the row vector's."""

    def forward(self, x, bias):
        return (x + bias * 2.0).softmax(-1)


@pytest.mark.parametrize("model", [MaskAndItsSum, BiasSoftmax])
def test_a_reduction_of_broadcast_rows_or_a_row_vector_first_is_right(model):
    """A review found two groups the broadcast rows broke: a row reduction of the mask's broadcast rows was planned
    with the space's rows and failed at its first call (its output [B, 1, 1, 1] read as [B*H*T]), and a group whose
    first op is a row vector's raised a ValueError (the subgraph left to PyTorch). The reduction is a kernel of its
    own now, and the row vector's op is computed in the rows' kernel (it was a kernel of its own before either
    change)."""
    compiled = amk.compile(model(), autotune=False)
    generator = torch.Generator().manual_seed(0)
    for batch in (2, 3):
        scores = torch.randn(batch, 3, 5, 24, generator=generator).to(DEVICE)
        second = ((torch.rand(batch, 24, generator=generator) > 0.3).float() if model is MaskAndItsSum
                  else torch.randn(24, generator=generator)).to(DEVICE)
        torch.testing.assert_close(compiled(scores, second), model()(scores, second), atol=1e-5, rtol=1e-5)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    assert graph.subgraphs and all(not sub.failure for sub in graph.subgraphs), graph.subgraphs
    assert all(bucket.runs == "amk" for sub in graph.subgraphs for bucket in sub.buckets)
    if model is BiasSoftmax:  # the scaled bias is computed in the softmax's kernel, the rows' space
        assert [len(sub.kernels) for sub in graph.subgraphs] == [1], graph.subgraphs


class MaskedSoftmax(torch.nn.Module):
    """Attention probabilities from scores passed in, with a padding mask over the keys ([B, 1, 1, S], as BERT's
    extended mask) or a bias per head and position ([1, H, T, S], as T5's and ALiBi's)."""

    def forward(self, scores, mask):
        return (scores * 0.125 + mask).softmax(-1)


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 24), (1, 3, 5, 24), (1, 3, 1, 24)])
def test_a_mask_broadcast_over_heads_or_the_batch_is_read_in_the_softmaxs_kernel(mask_shape):
    """A mask broadcast over the leading dims was left to PyTorch ("a fused kernel reads an operand whole"), the
    scaled scores written out for it; the kernel now reads the mask's rows through a map of its own rows. The last
    case is a decoding step's bias [1, H, 1, S] (T5's, ALiBi's), whose 1 the space has too."""
    torch.manual_seed(0)
    compiled = amk.compile(MaskedSoftmax(), autotune=False)
    generator = torch.Generator().manual_seed(0)
    for batch in (2, 3):
        scores = torch.randn(batch, 3, mask_shape[2] if mask_shape[0] == 1 else 5, 24, generator=generator).to(DEVICE)
        mask = torch.randn(*((batch,) if mask_shape[0] > 1 else (1,)), *mask_shape[1:], generator=generator).to(DEVICE)
        torch.testing.assert_close(compiled(scores, mask), MaskedSoftmax()(scores, mask), atol=1e-5, rtol=1e-5)
    (graph,) = amk.explain(compiled, print_report=False).graphs
    (subgraph,) = graph.subgraphs
    assert len(subgraph.kernels) == 1 and not subgraph.unfused and not graph.pytorch, subgraph.unfused


def test_a_reduction_without_keepdim_buckets_the_sequence_length(tmp_path):
    """Linear then logsumexp(-1) over [B, T, C], as a per-token log-partition: [B, T] holds a value per row, so new
    sequence lengths share the row buckets; T taken for the columns, each length was a build of its own."""
    class PerTokenLogPartition(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(32, 64)

        def forward(self, x):
            return self.head(x).logsumexp(-1)

    model = PerTokenLogPartition().to(DEVICE)
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in (5, 6, 7, 9, 11):
            x = torch.randn(2, length, 32, generator=generator).to(DEVICE)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert [b.sizes for b in only_subgraph(compiled).buckets] == ["2 <= M <= 16", "17 <= M <= 64"]


def test_an_empty_outer_batch_on_the_first_call_runs_pytorch():
    """x of [0, T, C] on a 3-D Linear's first call: the bucket's hints divided the bound by the outer sizes' product,
    0 (a ZeroDivisionError wrapped in TorchDynamo's BackendCompilerFailed); empty, it is built as one too large."""
    assert SizeBuckets(("t", "b"), 2).hints(1, (5, 0)) == {"t": 1, "b": 1}
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU()).to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    with torch.no_grad():
        for shape in ((0, 5, 32), (2, 5, 32)):
            x = torch.randn(shape, device=DEVICE)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


def test_an_empty_row_length_leaves_its_graph_to_pytorch_without_a_warning(caplog):
    """A softmax first called on [3, 0] (TorchDynamo traces empty tensors in a graph of their own): its build bound
    the row length 0, amk-bind-sizes refused it, and a warning said the subgraph "did not compile"."""
    def scaled_softmax(x):
        return torch.softmax(x, -1) * 3.0

    compiled = amk.compile(scaled_softmax, dynamic=True, autotune=False)
    with torch.no_grad(), caplog.at_level("WARNING", logger="amk"):
        for shape in ((3, 0), (4, 8)):
            x = torch.randn(shape, device=DEVICE)
            torch.testing.assert_close(compiled(x), scaled_softmax(x))
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    empty, full = (graph.subgraphs[0] for graph in amk.explain(compiled, print_report=False).graphs)
    assert "empty dim" in empty.failure and full.compiled


def test_a_weight_passed_as_an_argument_is_not_bucketed_as_rows(tmp_path):
    """relu(x @ w.t()) with both leading dims symbolic (dynamic=None): w's leading dim is the results' columns N, kept
    exact (a build per value), not a second row symbol; the bucket is x's row count, built for it."""
    def linear_relu_of(x, w):
        return torch.relu(x @ w.t())

    compiled = amk.compile(linear_relu_of, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    generator = torch.Generator().manual_seed(0)
    x, w = (torch.randn(rows, 32, generator=generator).to(DEVICE) for rows in (100, 48))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), linear_relu_of(x, w), atol=1e-5, rtol=1e-5)
    (bucket,) = only_subgraph(compiled).buckets
    rows, columns = bucket.hints
    assert bucket.sizes == f"65 <= M <= 128, {columns} = 48" and bucket.hints == {rows: 128, columns: 48}
    assert "[skinny_m]" not in bucket.kernels[0]


@pytest.mark.parametrize("bad", ["16", [0], [2.0], [True], [], 3, {16: 2}, [2 ** 30 + 1], torch.tensor(16),
                                 numpy.array(16), [torch.tensor(True)], [numpy.True_]])
def test_tune_sizes_are_checked(bad):
    with pytest.raises(InvalidArgumentError, match="tune_sizes must be None or a non-empty list of row counts"):
        check_tune_sizes(bad)
    with pytest.raises(InvalidArgumentError, match="tune_sizes must be"):
        amk.compile(torch.nn.ReLU(), tune_sizes=bad)
    assert check_tune_sizes(range(1, 3)) == (1, 2)
    assert check_tune_sizes([numpy.int64(16), 4096]) == (16, 4096)  # sizes computed with numpy
    assert bucket_of(check_tune_sizes([2 ** 30])[0]) == 2 ** 30  # the largest bucket tune_sizes may build


# --------------------------------------------------------------------------------------------------------------------
# The build service and the tuner at size hints
# --------------------------------------------------------------------------------------------------------------------


def test_a_bucket_is_built_for_its_sizes_and_runs_every_size(tmp_path):
    """The hints are part of the key and choose the strategy (split_k at M = 1, the tile grid at M = 4096) and the
    heuristic configuration; either program is symbolic in M and correct for any row count."""
    def request(hints):
        return BuildRequest(symbolic_module, [("s0", K), (K, 32)], torch.float32, autotune=False,
                            tuner_config=TunerConfig(target_cache_dir=tmp_path), size_hints=hints)

    decode, prefill, unhinted = build(request((("s0", 1),))), build(request((("s0", 4096),))), build(request(()))
    assert len({decode.key, prefill.key, unhinted.key}) == 3
    assert decode.meta["settings"]["size_hints"] == {"s0": 1} and "size_hints" not in unhinted.meta["settings"]
    assert (strategy_of(decode), strategy_of(prefill), strategy_of(unhinted)) == ("split_k", "tile2d", "tile2d")
    assert decode.compiled.kernels["fused_0"].config.BLOCK_M == 16
    assert prefill.compiled.kernels["fused_0"].config.BLOCK_M == 128
    generator = torch.Generator().manual_seed(0)
    w = (torch.randn(K, 32, generator=generator) / K ** 0.5).to(DEVICE)
    for rows in (1, 5, 70):
        x = torch.randn(rows, K, generator=generator).to(DEVICE)
        for built in (decode, prefill):
            (out,) = built.compiled.program(x, w)
            torch.testing.assert_close(out, torch.relu(x @ w), atol=1e-4, rtol=1e-4)


def test_kernels_are_tuned_where_every_size_has_a_value(monkeypatch, tmp_path):
    """Which kernels the build service hands to the tuner (as on a GPU): a static split_k kernel (its workspace
    dims hold tile sizes, which the tuner chooses), a symbolic one with a hint for every size; not one whose row
    count has no value to time at, nor one bound by its launch at its hint (both keep the heuristic)."""
    tuned = []

    def tuner(settings, grid, on_tuned, known, fp32_dot, size_hints, learned, beaten_at_ms):  # autotune_chooser's signature
        def choose(kernel):
            tuned.append(kernel.strategy.data)
            return amk.pipeline.heuristic_config(kernel, size_hints)
        return choose

    monkeypatch.setattr(amk.build, "autotune_chooser", tuner)
    monkeypatch.setattr(BuildRequest, "timed", property(lambda self: True))
    monkeypatch.setattr(amk.build, "start_compile_workers", lambda: None)  # the tuning is faked: nothing to compile
    # One program's kernels: fp32 chains under "highest" would also build the vendor-GEMM program to time against it.
    cache = TunerConfig(target_cache_dir=tmp_path, vendor_gemm=False)
    static = BuildRequest(lambda: amk.oplist.build_module(["matmul", "relu"], [(64, K), (K, 32)], torch.float32),
                          [(64, K), (K, 32)], torch.float32, tuner_config=cache)
    build(static, save=False)
    assert tuned == ["split_k"]
    for hints, expected, why in [((("s0", 64),), ["split_k"], None), ((("s0", 1),), [], "launch-bound at 1 x 32"),
                                 ((), [], "sizes without a value to tune at (s0)")]:
        tuned.clear()
        built = build(BuildRequest(symbolic_module, [("s0", K), (K, 32)], torch.float32, tuner_config=cache,
                                   size_hints=hints), save=False)
        assert tuned == expected
        if why:  # the kernel's log says why it kept the heuristic
            (trial,) = built.tuning_log["fused_0"]
            assert trial["status"] == "untimed" and why in trial["detail"], trial


def symbolic_kernel(size_hints: str = "") -> tiled_loop.KernelOp:
    module = symbolic_module()
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass(size_hints=size_hints).apply(ctx, module)
    (kernel,) = [op for op in module.walk() if isinstance(op, tiled_loop.KernelOp)]
    return kernel


def test_a_bucket_too_small_to_tune_is_launch_bound_only_at_its_sizes():
    """One row of a 1024 x 32 linear moves 135 KB and does 32768 multiply-adds: bound by its launch, not searched;
    64 rows move 401 KB; without a value for the row count nothing is known."""
    from amk.tuner import launch_bound_reason

    kernel = symbolic_kernel()
    assert "launch-bound at 1 x 32 x 1024" in launch_bound_reason(kernel, {"s0": 1})
    assert launch_bound_reason(kernel, {"s0": 64}) is None
    assert launch_bound_reason(kernel) is None


def test_the_tuner_searches_a_symbolic_kernel_at_the_hints(monkeypatch):
    """A split_k kernel symbolic in M: at M = 64 its search space holds BLOCK_M = 64 only (one row tile covers the
    bucket); the candidates' compile jobs and example arguments have the hinted shapes."""
    kernel = symbolic_kernel("s0=64")
    assert kernel.strategy.data == "split_k"
    timed = []
    monkeypatch.setattr(amk.tuner, "measure", lambda launch, *args, **kwargs: launch() or 1.0)

    def build_and_run(config: KernelConfig):
        return (lambda: timed.append(config)), (lambda: None)

    hints = {"s0": 64}
    heuristic = amk.pipeline.heuristic_config(kernel, hints)
    assert heuristic.BLOCK_M == 64 and amk.pipeline.heuristic_config(kernel).BLOCK_M == 64  # bounded: 64 at most
    best, trials = tune(kernel, TunerConfig(search="random", search_budget=6), None, heuristic, build_and_run,
                        size_hints=hints)
    assert timed and {config.BLOCK_M for config in timed} == {64}
    assert config_key(best) in {config_key(config) for config in timed}
    _, trials = tune(kernel, TunerConfig(search="random", search_budget=6), None, heuristic, build_and_run)
    assert {t.config.BLOCK_M for t in trials if t.status == "ok"} == {16}  # without hints: the symbolic default
    shapes = call_arguments(kernel, heuristic, hints)  # what a compile worker's job is captured on
    assert shapes[0] == ((64, K), "float32", (K, 1)) and shapes[2] == ((64, 32), "float32", (32, 1))
    x = amk.tuner.kernel_example_arguments(kernel, heuristic, DEVICE, hints)[0]
    assert tuple(x.shape) == (64, K)


# --------------------------------------------------------------------------------------------------------------------
# amk.compile: a build per bucket, picked per call, no recompilation
# --------------------------------------------------------------------------------------------------------------------

FEATURES = 32


def linear_relu() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, FEATURES), torch.nn.ReLU()).to(DEVICE)


def batch(rows: int) -> torch.Tensor:
    return torch.randn(rows, FEATURES, generator=torch.Generator().manual_seed(rows)).to(DEVICE)


def only_subgraph(compiled) -> amk.frontend.reports.SubgraphReport:
    (graph,) = amk.explain(compiled, print_report=False).graphs
    (subgraph,) = graph.subgraphs
    return subgraph


@pytest.mark.skipif(GPU, reason="a GPU tunes and times each bucket: see test_buckets_are_tuned_and_raced_on_a_gpu")
def test_each_bucket_gets_its_own_build_without_recompiling(tmp_path):
    """Batches 1, 3, 8, 17: three buckets (3 and 8 share 2..16), three builds with their own strategy and
    configuration, one TorchDynamo graph, every output right."""
    model = linear_relu()
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    before = frontend.STATS.as_dict()
    dynamo_frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for rows in (1, 3, 8, 17):
            torch.testing.assert_close(compiled(batch(rows)), model(batch(rows)), atol=1e-5, rtol=1e-5)
    after = frontend.STATS.as_dict()
    assert after["graphs"] - before["graphs"] == 1, "changing the batch size recompiled the graph"
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - dynamo_frames == 1
    assert after["pipeline_runs"] - before["pipeline_runs"] == 3 and after["kernel_calls"] - before["kernel_calls"] == 4
    assert after["fallbacks"] == before["fallbacks"]
    buckets = only_subgraph(compiled).buckets
    assert [b.sizes for b in buckets] == ["M = 1", "2 <= M <= 16", "17 <= M <= 64"]
    assert [b.hints for b in buckets] == [{s: m} for s, m in zip([next(iter(buckets[0].hints))] * 3, (1, 16, 64))]
    assert all(b.runs == AMK and b.note.startswith("not timed: no GPU") for b in buckets)
    assert buckets[2].kernels[0] != buckets[1].kernels[0]  # BLOCK_M 64 for up to 64 rows, 16 below
    assert "[skinny_m] BLOCK_M=64" in buckets[2].kernels[0] and "[skinny_m] BLOCK_M=16" in buckets[1].kernels[0]


def test_only_calls_that_may_compile_mark_their_leading_dims(tmp_path):
    """Marking an argument's leading dims dynamic (and the flag that keeps batches of 1 symbolic) matters only when
    TorchDynamo traces the call, and a marked tensor's guards run longer: a call like the last one is not marked;
    one with a new batch size, new strides or another grad mode is, and a new batch size still compiles nothing."""
    model = linear_relu()
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))

    def marked(x: torch.Tensor) -> bool:
        return 0 in getattr(x, "_dynamo_weak_dynamic_indices", set())

    with torch.no_grad():
        calls = [batch(8), batch(8), batch(8), batch(5), batch(5)]
        for x in calls:
            compiled(x)
        dynamo_frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        again = batch(9)
        compiled(again)
    assert [marked(x) for x in calls] == [True, False, False, True, False]
    assert marked(again) and torch._dynamo.utils.counters["stats"]["unique_graphs"] == dynamo_frames
    with torch.no_grad():
        strided = batch(9).t().contiguous().t()  # the same shape in column-major order
        compiled(strided)
    assert marked(strided)
    with torch.enable_grad():
        graded = batch(9)
        compiled(graded)
    assert marked(graded)


class _GeluOfLinearPlus(torch.nn.Module):
    """``gelu(linear(x) + cond)``, ``cond`` ``[B, N]`` or ``[1, N]`` (broadcast over the batch); with
    ``graph_break``, a call of Python between the two that TorchDynamo cannot trace (the graph before it runs)."""

    def __init__(self, graph_break: bool = False):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, FEATURES)
        self.graph_break = graph_break
        self.breaks = 0

    def forward(self, x, cond):
        y = self.linear(x)
        if self.graph_break:
            self.breaks += 1
            torch._dynamo.graph_break()
        return torch.nn.functional.gelu(y + cond)


def test_a_second_argument_may_broadcast_after_a_call_where_it_did_not(tmp_path):
    """A second argument of shape [1, N] after [B, N]: TorchDynamo makes its dim dynamic on the retrace and amk's
    size-oblivious tracing failed ("size of tensor a must match size of tensor b"). That trace was of the call's own
    frame, so nothing of the call had run: it is traced again without the flag (the dim specializes to 1), and every
    mix of batches then runs on those two graphs."""
    model = _GeluOfLinearPlus().to(DEVICE)
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for rows, cond_rows in [(4, 4), (4, 1), (7, 1), (7, 7), (1, 1), (9, 1)]:
            x, cond = batch(rows), torch.randn(cond_rows, FEATURES, device=DEVICE)
            torch.testing.assert_close(compiled(x, cond), model(x, cond), atol=1e-5, rtol=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2



class _CausalUnlessOneToken(torch.nn.Module):
    """Layers of attention as Hugging Face's SDPA attention writes it: ``is_causal = q_len > 1 and ...``, a Python
    bool that ``scaled_dot_product_attention`` requires, with the keys of a cache passed in, and the position ids
    [B, T] passed beside the input (a rotation of it broadcasts with their length)."""

    def __init__(self, layers: int = 3):
        super().__init__()
        self.projections = torch.nn.ModuleList(torch.nn.Linear(FEATURES, FEATURES) for _ in range(layers))

    def forward(self, x, positions, caches):
        x = x * torch.cos(positions.float())[..., None]
        tokens = x.shape[1]
        for index, projection in enumerate(self.projections):
            q = projection(x)
            keys = caches[index][:, :tokens] if tokens > 1 else caches[index]
            is_causal = tokens > 1 and projection.training is False
            x = x + torch.nn.functional.scaled_dot_product_attention(q, keys, keys, is_causal=is_causal)
        return x


def test_a_decoding_steps_one_token_is_a_number_the_model_may_test():
    """A prompt of 4 tokens, then steps of one: the step's length of 1 was marked dynamic in the input (or made so,
    in the position ids, by TorchDynamo's automatic dynamic shapes under amk's size-oblivious tracing), so
    ``q_len > 1`` was a SymBool, a graph break at ``scaled_dot_product_attention`` in every layer and a recompile of
    each resumed layer (past 8, TorchDynamo's limit, the rest ran untraced). Now the step's length is static in both,
    as in torch.compile: two graphs, no break, for any batch."""
    model = _CausalUnlessOneToken().to(DEVICE).eval()
    compiled = amk.compile(model, autotune=False)
    caches = [torch.randn(3, 6, FEATURES, device=DEVICE) for _ in model.projections]
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    with torch.no_grad():
        for batch, tokens in ((2, 4), (2, 1), (2, 1), (3, 1)):
            x = torch.randn(batch, tokens, FEATURES, device=DEVICE)
            positions = torch.arange(tokens, device=DEVICE).expand(batch, tokens) + 2
            expected = model(x, positions, [cache[:batch] for cache in caches])
            torch.testing.assert_close(compiled(x, positions, [cache[:batch] for cache in caches]), expected,
                                       atol=1e-5, rtol=1e-5)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == breaks
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2

class _LinearsAcrossAGraphBreak(torch.nn.Module):
    """``softmax(linear(relu(linear(x))))`` with a graph break after the ReLU: TorchDynamo resumes the rest of
    ``forward`` in a frame of its own, whose argument is the first graph's output, not a tensor amk.compile marks."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(FEATURES, 2 * FEATURES), torch.nn.Linear(2 * FEATURES, FEATURES)

    def forward(self, x):
        hidden = torch.relu(self.first(x))
        torch._dynamo.graph_break()
        return torch.softmax(self.second(hidden), dim=-1)


@pytest.mark.parametrize("marker", ["installed", "weak dynamic indices"])
def test_the_frame_resumed_after_a_graph_break_compiles_once_for_every_batch(marker, monkeypatch, tmp_path):
    """The first graph marks its outputs' symbolic dims (the batch), so the resumed frame is traced with its batch
    dynamic from its first call, its feature dims static: batches 1, 3, 8 and 17 take two TorchDynamo graphs, one a
    frame, where the resumed frame was traced static at the first batch and again at the second. ``marker``: the
    installed torch's mark for propagated dims, or maybe_mark_dynamic's attribute set as AOTAutograd sets it (torch
    2.11's)."""
    if marker == "weak dynamic indices":
        monkeypatch.setattr(amk.frontend.backend, "_dynamic_dims_marker", lambda: amk.frontend.backend._mark_weakly_dynamic)
    torch.manual_seed(0)
    model = _LinearsAcrossAGraphBreak().to(DEVICE)
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for rows in (1, 3, 8, 17):
            torch.testing.assert_close(compiled(batch(rows)), model(batch(rows)), atol=1e-5, rtol=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 2
    report = amk.explain(compiled, print_report=False)
    resumed = report.graphs[-1].subgraphs[0]
    assert [b.sizes for b in resumed.buckets] == ["M = 1", "2 <= M <= 16", "17 <= M <= 64"]
    assert all(len(b.hints) == 1 for b in resumed.buckets)  # one size symbol: the features are numbers


def test_the_mark_is_the_installed_torchs_whatever_was_imported_before():
    """Asked for before TorchDynamo has compiled anything (a fresh process), the mark is still the installed torch's
    unguarded one where it has it: AOTAutograd's runtime wrappers imported alone raise a circular ImportError."""
    import subprocess
    import sys

    check = ("from amk.frontend import backend\n"
             "marker = backend._dynamic_dims_marker()\n"
             "from torch._functorch._aot_autograd import runtime_wrappers\n"
             "assert marker is (getattr(runtime_wrappers, 'mark_dynamo_propagated_dynamic_indices', None) or "
             "getattr(runtime_wrappers, 'maybe_mark_dynamic_helper', None) or backend._mark_weakly_dynamic), marker\n")
    subprocess.run([sys.executable, "-c", check], check=True)


def test_a_trace_failing_after_a_graph_break_is_not_made_again(tmp_path):
    """The same failure in the frame resumed after a graph break: the graph before it has run (and the Python between
    them), so the call is not made again; the error reaches the caller. Later calls trace without the size-oblivious
    flag: they failed the same way, every one of them (a decoding loop raised on every step)."""
    model = _GeluOfLinearPlus(graph_break=True).to(DEVICE)
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    with torch.no_grad():
        compiled(batch(4), torch.randn(4, FEATURES, device=DEVICE))
        with pytest.raises(torch._dynamo.exc.TorchRuntimeError):
            compiled(batch(4), torch.randn(1, FEATURES, device=DEVICE))
        assert model.breaks == 2  # once a call: what ran before the failed frame ran once, not again
        for rows, cond_rows in [(4, 1), (6, 1), (6, 6), (1, 1)]:
            x, cond = batch(rows), torch.randn(cond_rows, FEATURES, device=DEVICE)
            torch.testing.assert_close(compiled(x, cond), model(x, cond), atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(GPU, reason="checks the untimed report of a CPU build")
def test_tune_sizes_are_built_ahead_and_explained(tmp_path):
    model = linear_relu()
    runs = frontend.STATS.pipeline_runs
    compiled = amk.compile(model, batch(3), tune_sizes=[1, 300], tuner_config=TunerConfig(target_cache_dir=tmp_path))
    assert frontend.STATS.pipeline_runs - runs == 3  # the example's bucket, M = 1 and 257..512
    buckets = {b.sizes: b for b in only_subgraph(compiled).buckets}
    assert list(buckets) == ["2 <= M <= 16", "M = 1", "257 <= M <= 512"]
    assert buckets["257 <= M <= 512"].note.startswith("not called yet")
    assert "[tile2d] BLOCK_M=128" in buckets["257 <= M <= 512"].kernels[0]
    with torch.no_grad():
        torch.testing.assert_close(compiled(batch(300)), model(batch(300)), atol=1e-5, rtol=1e-5)
    assert frontend.STATS.pipeline_runs - runs == 3, "a bucket built ahead was built again"
    text = str(amk.explain(compiled, print_report=False))
    assert "257 <= M <= 512 (built for s" in text and "not timed: no GPU (the kernels run in Triton's interpreter)" in text
    # where each bucket's build time went: the passes and the Triton source at least (a new cache: nothing reused)
    assert all(b.build_phases["total"] >= b.build_phases["emit"] > 0 for b in buckets.values())
    assert text.count("; built in ") == 3
    assert "not timed: autotune is off" in str(amk.explain(model, batch(2), print_report=False))


def test_tensors_where_the_kernels_cannot_run_leave_the_graph_to_pytorch():
    assert _off_device_reason([torch.empty(2, device="meta"), 3]) == (
        f"its tensors are on meta and amk's kernels run on {DEVICE}")
    assert _off_device_reason([torch.empty(2, device=DEVICE), 3]) is None
    assert _off_device_reason([torch.empty(2, device=DEVICE), torch.empty(2, device="meta")]) is None  # checked per call
    assert _off_device_reason([torch.empty(2, device=DEVICE), torch.tensor(1.0, device="meta")]) is None


@pytest.mark.skipif(not GPU, reason="on a GPU machine, a model left on the CPU has no kernels to run")
def test_a_model_on_the_cpu_of_a_gpu_machine_runs_in_pytorch_and_says_why(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, FEATURES), torch.nn.ReLU())
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    runs = frontend.STATS.pipeline_runs
    inputs = torch.randn(4, FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(compiled(inputs), model(inputs))
    assert frontend.STATS.pipeline_runs == runs, "kernels were built for tensors they cannot run on"
    subgraph = only_subgraph(compiled)
    assert not subgraph.compiled and "its tensors are on cpu and amk's kernels run on cuda" in subgraph.failure


def test_explain_of_a_compiled_module_validates_its_arguments():
    compiled = amk.compile(linear_relu(), autotune=False)
    with pytest.raises(InvalidArgumentError, match="explain takes neither"):
        amk.explain(compiled, dynamic=True)
    with pytest.raises(InvalidArgumentError, match="only a module compiled by amk.compile"):
        amk.explain(linear_relu())


# --------------------------------------------------------------------------------------------------------------------
# Never slower than PyTorch: the decision, and what records it
# --------------------------------------------------------------------------------------------------------------------


def test_the_faster_of_the_kernels_and_pytorch_runs():
    assert decide(0.010, 0.020) == AMK and decide(0.030, 0.020) == PYTORCH and decide(0.020, 0.020) == AMK
    report = BucketReport("2 <= M <= 16", {"s0": 16}, ["fused_0 [split_k] BLOCK_M=16"])
    report.timed(0.031, 0.024)
    assert (report.runs, report.amk_ms, report.pytorch_ms) == (PYTORCH, 0.031, 0.024)
    assert str(report).startswith("2 <= M <= 16 (built for s0=16): runs PyTorch; timed on its first call: amk "
                                  "0.0310 ms, PyTorch 0.0240 ms: PyTorch is faster")


@pytest.mark.skipif(GPU, reason="times the CPU interpreter, which a GPU does not use")
def test_a_bucket_runs_what_won_its_race(monkeypatch, tmp_path):
    """The race itself, with real timings (the CPU's wall clock, as ``time_ms`` measures without a GPU): once timed,
    as on a GPU, the bucket records both times and runs the faster from its second call on (the kernels in Triton's
    interpreter are usually far slower than PyTorch's own ops; a loaded machine may say otherwise)."""
    monkeypatch.setattr(amk.frontend.backend, "_untimed_reason", lambda settings: None)
    model = linear_relu()
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))
    fallbacks, calls = frontend.STATS.fallbacks, frontend.STATS.kernel_calls
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(batch(4)), model(batch(4)), atol=1e-5, rtol=1e-5)
    (bucket,) = only_subgraph(compiled).buckets
    assert bucket.amk_ms > 0 and bucket.pytorch_ms > 0 and bucket.runs == decide(bucket.amk_ms, bucket.pytorch_ms)
    assert bucket.note.startswith("timed on its first call (wall clock): amk ")
    second_call_ran_kernels = bucket.runs == AMK
    assert frontend.STATS.kernel_calls - calls == 1 + second_call_ran_kernels
    assert frontend.STATS.fallbacks - fallbacks == (not second_call_ran_kernels)


@pytest.mark.skipif(GPU, reason="times the CPU interpreter, which a GPU does not use")
def test_a_cached_bucket_is_decided_by_its_recorded_race(monkeypatch, tmp_path):
    """A later compile loading the bucket's program from the cache (a warm start) takes the race's times as the
    first call recorded them, without timing or checking again; a record made without checking does not spare a
    verifying compile its check."""
    monkeypatch.setattr(amk.frontend.backend, "_untimed_reason", lambda settings: None)
    model, config = linear_relu(), TunerConfig(target_cache_dir=tmp_path)

    def first_bucket(verify: bool):
        compiled = amk.compile(model, tuner_config=config, verify=verify)
        with torch.no_grad():
            torch.testing.assert_close(compiled(batch(4)), model(batch(4)), atol=1e-5, rtol=1e-5)
        (bucket,) = only_subgraph(compiled).buckets
        return bucket

    unchecked = first_bucket(verify=False)
    assert not unchecked.cached and unchecked.note.startswith("timed on its first call")
    checked = first_bucket(verify=True)  # from the cache, but its record says nothing about the outputs
    assert checked.cached and checked.note.startswith("timed on its first call")
    assert checked.amk_ms != unchecked.amk_ms
    warm = first_bucket(verify=True)
    assert warm.cached and warm.note.startswith("timed on a first call before, as recorded: amk ")
    assert (warm.amk_ms, warm.pytorch_ms, warm.runs) == (checked.amk_ms, checked.pytorch_ms, checked.runs)


# --------------------------------------------------------------------------------------------------------------------
# The call path
# --------------------------------------------------------------------------------------------------------------------


def test_each_size_gets_one_launcher_made_on_its_first_call(monkeypatch):
    """Made by Program.fast_path (a Linear's kernel views its weight transposed: the view is found once too), once
    per size; an empty batch runs PyTorch."""
    made = []
    fast_path = amk.runtime.Program.fast_path

    def counted(self, bindings, device, *operands):
        made.append(dict(bindings))
        return fast_path(self, bindings, device, *operands)

    monkeypatch.setattr(amk.runtime.Program, "fast_path", counted)
    model = linear_relu()
    compiled = amk.compile(model, autotune=False)
    with torch.no_grad():
        for rows in (2, 2, 5, 2, 5):
            torch.testing.assert_close(compiled(batch(rows)), model(batch(rows)), atol=1e-5, rtol=1e-5)
        assert [list(bindings.values()) for bindings in made] == [[2], [5]]
        empty = compiled(batch(0))
    assert empty.shape == (0, FEATURES)


@pytest.mark.skipif(not GPU, reason="tunes on the GPU")
def test_buckets_are_tuned_and_raced_on_a_gpu(tmp_path):
    """On a GPU with autotuning: each bucket's kernels are tuned at its sizes and timed against PyTorch on its
    first call; the report holds both times and the faster runs. Each build timed the PyTorch ops first, on random
    inputs (a kernel slower than them is not refined), and explain says so."""
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU()).to(DEVICE, torch.float16)
    compiled = amk.compile(model, tune_sizes=[1, 256],
                           tuner_config=TunerConfig(search_budget=4, target_cache_dir=tmp_path))
    with torch.no_grad():
        for rows in (1, 256):
            x = torch.randn(rows, 512, device=DEVICE, dtype=torch.float16)
            torch.testing.assert_close(compiled(x), model(x), atol=2e-2, rtol=2e-2)
    buckets = only_subgraph(compiled).buckets
    assert [b.sizes for b in buckets][:2] == ["M = 1", "129 <= M <= 256"]
    for bucket in buckets[:2]:
        assert bucket.amk_ms > 0 and bucket.pytorch_ms > 0 and bucket.runs == decide(bucket.amk_ms, bucket.pytorch_ms)
        assert bucket.build_times["pytorch_ops"] > 0 and "pytorch_ops" in str(bucket)


def test_a_new_bucket_is_left_to_pytorch_inside_a_cuda_graph_capture(monkeypatch, tmp_path):
    """Building, tuning, verifying and timing a bucket cannot be captured: a call captured before its bucket was built
    and checked runs the PyTorch ops and keeps no launcher; the next uncaptured call builds and checks the bucket. No
    GPU here captures a graph, so the capture check is patched to answer what it answers inside one (the real capture:
    test_a_new_bucket_can_be_captured_into_a_cuda_graph)."""
    model = linear_relu()
    # A cache of its own: the bucket built after the capture is a pipeline run whatever other tests built before.
    compiled = amk.compile(model, autotune=False, tuner_config=amk.TunerConfig(target_cache_dir=tmp_path))
    with torch.no_grad():
        compiled(batch(3))  # built and checked outside the capture
        runs, fallbacks, calls = frontend.STATS.pipeline_runs, frontend.STATS.fallbacks, frontend.STATS.kernel_calls
        monkeypatch.setattr(amk.frontend.subgraph, "stream_capturing", lambda: True)
        for rows in (40, 40, 5):
            torch.testing.assert_close(compiled(batch(rows)), model(batch(rows)), atol=1e-5, rtol=1e-5)
        assert frontend.STATS.pipeline_runs == runs and frontend.STATS.fallbacks - fallbacks == 2
        assert frontend.STATS.kernel_calls - calls == 1  # 5 rows: a new size of a checked bucket launches its kernels
        assert [b.sizes for b in only_subgraph(compiled).buckets] == ["2 <= M <= 16"]
        monkeypatch.undo()
        torch.testing.assert_close(compiled(batch(40)), model(batch(40)), atol=1e-5, rtol=1e-5)
    assert frontend.STATS.pipeline_runs - runs == 1 and frontend.STATS.kernel_calls - calls == 2
    buckets = {b.sizes: b for b in only_subgraph(compiled).buckets}
    assert buckets["17 <= M <= 64"].runs == AMK and buckets["17 <= M <= 64"].note.startswith("not timed")


@pytest.mark.skipif(not GPU, reason="captures a CUDA graph")
def test_a_new_bucket_can_be_captured_into_a_cuda_graph():
    model = linear_relu()
    compiled = amk.compile(model, autotune=False)
    with torch.no_grad():
        compiled(batch(3))
        x = batch(40)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled(x)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, model(x), atol=1e-4, rtol=1e-4)
        assert [b.sizes for b in only_subgraph(compiled).buckets] == ["2 <= M <= 16"]
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert [b.sizes for b in only_subgraph(compiled).buckets] == ["2 <= M <= 16", "17 <= M <= 64"]


def test_a_bucket_whose_first_call_fails_is_left_to_pytorch(monkeypatch, caplog):
    """The kernels' launch raises on the bucket's first call (once): that call returns PyTorch's outputs, the bucket
    runs PyTorch from then on (other sizes in it too), and explain says why."""
    fast_path = amk.runtime.Program.fast_path
    failures = ["launch failed"]

    def failing_once(self, bindings, device, *operands):
        launch = fast_path(self, bindings, device, *operands)

        def run(tensors):
            if failures:
                raise RuntimeError(failures.pop())
            return launch(tensors)
        return run

    monkeypatch.setattr(amk.runtime.Program, "fast_path", failing_once)
    model = linear_relu()
    compiled = amk.compile(model, autotune=False)
    calls, fallbacks = frontend.STATS.kernel_calls, frontend.STATS.fallbacks
    with torch.no_grad(), caplog.at_level("WARNING", logger="amk.frontend"):
        for rows in (3, 3, 5):
            torch.testing.assert_close(compiled(batch(rows)), model(batch(rows)), atol=1e-5, rtol=1e-5)
    assert not failures and frontend.STATS.fallbacks - fallbacks == 3
    assert frontend.STATS.kernel_calls - calls == 1  # the failed first call only
    (bucket,) = only_subgraph(compiled).buckets
    assert bucket.runs == PYTORCH
    assert bucket.note.startswith("failed on the first call of s") and bucket.note.endswith("RuntimeError: launch failed")
    assert bucket.note in str(amk.explain(compiled, print_report=False))
    (warning,) = [record for record in caplog.records if record.levelname == "WARNING"]
    assert "run in PyTorch from now on" in warning.getMessage()


def test_workspaces_are_dropped_with_the_launchers(monkeypatch):
    """A matmul followed by a softmax over a long contraction runs tile_stats, whose workspace holds a row per row of
    M: one workspace per size. When the launchers start over, the workspaces go with them."""
    monkeypatch.setattr(amk.frontend.subgraph, "MAX_LAUNCHERS", 2)
    programs = set()
    fast_path = amk.runtime.Program.fast_path

    def recorded(self, bindings, device, *operands):
        programs.add(self)
        return fast_path(self, bindings, device, *operands)

    monkeypatch.setattr(amk.runtime.Program, "fast_path", recorded)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(K, FEATURES), torch.nn.Softmax(dim=-1)).to(DEVICE)
    compiled = amk.compile(model, autotune=False)
    with torch.no_grad():
        for rows in range(2, 8):
            x = torch.randn(rows, K, generator=torch.Generator().manual_seed(rows)).to(DEVICE)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert "[tile_stats]" in only_subgraph(compiled).buckets[0].kernels[0]
    assert sum(len(program.workspaces) for program in programs) <= 2  # six sizes called


def test_explain_shows_the_strategy_that_was_built():
    """A softmax under ``dynamic=True``: its row length is kept exact, a number in its build (amk-bind-sizes), so
    ``auto`` takes row_resident, which holds a row of known length; the subgraph's kernel (what explain describes
    before any call) and its bucket's build both say row_resident."""
    compiled = amk.compile(torch.nn.Softmax(dim=-1), autotune=False, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(4, 64).to(DEVICE))
    subgraph = only_subgraph(compiled)
    (kernel,) = subgraph.kernels
    (bucket,) = subgraph.buckets
    assert kernel.strategy == "row_resident" and "[row_resident]" in bucket.kernels[0]


@pytest.mark.parametrize("sources, expected", [
    ([], ()),
    ([SymbolSource("s0", 1, None)], (5,)),  # a size TorchDynamo passes as an int argument
    ([SymbolSource("s0", 0, 1)], (3,)),  # a tensor's dim
    ([SymbolSource("s0", 1, None), SymbolSource("s1", 2, None)], (5, 7)),
    ([SymbolSource("s0", 2, None), SymbolSource("s1", 0, 0)], (7, 2)),
])
def test_each_symbol_is_read_where_its_source_says(sources, expected):
    """The size reader of a subgraph's call: ints by position, tensor dims from the tensor, in the symbols' order."""
    assert _size_reader(sources)((torch.zeros(2, 3), 5, 7)) == expected


@pytest.mark.skipif(GPU, reason="fakes the race's timing on the CPU")
def test_under_autocast_pytorchs_side_of_the_race_casts_its_weights_every_call(monkeypatch, tmp_path):
    """The race times PyTorch's ops back to back inside the first call's autocast region, where autocast keeps its
    cast of an fp32 weight: PyTorch's side skipped the casts each call of a model pays (0.069 ms against 0.109 per
    call for an autocast Linear on the H100; the kernels cast every call), and won. Each timed call casts again."""
    from torch.utils._python_dispatch import TorchDispatchMode

    model = linear_relu()
    weight_shape = model[0].weight.shape

    class WeightCasts(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._to_copy.default and args[0].shape == weight_shape:
                WeightCasts.count += 1
            return func(*args, **(kwargs or {}))

    def timed_twice(programs, settings):
        with WeightCasts():
            for _ in range(2):
                programs[PYTORCH]()
        return AMK, {AMK: 1.0, PYTORCH: 2.0}, "events"

    monkeypatch.setattr(amk.frontend.backend, "_untimed_reason", lambda settings: None)
    monkeypatch.setattr(amk.frontend.subgraph, "fastest_program", timed_twice)
    compiled = amk.compile(model, tuner_config=TunerConfig(target_cache_dir=tmp_path))  # no race recorded before
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, expected = compiled(batch(4)), model(batch(4))
    assert WeightCasts.count == 2
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)
