"""``amk-bind-sizes``: give symbolic sizes fixed values in every tensor type of a module.

``amk.compile`` builds a program per value of a size it does not bucket (a feature size under ``dynamic=True``, the
keys' length of attention's ``q @ k^T``: the columns of the results), so within that build the size is a number.
Written into the types before the other passes, it is one to every pass after them: amk-tile's loops over the
columns get constant bounds, amk-stage proves the masks along them away, and Triton sees constant trip counts (the
attention probabilities' kernel ran 0.157 ms with the keys' length a kernel argument and 0.067 ms with it a number,
2026-12-04-h200-index-width-e432ca3). Symbols left unbound stay symbolic; an expression of bound symbols only
becomes its value. A size may be bound to 0 where it only appears inside expressions that stay positive (an empty
key cache's length ``s``, the keys being ``s + T`` long after ``torch.cat``); a dim that would be 0 is refused.

Input (``amk-bind-sizes{sizes="T=512"}``)::

    func.func @scores(%q : !tensor_op.tensor<[S, 64], f16>, %k : !tensor_op.tensor<[T, 64], f16>)
        -> !tensor_op.tensor<[S, T], f16> {
      %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (...) -> !tensor_op.tensor<[S, T], f16>

Output::

    func.func @scores(%q: !tensor_op.tensor<[S, 64], f16>, %k: !tensor_op.tensor<[512, 64], f16>)
        -> !tensor_op.tensor<[S, 512], f16> {
      %0 = tensor_op.matmul %q, %k {transpose_rhs = true} : (...) -> !tensor_op.tensor<[S, 512], f16>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriteWalker, TypeConversionPattern, attr_type_rewrite_pattern
from xdsl.utils.exceptions import PassFailedException

from amk.dialects.tensor_op import TensorType
from amk.lowering.tile import check_size_symbols, parse_size_hints, tensor_dims
from amk.symbolic import emptied


@dataclass
class _BindTensorSizes(TypeConversionPattern):
    """A tensor type with the bound symbols replaced by their values (function types too: ``recursive``)."""

    values: dict[str, int] | None = None

    @attr_type_rewrite_pattern
    def convert_type(self, typ: TensorType) -> TensorType | None:
        dims = [dim.subs(self.values) for dim in typ.dims]
        return TensorType(dims, typ.element_type) if tuple(dims) != tuple(typ.dims) else None


@dataclass(frozen=True)
class BindSizesPass(ModulePass):
    """Replace the symbols of ``sizes`` (``"T=512,D=64"``) by their values in every tensor type (module docstring)."""

    name = "amk-bind-sizes"

    sizes: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        values = parse_size_hints(self.sizes, "amk-bind-sizes: sizes", allow_zero=True)
        if not values:
            return
        check_size_symbols(op, values, "amk-bind-sizes")
        zero = {symbol for symbol, value in values.items() if value == 0}
        empty = sorted({dim.text for dim in emptied(tensor_dims(op), values, zero)})
        if empty:
            raise PassFailedException(f"amk-bind-sizes: sizes {self.sizes!r} make the dim {empty[0]} empty (0): a "
                                      "size is bound to 0 only where it appears inside expressions that stay positive")
        PatternRewriteWalker(_BindTensorSizes(recursive=True, values=values)).rewrite_module(op)
