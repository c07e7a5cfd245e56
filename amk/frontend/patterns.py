"""Patterns: several FX nodes imported as one ``tensor_op`` op. :func:`match_patterns` finds the hand-written RMSNorm
``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`` (and ``x / sqrt(...)``, with or without the weight, the
mean of squares also taken of ``x.to(torch.float32)`` as T5's is) and
returns it as a :class:`Pattern` whose root becomes one ``tensor_op.rmsnorm`` and whose other nodes are absorbed, so
that the norm fuses as a matmul prologue like ``torch.rms_norm`` does; the hand-written LayerNorm ``(x - u) /
sqrt(v + eps) * w + b`` (``u`` x's mean over the last dim, ``v`` its variance: ``x.var(-1, keepdim=True,
unbiased=False)`` or the mean of the squared deviations; ``rsqrt`` too), which becomes one ``tensor_op.layernorm``;
and a matmul of rows merged by a view and
split again (Hugging Face GPT-2's ``Conv1D``: ``torch.addmm(b, x.view(-1, K), w).view(*x.shape[:-1], N)``), imported
as the matmul of ``x`` itself, so that it fuses with the ops around it (amk has no view between leading dims); and
rotary embeddings' ``rotate_half``, ``torch.cat((-x[..., D/2:], x[..., :D/2]), dim=-1)``, one
``tensor_op.rotate_half``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node

from amk.dialects import tensor_op
from amk.frontend.converters import CASTS, CONVERTERS
from amk.frontend.nodes import fake_tensor, meta_value, single_user
from amk.frontend.spellings import (
    ADD,
    ADDMM,
    CAT,
    DIV,
    GETITEM,
    LINEAR,
    MATMUL,
    MEAN,
    MUL,
    NEG,
    POW,
    RESHAPES,
    RSQRT,
    SQRT,
    SQUARE,
    SUB,
    VAR,
    is_,
    key_of,
)


@dataclass
class Pattern:
    """Several FX nodes imported as one op: ``root``'s value; ``absorbed`` nodes get no value of their own."""

    root: Node
    absorbed: list[Node]
    label: str
    build: Callable


def _is_square_of(node, x) -> bool:
    if is_(node, POW):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] == 2 and not node.kwargs
    if is_(node, SQUARE):
        return len(node.args) == 1 and node.args[0] is x
    if is_(node, MUL):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] is x
    return False


# The positional arguments after the input: torch.mean(x, dim, keepdim), torch.var(x, dim, unbiased, keepdim).
_POSITIONAL = {"mean": ("dim", "keepdim"), "var": ("dim", "unbiased", "keepdim")}


def _row_statistic(node, family: frozenset, extra: dict) -> Node | None:
    """The source of ``node`` = ``op(source, dim=-1, keepdim=True, **extra)`` of ``family`` (``mean``, ``var``) over
    the last dim (the extra arguments as given, by keyword or by position), else None."""
    if not is_(node, family):
        return None
    names = _POSITIONAL["var" if family is VAR else "mean"]
    args = list(node.args)
    kwargs = dict(node.kwargs)
    source = args.pop(0) if args else kwargs.pop("input", None)
    if len(args) > len(names) or any(name in kwargs for name in names[:len(args)]):
        return None
    kwargs.update(zip(names, args))
    dim, keepdim = kwargs.pop("dim", None), kwargs.pop("keepdim", False)
    if kwargs.pop("dtype", None) is not None or kwargs != extra:
        return None
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    rank = fake_tensor(source).dim() if isinstance(meta_value(source), torch.Tensor) else 0
    if not isinstance(dim, int) or rank == 0 or dim % rank != rank - 1 or keepdim is not True:
        return None
    return source


def _float32_copy_of(node, x) -> bool:
    """Whether ``node`` is ``x`` cast to float32 (``x.to(torch.float32)``, ``x.float()``), exact from fp16 and bf16."""
    return (is_(node, CASTS) and bool(node.args) and node.args[0] is x and isinstance(meta_value(node), torch.Tensor)
            and fake_tensor(node).dtype == torch.float32
            and fake_tensor(x).dtype in (torch.float32, torch.float16, torch.bfloat16))


def _mean_of_square(node, x) -> tuple[Node, Node] | None:
    """``mean(sq(x), dim=-1, keepdim=True)``, or the mean of the square of ``x`` cast to float32 (T5's norm takes
    its variance in fp32 and multiplies ``x`` itself, promoted to fp32: the norm of the cast) → (the square node,
    the norm's input: ``x`` or the cast)."""
    source = _row_statistic(node, MEAN, {})
    if source is None or not single_user(source, node):
        return None
    if _is_square_of(source, x):
        return source, x
    base = source.args[0] if source.args else None
    if _float32_copy_of(base, x) and single_user(base, source) and _is_square_of(source, base):
        return source, base
    return None


