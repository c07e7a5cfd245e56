"""In-place activations on private temporaries made out-of-place: ``nn.ReLU(inplace=True)``, ``nn.Hardswish(inplace=
True)`` and ``nn.Dropout(inplace=True)`` as torchvision's models and many hand-written MLPs use them, traced by
TorchDynamo as ``F.relu(h, inplace=True)``. Such a call writes into ``h``, so it is a barrier that no fused subgraph
spans and its op stays in PyTorch: MobileNetV3's Linear, Hardswish, Dropout, Linear head ran as two kernels and two
PyTorch ops. Where nothing else can see ``h`` (it is new memory, the result of an op that always allocates its own,
and this call is its only reader), writing the result to other memory changes nothing a program can observe, and
:func:`out_of_place_temporaries` sets the call's ``inplace`` to False.

Aliasing is judged by the op that made ``h``, not by the traced fake tensors: an eval-mode dropout returns its input
as it is in eager, while its fake result has storage of its own, and ``.to()`` or ``.contiguous()`` return their
input where there is nothing to do.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Node

from amk.frontend.nodes import meta_value
from amk.frontend.spellings import ADD, ADDMM, BMM, DIV, LINEAR, MATMUL, MUL, POW, SUB, is_, spellings

# Ops whose result is always new memory, never an input returned as it is nor a view of one (an activation only when
# it is not itself in place).
ALLOCATING = ADD | SUB | MUL | DIV | POW | MATMUL | ADDMM | BMM | LINEAR | spellings(
    [F.relu, torch.relu, F.gelu, F.silu, F.mish, F.hardswish, F.hardsigmoid, F.leaky_relu, F.hardtanh, F.relu6,
     F.softplus, torch.sigmoid, torch.tanh, torch.softmax, F.softmax, F.layer_norm, F.rms_norm, F.group_norm,
     F.batch_norm, F.conv1d, F.conv2d, F.conv3d],
    ["relu", "sigmoid", "tanh", "softmax"])


def out_of_place_temporaries(gm: GraphModule) -> list[str]:
    """Set ``inplace=False`` on the calls of ``gm`` that write only into a private temporary (the module's
    docstring), in graph order, so that a chain of them (an activation, then a dropout) becomes out-of-place as a
    whole; the names of the nodes changed."""
    changed = []
    for node in gm.graph.nodes:
        bound = _inplace_call(node)
        if bound is not None and _private_temporary(node, bound.arguments.get("input")):
            bound.arguments["inplace"] = False
            node.args, node.kwargs = bound.args, bound.kwargs
            changed.append(node.name)
    if changed:
        gm.recompile()
    return changed


def _inplace_call(node: Node) -> inspect.BoundArguments | None:
    """The arguments of a call of a Python function with an ``inplace`` parameter set to True, else None."""
    if node.op != "call_function" or not inspect.isfunction(node.target):
        return None
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return None
    return bound if bound.arguments.get("inplace") is True else None


def _private_temporary(node: Node, written) -> bool:
    """Whether ``written``, the tensor that ``node`` writes into, is seen by nothing else: new memory from an op that
    allocates (not itself still in place), read by ``node`` alone."""
    return (is_(written, ALLOCATING) and _inplace_call(written) is None and list(written.users) == [node]
            and isinstance(meta_value(written), torch.Tensor))
