"""Parsing and printing helpers shared by the amk dialects: symbolic dimension lists and expressions.

A dimension is written as plain text (``4096``, ``B*S``, ``cdiv(M, BLOCK_M)``) inside the angle brackets of a type
or attribute. The parser collects tokens up to the next ``,``, ``]`` or ``>`` at bracket depth zero and hands the text
to sympy, so any expression sympy reads is a dimension.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.mlir_lexer import MLIRTokenKind

from amk.symbolic import Dim

_OPEN = {MLIRTokenKind.L_PAREN, MLIRTokenKind.L_SQUARE}
_CLOSE = {MLIRTokenKind.R_PAREN, MLIRTokenKind.R_SQUARE}
_STOP = {MLIRTokenKind.COMMA, MLIRTokenKind.R_SQUARE, MLIRTokenKind.GREATER}


def parse_dim(parser: AttrParser) -> Dim:
    """Parse one dimension expression, stopping before a top-level ``,``, ``]`` or ``>``."""
    start = parser._current_token.span.start
    pieces: list[str] = []
    depth = 0
    while True:
        token = parser._current_token
        if token.kind == MLIRTokenKind.EOF or (depth == 0 and token.kind in _STOP):
            break
        if token.kind in _OPEN:
            depth += 1
        elif token.kind in _CLOSE:
            depth -= 1
        pieces.append(token.text)
        parser._consume_token()
    if not pieces:
        parser.raise_error("expected a dimension expression", start, start + 1)
    text = " ".join(pieces)
    try:
        return Dim(text)
    except ValueError as error:
        parser.raise_error(str(error), start, parser._current_token.span.start)


def parse_dim_list(parser: AttrParser) -> tuple[Dim, ...]:
    """Parse ``[d0, d1, ...]`` (possibly empty)."""
    return tuple(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_dim(parser)))


def print_dim_list(printer: Printer, dims: tuple[Dim, ...]) -> None:
    printer.print_string("[" + ", ".join(d.text for d in dims) + "]")


# The names amk's lowering gives what it brings into index expressions: the loop variables of its strategies, the
# program ids, a configuration's tile parameters. A fused region's dims may not be named so (amk-tile refuses them):
# the kernel would read the lowering's value where the dim's was meant.
LOOP_VARIABLES = frozenset({"k", "n", "t", "split"})
_LOWERING_PREFIXES = ("pid_", "BLOCK_", "SPLIT_", "GROUP_", "WARP_", "NUM_", "EVEN_", "even_")


def lowering_name(name: str) -> bool:
    """Whether ``name`` is one amk's lowering uses in index expressions (:data:`LOOP_VARIABLES`, ``pid_*``,
    ``BLOCK_*``, ...)."""
    return name in LOOP_VARIABLES or name.startswith(_LOWERING_PREFIXES)


class SymbolicShapedType:
    """Mixin for types written ``<[d0, d1, ...], element-type>`` with symbolic dims (tensors, tiles).

    Concrete classes declare the ``shape`` and ``element_type`` parameters (and any before them, such as the memory
    space of a buffer, parsed by ``parse_prefix``).
    """

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(Dim(s.data) for s in self.shape.data)

    @property
    def rank(self) -> int:
        return len(self.shape.data)

    @staticmethod
    def shape_attr(dims) -> ArrayAttr[StringAttr]:
        return ArrayAttr([StringAttr(Dim(d).text) for d in dims])

    @classmethod
    def parse_prefix(cls, parser: AttrParser) -> list[Attribute]:
        return []

    def print_prefix(self, printer: Printer) -> None:
        pass

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            prefix = cls.parse_prefix(parser)
            dims = parse_dim_list(parser)
            parser.parse_punctuation(",")
            element_type = parser.parse_type()
        return [*prefix, cls.shape_attr(dims), element_type]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            self.print_prefix(printer)
            print_dim_list(printer, self.dims)
            printer.print_string(", ")
            printer.print_attribute(self.element_type)

    def verify(self) -> None:
        for text in self.shape.data:
            try:
                dim = Dim(text.data)
            except ValueError as error:
                raise VerifyException(f"{self.name}: {error}") from None
            # 3/2 or M/2: a launcher would size a buffer by its floor, and the kernel fill the rows it is given
            if dim.expr.is_integer is not True or dim.expr.is_zero:
                raise VerifyException(f"{self.name}: dimension {dim.text} is not a whole number of at least 1 (write "
                                      "floor(M/2) or cdiv(M, 2) for a quotient)")


class SymbolicExprList:
    """Mixin for attributes holding a list of symbolic expressions (parameter ``exprs``), written ``<[pid_m * BLOCK_M, k]>``."""

    @property
    def dims(self) -> tuple[Dim, ...]:
        return tuple(Dim(s.data) for s in self.exprs.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            dims = parse_dim_list(parser)
        return [SymbolicShapedType.shape_attr(dims)]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            print_dim_list(printer, self.dims)
