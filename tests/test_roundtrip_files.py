"""Every .mlir file under tests/filecheck must print the same custom form whether it is parsed directly or first
printed in generic form and parsed back.

Skipped: files whose RUN lines expect diagnostics (``--verify-diagnostics``, ``--parsing-diagnostics``) and files
marked ``// NO-ROUNDTRIP`` (pass tests whose input is not meant to be re-printed). A file marked
``// XFAIL-ROUNDTRIP: reason`` documents a known round-trip bug and is a strict xfail.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import installed_script

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


def _amk_opt(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run([installed_script("amk-opt"), *args], input=stdin, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"amk-opt {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def test_some_files_are_checked():
    assert list(_cases()), f"no round-trippable .mlir files under {FILECHECK_DIR}"


@pytest.mark.parametrize("path", list(_cases()))
def test_generic_form_round_trips(path: Path):
    # amk-opt start-up dominates, so independent invocations run side by side.
    with ThreadPoolExecutor(max_workers=2) as pool:
        custom_job = pool.submit(_amk_opt, str(path), "--split-input-file")
        generic_job = pool.submit(_amk_opt, str(path), "--split-input-file", "--print-op-generic")
        custom, generic = custom_job.result(), generic_job.result()
        assert custom.strip(), f"amk-opt printed nothing for {path}"
        reparsed_job = pool.submit(_amk_opt, "--split-input-file", stdin=generic)
        # The custom form must also parse back to itself.
        again_job = pool.submit(_amk_opt, "--split-input-file", stdin=custom)
        reparsed, again = reparsed_job.result(), again_job.result()
    assert reparsed == custom, "generic form -> amk-opt differs from the custom form"
    assert again == custom, "custom form -> amk-opt differs from the custom form"