def _inverse_root_forms(root: Node):
    """Each way ``root`` reads as ``x * rsqrt(s + eps)`` (either order) or ``x / sqrt(s + eps)``, ``eps`` not a tensor:
    ``(x, s, eps, [the sum, the root])``."""
    if is_(root, MUL) and len(root.args) == 2 and not root.kwargs:
        candidates, inverse = [(root.args[0], root.args[1]), (root.args[1], root.args[0])], RSQRT
    elif is_(root, DIV) and len(root.args) == 2 and not root.kwargs:
        candidates, inverse = [(root.args[0], root.args[1])], SQRT
    else:
        return
    for x, r in candidates:
        if not isinstance(x, Node) or not is_(r, inverse) or len(r.args) != 1 or not is_(r.args[0], ADD):
            continue
        total = r.args[0]
        if len(total.args) != 2 or total.kwargs:
            continue
        for value, eps in [(total.args[0], total.args[1]), (total.args[1], total.args[0])]:
            if isinstance(value, Node) and not (isinstance(eps, Node) and isinstance(meta_value(eps), torch.Tensor)):
                yield x, value, eps, [total, r]


def _match_rms_core(root: Node):
    """``x * rsqrt(mean(x²) + eps)`` (either order) or ``x / sqrt(mean(x²) + eps)`` → (the norm's input, eps,
    absorbed); the mean may be of ``x`` cast to float32 (:func:`_mean_of_square`)."""
    for x, mean, eps, (total, r) in _inverse_root_forms(root):
        if not (single_user(r, root) and single_user(total, r) and single_user(mean, total)):
            continue
        found = _mean_of_square(mean, x)
        if found is not None:
            square, normalized = found
            return normalized, eps, [square, mean, total, r]
    return None


def _centered(node) -> tuple[Node, Node] | None:
    """``x - x.mean(-1, keepdim=True)`` → (x, the mean node)."""
    if not is_(node, SUB) or len(node.args) != 2 or node.kwargs:
        return None
    x, mean = node.args
    if not isinstance(x, Node) or _row_statistic(mean, MEAN, {}) is not x:
        return None
    return x, mean


def _variance_absorbed(variance: Node, x: Node, centered: Node, mean: Node) -> list[Node] | None:
    """The nodes of ``variance`` when it is ``x``'s variance over the last dim: ``x.var(-1, keepdim=True,
    unbiased=False)`` (or ``correction=0``), or the mean of the squares of ``centered`` or of another ``x - x.mean(-1,
    keepdim=True)``."""
    if any(_row_statistic(variance, VAR, extra) is x for extra in ({"unbiased": False}, {"correction": 0})):
        return [variance]
    square = _row_statistic(variance, MEAN, {})
    if square is None:
        return None
    if _is_square_of(square, centered):
        return [square, variance]
    base = square.args[0] if is_(square, POW | SQUARE | MUL) and square.args else None
    again = _centered(base)  # x - u written twice (the mean too, or not)
    if base is centered or again is None or again[0] is not x or not _is_square_of(square, base):
        return None
    return [*([again[1]] if again[1] is not mean else []), base, square, variance]


def _match_layer_norm_core(root: Node):
    """``c / sqrt(v + eps)`` or ``c * rsqrt(v + eps)`` (either order), ``c = x - x.mean(-1, keepdim=True)`` and ``v``
    x's variance over the last dim (:func:`_variance_absorbed`), no value of them read elsewhere → (x, eps,
    absorbed)."""
    for centered, variance, eps, (total, r) in _inverse_root_forms(root):
        found = _centered(centered)
        if found is None:
            continue
        x, mean = found
        nodes = _variance_absorbed(variance, x, centered, mean)
        if nodes is None:
            continue
        absorbed = [mean, centered, *nodes, total, r]
        inside = {*absorbed, root}
        if all(user in inside for node in absorbed for user in node.users):
            return x, eps, absorbed
    return None


