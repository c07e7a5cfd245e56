"""Patterns: several FX nodes imported as one ``tensor_op`` op. :func:`match_patterns` finds the hand-written RMSNorm
``x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`` (and ``x / sqrt(...)``, with or without the weight) and
returns it as a :class:`Pattern` whose root becomes one ``tensor_op.rmsnorm`` and whose other nodes are absorbed, so
that the norm fuses as a matmul prologue like ``torch.rms_norm`` does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node

from amk.dialects import tensor_op
from amk.frontend.nodes import fake_tensor, meta_value
from amk.frontend.spellings import ADD, DIV, MEAN, MUL, POW, RSQRT, SQRT, SQUARE, is_


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


def match_patterns(gm: GraphModule) -> list[Pattern]:
    patterns = []
    taken: set[Node] = set()
    for node in gm.graph.nodes:
        if node in taken or node.op not in ("call_function", "call_method"):
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
