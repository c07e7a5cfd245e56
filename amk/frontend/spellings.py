"""How an FX node names its op: the families of spellings (``x + y``, ``torch.add``, ``x.add``) that one ``tensor_op``
op has in the torch-level graph TorchDynamo hands a backend. :func:`spellings` makes a family, :func:`key_of` is a
node's key in one (and in :data:`amk.frontend.converters.CONVERTERS`), :func:`is_` tests a node against one; the
converters and the patterns match nodes by these families."""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch
from torch.fx import Node


def spellings(functions: Iterable = (), methods: Iterable[str] = ()) -> frozenset:
    """Keys of :data:`CONVERTERS`: ``("call_function", fn)`` and ``("call_method", name)``."""
    return frozenset([("call_function", f) for f in functions] + [("call_method", m) for m in methods])


def key_of(node: Node):
    if node.op == "call_function":
        return ("call_function", node.target)
    if node.op == "call_method":
        return ("call_method", node.target)
    return None


ADD = spellings([operator.add, torch.add], ["add"])
SUB = spellings([operator.sub, torch.sub, torch.subtract], ["sub", "subtract"])
MUL = spellings([operator.mul, torch.mul, torch.multiply], ["mul", "multiply"])
DIV = spellings([operator.truediv, torch.div, torch.divide, torch.true_divide], ["div", "divide", "true_divide"])
POW = spellings([operator.pow, torch.pow], ["pow"])
SQUARE = spellings([torch.square], ["square"])
MEAN = spellings([torch.mean], ["mean"])
VAR = spellings([torch.var], ["var"])
RSQRT = spellings([torch.rsqrt], ["rsqrt"])
SQRT = spellings([torch.sqrt], ["sqrt"])
MATMUL = spellings([operator.matmul, torch.matmul, torch.mm], ["matmul", "mm", "__matmul__"])
ADDMM = spellings([torch.addmm], ["addmm"])
BMM = spellings([torch.bmm], ["bmm"])
BADDBMM = spellings([torch.baddbmm], ["baddbmm"])
LINEAR = spellings([torch.nn.functional.linear, torch._C._nn.linear], [])
RESHAPES = spellings([torch.reshape], ["view", "reshape"])
CAT = spellings([torch.cat, torch.concat, torch.concatenate], ["cat"])
NEG = spellings([operator.neg, torch.neg, torch.negative], ["neg", "negative"])
GETITEM = spellings([operator.getitem])


def is_(node: object, family: frozenset) -> bool:
    return isinstance(node, Node) and key_of(node) in family
