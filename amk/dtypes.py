"""Element types: the mapping between torch dtypes and xDSL types."""

from __future__ import annotations

import torch
from xdsl.dialects.builtin import (
    Float8E4M3FNType,
    bf16,
    f16,
    f32,
    i1,
    i32,
)
from xdsl.ir import Attribute

from amk.errors import DTypeError

_F8E4M3 = Float8E4M3FNType()

TORCH_TO_IR: dict[torch.dtype, Attribute] = {
    torch.float32: f32,
    torch.float16: f16,
    torch.bfloat16: bf16,
    torch.float8_e4m3fn: _F8E4M3,
}
IR_TO_TORCH: dict[Attribute, torch.dtype] = {v: k for k, v in TORCH_TO_IR.items()} | {i32: torch.int32, i1: torch.bool}

SUPPORTED = ", ".join(str(d) for d in TORCH_TO_IR)


def to_ir(dtype: torch.dtype) -> Attribute:
    if dtype not in TORCH_TO_IR:
        raise DTypeError(f"dtype {dtype} is not supported; use one of {SUPPORTED}")
    return TORCH_TO_IR[dtype]


def argument_type(dtype: torch.dtype) -> Attribute:
    """The element type of a kernel argument of ``dtype``: a compute dtype's (:func:`to_ir`), or ``i1`` for a boolean
    mask (read, as ``torch.where``'s condition, never computed in)."""
    return i1 if dtype == torch.bool else to_ir(dtype)


def from_normal_draw(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Random standard-normal ``values`` to fill an input of ``dtype`` with: for a boolean mask, true where the draw is
    positive (about half of it; converting the draw would make every element true, and a mask of -inf fills a whole
    row, whose softmax is NaN); for any other dtype the draw itself (the caller's copy or ``.to`` converts it, without
    a second full-size tensor where it copies)."""
    return values > 0 if dtype == torch.bool else values


def to_torch(element_type: Attribute) -> torch.dtype:
    if element_type not in IR_TO_TORCH:
        raise DTypeError(f"element type {element_type} has no torch dtype; supported: {SUPPORTED}")
    return IR_TO_TORCH[element_type]
