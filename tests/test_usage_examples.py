"""The three documented usage examples (examples/usage/, verbatim copies of the project's origin document's) run to
completion on a GPU with default settings, as plain scripts without a main guard and from standard input: the
compile workers must not re-run them, whatever started Python."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples" / "usage").glob("example*.py"))
ORIGINALS = REPO.parent / "shared" / "usage-examples"


def test_the_usage_examples_are_verbatim_copies():
    assert [path.name for path in EXAMPLES] == ["example1_fused_transformer_subblock.py",
                                                 "example2_benchmark_latency.py", "example3_custom_tuner.py"]
    if not ORIGINALS.is_dir():
        pytest.skip("the originals (shared/usage-examples beside the checkout) are not here")
    for path in EXAMPLES:
        assert path.read_text() == (ORIGINALS / path.name).read_text(), f"{path.name} differs from the original"


@pytest.fixture(scope="module")
def cache_directories(tmp_path_factory):
    """One cache directory per example, shared by its two runs (the second starts warm)."""
    return {path.name: tmp_path_factory.mktemp(path.stem) for path in EXAMPLES}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the usage examples require CUDA")
@pytest.mark.parametrize("started_as", ["script", "stdin"])
@pytest.mark.parametrize("example", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_a_usage_example_runs_to_completion(example, started_as, cache_directories):
    workdir = cache_directories[example.name]
    command = [sys.executable, str(example)] if started_as == "script" else [sys.executable, "-"]
    env = dict(os.environ, AMK_CACHE_DIR=str(workdir / "amk-cache"))
    start = time.perf_counter()
    result = subprocess.run(command, stdin=example.open() if started_as == "stdin" else None, capture_output=True,
                            text=True, env=env, cwd=workdir, timeout=900)
    seconds = time.perf_counter() - start
    print(f"{example.name} as {started_as}: rc {result.returncode} in {seconds:.1f} s\n{result.stdout}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "bootstrapping phase" not in result.stderr and "BrokenProcessPool" not in result.stderr
    first_line = next(line for line in result.stdout.splitlines() if any(c.isalnum() for c in line))
    assert result.stdout.count(first_line) == 1, "the script's output repeats: something re-ran it"