def _vector_after(node: Node, family: frozenset):
    """``node ⊙ v`` / ``v ⊙ node`` of ``family`` (a norm's weight: ``MUL``, its bias: ``ADD``) right after ``node``,
    its only user, with ``v`` a vector over the last dim of its dtype → (the user, v)."""
    users = list(node.users)
    if len(users) != 1 or not is_(users[0], family) or len(users[0].args) != 2 or users[0].kwargs:
        return None
    user = users[0]
    vector = user.args[1] if user.args[0] is node else user.args[0]
    if vector is node or not isinstance(vector, Node) or not isinstance(meta_value(vector), torch.Tensor):
        return None
    v, y = fake_tensor(vector), fake_tensor(node)
    if v.dim() != 1 or v.dtype != y.dtype or fake_tensor(user).dtype != y.dtype or _dims(v.shape) != _dims(y.shape)[-1:]:
        return None  # not the norm's weight or bias: a size-1 gain, broadcast over the row, stays an op of its own
    return user, vector


def _cast_back_to_the_weight(norm: Node, x: Node) -> tuple[Node, tuple[Node, Node]] | None:
    """Hugging Face's Llama (Mistral, Qwen2) RMSNorm of a narrower input: ``x`` a cast up of it, ``norm``'s only user a
    cast back to its dtype, then the product with a weight of that dtype (``self.weight *
    hidden_states.to(input_dtype)``) → (the cast back, (the product, the weight)); else None."""
    users = list(norm.users)
    if not (x.args and _float32_copy_of(x, x.args[0])) or len(users) != 1 \
            or not is_(users[0], CASTS) or not isinstance(meta_value(users[0]), torch.Tensor) \
            or fake_tensor(users[0]).dtype != fake_tensor(x.args[0]).dtype:
        return None
    weighted = _vector_after(users[0], MUL)
    return (users[0], weighted) if weighted else None


def _dims(shape) -> list[str]:
    """A shape's sizes as text: symbolic sizes read from the same input print alike, with no guard installed."""
    return [str(size) for size in shape]


def _rows_merged(node) -> Node | None:
    """``x.view(-1, K)`` / ``x.reshape(M, K)`` / ``torch.reshape(x, ...)`` of an ``x`` of rank 3 or more: its leading
    dims merged into rows, its last dim kept. Returns ``x``."""
    if not is_(node, RESHAPES) or not node.args or node.kwargs:
        return None
    if not isinstance(meta_value(node.args[0]), torch.Tensor):
        return None
    before, after = fake_tensor(node.args[0]), fake_tensor(node)
    if before.dim() < 3 or after.dim() != 2 or _dims(after.shape)[-1] != _dims(before.shape)[-1]:
        return None
    return node.args[0]


def _match_merged_rows_matmul(root: Node) -> tuple[Node, Node, Node] | None:
    """``root`` = ``product.view(*x.shape[:-1], N)`` where ``product`` is a matmul (``addmm``, ``mm``, ``@``,
    ``linear``) of ``flat`` = the rows of ``x`` merged (:func:`_rows_merged`), each read only there. Returns
    ``(x, flat, product)``."""
    if not is_(root, RESHAPES) or not root.args or root.kwargs:
        return None
    product = root.args[0]
    if not (is_(product, ADDMM) or is_(product, MATMUL) or is_(product, LINEAR)) or not single_user(product, root):
        return None
    lhs_position = 1 if is_(product, ADDMM) else 0
    if len(product.args) <= lhs_position:
        return None
    flat = product.args[lhs_position]
    x = _rows_merged(flat)
    if x is None or not single_user(flat, product):
        return None
    split, source = fake_tensor(root), fake_tensor(x)
    if split.dim() != source.dim() or _dims(split.shape)[:-1] != _dims(source.shape)[:-1]:
        return None
    return x, flat, product


def last_dim_slice(node) -> tuple[Node, int, int] | None:
    """``(x, start, stop)`` for ``x[..., start:stop]`` (or ``x[:, :, start:stop]``: every other index a whole dim)
    over ``x``'s last dim of known size, the bounds made non-negative and clipped as Python clips them; else None."""
    if not is_(node, GETITEM) or len(node.args) != 2 or not isinstance(node.args[0], Node):
        return None
    x, index = node.args
    value = meta_value(x)
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or not isinstance(index, tuple) or not index:
        return None
    *lead, last = index
    whole = slice(None)
    if lead[:1] == [Ellipsis]:
        lead = lead[1:]
    elif len(index) != value.dim():
        return None
    if any(entry != whole for entry in lead) or not isinstance(last, slice) or last.step not in (None, 1):
        return None
    length = value.shape[-1]
    if not isinstance(length, int) or not all(isinstance(b, int | None) for b in (last.start, last.stop)):
        return None
    start, stop, _ = last.indices(length)
    return x, start, max(start, stop)


