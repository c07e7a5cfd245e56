"""Attention as PyTorch's fused kernel: :func:`fuse_attention` rewrites, in the torch-level graph TorchDynamo hands the
backend, each ``softmax(q @ k^T * scale + mask) @ v`` written out op by op (Hugging Face's eager attention, nanoGPT's
``masked_fill(mask, -inf)``, Llama's softmax in fp32 cast back) as one
``torch.nn.functional.scaled_dot_product_attention`` call, as Inductor's ``fuse_attention`` pass does.

Why: amk's kernels compute the scores and their softmax in one kernel and ``probs @ v`` in another, writing and reading
the probabilities ``[B, H, S, T]`` in between; PyTorch's fused attention (FlashAttention, memory-efficient attention)
never writes them. On an H100 (``benchmarks/NOTES.md``, fifty-first session) Hugging Face's BERT self-attention ran
0.12 ms through amk against torch.compile's 0.054, whose graph has this rewrite. The rewritten node runs in PyTorch
and ``amk.explain`` lists it so.

What matches: ``matmul(q, k.transpose(-2, -1))`` or ``torch.bmm`` (of any rhs, transposed back for the call), then optionally a
scale (``* c`` or ``/ c``, ``c`` a number), then optionally ``+ mask`` (a tensor of the query's dtype) or
``.masked_fill(mask, -inf)`` (a boolean mask: the call attends where it is False) or ``torch.where(keep, scores,
-inf)`` (the call attends where ``keep`` is True), ``softmax`` over the last dim
(with ``dtype=torch.float32`` and a cast back to the query's dtype, or none), dropout in evaluation (an identity),
and ``matmul(probs, v)``; q, k and v of one dtype and the same leading dims, a mask that broadcasts to the scores
without growing them; every intermediate value read by the next op only (a model that returns the probabilities
keeps its ops), and nothing changed in place between the scores and ``probs @ v`` (the call reads q, k and the mask
there). Where the call's result is laid out otherwise than the product's, ``view`` reads a contiguous copy. One
difference remains: a query row whose keys are all masked with -inf is NaN in eager's softmax and may be 0 in the
fused kernels.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from amk.frontend.analysis import mutated_between
from amk.frontend.converters import CASTS, TRANSPOSES
from amk.frontend.nodes import meta_value, single_user, traced_symbol_values
from amk.frontend.spellings import ADD, BMM, DIV, MATMUL, MUL, is_, spellings

log = logging.getLogger(__name__)

SOFTMAX = spellings([torch.softmax, F.softmax], ["softmax"])
PRODUCTS = MATMUL | BMM  # torch.bmm's attention too
MASKED_FILL = spellings([torch.masked_fill], ["masked_fill"])
WHERE = spellings([torch.where], [])
DROPOUT = spellings([F.dropout], [])


@dataclass
class _Attention:
    """A matched attention: its operands and the call's arguments; ``absorbed`` the nodes the call replaces."""

    query: Node
    key_transposed: Node  # the matmul's rhs, [..., D, T]
    value: Node
    mask: Node | None
    scale: float
    absorbed: list[Node]
    fills_where_true: bool = False  # a boolean mask marking the filled scores (masked_fill's), which the call negates


