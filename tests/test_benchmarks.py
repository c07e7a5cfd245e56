"""The benchmark suite runs end to end on the CPU (tiny shapes, Triton's interpreter) and re-renders committed
results; the GPU figures themselves live in benchmarks/results/. The folder's layout is checked: the suite and the
shared ``workloads`` module at the top, the probes under benchmarks/probes/ importing only ``workloads``, and every
results file cited somewhere in the repository."""

from __future__ import annotations

import ast
import fnmatch
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
PROBES = BENCHMARKS / "probes"
RUN = BENCHMARKS / "run.py"
SCRIPTS = sorted([*BENCHMARKS.glob("*.py"), *PROBES.glob("*.py")])


# Runs each (script, arguments) of a JSON list on standard input as ``python script arguments`` would (the script's
# folder first on sys.path, run as __main__), all in this one process, and prints each one's exit status and output.
_SCRIPTS_DRIVER = r"""
import contextlib, io, json, os, runpy, sys
results = []
for script, arguments in json.load(sys.stdin):
    sys.argv = [script, *arguments]
    sys.path.insert(0, os.path.dirname(script))
    out, err, status = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    except Exception as error:
        status = 1
        err.write(f"{type(error).__name__}: {error}")
    finally:
        sys.path.remove(os.path.dirname(script))
    results.append({"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()[-2000:]})
print(json.dumps(results))
"""


def run_scripts(cases: list[tuple[Path, list[str]]]) -> list[dict]:
    """Each script run with its arguments, all in one Python process (each would import torch again: 5 s here,
    15-20 s on the H200 host): its exit status, output and error output."""
    result = subprocess.run([sys.executable, "-c", _SCRIPTS_DRIVER], input=json.dumps(
        [[str(script), arguments] for script, arguments in cases]), capture_output=True, text=True, timeout=600,
                            check=True)
    return json.loads(result.stdout.splitlines()[-1])


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



def test_the_decoding_loop_checks_every_step_and_counts_amks_builds(tmp_path):
    """benchmarks/decode_loop.py at tiny shapes: every step of both contenders within fp32's tolerance of the float64
    module, and amk's builds capped: one each for the two Linears, the attention over caches one longer every step
    running as PyTorch's fused attention (amk.frontend.attention), as torch.compile runs it."""
    subprocess.run([sys.executable, str(BENCHMARKS / "decode_loop.py"), "--small", "--steps", "7", "--start", "4",
                    "--out", str(tmp_path), "--stem", "decode"], capture_output=True, text=True, timeout=600,
                   check=True)
    document = json.loads((tmp_path / "decode.json").read_text())
    eager, compiled = document["contenders"]["eager"], document["contenders"]["amk"]
    assert eager["status"] == compiled["status"] == "ok" and compiled["worst_rel_l2"] < 1e-5
    assert compiled["amk_builds"] == 1 + 1, compiled
    assert "| amk | ok |" in (tmp_path / "decode.md").read_text()

COMMAND_LINE_SCRIPTS = [script for script in SCRIPTS if script.name != "workloads.py"]


def test_the_command_line_check_covers_the_main_scripts():
    assert {"run.py", "build_time.py", "kernel_times.py"} <= {script.name for script in COMMAND_LINE_SCRIPTS}


@pytest.fixture(scope="module")
def usages() -> dict[Path, dict]:
    """Every script's ``--help``, run in one process (:func:`run_scripts`)."""
    return dict(zip(COMMAND_LINE_SCRIPTS, run_scripts([(script, ["--help"]) for script in COMMAND_LINE_SCRIPTS])))


@pytest.mark.parametrize("script", COMMAND_LINE_SCRIPTS, ids=lambda script: script.name)
def test_every_script_documents_its_command_line(script, usages):
    """Each script of benchmarks/ and benchmarks/probes/ imports (the GPU-only diagnostics too) and prints its usage."""
    result = usages[script]
    assert result["status"] == 0 and "usage:" in result["stdout"], (script.name, result["stderr"][-500:])


def test_scripts_import_the_shared_workloads_module_and_no_other_script():
    """What scripts share lives in benchmarks/workloads.py: no script imports run.py or a probe."""
    local = {script.stem for script in SCRIPTS} - {"workloads"}
    for script in SCRIPTS:
        for node in ast.walk(ast.parse(script.read_text())):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) else [])
            assert not local & {module.split(".")[0] for module in modules if module}, (script.name, modules)


