"""Parsing and printing helpers shared by the amk dialects: symbolic dimension lists and expressions.

A dimension is written as plain text (``4096``, ``B*S``, ``cdiv(M, BLOCK_M)``) inside the angle brackets of a type
or attribute. The parser collects tokens up to the next ``,``, ``]`` or ``>`` at bracket depth zero and hands the text
to sympy, so any expression sympy reads is a dimension.
"""

from __future__ import annotations

from xdsl.parser import AttrParser
from xdsl.printer import Printer
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
