"""Comparing an output with a reference: the same non-finite values where the reference has them (a -inf fill that
a log_softmax keeps, a whole masked row's NaN), and the relative L2 error over the rest. The one rule of the tuner's
check of a candidate against the heuristic configuration, the build's of the vendor-GEMM program against the fused
one, and verification's against PyTorch. A leaf module: it imports torch only."""

from __future__ import annotations

import math

import torch


def non_finite_agree(have: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether ``have`` is non-finite exactly where ``want`` is, with the same values there (NaN for NaN, each
    infinity with its sign)."""
    finite = want.isfinite()
    if bool(finite.all()):
        return bool(have.isfinite().all())
    return torch.equal(have.isfinite(), finite) and torch.allclose(have[~finite], want[~finite], rtol=0, atol=0,
                                                                   equal_nan=True)


def relative_error(have: torch.Tensor, want: torch.Tensor) -> float:
    """``||have - want|| / ||want||`` over the elements where ``want`` is finite; infinite where the non-finite
    values differ (:func:`non_finite_agree`)."""
    if not non_finite_agree(have, want):
        return math.inf
    finite = want.isfinite()
    if not bool(finite.all()):
        have, want = have[finite], want[finite]
    return (torch.linalg.vector_norm(have - want) / torch.linalg.vector_norm(want).clamp_min(1e-30)).item()
