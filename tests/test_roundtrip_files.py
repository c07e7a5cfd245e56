"""Every .mlir file under tests/filecheck must print the same custom form whether it is parsed directly or first
printed in generic form and parsed back.

Skipped: files whose RUN lines expect diagnostics (``--verify-diagnostics``, ``--parsing-diagnostics``) and files
marked ``// NO-ROUNDTRIP`` (pass tests whose input is not meant to be re-printed). A file marked
``// XFAIL-ROUNDTRIP: reason`` documents a known round-trip bug and is a strict xfail.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amk.opt import AmkOptMain

FILECHECK_DIR = Path(__file__).parent / "filecheck"
DIAGNOSTIC_FLAGS = ("--verify-diagnostics", "--parsing-diagnostics")
_XFAIL = re.compile(r"^//\s*XFAIL-ROUNDTRIP:\s*(.*)$", re.MULTILINE)


def _run_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"^//\s*RUN:", line)]


def _cases():
    for path in sorted(FILECHECK_DIR.rglob("*.mlir")):
        if "Inputs" in path.relative_to(FILECHECK_DIR).parts:
            continue
        text = path.read_text()
        if any(flag in line for line in _run_lines(text) for flag in DIAGNOSTIC_FLAGS):
            continue
        marks = []
        if "// NO-ROUNDTRIP" in text:
            marks.append(pytest.mark.skip(reason="marked // NO-ROUNDTRIP"))
        if match := _XFAIL.search(text):
            marks.append(pytest.mark.xfail(strict=True, reason=match.group(1).strip() or "known round-trip bug"))
        yield pytest.param(path, id=str(path.relative_to(FILECHECK_DIR)), marks=marks)


def _amk_opt(source: Path, output: Path, *args: str) -> str:
    """``amk-opt SOURCE ARGS -o OUTPUT`` run by its driver in this process (lit runs the installed script on every
    file; here its start-up, most of a run, would be paid four times a file); what it wrote."""
    AmkOptMain(args=[str(source), "--split-input-file", *args, "-o", str(output)]).run()
    return output.read_text()


def test_some_files_are_checked():
    assert list(_cases()), f"no round-trippable .mlir files under {FILECHECK_DIR}"


@pytest.mark.parametrize("path", list(_cases()))
def test_generic_form_round_trips(path: Path, tmp_path: Path):
    custom = _amk_opt(path, tmp_path / "custom.mlir")
    assert custom.strip(), f"amk-opt printed nothing for {path}"
    _amk_opt(path, tmp_path / "generic.mlir", "--print-op-generic")
    reparsed = _amk_opt(tmp_path / "generic.mlir", tmp_path / "reparsed.mlir")
    assert reparsed == custom, "generic form -> amk-opt differs from the custom form"
    # The custom form must also parse back to itself.
    again = _amk_opt(tmp_path / "custom.mlir", tmp_path / "again.mlir")
    assert again == custom, "custom form -> amk-opt differs from the custom form"
