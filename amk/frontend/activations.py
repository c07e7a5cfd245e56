"""Activations written out as arithmetic, recognized: :func:`recognize_activations` rewrites, in the torch-level graph
TorchDynamo hands the backend, each chain of elementwise ops that computes a GELU of one tensor as one
``torch.nn.functional.gelu`` call (tanh or exact form), as Inductor's pattern passes rewrite known subgraphs.

Why: models write GELU out. Hugging Face's GPT-2 (``NewGELUActivation``), minGPT and BLOOM spell the tanh form as
``0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))`` or a rearrangement of it;
older BERT code spells the exact one with ``torch.erf``. As one op, the tanh form is what cuBLASLt's epilogue computes
(``amk-vendor-epilogues`` puts it in the GEMM, no pass over the hidden activations), and either form is one op in
its kernel, not six to ten; the PyTorch ops a bucket is raced against run one kernel, not eight.

What matches: a node ``s`` and the nodes it reads back to one floating tensor ``x``, each an add, sub, mul, div,
power, tanh, sigmoid or erf whose other operands are Python numbers, none of them read outside the chain but ``s``.
Whether the chain computes a GELU is decided by evaluating it, in float64, on 327 numbers from -30 to 30, against
each form, to a millionth: the ops are analytic, and a formula that agrees with GELU that closely at so many points
is GELU written another way (a rearranged formula, or a constant rounded to eight digits as BLOOM's ``0.79788456``,
still matches; the two forms differ by about 1e-3), or differs from it by less than fp32 resolves. Not where an op
between the chain's first and last changes a tensor or global state, nor where the chain's dtype is not its
input's. The call computes in one rounding what eager rounds at each of its ops, so the result is closer to
the float64 value than eager's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node

from amk.frontend.analysis import mutated_between
from amk.frontend.nodes import meta_value
from amk.frontend.spellings import ADD, DIV, MUL, POW, SUB, key_of, spellings

log = logging.getLogger(__name__)

ELEMENTWISE = ADD | SUB | MUL | DIV | POW | spellings([torch.tanh, F.tanh, torch.sigmoid, F.sigmoid, torch.erf,
                                                       torch.special.erf], ["tanh", "sigmoid", "erf"])
# The forms a chain may compute, each with the call that replaces it (its target and keyword arguments).
FORMS: dict[str, tuple[Callable, dict]] = {
    "gelu_tanh": (F.gelu, {"approximate": "tanh"}),
    "gelu": (F.gelu, {}),
}
PROBE = torch.cat([torch.linspace(-8.0, 8.0, 321, dtype=torch.float64),
                   torch.tensor([-30.0, -20.0, -12.0, 12.0, 20.0, 30.0], dtype=torch.float64)])
RELATIVE_TOLERANCE, ABSOLUTE_TOLERANCE = 1e-6, 1e-9
LONGEST_CHAIN = 24  # the forms take 7-10 ops; a longer run of elementwise ops is not searched further


def recognize_activations(gm: GraphModule) -> list[str]:
    """Rewrite ``gm``'s GELUs written out as arithmetic (the module's docstring) as ``F.gelu`` calls; the names of
    the calls made."""
    graph, made, erased = gm.graph, [], set()
    order = {node: index for index, node in enumerate(graph.nodes)}
    for x in list(graph.nodes):
        # A GELU reads its input at least twice (x and its Phi(x)); a single reader starts no formula.
        if x in erased or len(x.users) < 2 or not _floating(x):
            continue
        match = _largest_match(x, _chain_from(x, order), order)
        if match is None:
            continue
        sink, nodes, form = match
        target, kwargs = FORMS[form]
        with graph.inserting_before(sink):
            call = graph.call_function(target, (x,), kwargs)
        call.meta = dict(sink.meta)  # the same shape, dtype and source location (the match checked the dtype)
        sink.replace_all_uses_with(call)
        order[call] = order[sink]
        for node in sorted(nodes, key=order.__getitem__, reverse=True):
            graph.erase_node(node)
        erased |= nodes
        made.append(call.name)
    if made:
        gm.recompile()
        log.info("amk: GELU written out recognized as %s", ", ".join(made))
    return made


def _floating(node: Node) -> bool:
    value = meta_value(node)
    return isinstance(value, torch.Tensor) and value.dtype.is_floating_point


def _operands_fit(node: Node, inside: set[Node]) -> bool:
    """Whether ``node`` is an op of the chain: an elementwise op of :data:`ELEMENTWISE` whose tensor operands are in
    ``inside`` and whose other operands are Python numbers (a division's rounding mode is not analytic)."""
    if key_of(node) not in ELEMENTWISE or "rounding_mode" in node.kwargs:
        return False
    operands = [*node.args, *node.kwargs.values()]
    return all(operand in inside if isinstance(operand, Node) else type(operand) in (int, float)
               for operand in operands) and any(isinstance(operand, Node) for operand in operands)


def _chain_from(x: Node, order: dict[Node, int]) -> list[Node]:
    """The elementwise ops that compute from ``x`` and numbers alone, in graph order (at most
    :data:`LONGEST_CHAIN`)."""
    inside, chain, frontier = {x}, [], sorted(x.users, key=order.__getitem__)
    while frontier and len(chain) < LONGEST_CHAIN:
        node = frontier.pop(0)
        if node in inside or not _operands_fit(node, inside):
            continue
        inside.add(node)
        chain.append(node)
        frontier = sorted({*frontier, *node.users}, key=order.__getitem__)
    return sorted(chain, key=order.__getitem__)


def _largest_match(x: Node, chain: list[Node], order: dict[Node, int]) -> tuple[Node, set[Node], str] | None:
    """The last node of ``chain`` whose ops, read only within them, compute one of :data:`FORMS` of ``x``: the node,
    those ops and the form's name. Not where a node between the first of those ops and it changes a tensor or global
    state (``x`` changed in place, a ``no_grad`` block: the call, put at that node, would read ``x`` as changed or
    in another mode), nor where its dtype is not ``x``'s (autocast runs ``pow`` in fp32; ``F.gelu`` keeps the
    dtype)."""
    members, values = set(chain), _evaluated(x, chain)
    dtype = meta_value(x).dtype
    for sink in reversed(chain):
        nodes = _reads_back(sink, members)
        if len(nodes) < 3 or not nodes <= values.keys() or any(set(node.users) - nodes for node in nodes - {sink}) \
                or getattr(meta_value(sink), "dtype", None) != dtype \
                or mutated_between(min(nodes, key=order.__getitem__), sink):
            continue
        for form, (target, kwargs) in FORMS.items():
            if torch.allclose(values[sink], target(PROBE, **kwargs), rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE):
                return sink, nodes, form
    return None


def _reads_back(sink: Node, members: set[Node]) -> set[Node]:
    """``sink`` and the members it reads, directly or through others."""
    nodes, stack = set(), [sink]
    while stack:
        node = stack.pop()
        if node in nodes:
            continue
        nodes.add(node)
        stack.extend(n for n in node.all_input_nodes if n in members)
    return nodes


def _evaluated(x: Node, chain: list[Node]) -> dict[Node, torch.Tensor]:
    """The value of each node of ``chain`` (in graph order) with :data:`PROBE` for ``x``, in float64, and of ``x``;
    a node an op refuses to compute so (an integer power's own rules), and those that read it, have none."""
    values: dict[Node, torch.Tensor] = {x: PROBE}
    for node in chain:
        if not all(operand in values for operand in node.all_input_nodes):
            continue
        args = [values[a] if isinstance(a, Node) else a for a in node.args]
        kwargs = {name: values[v] if isinstance(v, Node) else v for name, v in node.kwargs.items()}
        try:
            value = getattr(args[0], node.target)(*args[1:], **kwargs) if node.op == "call_method" \
                else node.target(*args, **kwargs)
        except (RuntimeError, TypeError, ZeroDivisionError):
            continue
        if isinstance(value, torch.Tensor) and value.shape == PROBE.shape:
            values[node] = value
    return values