def _tensor(node) -> torch.Tensor | None:
    value = meta_value(node) if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _number(value) -> float | None:
    """A plain number (not a size symbol: a scale read from a dynamic size would be the trace's for every call)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _scale_of(node: Node, scores: Node) -> float | None:
    """The factor ``node`` multiplies ``scores`` by (``scores * c``, ``c * scores``, ``scores / c``), or None."""
    if node.kwargs or len(node.args) != 2:
        return None
    lhs, rhs = node.args
    if is_(node, MUL):
        factor = _number(rhs) if lhs is scores else _number(lhs) if rhs is scores else None
        return factor
    if is_(node, DIV) and lhs is scores and _number(rhs):
        return 1.0 / _number(rhs)
    return None


def _softmax_over_last_dim(node: Node) -> bool:
    if not is_(node, SOFTMAX):
        return False
    rank = _tensor(node).dim()
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    extra = set(node.kwargs) - {"dim", "dtype", "_stacklevel"}
    return (isinstance(dim, int) and dim % rank == rank - 1 and not extra and len(node.args) <= 2
            and node.kwargs.get("dtype") in (None, torch.float32))


def _mask_of(node: Node, scores: Node, query: torch.Tensor) -> tuple[Node, bool] | None:
    """The mask of ``node`` where it masks ``scores``, and whether it marks the filled scores: an additive mask
    (``scores + mask``) of the query's dtype; a boolean ``masked_fill(mask, -inf)``'s (marking them: the call takes it
    negated) or ``torch.where(keep, scores, -inf)``'s (marking the kept ones, as the call does); None where ``node``
    is no mask."""
    if is_(node, ADD) and len(node.args) == 2 and not node.kwargs:
        lhs, rhs = node.args
        mask = rhs if lhs is scores else lhs if rhs is scores else None
        tensor = _tensor(mask)
        return (mask, False) if tensor is not None and tensor.dtype == query.dtype else None
    if is_(node, MASKED_FILL) and len(node.args) == 3 and not node.kwargs and node.args[0] is scores:
        mask, fill, fills_where_true = node.args[1], node.args[2], True
    elif is_(node, WHERE) and len(node.args) == 3 and not node.kwargs and node.args[1] is scores:
        mask, fill, fills_where_true = node.args[0], node.args[2], False
    else:
        return None
    tensor = _tensor(mask)
    return (mask, fills_where_true) if tensor is not None and tensor.dtype == torch.bool and fill == -math.inf \
        else None


def _scores_chain(node, depth: int) -> list[Node] | None:
    """``[scores, op, ...]`` ending at ``node``: the scores' matmul, then up to ``depth`` ops (a scale, a mask) each
    reading the one before; None where ``node`` is not so made."""
    if is_(node, PRODUCTS):
        return [node]
    if depth == 0 or not isinstance(node, Node):
        return None
    reads = (node.args[:2] if is_(node, ADD | MUL) else node.args[:1] if is_(node, DIV | MASKED_FILL)
             else node.args[1:2] if is_(node, WHERE) else ())
    for operand in reads:
        chain = _scores_chain(operand, depth - 1)
        if chain is not None:
            return [*chain, node]
    return None


def _match(root: Node) -> _Attention | None:
    """The attention whose last op is ``root`` (``probs @ v``), or None."""
    if not is_(root, PRODUCTS) or root.kwargs or len(root.args) != 2:
        return None
    probs, value = root.args
    node, absorbed, casts = probs, [root], 0
    # walk back from the probabilities: one cast back and dropout in evaluation (their input given by position),
    # then the softmax
    while isinstance(node, Node) and (is_(node, CASTS) or is_(node, DROPOUT)) and single_user(node, absorbed[-1]):
        if not node.args or (is_(node, DROPOUT) and node.kwargs.get("training", node.args[2] if len(node.args) > 2
                                                                    else True)):
            return None
        casts += is_(node, CASTS)
        absorbed.append(node)
        node = node.args[0]
    if not isinstance(node, Node) or not _softmax_over_last_dim(node) or not single_user(node, absorbed[-1]):
        return None
    if casts > 1:  # a cast that rounds the probabilities (.half().float()), which the call would not
        return None
    absorbed.append(node)
    chain = _scores_chain(node.args[0], depth=2)
    if chain is None:
        return None
    scores, chain = chain[0], chain[1:]
    if scores.kwargs or len(scores.args) != 2:
        return None
    query, key_transposed = scores.args
    tensors = [_tensor(n) for n in (query, key_transposed, value)]
    if any(t is None for t in tensors) or len({t.dtype for t in tensors}) != 1 or not tensors[0].is_floating_point():
        return None
    q, kt, v = tensors
    if not (q.dim() == kt.dim() == v.dim() >= 3 and q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]):
        return None
    output = _tensor(root)
    if output is None or output.dtype != q.dtype or _tensor(node).dtype not in (q.dtype, torch.float32):
        return None
    scale, mask, fills_where_true, previous = 1.0, None, False, scores
    for op in chain:
        if not single_user(previous, op):
            return None
        factor = _scale_of(op, previous)
        if factor is not None and mask is None and scale == 1.0:
            scale = factor
        else:
            found = _mask_of(op, previous, q)
            if found is None or mask is not None:
                return None
            mask, fills_where_true = found
        previous = op
    if not single_user(previous, node) or (mask is not None and not _broadcasts_to(_tensor(mask), _tensor(scores))):
        return None
    absorbed += [*reversed(chain), scores]
    if mutated_between(scores, root):
        return None
    return _Attention(query, key_transposed, value, mask, scale, absorbed, fills_where_true)


def _broadcasts_to(mask: torch.Tensor, scores: torch.Tensor) -> bool:
    """Whether ``mask`` broadcasts to the scores' shape without growing it (a mask of more dims, or larger where the
    scores have 1, would make the ops' result larger than the call's)."""
    if mask.dim() > scores.dim():
        return False
    pairs = zip(reversed(mask.shape), reversed(scores.shape))
    return all(statically_known_true(size == 1) or statically_known_true(size == target) for size, target in pairs)


def _key_transposed_back(key_transposed: Node) -> Node | None:
    """The keys ``[..., T, D]`` that the scores' rhs ``[..., D, T]`` transposes, or None where it is no transpose."""
    if is_(key_transposed, TRANSPOSES) and key_transposed.target in (torch.transpose, "transpose") \
            and not key_transposed.kwargs and len(key_transposed.args) == 3:
        rank = _tensor(key_transposed).dim()
        if sorted(d % rank for d in key_transposed.args[1:]) == [rank - 2, rank - 1]:
            return key_transposed.args[0]
    return None


