"""The indented writer the Triton emitter writes through (amk.lowering.indented_writer, after Inductor's
``IndentedBuffer``): lines at the current level, ``indent()`` blocks that restore the level however they end, and an
emitter with no indentation arguments left."""

from __future__ import annotations

import inspect

import pytest

from amk.lowering.emit_triton import TritonEmitter
from amk.lowering.indented_writer import IndentedWriter


def test_lines_are_written_at_the_current_level():
    code = IndentedWriter()
    code.writeline("def f(x):")
    with code.indent():
        code.writeline("for i in range(x):")
        with code.indent():
            code.writeline("print(i)")
        code.writeline("return x")
    code.writeline("f(2)")
    assert code.getvalue() == "def f(x):\n    for i in range(x):\n        print(i)\n    return x\nf(2)\n"
    assert code.level == 0


def test_empty_lines_stay_empty_and_nothing_written_is_empty_text():
    code = IndentedWriter()
    assert code.getvalue() == ""
    with code.indent(2):
        code.writelines(["a", "", "b"])
    assert code.lines == ["        a", "", "        b"]


def test_indent_zero_keeps_the_level_and_negative_is_refused():
    code = IndentedWriter(level=1)
    with code.indent(0):
        code.writeline("x = 1")
    assert code.lines == ["    x = 1"]
    with pytest.raises(ValueError), code.indent(-1):
        pass
    with pytest.raises(ValueError):
        IndentedWriter(level=-1)


def test_the_level_is_restored_when_a_block_raises():
    code = IndentedWriter()
    with pytest.raises(RuntimeError), code.indent():
        code.writeline("inside")
        raise RuntimeError
    code.writeline("after")
    assert code.lines == ["    inside", "after"]


def test_splice_shifts_another_writers_lines_and_keeps_their_own_indentation():
    body = IndentedWriter()
    body.writeline("if x:")
    with body.indent():
        body.writeline("y = 1")
    code = IndentedWriter(tab="  ")
    code.writeline("def f(x):")
    with code.indent():
        code.splice(body)
    assert code.getvalue() == "def f(x):\n  if x:\n      y = 1\n"


def test_the_emitter_takes_no_indentation_arguments():
    """Blocks open through the writer; no emitter method threads an indentation depth."""
    methods = {name: member for name, member in inspect.getmembers(TritonEmitter, inspect.isfunction)}
    assert {name for name, method in methods.items() if "indent" in inspect.signature(method).parameters} == set()
    assert "line" not in methods
