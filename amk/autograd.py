"""The backward that amk's kernels share: the computation recomputed in PyTorch and differentiated.

``build_fused_kernel`` kernels (recomputing the op chain's reference) and ``amk.compile`` subgraphs (re-running the
FX nodes they replaced) both run their fused kernels forward and, for backward, recompute what the kernels computed
with autograd on; :func:`recomputed_gradients` turns that recomputation into the gradients autograd asks for.

A backward asked to build a graph itself (``create_graph=True``: a gradient penalty, a Hessian-vector product) runs with
grad mode on (:func:`builds_graph`); the recomputation then starts from views of the saved inputs rather than from
detached copies (:func:`recomputation_input`), so that the gradients it returns are differentiable with respect to
those inputs too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def builds_graph() -> bool:
    """Whether the running backward must itself be differentiable (autograd enables grad mode for it exactly when
    ``create_graph=True``)."""
    return torch.is_grad_enabled()


def recomputation_input(tensor: torch.Tensor, needs_grad: bool, create_graph: bool,
                        dtype: torch.dtype | None = None) -> torch.Tensor:
    """What a backward recomputes from in place of the saved input ``tensor`` (in ``dtype`` where given): a detached
    copy, a leaf requiring grad where ``needs_grad``; with ``create_graph``, a view of the input itself, a node of its
    own for each input, so that the gradients stay differentiable with respect to it and an input passed twice, or
    computed from another input, has each path counted once (the inputs themselves would count the other's twice)."""
    if create_graph:
        view = tensor.view_as(tensor)
        return view if dtype is None else view.to(dtype)
    leaf = tensor.detach() if dtype is None else tensor.detach().to(dtype)
    return leaf.requires_grad_() if needs_grad else leaf


def recomputed_gradients(outputs: Sequence, grads: Sequence, inputs: Sequence, wanted: Sequence[int],
                         dtypes: Sequence[torch.dtype | None], create_graph: bool = False) -> list[torch.Tensor | None]:
    """The gradients of the recomputed ``outputs`` (weighted by the incoming ``grads``) with respect to
    ``inputs[i]`` for each ``i`` in ``wanted``, in ``dtypes[i]``; None for the other inputs and for an input no
    output depends on. Outputs without an incoming gradient, or that need none, are left out. With
    ``create_graph`` the gradients carry a graph of their own (see the module docstring)."""
    pairs = [(output, grad) for output, grad in zip(outputs, grads)
             if grad is not None and isinstance(output, torch.Tensor) and output.requires_grad]
    result: list[torch.Tensor | None] = [None] * len(inputs)
    if pairs and wanted:
        computed = torch.autograd.grad([o for o, _ in pairs], [inputs[i] for i in wanted],
                                       [g.to(o.dtype) for o, g in pairs], allow_unused=True,
                                       create_graph=create_graph)
        for index, grad in zip(wanted, computed):
            result[index] = None if grad is None else grad.to(dtypes[index])
    return result