def _traced_call(match: _Attention, key: Node | None) -> tuple[torch.Tensor, ...] | None:
    """The fake values of the call's keys, mask and result (the new nodes' metadata), made in the fake tensors' mode
    (the constants they make are fake too), or None where the call refuses its operands (its shape checks) or gives
    another shape (a mask broadcasting the scores to more dims): the ops are then kept."""
    query = _tensor(match.query)
    fake_mode = getattr(query, "fake_mode", None)
    shape_env = getattr(fake_mode, "shape_env", None)
    # No guards from the fake ops made here (the keys' transpose, the mask's negation): the ops they stand for guard
    # nothing of the sizes, and a guarded batch is a recompile at the next batch.
    with fake_mode or contextlib.nullcontext(), \
            shape_env.suppress_guards() if shape_env is not None else contextlib.nullcontext():
        keys = _tensor(key) if key is not None else _tensor(match.key_transposed).transpose(-2, -1)
        mask = _tensor(match.mask)
        if match.fills_where_true:
            mask = torch.logical_not(mask)
        try:
            result = _fake_result(query, keys, _tensor(match.value), mask, match.scale, _tensor(match.absorbed[0]))
        except Exception as error:  # noqa: BLE001 - any refusal keeps the ops, which run as traced
            log.info("amk: the attention at %s keeps its ops: scaled_dot_product_attention refuses them (%s: %s)",
                     match.absorbed[0].name, type(error).__name__, error)
            return None
    if result is None:
        log.info("amk: the attention at %s keeps its ops: its mask broadcasts the scores to more or larger dims",
                 match.absorbed[0].name)
        return None
    return keys, mask, result


def _fake_result(query: torch.Tensor, keys: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                 scale: float | None, replaced: torch.Tensor) -> torch.Tensor | None:
    """The call's result on the fake operands (in their mode): the shape, dtype and device of the product it replaces
    (``replaced``), its layout (the order of its strides) from the call itself on operands of concrete sizes
    (:func:`_at_example_sizes`), which picks the kernel the call picks at run time (at those sizes) and checks the
    operands there (their shapes agree at every size: the traced product and :func:`_broadcasts_to` saw to that).
    Raises where the call refuses them, or a size has no traced value (an unbacked one); None where its result at
    those sizes is not the product's (a mask growing the scores). The call never runs on the symbolic operands:
    PyTorch's CUDA kernels take some sizes concrete. The memory-efficient kernel pads a mask whose key length is no
    multiple of 16 by an amount the pad's fake kernel takes concrete only (nanoGPT's causal mask refused so,
    ``2026-12-06-h100-gpu-tests-52.log``); the math kernel, the guards suppressed, broadcast BERT's mask to the
    trace's batch, a result of concrete batch whose comparison with the product's then guarded the batch (a recompile
    at every batch, ``2026-12-06-h100-gpu-tests-53.log``)."""
    example = F.scaled_dot_product_attention(*(_at_example_sizes(t) for t in (query, keys, value)),
                                             attn_mask=None if mask is None else _at_example_sizes(mask), scale=scale)
    if list(example.shape) != [_at_example(size) for size in replaced.shape]:
        return None
    # The strides written out, innermost first: ``contiguous()`` of the permuted result would judge contiguity at the
    # traced sizes, where a dim traced at 1 makes any layout contiguous.
    strides, step = [0] * replaced.dim(), 1
    for dim in sorted(range(example.dim()), key=lambda d: (example.stride(d), -d)):
        strides[dim], step = step, step * replaced.shape[dim]
    return torch.empty_strided(replaced.shape, strides, dtype=replaced.dtype, device=replaced.device,
                               requires_grad=replaced.requires_grad)


