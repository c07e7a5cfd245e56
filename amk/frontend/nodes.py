"""Reading FX nodes: a node's fake value (shape, dtype, symbolic sizes) and its ``tensor_op`` type, its arguments by
name, and its target's name for messages. :class:`Unsupported`, raised wherever a node has no ``tensor_op``
equivalent, lives here, in the lowest module of the importer, so that every module above it can raise it."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import sympy
import torch
import torch.nn.functional as F
from torch.fx import Node
from torch.utils._sympy.functions import MinMaxBase

from amk.dialects.tensor_op import TensorType
from amk.dtypes import argument_type
from amk.symbolic import Dim

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """The node has no ``tensor_op`` equivalent (the message says why)."""


def meta_value(node: Node):
    """The fake value Dynamo recorded for ``node`` (a FakeTensor, SymInt, ...), or None."""
    value = node.meta.get("val")
    if value is None:
        value = node.meta.get("example_value")
    return value


# What a node computing on sizes yields: a number, or a symbol standing for one
NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


def computes_on_sizes(node: Node) -> bool:
    """Whether ``node`` computes on numbers, not tensors: a size read, arithmetic or a comparison of sizes (its value
    a number), or a check of such numbers (``torch._check``, the trace's ``torch._assert_scalar``: no value, numbers
    in). Such a node has nothing to fuse and launches nothing; where a graph runs it, it runs as Python."""
    value = meta_value(node)
    if isinstance(value, NUMBERS):
        return True
    inputs = node.all_input_nodes
    return (value is None and node.op == "call_function" and bool(inputs)
            and all(isinstance(meta_value(arg), NUMBERS) for arg in inputs))


def single_user(node, user: Node) -> bool:
    """Whether ``user`` is the one node that reads ``node`` (a pattern may then absorb ``node`` into ``user``)."""
    return isinstance(node, Node) and list(node.users) == [user]


def traced_value(size) -> int | None:
    """The value TorchDynamo traced a size with (an int as it is; a SymInt's hint), None where it has none (an
    unbacked size)."""
    hint = size.node.hint if isinstance(size, torch.SymInt) else size
    return hint if isinstance(hint, int) else None


def traced_symbol_values(shape_env) -> dict:
    """Each backed size symbol's traced value (torch 2.13's ``backed_var_to_val``; ``var_to_val``, which warns
    there, before)."""
    values = getattr(shape_env, "backed_var_to_val", None)
    return shape_env.var_to_val if values is None else values


def fake_tensor(node: Node) -> torch.Tensor:
    value = meta_value(node)
    if isinstance(value, NUMBERS):
        # Whisper's bsz * num_heads, ViT's shape products: sizes the model computes, not data to fuse
        raise Unsupported(f"{node.name} is a number computed from sizes ({value}), not a tensor")
    if not isinstance(value, torch.Tensor):
        raise Unsupported(f"{node.name} is not a tensor" if value is not None else f"{node.name} has no shape metadata")
    return value


def dim_of(size) -> Dim:
    """A ``Dim`` from an int or a SymInt (its sympy expression, e.g. ``s27*s77``)."""
    if isinstance(size, int):
        return Dim(size)
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        if expr.is_Integer:
            return Dim(int(expr))
        pinned = _pinned_value(size.node)
        if pinned is not None:
            return Dim(pinned)
        try:
            return Dim(str(_guarded_equal(size.node, _settled_min_max(size.node))))
        except ValueError as error:
            raise Unsupported(f"symbolic size {expr} is not a dimension expression amk reads ({error})") from None
    raise Unsupported(f"size {size!r} is neither an int nor a SymInt")


def _pinned_value(node) -> int | None:
    """The value the guards of TorchDynamo's ShapeEnv pin a symbolic size to in this graph, or None where it may
    vary: a graph compiled again after a size such as ``(s0 + 3)//4`` met a guard ``!= 1`` holds it as that
    expression in some nodes' shapes and as 1 in others' (those computed after the guard)."""
    try:
        hint = node.hint
        if hint is None:  # an unbacked size
            return None
        pinned = node.shape_env._maybe_evaluate_static(sympy.Eq(node.expr, hint))
    except Exception:  # private APIs of TorchDynamo's: where they fail, the size stays symbolic (fused less, not wrong)
        return None
    return int(hint) if pinned is sympy.true else None


def _settled_min_max(node) -> sympy.Expr:
    """The size's expression with each ``Min`` or ``Max`` that the guards of TorchDynamo's ShapeEnv settle to one of
    its arguments replaced by that argument. A buffer sliced to a length, ``position_ids[:, :L]`` (BERT's position
    embeddings), has the length ``Min(512, L)``, which the size-oblivious trace does not bound; once the slice is
    broadcast against the length itself, the graph is guarded on ``Min(512, L) == L``, and the two dims are one.
    Sub-expressions that the guards pin to a number are that number first (GPT-2's decoding step slices its causal
    mask to ``kl - ql``, ``Max(0, -Min(64, s59) + Min(64, s59 + 1))``, guarded equal to 1: settled Min by Min, two
    slices of one length came out spelled two ways)."""
    expr = node.expr
    try:
        expr = expr.xreplace(_guard_facts(node.shape_env).numbers)
        settled = {}
        for min_max in expr.atoms(sympy.Min, sympy.Max, MinMaxBase):  # torch's own Min and Max too
            equal = [arg for arg in min_max.args if _guards_equate(node.shape_env, min_max, arg)]
            if equal:
                settled[min_max] = equal[0]
    except Exception:  # private APIs of TorchDynamo's, as in _pinned_value: the expression stays (fused less)
        return expr
    return expr.xreplace(settled)


# Per TorchDynamo ShapeEnv (a graph's), how each size expression that is no symbol of its own was read, and those
# read as themselves by their value at the trace (see _guarded_equal): a graph's sizes are read once per node that
# has them, and the guards' checks are sympy work.
_READ_AS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _guarded_equal(node, expr: sympy.Expr) -> sympy.Expr:
    """``expr``, the expression of the size ``node``, or where the guards of TorchDynamo's ShapeEnv make it equal to
    a symbol of the same value at the trace, that symbol, or else to an expression read before in the graph, that
    expression: one dim spelled two ways must be one for amk's broadcasting checks, which compare expressions (GPT-2's
    ``attention_mask.view(batch_size, -1)`` has the length ``(s43*s53)//s44``, guarded equal to the scores' ``s70``,
    and the mask's add stayed out of the attention kernel). Sizes that no guard settles stay as they are."""
    if expr.is_Symbol or expr.is_Integer:
        return expr
    try:
        hint, shape_env = node.hint, node.shape_env
        if hint is None:  # an unbacked size
            return expr
        read_as, kept = _READ_AS.setdefault(shape_env, ({}, {}))
        if expr not in read_as:
            symbols = [symbol for symbol, value in traced_symbol_values(shape_env).items() if value == hint]
            same_value = kept.setdefault(int(hint), [])  # expressions read as themselves, of this value
            read_as[expr] = next((candidate for candidate in (*sorted(symbols, key=str), *same_value)
                                  if _guards_equate(shape_env, expr, candidate)), expr)
            if read_as[expr] is expr:
                same_value.append(expr)
        return read_as[expr]
    except Exception:  # private APIs of TorchDynamo's, as in _pinned_value: the expression stays (fused less)
        return expr