def citing_text() -> str:
    """Every tracked text file of the repository outside benchmarks/results/, joined."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    texts = []
    for name in tracked.split("\0"):
        path = REPO / name
        if name and not name.startswith("benchmarks/results/") and path.is_file():
            try:
                texts.append(path.read_text())
            except (OSError, UnicodeDecodeError):
                continue
    return "\n".join(texts)


def is_cited(name: str, text: str, citations: set[str]) -> bool:
    """``name`` (``2026-11-30-h200-sweep-G.json``) is cited by its file name or stem, or, in backticks, by its stem
    without the date and machine (``-sweep-G``, the notes' shorthand) or a pattern of either (``-sweep-G*``)."""
    stem = name.split(".")[0]
    short = re.sub(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+-", "", stem)
    if name in text or re.search(rf"{re.escape(stem)}(?![\w-])", text):
        return True
    for citation in citations:
        pattern = citation.split(".")[0]
        if fnmatch.fnmatchcase(stem, pattern) or (pattern.startswith("-") and fnmatch.fnmatchcase(short, pattern[1:])):
            return True
    return False


def test_every_results_file_is_cited_in_the_repository():
    """benchmarks/results/ keeps only what the README, the docs, the notes, code or tests cite; the rest lives in git
    history (``git log --diff-filter=D -- benchmarks/results/`` lists what left)."""
    text = citing_text()
    citations = set(re.findall(r"`([^`\s]+)`", text))
    uncited = [path.name for path in sorted((BENCHMARKS / "results").iterdir())
               if not is_cited(path.name, text, citations)]
    assert not uncited, f"results files that nothing outside benchmarks/results/ cites: {uncited}"


def test_the_citation_rule_reads_the_notes_shorthand():
    citations = {"-sweep-G*-chunk", "-decode-floor*", "-host-overhead-2.json"}
    assert is_cited("2026-11-30-h200-sweep-G2-chunk.json", "", citations)
    assert is_cited("2026-11-30-h200-decode-floor-3.json", "", citations)
    assert is_cited("2026-11-30-h200-host-overhead-2.json", "", citations)
    assert not is_cited("2026-11-30-h200-host-overhead-3.json", "see 2026-11-30-h200-host-overhead-30", citations)
    assert not is_cited("2026-11-30-h200-sweep-G-chunk-2.json", "", citations)
    assert is_cited("2026-11-30-h200-ncu-ACG.json", "(`2026-11-30-h200-ncu-ACG`)", set())


def test_kernel_times_reads_a_fixed_configuration_and_its_merge_chunk():
    sys.path.insert(0, str(PROBES))
    try:
        from kernel_times import parse_config
    finally:
        sys.path.remove(str(PROBES))
    config, merge_chunk = parse_config("128x256x64:w8s4:m16")
    assert (config.BLOCK_M, config.BLOCK_N, config.BLOCK_K, config.num_warps, config.num_stages) == (128, 256, 64, 8, 4)
    assert merge_chunk == 16
    assert parse_config("64x128x32:w4s3")[1] == 0  # the pass's default


def test_diagnostics_reject_bad_arguments_before_looking_for_a_gpu():
    cases = [("kernel_times.py", ["--workloads", "D"], "choose from those with a single GEMM to compare with, A, B, C, G"),
             ("kernel_times.py", ["--configs", "128x256"], "expected BLOCK_MxBLOCK_NxBLOCK_K:wWARPSsSTAGES"),
             ("trailing_probe.py", ["--variants", "4"], "a comma-separated list of 1, 2 and 3"),
             ("chunk_recompute_probe.py", ["--variants", "1,0"], "a comma-separated list of 1, 2 and 3"),
             ("ncu_profile.py", ["--workloads", "A,F"], "no tuned amk configuration of workload(s) F"),
             ("host_profile.py", ["--contenders", "eager,inductor"], "--contenders takes a comma-separated list"),
             ("host_profile.py", ["--rows", "gpt3"], "unknown rows gpt3")]
    results = run_scripts([(PROBES / script, args) for script, args, _ in cases])
    for (script, args, message), result in zip(cases, results):
        assert result["status"] == 2 and message in result["stderr"], (script, args, result["stderr"][-300:])


def test_the_chunk_recompute_probe_computes_the_softmax():
    """The hand-written two-launch kernel of benchmarks/probes/chunk_recompute_probe.py, with and without the next tile's
    product issued ahead, with pointer and tensor-descriptor loads, at chunk shapes that leave a short last chunk, against float64 (where kernels run: the GPU, or the CPU interpreter)."""
    sys.path.insert(0, str(PROBES))
    try:
        from chunk_recompute_probe import SCALE, ChunkRecompute
    finally:
        sys.path.remove(str(PROBES))
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(48, 32, generator=generator).to(DEVICE), torch.randn(32, 200, generator=generator).to(DEVICE)
    expected = torch.softmax((q.double() @ k.double()) * SCALE, -1)
    for block_m, block_n, chunk_tiles in ((16, 32, 2), (32, 64, 3)):
        for dot_ahead, loads in ((0, "pointers"), (1, "pointers"), (0, "tma"), (1, "tma_ws")):
            out = ChunkRecompute(q, k, block_m, block_n, chunk_tiles, 4, 2, dot_ahead, loads)().double()
            limit = 1e-5 if DEVICE.type == "cpu" else 2e-3  # the probe's fp32 tl.dot takes TF32 on a GPU
            assert ((out - expected).norm() / expected.norm()).item() < limit, (block_m, block_n, chunk_tiles, loads)



# Compiles the Gluon softmax probe's launches of argv[2] (a JSON list of [configuration, write]) for sm_90 and prints,
# for each, what the test checks in its PTX.
_GLUON_SOFTMAX_PTX = r"""
import json, re, sys
sys.path.insert(0, sys.argv[1])
from gluon_softmax_probe import compile_for_hopper
report = []
for config, write in json.loads(sys.argv[2]):
    ptx, shared, warps = compile_for_hopper(*config, write=write)
    mmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.f16\.f16 \{[^}]*\}, (\S)", ptx)
    report.append({"shared": shared, "warps": warps, "mmas": len(mmas), "a_in_registers": all(a == "{" for a in mmas),
                   "waits": re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx),
                   "exp2": ptx.count("ex2.approx"), "tma_stores": ptx.count("cp.async.bulk.tensor.2d.global.shared"),
                   "stores": len(re.findall(r"\bst\.global\.b32\b", ptx))})
print(json.dumps(report))
"""


def test_the_gluon_softmax_probe_builds_amks_own_kernel_of_the_forms_amk_emits(monkeypatch):
    """``--emitted``: beside a configuration written by hand, amk-emit-gluon's kernel of G's IR at the same tiles
    (built through the pipeline: a column sweep, each launch warp-specialized), where amk emits that form; none for a
    form it does not (ping-pong turns, one 8-warp consumer)."""
    pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    monkeypatch.syspath_prepend(str(PROBES))
    monkeypatch.syspath_prepend(str(PROBES.parent))
    probe = importlib.import_module("gluon_softmax_probe")
    shapes = [(8192, 128), (128, 8192)]
    config = dict(zip(probe.CONFIG_KEYS, [128, 128, 2, 4, 3, 2, 0, 1, 0, 0]))
    program = probe.emitted_program(shapes, config)
    sources = "".join(kernel.source for kernel in program.kernels.values())
    assert sources.count("gl.warp_specialize([") == 2 and "SPLIT_N=2," in sources and "STAGES=3," in sources
    for other in ({"PINGPONG": 1}, {"CONSUMERS": 1, "num_warps": 8}):
        assert probe.emitted_program(shapes, config | other) is None


def test_the_gluon_softmax_probe_compiles_for_hopper_without_a_gpu():
    """benchmarks/probes/gluon_softmax_probe.py's two launches compile for sm_90 in each form it measures: two
    consumer warpgroups and a producer (12 warps), or four (20); the next tile's product kept in flight (a wait for all but one);
    q read from registers by wgmma; consumer 1's exponentials on the FMA pipe (half the ex2 instructions); launch 2
    storing its tiles with TMA, launch 1 its row states with plain stores. (Gluon does not run in the interpreter:
    the GPU runs of the probe check its numbers.)"""
    pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("this triton has no CUDA backend to compile for sm_90")
    base = [128, 128, 2, 4, 3, 2, False, True]
    cases = [[base + [False, False], False], [base + [True, True], False], [base + [True, True], True],
             [[256, 128, 4, 4, 2, 2, False, False, True, False], True],
             [[256, 128, 4, 4, 3, 4, False, False, False, False], True]]
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", _GLUON_SOFTMAX_PTX, str(PROBES), json.dumps(cases)],
                            capture_output=True, text=True, timeout=600, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    plain, split, split_write, one_accumulator, four_consumers = json.loads(result.stdout.splitlines()[-1])
    for compiled in (plain, split, split_write, one_accumulator):
        assert compiled["warps"] == 12 and compiled["shared"] <= 232448
    # four consumer warpgroups and the producer's
    assert four_consumers["warps"] == 20 and four_consumers["shared"] <= 232448 and four_consumers["tma_stores"] > 0
    assert "1" in plain["waits"] and "1" not in one_accumulator["waits"]
    assert not plain["a_in_registers"] and split["a_in_registers"] and one_accumulator["a_in_registers"]
    assert split["exp2"] < 0.6 * plain["exp2"]
    assert split_write["tma_stores"] > 0 and one_accumulator["tma_stores"] > 0 and plain["tma_stores"] == 0
    assert plain["stores"] > 0