def _at_example(size):
    """``size`` (an int or a SymInt) at each symbol's traced value, or at 2 where that is 1: a dynamic dim traced at 1
    (a first batch of 1) would have the stride of its neighbour in the call's layout, which would then say nothing of
    where it goes at other sizes. Raises ValueError for an unbacked size (the ops are then kept)."""
    if not isinstance(size, torch.SymInt):
        return size
    traced = traced_symbol_values(size.node.shape_env)
    unbacked = sorted(str(symbol) for symbol in size.node.expr.free_symbols if symbol not in traced)
    if unbacked:
        raise ValueError(f"the size {size.node.expr} has no traced value (unbacked: {', '.join(unbacked)})")
    return int(size.node.expr.xreplace({symbol: max(int(traced[symbol]), 2) for symbol in size.node.expr.free_symbols}))


def _at_example_sizes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor (fake, in the mode of the caller) of ``tensor``'s dtype and device, its sizes and strides
    :func:`_at_example`."""
    return torch.empty_strided([_at_example(size) for size in tensor.shape],
                               [_at_example(stride) for stride in tensor.stride()], dtype=tensor.dtype,
                               device=tensor.device)


def _lay_out_for_views(graph, call: Node, replaced: torch.Tensor) -> None:
    """Where the call's result is laid out otherwise than the ``probs @ v`` it replaces (CUDA's fused kernels write
    ``[B, S, H, D]`` transposed), its ``view`` users read a contiguous copy, as they read the product: a view of it
    may not exist. Its other users (``permute(0, 2, 1, 3).contiguous()``, Hugging Face's) read it as it is."""
    viewers = [user for user in call.users if user.op == "call_method" and user.target == "view"]
    result = _tensor(call)
    if not viewers or result.stride() == replaced.stride():
        return
    with graph.inserting_after(call):
        contiguous = graph.call_method("contiguous", (call,))
    contiguous.meta["example_value"] = replaced
    for user in viewers:
        user.replace_input_with(call, contiguous)


def fuse_attention(gm: GraphModule) -> list[str]:
    """Rewrite ``gm``'s attentions (see the module's docstring) as ``scaled_dot_product_attention`` calls; the names
    of the calls made."""
    graph, made = gm.graph, []
    for root in list(graph.nodes):  # a match's other nodes come before its root and are never roots of matches
        match = _match(root)
        if match is None:
            continue
        key = _key_transposed_back(match.key_transposed)
        traced = _traced_call(match, key)
        if traced is None:
            continue
        keys_value, mask_value, result = traced
        with graph.inserting_before(root):
            if key is None:
                key = graph.call_method("transpose", (match.key_transposed, -2, -1))
                key.meta["example_value"] = keys_value
            mask = match.mask
            if match.fills_where_true:  # negated: where the call attends
                mask = graph.call_function(torch.logical_not, (mask,))
                mask.meta["example_value"] = mask_value
            call = graph.call_function(F.scaled_dot_product_attention, (match.query, key, match.value),
                                       {"attn_mask": mask, "scale": match.scale})
        call.meta["example_value"] = result
        root.replace_all_uses_with(call)
        _lay_out_for_views(graph, call, _tensor(root))
        for node in [*match.absorbed, match.key_transposed]:
            if not node.users and node.op in ("call_function", "call_method"):
                graph.erase_node(node)
        made.append(call.name)
    if made:
        gm.recompile()
    return made
