"""The benchmark suite runs end to end on the CPU (tiny shapes, Triton's interpreter) and re-renders committed
results; the GPU figures themselves live in benchmarks/results/."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from conftest import DEVICE

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "benchmarks" / "run.py"


def run_suite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, timeout=300, check=True)


def test_the_suite_measures_a_small_workload_and_writes_its_three_files(tmp_path):
    run_suite("--small", "--workloads", "E", "--contenders", "eager,amk", "--out", str(tmp_path), "--stem", "smoke")
    document = json.loads((tmp_path / "smoke.json").read_text())
    (result,) = document["results"]
    assert result["workload"] == "E" and result["amk_kernels"] == 1
    assert result["errors"]["amk"][0] < 1e-2  # correctness is checked before any timing
    table = (tmp_path / "smoke.md").read_text()
    assert "| amk vs eager | amk vs compile |" in table and "| amk / floor |" in table


def test_render_rewrites_the_table_of_a_committed_results_file(tmp_path):
    committed = REPO / "benchmarks" / "results" / "2026-11-30-h200-decode-hot-path.json"
    copy = tmp_path / committed.name
    shutil.copy(committed, copy)
    run_suite("--render", str(copy))
    table = copy.with_suffix(".md").read_text()
    assert "| F (graphs): SwiGLU MLP" in table
    assert "| 0.0859 | 2.33e-03 | 1.16x | 1.12x | — | — | 95% |" in table


def test_extra_shapes_run_each_family_at_two_more_shapes(tmp_path):
    run_suite("--small", "--extra-shapes", "--workloads", "E", "--contenders", "amk", "--no-graphs",
              "--out", str(tmp_path), "--stem", "extra")
    results = json.loads((tmp_path / "extra.json").read_text())["results"]
    assert [r["workload"] for r in results] == ["E2", "E3"]
    assert all(r["errors"]["amk"][0] < 1e-2 for r in results)


def test_every_diagnostic_script_documents_its_command_line():
    """Each script of benchmarks/ imports (the GPU-only diagnostics too) and prints its usage."""
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "usage:" in result.stdout, (script.name, result.stderr[-500:])


def test_kernel_times_reads_a_fixed_configuration_and_its_merge_chunk():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from kernel_times import parse_config
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    config, merge_chunk = parse_config("128x256x64:w8s4:m16")
    assert (config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.num_warps, config.num_stages) == (128, 256, 64, 8, 4)
    assert merge_chunk == 16
    assert parse_config("64x128x32:w4s3")[1] == 0  # the pass's default


def test_diagnostics_reject_bad_arguments_before_looking_for_a_gpu():
    cases = [("kernel_times.py", ["--workloads", "D"], "choose from those with a single GEMM to compare with, A, B, C, G"),
             ("kernel_times.py", ["--configs", "128x256"], "expected BLOCK_MxBLOCK_NxBLOCK_K:wWARPSsSTAGES"),
             ("trailing_probe.py", ["--variants", "4"], "a comma-separated list of 1, 2 and 3"),
             ("chunk_recompute_probe.py", ["--variants", "1,0"], "a comma-separated list of 1, 2 and 3"),
             ("ncu_profile.py", ["--workloads", "A,F"], "no tuned amk configuration of workload(s) F")]
    for script, args, message in cases:
        result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (script, args, result.stderr[-300:])


def test_the_chunk_recompute_probe_computes_the_softmax():
    """The hand-written two-launch kernel of benchmarks/chunk_recompute_probe.py, with and without the next tile's
    product issued ahead, with pointer and tensor-descriptor loads, at chunk shapes that leave a short last chunk, against float64 (where kernels run: the GPU, or the CPU interpreter)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from chunk_recompute_probe import SCALE, ChunkRecompute
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(48, 32, generator=generator).to(DEVICE), torch.randn(32, 200, generator=generator).to(DEVICE)
    expected = torch.softmax((q.double() @ k.double()) * SCALE, -1)
    for block_m, block_n, chunk_tiles in ((16, 32, 2), (32, 64, 3)):
        for dot_ahead, loads in ((0, "pointers"), (1, "pointers"), (0, "tma"), (1, "tma_ws")):
            out = ChunkRecompute(q, k, block_m, block_n, chunk_tiles, 4, 2, dot_ahead, loads)().double()
            assert ((out - expected).norm() / expected.norm()).item() < 1e-5, (block_m, block_n, chunk_tiles, loads)

