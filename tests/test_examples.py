"""Every script in examples/ runs with ``--small`` (CPU interpreter shapes; on the GPU where there is one), exits 0 and reports a passing
verification against PyTorch."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import GPU, REPO

EXAMPLES = sorted((REPO / "examples").glob("*.py"))

# Lines each example must print, beyond the verification report that all of them print.
EXPECTED = {
    "gemm_bias_gelu_layernorm.py": [r"max \|amk - eager\| = \S+\s+\(ok; must be < 1e-2\)", r"^config: \{.*BLOCK_SIZE_M",
                                    r"^emitted Triton source: .*\.py$"],
    "gemm_bias_relu.py": [r"max \|amk - eager\| = \S+", r"^amk [\d.]+ ms, eager [\d.]+ ms"],
    "gemm_residual_rmsnorm_tuned.py": [r"max \|amk - fp32 reference\| = \S+", r"^config: \{.*BLOCK_SIZE_M"],
}
REPORT_LINE = re.compile(r"^\s*(float32|float16|bfloat16|float8_e4m3fn)\s+max_abs=\S+\s+mean_abs=\S+\s+rel_l2=(\S+)\s+"
                         r"(?:\(tolerance |<= |> )(\S+?)\)?\s+(ok|FAILED)$")


def test_examples_exist():
    assert {p.name for p in EXAMPLES} >= set(EXPECTED)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_small(script):
    env = dict(os.environ)
    if not GPU:  # on a GPU machine the examples run on the GPU (at their --small shapes)
        env.setdefault("TRITON_INTERPRET", "1")
    result = subprocess.run([sys.executable, str(script), "--small"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    output = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{output}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = output.splitlines()
    assert "verification against PyTorch (float64 reference):" in lines, output
    report = [REPORT_LINE.match(line) for line in lines]
    report = [m for m in report if m]
    assert report, f"no verification result line in:\n{output}"
    for match in report:
        dtype, rel_l2, tolerance, status = match.groups()
        assert status == "ok", match.group(0)
        assert float(rel_l2) <= float(tolerance), match.group(0)
    assert "FAILED" not in output and "TOO LARGE" not in output
    for pattern in EXPECTED.get(script.name, []):
        assert any(re.search(pattern, line) for line in lines), f"no line matching {pattern!r} in:\n{output}"


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_help(script):
    result = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--small" in result.stdout