def match_rotate_half(root: Node) -> tuple[Node, list[Node]] | None:
    """``torch.cat((-x[..., D/2:], x[..., :D/2]), dim=-1)`` (Hugging Face's ``rotate_half``): ``x`` and the nodes
    absorbed, each read by the next alone."""
    if not is_(root, CAT) or root.kwargs.keys() - {"tensors", "dim"}:
        return None
    tensors = root.args[0] if root.args else root.kwargs.get("tensors")
    dim = root.args[1] if len(root.args) > 1 else root.kwargs.get("dim", 0)
    if not isinstance(tensors, list | tuple) or len(tensors) != 2 or not isinstance(dim, int):
        return None
    negated, first = tensors
    if not is_(negated, NEG) or len(negated.args) != 1 or not single_user(negated, root) or not single_user(first, root):
        return None
    second = negated.args[0]
    moved, kept = last_dim_slice(second), last_dim_slice(first)
    if moved is None or kept is None or moved[0] is not kept[0] or not single_user(second, negated):
        return None
    x = moved[0]
    value = meta_value(x)
    length = value.shape[-1]
    half = length // 2
    if length % 2 or dim % value.dim() != value.dim() - 1 or moved[1:] != (half, length) or kept[1:] != (0, half):
        return None
    return x, [negated, second, first]


def match_patterns(gm: GraphModule) -> list[Pattern]:
    patterns = []
    taken: set[Node] = set()
    for node in gm.graph.nodes:
        if node in taken or node.op not in ("call_function", "call_method"):
            continue
        rotated = match_rotate_half(node)
        if rotated is not None and not taken.intersection(rotated[1]):
            x, absorbed = rotated
            patterns.append(Pattern(node, absorbed, "rotate_half (cat(-x[..., D/2:], x[..., :D/2]))",
                                    lambda b, _node, x=x: b.add(tensor_op.RotateHalfOp(b.tensor(x)))))
            taken.update([*absorbed, node])
            continue
        merged = _match_merged_rows_matmul(node)
        if merged is not None and not taken.intersection(merged[1:]):
            x, flat, product = merged

            def build_matmul(b, _node, x=x, flat=flat, product=product):
                b.values[flat] = b.tensor(x)  # the merged rows are x's: the matmul takes x as it is
                return CONVERTERS[key_of(product)].build(b, product)

            patterns.append(Pattern(node, [flat, product], "matmul of merged rows (x.view(-1, K) @ w, viewed back)",
                                    build_matmul))
            taken.update([flat, product, node])
            continue
        layer_norm = _match_layer_norm_core(node)
        core = layer_norm or _match_rms_core(node)
        if core is None:
            continue
        x, eps, absorbed = core
        if not isinstance(meta_value(x), torch.Tensor) or fake_tensor(node).dtype != fake_tensor(x).dtype:
            continue
        root, weight, bias = node, None, None
        weighted = _vector_after(root, MUL)
        # Where another op reads the cast up too, the fp32 input is computed anyway: the norm stays the cast's (one
        # kernel with that reader, where the norm of the narrower input and the cast were two).
        narrowed = None if weighted or not set(x.users) <= {*absorbed, root} else _cast_back_to_the_weight(root, x)
        if narrowed is not None:
            # Llama's RMSNorm of a bf16 model computes in fp32 between a cast up and the cast back: amk's norm kernels
            # compute in fp32 whatever the dtype, so that is the norm of the bf16 input itself, as nn.RMSNorm's is
            # (the matmuls then read the norm, and its decode prologue scales their accumulators:
            # row_scaled_prologue). One rounding, where PyTorch rounds before the weight's product too: within bf16's
            # tolerance. The cast up goes too.
            cast_back, weighted = narrowed
            absorbed = absorbed + [cast_back, x]
            x = x.args[0]
        if weighted:
            absorbed = absorbed + [root]
            root, weight = weighted
        biased = _vector_after(root, ADD) if layer_norm else None
        if biased:
            absorbed = absorbed + [root]
            root, bias = biased

        def build(b, _node, x=x, eps=eps, weight=weight, bias=bias, layer_norm=layer_norm is not None):
            value = b.tensor(x)
            w = b.tensor(weight) if weight is not None else None
            if layer_norm:
                return b.add(tensor_op.LayerNormOp(value, w, b.tensor(bias) if bias is not None else None,
                                                   b.scalar(eps)))
            return b.add(tensor_op.RMSNormOp(value, w, b.scalar(eps)))

        label = ("layernorm ((x - mean) / sqrt(var + eps) * w + b)" if layer_norm
                 else "rmsnorm (x * rsqrt(mean(x**2) + eps) * w)")
        patterns.append(Pattern(root, absorbed, label, build))
        taken.update(absorbed)
        taken.add(root)
    return patterns
