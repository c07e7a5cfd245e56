"""Patterns: several FX nodes imported as one ``tensor_op`` op. :func:`match_patterns` finds the hand-written RMSNorm
``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`` (and ``x / sqrt(...)``, with or without the weight) and
returns it as a :class:`Pattern` whose root becomes one ``tensor_op.rmsnorm`` and whose other nodes are absorbed, so
that the norm fuses as a matmul prologue like ``torch.rms_norm`` does; and a matmul of rows merged by a view and
split again (Hugging Face GPT-2's ``Conv1D``: ``torch.addmm(b, x.view(-1, K), w).view(*x.shape[:-1], N)``), imported
as the matmul of ``x`` itself, so that it fuses with the ops around it (amk has no view between leading dims)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node

from amk.dialects import tensor_op
from amk.frontend.converters import CONVERTERS
from amk.frontend.nodes import fake_tensor, meta_value
from amk.frontend.spellings import (
    ADD,
    ADDMM,
    DIV,
    LINEAR,
    MATMUL,
    MEAN,
    MUL,
    POW,
    RESHAPES,
    RSQRT,
    SQRT,
    SQUARE,
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


def _single_user(node: Node, user: Node) -> bool:
    return isinstance(node, Node) and list(node.users) == [user]


def _is_square_of(node, x) -> bool:
    if is_(node, POW):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] == 2 and not node.kwargs
    if is_(node, SQUARE):
        return len(node.args) == 1 and node.args[0] is x
    if is_(node, MUL):
        return len(node.args) == 2 and node.args[0] is x and node.args[1] is x
    return False


def _mean_of_square(node, x) -> Node | None:
    """``mean(sq(x), dim=-1, keepdim=True)``: returns the square node."""
    if not is_(node, MEAN):
        return None
    args = list(node.args)
    kwargs = dict(node.kwargs)
    source = args.pop(0) if args else kwargs.pop("input", None)
    dim = args.pop(0) if args else kwargs.pop("dim", None)
    keepdim = args.pop(0) if args else kwargs.pop("keepdim", False)
    if args or kwargs.pop("dtype", None) is not None or kwargs:
        return None
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    rank = fake_tensor(x).dim() if isinstance(meta_value(x), torch.Tensor) else 0
    if not isinstance(dim, int) or rank == 0 or dim % rank != rank - 1 or keepdim is not True:
        return None
    if not _single_user(source, node) or not _is_square_of(source, x):
        return None
    return source


def _match_rms_core(root: Node):
    """``x * rsqrt(mean(x²) + eps)`` (either order) or ``x / sqrt(mean(x²) + eps)`` → (x, eps, absorbed)."""
    if is_(root, MUL) and len(root.args) == 2 and not root.kwargs:
        candidates = [(root.args[0], root.args[1]), (root.args[1], root.args[0])]
        inverse = RSQRT
    elif is_(root, DIV) and len(root.args) == 2 and not root.kwargs:
        candidates = [(root.args[0], root.args[1])]
        inverse = SQRT
    else:
        return None
    for x, r in candidates:
        if not isinstance(x, Node) or not is_(r, inverse) or not _single_user(r, root) or len(r.args) != 1:
            continue
        total = r.args[0]
        if not is_(total, ADD) or not _single_user(total, r) or len(total.args) != 2 or total.kwargs:
            continue
        for mean, eps in [(total.args[0], total.args[1]), (total.args[1], total.args[0])]:
            if isinstance(eps, Node) and isinstance(meta_value(eps), torch.Tensor):
                continue
            if not isinstance(mean, Node) or not _single_user(mean, total):
                continue
            square = _mean_of_square(mean, x)
            if square is not None:
                return x, eps, [square, mean, total, r]
    return None


def _rms_weight(root: Node):
    """``norm * w`` / ``w * norm`` right after the core, with ``w`` a vector over the last dim."""
    users = list(root.users)
    if len(users) != 1:
        return None
    user = users[0]
    if not is_(user, MUL) or len(user.args) != 2 or user.kwargs:
        return None
    weight = user.args[1] if user.args[0] is root else user.args[0]
    if weight is root or not isinstance(weight, Node) or not isinstance(meta_value(weight), torch.Tensor):
        return None
    w, y = fake_tensor(weight), fake_tensor(root)
    if w.dim() != 1 or w.dtype != y.dtype or fake_tensor(user).dtype != y.dtype:
        return None
    return user, weight


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
    if not (is_(product, ADDMM) or is_(product, MATMUL) or is_(product, LINEAR)) or not _single_user(product, root):
        return None
    lhs_position = 1 if is_(product, ADDMM) else 0
    if len(product.args) <= lhs_position:
        return None
    flat = product.args[lhs_position]
    x = _rows_merged(flat)
    if x is None or not _single_user(flat, product):
        return None
    split, source = fake_tensor(root), fake_tensor(x)
    if split.dim() != source.dim() or _dims(split.shape)[:-1] != _dims(source.shape)[:-1]:
        return None
    return x, flat, product


def match_patterns(gm: GraphModule) -> list[Pattern]:
    patterns = []
    taken: set[Node] = set()
    for node in gm.graph.nodes:
        if node in taken or node.op not in ("call_function", "call_method"):
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
        core = _match_rms_core(node)
        if core is None:
            continue
        x, eps, absorbed = core
        if not isinstance(meta_value(x), torch.Tensor) or fake_tensor(node).dtype != fake_tensor(x).dtype:
            continue
        weighted = _rms_weight(node)
        root, weight = (weighted[0], weighted[1]) if weighted else (node, None)
        if weighted:
            absorbed = absorbed + [node]

        def build(b, _node, x=x, eps=eps, weight=weight):
            value = b.tensor(x)
            w = b.tensor(weight) if weight is not None else None
            return b.add(tensor_op.RMSNormOp(value, w, b.scalar(eps)))

        patterns.append(Pattern(root, absorbed, "rmsnorm (x * rsqrt(mean(x**2) + eps) * w)", build))
        taken.update(absorbed)
        taken.add(root)
    return patterns