def _guards_equate(shape_env, a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether the guards of ``shape_env`` make ``a`` and ``b`` equal: as its own static evaluation says, or as one of
    its equality guards says once its symbols are replaced as the ShapeEnv replaces them since (its evaluation keeps
    the guards as they were recorded: ``Eq(s69, (s43*s53)//s37)`` after the replacements ``s69 -> s49`` and
    ``s37 -> s33`` did not settle ``(s43*s53)//s33 == s49``). Raises where TorchDynamo's private API does."""
    if shape_env._maybe_evaluate_static(sympy.Eq(a, b)) is sympy.true:
        return True
    difference, said = sympy.expand(a - b), _guard_facts(shape_env).differences
    return difference in said or -difference in said


@dataclass(frozen=True)
class _GuardFacts:
    """What the equality guards of a ShapeEnv say, their symbols replaced as the ShapeEnv replaces them since:
    ``numbers``, the compound sub-expressions (a ``Max`` of ``Min``s) they pin to a number, with it; ``differences``,
    ``left - right`` of each, expanded, those sub-expressions replaced by their numbers."""

    numbers: dict
    differences: frozenset


# Per ShapeEnv, its guard facts and what they were read from (its guards' count and its replacements): every size
# of a graph asks, and reading them is sympy work over every guard.
_GUARD_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _guard_facts(shape_env) -> _GuardFacts:
    read_from = (len(shape_env.guards), tuple(shape_env.replacements.items()))
    cached = _GUARD_FACTS.get(shape_env)
    if cached is not None and cached[0] == read_from:
        return cached[1]
    equalities = [tuple(_replaced(shape_env, side) for side in guard.expr.args) for guard in shape_env.guards
                  if isinstance(guard.expr, sympy.Eq)]
    numbers = {side: other for left, right in equalities for side, other in ((left, right), (right, left))
               if other.is_Integer and not side.is_Symbol and not side.is_Integer}
    differences = frozenset(sympy.expand(left.xreplace(numbers) - right.xreplace(numbers))
                            for left, right in equalities)
    facts = _GuardFacts(numbers, differences)
    _GUARD_FACTS[shape_env] = (read_from, facts)
    return facts


def _replaced(shape_env, expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with the ShapeEnv's replacements of its symbols applied until none applies (they may chain)."""
    for _ in range(8):
        replaced = expr.xreplace(shape_env.replacements)
        if replaced == expr:
            break
        expr = replaced
    return expr


def tensor_type_of(fake: torch.Tensor) -> TensorType:
    if fake.dtype not in FLOAT_DTYPES and fake.dtype != torch.bool:
        raise Unsupported(f"dtype {fake.dtype} (amk kernels compute float32, float16 and bfloat16, and read boolean "
                          "masks)")
    if fake.is_complex() or fake.is_sparse or fake.layout != torch.strided:
        raise Unsupported("only dense strided tensors")
    return TensorType([dim_of(s) for s in fake.shape], argument_type(fake.dtype))


def bind_arguments(node: Node, names: Sequence[str], defaults: dict | None = None) -> dict:
    """The node's arguments by name (``names`` in positional order; ``defaults`` for those left out)."""
    bound = dict(defaults or {})
    if len(node.args) > len(names):
        raise Unsupported(f"{describe_target(node)} called with {len(node.args)} positional arguments")
    bound.update(zip(names, node.args))
    for key, value in node.kwargs.items():
        if key not in names:
            raise Unsupported(f"{describe_target(node)}: argument {key}={value!r} is not supported")
        bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        raise Unsupported(f"{describe_target(node)}: missing argument {missing[0]}")
    return bound


def describe_target(node: Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        target = node.target
        module = getattr(target, "__module__", None) or ""
        name = getattr(target, "__name__", str(target))
        if module in ("_operator", "operator"):
            return f"operator.{name}"
        if module.startswith("torch._C._nn") or target in (F.linear, F.gelu):
            return f"F.{name}"
        if module.startswith("torch.nn.functional"):
            return f"F.{name}"
        if module.startswith("torch") or module == "":
            return f"torch.{name}"
        return f"{module}.{name}"
    if node.op == "call_module":
        return f"module {node.target}"
    return node.op
