"""Elementwise ops on permuted views computed in memory order: :func:`compute_in_memory_order` rewrites
``f(x.transpose(1, 2), c)`` as ``f(x, c').transpose(1, 2)`` in the torch-level graph TorchDynamo hands the backend,
where ``c'`` is each other operand viewed in ``x``'s order, so that the ops run over the tensor as it lies in memory
and the transpose moves after them, to what reads the result (an attention call, a matmul, the graph's output).

:func:`chunks_as_slices` first writes the pieces of a ``chunk`` or ``split`` of the last dim as the slices they are
(``first, second = q.chunk(2, dim=-1)``, another spelling of ``rotate_half``'s halves).

Why: attention code splits heads with a view and a transpose before it applies rotary embeddings, as Hugging Face's
Llama does::

    q = self.q_proj(x).view(B, S, H, D).transpose(1, 2)           # [B, H, S, D], laid out [B, S, H, D]
    q = q * cos.unsqueeze(1) + rotate_half(q) * sin.unsqueeze(1)  # cos, sin: [B, S, D]

PyTorch lays the result of an elementwise op on the transposed ``q`` out as ``q`` lies, not row-major as amk's
kernels write results, and the code after it was traced on that layout, so amk left the ops to PyTorch; ``cos`` as
``[B, 1, S, D]`` also broadcasts over a dim between kept ones, which a kernel does not read. In memory order the
iteration space is ``[B, S, H, D]``, ``cos`` reads as ``[B, S, 1, D]`` (rows broadcast over the heads, which a kernel
reads) and the result, transposed back, has PyTorch's strides.

What moves: a permutation of a tensor of rank 3 or more that keeps the last dim in place, through the arithmetic
ops (add, sub, mul, div, neg), activations of one tensor, casts to a dtype (RoPE computed in fp32, Qwen2-VL's and
Gemma 3's), and ``rotate_half``'s slices and ``cat`` over the last dim, whose other tensor operands broadcast to the
result (each viewed in memory order: unsqueezed to the result's rank, then permuted; a 0-d tensor as it is). The ops
so moved form a region; one whose result is read outside the region stays out of it where that result, transposed
back, would have other strides than PyTorch gives it (its operands permuted differently, a full-size operand laid
out otherwise; a ``cat`` of permuted views, which PyTorch makes row-major), compared on every dim longer than 1 (a
size-1 dim's stride addresses nothing, as amk's kernels' outputs are judged). Nothing moves across a mutation or a
grad-mode change (a view made under ``no_grad`` carries no gradient to its source, a view of a table made there none
to the table).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import operator

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from amk import reference
from amk.frontend.analysis import epochs_of
from amk.frontend.converters import CASTS
from amk.frontend.nodes import meta_value
from amk.frontend.patterns import last_dim_slice, match_rotate_half
from amk.frontend.spellings import ADD, CAT, DIV, GETITEM, MUL, NEG, RESHAPES, SUB, is_, spellings

log = logging.getLogger(__name__)

ARITHMETIC = ADD | SUB | MUL | DIV | NEG
# Activations of one tensor, their other arguments by keyword (an in-place call writes into the view: it stays).
ACTIVATIONS = spellings(
    [torch.relu, F.relu, F.gelu, F.silu, torch.sigmoid, F.sigmoid, torch.tanh, F.tanh, torch.exp, F.mish, F.softplus,
     F.hardswish, F.hardsigmoid, F.leaky_relu, torch.abs, torch.sqrt, torch.rsqrt, torch.erf, torch.clamp],
    ["relu", "sigmoid", "tanh", "exp", "abs", "sqrt", "rsqrt", "clamp"])
PERMUTES = spellings([torch.transpose, torch.permute], ["transpose", "permute"])
CHUNKS = spellings([torch.chunk, torch.split], ["chunk", "split"])
UNFLATTENS = spellings([torch.unflatten], ["unflatten"])
UNSQUEEZES = spellings([torch.unsqueeze], ["unsqueeze"])


def chunks_as_slices(gm: GraphModule) -> list[str]:
    """Rewrite each piece of a ``chunk`` or ``split`` of a tensor's last dim (of known size) that is read as
    ``x[..., start:stop]``, the slice it is (the same view), so that ``first, second = q.chunk(2, dim=-1)`` reads
    as ``rotate_half``'s slices do and moves into memory order like them; the names of the chunks and splits
    rewritten."""
    rewritten = []
    for node in list(gm.graph.nodes):
        pieces = _last_dim_pieces(node)
        if pieces is None:
            continue
        source = node.args[0]
        for user in list(node.users):
            start, stop = pieces[user.args[1]]
            with gm.graph.inserting_before(user):
                piece = gm.graph.call_function(operator.getitem, (source, (Ellipsis, slice(start, stop))))
            piece.meta = dict(user.meta)  # the same view of the same tensor
            user.replace_all_uses_with(piece)
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        rewritten.append(node.name)
    if rewritten:
        gm.recompile()
    return rewritten


def _last_dim_pieces(node: Node) -> list[tuple[int, int]] | None:
    """The ``(start, stop)`` of each piece of a ``chunk`` or ``split`` of a tensor's last dim whose every reader is
    an indexing of one piece; else None."""
    if not is_(node, CHUNKS) or not node.args or not isinstance(node.args[0], Node):
        return None
    value, pieces = meta_value(node.args[0]), meta_value(node)
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    if not isinstance(value, torch.Tensor) or not isinstance(pieces, list | tuple) or not isinstance(dim, int) \
            or value.dim() == 0 or dim % value.dim() != value.dim() - 1 or node.kwargs.keys() - {"dim"}:
        return None
    lengths = [piece.shape[-1] for piece in pieces]
    if not all(isinstance(length, int) for length in lengths) or not node.users or not all(
            is_(user, GETITEM) and len(user.args) == 2 and isinstance(user.args[1], int) and not user.kwargs
            for user in node.users):
        return None
    bounds = list(itertools.accumulate(lengths, initial=0))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def compute_in_memory_order(gm: GraphModule) -> list[str]:
    """Rewrite ``gm``'s elementwise ops on permuted views to run in memory order (the module's docstring); the names
    of the ops rewritten."""
    epochs = epochs_of(gm)
    region = _region(gm, epochs)
    if not region:
        return []
    graph, in_memory_order, views = gm.graph, {}, {}
    for node, dims in region.items():
        with graph.inserting_before(node):
            in_memory_order[node] = _in_memory_order(node, dims, region, in_memory_order, views, epochs)
            if any(user not in region for user in node.users):
                back = _traced(graph.call_method("permute", (in_memory_order[node], *dims)),
                               lambda n=in_memory_order[node], d=dims: meta_value(n).permute(*d), node)
                node.replace_all_uses_with(back, delete_user_cb=lambda user: user not in region)
    permuted_sources = {operand for node in region for operand in node.all_input_nodes
                        if operand not in region and permutation(operand) is not None}
    for node in reversed(region):
        graph.erase_node(node)
    for view in permuted_sources:
        if not view.users:
            graph.erase_node(view)
    gm.recompile()
    log.info("amk: computed in memory order, the permutation after them: %s", ", ".join(n.name for n in region))
    return [node.name for node in region]


def fold_heads(gm: GraphModule) -> list[str]:
    """Rewrite the elementwise ops on a tensor's heads, ``p.view(*lead, H, D)``, that rotate them (rotary
    embeddings in memory order, after :func:`compute_in_memory_order`: a ``rotate_half`` among them) to run on ``p``
    itself, ``[*lead, H * D]``: ``rotate_half`` of each group of ``D`` columns (:func:`amk.reference.rotate_half`),
    each table ``[*lead, 1, D]`` read over the heads (:func:`amk.reference.repeat_columns` of its ``select(-2, 0)``,
    with the fewest views: :func:`_one_head_of`),
    and the heads' view after them, for what reads their results. So the rotation of a projection's output is the
    projection kernel's epilogue, not a kernel of its own that reads the output back: its iteration space is the
    projection's. Only ops of the view's epoch move, as in :func:`compute_in_memory_order`; the names of the ops
    rewritten."""
    epochs, one_heads = epochs_of(gm), {}
    rewritten = []
    for node in list(gm.graph.nodes):
        heads = _heads_of(node)
        if heads is not None:
            rewritten += _fold_heads(gm, node, *heads, epochs, one_heads)
    if rewritten:
        gm.recompile()
        log.info("amk: computed over the heads side by side, their view after them: %s", ", ".join(rewritten))
    return rewritten


def _heads_of(view: Node) -> tuple[Node, int, int] | None:
    """``(p, H, D)`` where ``view`` splits the last dim of ``p``, a row-major tensor, into ``H`` heads of ``D`` (both
    known, ``D`` even) and keeps its leading dims; else None."""
    if not is_(view, RESHAPES | UNFLATTENS) or not view.args or not isinstance(view.args[0], Node):
        return None
    source, value = meta_value(view.args[0]), meta_value(view)
    if not isinstance(source, torch.Tensor) or not isinstance(value, torch.Tensor) or value.dim() != source.dim() + 1 \
            or source.dim() < 1 or not _dims_in_order(source):
        return None
    heads, head_dim = value.shape[-2:]
    if not isinstance(heads, int) or not isinstance(head_dim, int) or head_dim % 2 or heads < 1 \
            or not statically_known_true(source.shape[-1] == heads * head_dim) \
            or not all(statically_known_true(a == b) for a, b in zip(value.shape[:-2], source.shape[:-1], strict=True)):
        return None
    return view.args[0], heads, head_dim


def _dims_in_order(value: torch.Tensor) -> bool:
    """Whether ``value``'s dims lie in memory in their order, each outer one past the inner ones (a row-major tensor,
    or a slice of one's columns: q of a fused qkv projection), so that PyTorch lays an elementwise op's result on it
    out row-major, as amk's kernels write it; a permuted one (a transposed projection) keeps its order there. Dims of
    size 1 address nothing."""
    dims = [(size, stride) for size, stride in zip(value.shape, value.stride(), strict=True)
            if not statically_known_true(size == 1)]
    if dims and not statically_known_true(dims[-1][1] == 1):
        return False
    return all(statically_known_true(outer >= inner * size)
               for (_, outer), (size, inner) in zip(dims, dims[1:]))


def _fold_heads(gm: GraphModule, view: Node, source: Node, heads: int, head_dim: int, epochs: dict[Node, int],
                one_heads: dict) -> list[str]:
    """:func:`fold_heads` of one view: the ops that read it or one another, on its shape, with tables of one head
    beside them; rewritten where a rotation is among them. ``one_heads``: the tables' heads made for earlier views
    (:func:`_one_head_of`)."""
    shape, epoch = meta_value(view).shape, epochs.get(view)
    region: dict[Node, Node | None] = {}  # each op, with the operand its rotate_half rotates (None: any other op)
    absorbed: list[Node] = []
    for node in gm.graph.nodes:
        if epochs.get(node) != epoch or node is view or not isinstance(meta_value(node), torch.Tensor):
            continue
        rotated = match_rotate_half(node)
        if rotated is not None:
            if rotated[0] is view or rotated[0] in region:
                region[node] = rotated[0]
                absorbed += rotated[1]
            continue
        operands = _operands(node)  # arithmetic, an activation or a cast (a slice or cat only in rotate_half)
        if operands is None or is_(node, CAT) or last_dim_slice(node) is not None:
            continue
        tensors = [a for a in operands if isinstance(a, Node)]
        if not any(a is view or a in region for a in tensors) or len(meta_value(node).shape) != len(shape) \
                or not all(statically_known_true(a == b) for a, b in zip(meta_value(node).shape, shape, strict=True)) \
                or not all(a is view or a in region or _one_head(a, shape) for a in tensors):
            continue
        region[node] = None
    if not any(rotated is not None for rotated in region.values()):
        return []
    graph, folded, tables = gm.graph, {view: source}, {}

    def over_heads(operand):
        if not isinstance(operand, Node):
            return operand
        if operand in folded:
            return folded[operand]
        if meta_value(operand).dim() == 0:
            return operand
        if operand not in tables:
            table = operand
            if meta_value(table).dim() >= 2:
                table = _one_head_of(table, epoch, epochs, one_heads)
            if meta_value(table).shape[-1] == head_dim:
                table = _traced(graph.call_function(reference.repeat_columns, (table, heads)),
                                lambda t=table: reference.repeat_columns(meta_value(t), heads), operand)
            tables[operand] = table
        return tables[operand]

    for node, rotated in region.items():
        with graph.inserting_before(node):
            if rotated is not None:
                x = folded[rotated]
                folded[node] = _traced(graph.call_function(reference.rotate_half, (x, head_dim)),
                                       lambda x=x: reference.rotate_half(meta_value(x), head_dim), node)
            else:
                args = tuple(over_heads(a) for a in node.args)
                folded[node] = _traced(graph.create_node(node.op, node.target, args, dict(node.kwargs)),
                                       lambda node=node, args=args: _call(node, args), node)
    outside = set(region) | set(absorbed)
    for node in region:
        if any(user not in outside for user in node.users):
            with graph.inserting_after(folded[node]):
                back = _traced(graph.call_method("unflatten", (folded[node], -1, (heads, head_dim))),
                               lambda n=folded[node]: meta_value(n).unflatten(-1, (heads, head_dim)), node)
            node.replace_all_uses_with(back, delete_user_cb=lambda user: user not in outside)
    # Erased once nothing reads them: a rotation's cat before its neg and slices, which read an op of the region (a
    # cast to fp32) or the view.
    leftover = [*reversed(region), *absorbed, view]
    while any(not node.users for node in leftover):
        for node in [node for node in leftover if not node.users]:
            graph.erase_node(node)
            leftover.remove(node)
    for table in tables:  # the views of a table read as the tensor they view, once nothing else reads them
        while isinstance(table, Node) and not table.users and (permutation(table) or is_(table, UNSQUEEZES)):
            viewed = table.args[0]
            graph.erase_node(table)
            table = viewed
    return [node.name for node in region]


def _one_head_of(table: Node, epoch: int | None, epochs: dict[Node, int], made: dict) -> Node:
    """``table.select(-2, 0)`` (its dim before the last is 1: one head) with the fewest views for a call to run:
    where ``table`` is views made in ``epoch`` (permutes, an unsqueeze) of a tensor whose other dims they keep in
    order, the tensor itself when an unsqueeze added that dim (``cos.unsqueeze(1)`` of Hugging Face's Llama, permuted
    to memory order, is ``cos [B, S, D]``), else that tensor's select of the dim, made once for every view of heads
    that reads it (``made``; q's and k's rotations read the same tables)."""
    graph, rank = table.graph, meta_value(table).dim()
    dropped, kept, source = rank - 2, [*range(rank - 2), rank - 1], table
    while epochs.get(source) == epoch:
        dims = permutation(source)
        if dims is not None:  # the view's dim i is dim dims[i] of its source
            dropped, kept, source = dims[dropped], [dims[d] for d in kept], source.args[0]
            continue
        if is_(source, UNSQUEEZES) and len(source.args) == 2 and isinstance(source.args[1], int) \
                and not source.kwargs and source.args[1] % meta_value(source).dim() == dropped:
            if [d - (d > dropped) for d in kept] == list(range(len(kept))):
                return source.args[0]
        break
    if kept != sorted(kept):  # the other dims moved: the table's own select
        dropped, source = rank - 2, table
    if epochs.get(source) != epoch:  # a table of another grad mode: its select made where the region is
        return _traced(graph.call_method("select", (table, -2, 0)), lambda: meta_value(table).select(-2, 0), table)
    if (source, dropped) not in made:
        anchor = source
        if source.op == "placeholder":  # after the graph's arguments
            anchor = [node for node in graph.nodes if node.op == "placeholder"][-1]
        with graph.inserting_after(anchor):
            made[source, dropped] = _traced(graph.call_method("select", (source, dropped, 0)),
                                            lambda: meta_value(source).select(dropped, 0), table)
    return made[source, dropped]


def _one_head(operand: Node, shape) -> bool:
    """Whether ``operand`` broadcasts over heads ``shape`` ``[*lead, H, D]`` as one head: a tensor of at most that
    rank whose dim before the last is 1 (or absent) and whose last is ``D`` or 1."""
    value = meta_value(operand)
    if not isinstance(value, torch.Tensor) or value.dim() > len(shape):
        return False
    if value.dim() == 0:
        return True
    last = value.shape[-1]
    one_head = value.dim() < 2 or statically_known_true(value.shape[-2] == 1)
    return one_head and (statically_known_true(last == 1) or statically_known_true(last == shape[-1]))


def permutation(node) -> tuple[int, ...] | None:
    """The dims of ``node`` as ``x.permute(dims)`` where it is a transpose or permute of a tensor ``x`` of rank 3 or
    more that keeps the last dim in place and moves another; else None."""
    if not is_(node, PERMUTES) or node.kwargs or not node.args:
        return None
    value = meta_value(node.args[0])
    if not isinstance(value, torch.Tensor) or value.dim() < 3:
        return None
    rank, rest = value.dim(), list(node.args[1:])
    if node.target in (torch.transpose, "transpose"):
        if len(rest) != 2 or not all(isinstance(d, int) for d in rest):
            return None
        dims = list(range(rank))
        first, second = (d % rank for d in rest)
        dims[first], dims[second] = dims[second], dims[first]
    else:
        dims = rest[0] if len(rest) == 1 and isinstance(rest[0], list | tuple) else rest
        if len(dims) != rank or not all(isinstance(d, int) for d in dims):
            return None
        dims = [d % rank for d in dims]
    if dims[-1] != rank - 1 or dims == list(range(rank)):
        return None
    return tuple(dims)


def _region(gm: GraphModule, epochs: dict[Node, int]) -> dict[Node, tuple[int, ...]]:
    """The ops to compute in memory order, in graph order, each with the permutation of its result: the elementwise
    ops that read a permuted view or an op of the region, less those read outside the region whose result PyTorch
    lays out otherwise than the permutation of a row-major one (removed until none is left)."""
    region: dict[Node, tuple[int, ...]] = {}
    for node in gm.graph.nodes:
        dims = _movable(node, region, epochs)
        if dims is not None:
            region[node] = dims
    shrinking = True
    while shrinking:
        leaving = [node for node, dims in region.items()
                   if any(user not in region for user in node.users) and not _laid_out_as_permuted(node, dims)]
        for node in leaving:
            del region[node]
        shrinking = bool(leaving)
    return region


def _operands(node: Node) -> list | None:
    """The operands of an op that may move (arithmetic; a slice of the last dim; a cat over it), else None."""
    value = meta_value(node)
    if node.op not in ("call_function", "call_method") or not isinstance(value, torch.Tensor):
        return None
    if is_(node, ARITHMETIC) and not node.kwargs:
        operands = list(node.args)
        numbers = all(isinstance(a, Node) or isinstance(a, int | float) and not isinstance(a, bool) for a in operands)
        return operands if numbers else None
    if is_(node, ACTIVATIONS) and len(node.args) == 1 and not node.kwargs.get("inplace") \
            and not any(isinstance(v, Node) for v in node.kwargs.values()):
        return [node.args[0]]
    if is_(node, CASTS) and "memory_format" not in node.kwargs \
            and not any(isinstance(a, Node) for a in [*node.args[1:], *node.kwargs.values()]):
        return [node.args[0]]  # to a dtype (type_as reads another tensor: it stays)
    if last_dim_slice(node) is not None:
        return [node.args[0]]
    if is_(node, CAT) and node.kwargs.keys() <= {"dim"} and node.args and isinstance(node.args[0], list | tuple):
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        if isinstance(dim, int) and dim % value.dim() == value.dim() - 1:
            return list(node.args[0])
    return None


def _movable(node: Node, region: dict[Node, tuple[int, ...]], epochs: dict[Node, int]) -> tuple[int, ...] | None:
    """The permutation ``node`` would be computed under: that of its first operand that is a permuted view or an op
    of the region, where every tensor operand broadcasts to its result and every operand of the region has that
    permutation; else None. Only a view or an op made in ``node``'s epoch counts (no mutation or grad-mode change
    between them: a view made under ``no_grad`` carries no gradient to its source)."""
    operands = _operands(node)
    if operands is None:
        return None
    same_epoch = [a for a in operands if isinstance(a, Node) and epochs.get(a) == epochs.get(node)]
    if any(a in region and epochs.get(a) != epochs.get(node) for a in operands if isinstance(a, Node)):
        return None
    permuted = [region[a] if a in region else permutation(a) for a in same_epoch]
    dims = next((d for d in permuted if d is not None), None)
    rank = meta_value(node).dim()
    if dims is None or len(dims) != rank or any(region.get(a, dims) != dims for a in same_epoch):
        return None
    if any(not isinstance(meta_value(a), torch.Tensor) or meta_value(a).dim() > rank
           for a in operands if isinstance(a, Node)):
        return None
    return dims


def _laid_out_as_permuted(node: Node, dims: tuple[int, ...]) -> bool:
    """Whether PyTorch lays ``node``'s result out as the ``dims`` permutation of a row-major tensor (a size-1 dim's
    stride addresses nothing)."""
    value = meta_value(node)
    in_memory_order = [value.shape[d] for d in _inverse(dims)]
    strides, step = [0] * len(dims), 1
    for dim in reversed(range(len(dims))):
        strides[dim] = step
        step = step * in_memory_order[dim]
    return all(statically_known_true(size == 1) or statically_known_true(stride == strides[dims[axis]])
               for axis, (size, stride) in enumerate(zip(value.shape, value.stride(), strict=True)))


def _inverse(dims: tuple[int, ...]) -> list[int]:
    inverse = [0] * len(dims)
    for position, dim in enumerate(dims):
        inverse[dim] = position
    return inverse


def _in_memory_order(node: Node, dims: tuple[int, ...], region: dict, in_memory_order: dict, views: dict,
                     epochs: dict[Node, int]) -> Node:
    """``node``'s op on its operands in memory order: an op of the region as it was computed so, a view permuted by
    ``dims`` (made in ``node``'s epoch) as its source, a 0-d tensor as it is (type promotion ranks it below tensors of
    dims), any other tensor unsqueezed to the rank and permuted back (once per epoch: ``views`` keeps them, RoPE's cos
    and sin read by the q and k rotations alike)."""
    graph, inverse, epoch = node.graph, _inverse(dims), epochs.get(node)

    def aligned(operand):
        if not isinstance(operand, Node) or meta_value(operand).dim() == 0:
            return operand
        if operand in region:  # _movable saw to it: the same permutation, the same epoch
            return in_memory_order[operand]
        if permutation(operand) == dims and epochs.get(operand) == epoch:
            return operand.args[0]
        if (operand, dims, epoch) not in views:
            view = operand
            for _ in range(len(dims) - meta_value(operand).dim()):
                view = _traced(graph.call_method("unsqueeze", (view, 0)), lambda v=view: meta_value(v).unsqueeze(0),
                               node)
            views[operand, dims, epoch] = _traced(graph.call_method("permute", (view, *inverse)),
                                                  lambda v=view: meta_value(v).permute(*inverse), node)
        return views[operand, dims, epoch]

    if is_(node, CAT):
        args = ([aligned(a) for a in node.args[0]], *node.args[1:])
    elif is_(node, ARITHMETIC):
        args = tuple(aligned(a) for a in node.args)
    else:  # an activation, a cast, or a slice of the last dim (the same index)
        args = (aligned(node.args[0]), *node.args[1:])
    return _traced(graph.create_node(node.op, node.target, args, dict(node.kwargs)), lambda: _call(node, args), node)


def _traced(new: Node, compute, like: Node) -> Node:
    """``new`` with its fake value (``compute()`` in the graph's fake mode, guarding nothing: the same ops on the
    same sizes) and ``like``'s source location."""
    value = meta_value(like)
    fake_mode = getattr(value, "fake_mode", None)
    shape_env = getattr(fake_mode, "shape_env", None)
    with fake_mode or contextlib.nullcontext(), \
            shape_env.suppress_guards() if shape_env is not None else contextlib.nullcontext():
        new.meta["example_value"] = compute()
    for key in ("stack_trace", "source_fn_stack", "nn_module_stack"):
        if key in like.meta:
            new.meta[key] = like.meta[key]
    return new


def _call(node: Node, args):
    """``node``'s op on the fake values of ``args``."""
    values = [[meta_value(a) for a in v] if isinstance(v, list) else meta_value(v) if isinstance(v, Node) else v
              for v in args]
    if node.op == "call_method":
        return getattr(values[0], node.target)(*values[1:], **node.kwargs)
    return node.target(*values, **node.kwargs)
