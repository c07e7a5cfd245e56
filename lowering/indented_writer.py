"""A small writer of indented source lines, in the style of Inductor's ``IndentedBuffer``
(``torch/_inductor/utils.py``): the Triton emitter writes each line at the writer's current level and opens a
block with ``with writer.indent():`` instead of passing an indentation depth to every method.

>>> code = IndentedWriter()
>>> code.writeline("for i in range(3):")
>>> with code.indent():
...     code.writeline("print(i)")
>>> print(code.getvalue(), end="")
for i in range(3):
    print(i)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class IndentedWriter:
    """Source lines, each written at the current indentation level (``tab`` per level)."""

    def __init__(self, level: int = 0, tab: str = "    "):
        if level < 0:
            raise ValueError(f"indentation level must be at least 0, got {level}")
        self.level = level
        self.tab = tab
        self.lines: list[str] = []

    def writeline(self, text: str) -> None:
        """One line at the current level; an empty line stays empty (no trailing blanks)."""
        self.lines.append(self.tab * self.level + text if text else "")

    def writelines(self, lines: Iterable[str]) -> None:
        """Each of ``lines`` at the current level (lines that carry their own indentation keep it, shifted)."""
        for line in lines:
            self.writeline(line)

    @contextmanager
    def indent(self, levels: int = 1) -> Iterator[None]:
        """Write the lines of the ``with`` block ``levels`` deeper (0: at the same level); the level is restored
        however the block ends."""
        if levels < 0:
            raise ValueError(f"indent() opens blocks only (levels >= 0), got {levels}")
        self.level += levels
        try:
            yield
        finally:
            self.level -= levels

    def splice(self, other: IndentedWriter) -> None:
        """Append ``other``'s lines, shifted to the current level."""
        self.writelines(other.lines)

    def getvalue(self) -> str:
        """The text: every line ended by a newline ("" when nothing was written)."""
        return "".join(line + "\n" for line in self.lines)
