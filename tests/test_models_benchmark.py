"""benchmarks/models.py, the model benchmark: two rows at tiny shapes run end to end (on the CPU in Triton's
interpreter, eager and amk), its command line refuses what it does not know, and its speed-ups compare the best
correct contenders of each side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import GPU, REPO

MODELS = REPO / "benchmarks" / "models.py"


def run_models(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MODELS), *args], capture_output=True, text=True, timeout=300,
                          check=check)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    """Two rows, each in a process of its own (``--process-per-row``): the second appended to the first's file."""
    out = tmp_path_factory.mktemp("models")
    run_models("--small", "--rows", "fp16_linear_layernorm,llama_mlp_decode_m1", "--contenders",
               "eager,amk,amk_graphs", "--out", str(out), "--stem", "smoke", "--process-per-row")
    return out


def test_two_small_rows_are_measured_correct_and_written_as_json_and_markdown(smoke):
    document = json.loads((smoke / "smoke.json").read_text())
    assert [row["row"] for row in document["rows"]] == ["fp16_linear_layernorm", "llama_mlp_decode_m1"]
    expected = {"eager", "amk", "amk_graphs"} if GPU else {"eager", "amk"}  # no CUDA graphs without a GPU
    for row in document["rows"]:
        assert set(row["contenders"]) == expected, row["contenders"]
        for name, result in row["contenders"].items():
            assert result["status"] == "ok", (row["row"], name, result)
            assert result["rel_l2"] < 1e-2 and result["ms"] > 0 and result["host_us"] > 0
            assert result["first_call_s"] >= 0
            # timed in turns with the row's other contenders: the median of its rounds
            assert min(result["ms_rounds"]) - 1e-5 <= result["ms"] <= max(result["ms_rounds"]) + 1e-5
        # nothing is tuned on the CPU; on a GPU the small rows' buckets may all be launch-bound and tune nothing too
        assert row["contenders"]["amk"]["compile_worker_jobs"] >= 0 if GPU else \
            row["contenders"]["amk"]["compile_worker_jobs"] == 0
        assert (row["contenders"]["amk"]["compile_worker_job_s"] > 0) == (row["contenders"]["amk"]["compile_worker_jobs"] > 0)
        assert "compile_workers_broken" not in row["contenders"]["amk"]
    first, second = document["command"].split("; ")
    assert first.startswith("python benchmarks/models.py --rows fp16_linear_layernorm") and "--append" not in first
    assert second.startswith("python benchmarks/models.py --rows llama_mlp_decode_m1") and second.endswith("--append")
    assert document["caches"] == "fresh temporary directories"
    table = (smoke / "smoke.md").read_text()
    assert "| row | eager | amk.compile |" in table and "| fp16_linear_layernorm: Linear + LayerNorm, fp16 |" in table
    assert "Per-call host time, µs." in table and "Relative L2 error against float64" in table
    # What ran is recorded per row: on the CPU every bucket of these rows runs amk's kernels (a failed check would show
    # here); on a GPU each bucket was timed against PyTorch, and the faster ran.
    for row in document["rows"]:
        for bucket in row["amk_ran"]["buckets"]:
            assert bucket["program"] and bucket["build_s"]["total"] > 0, bucket
            # a GPU may also leave a bucket to PyTorch (slower kernels, a failed check); either way it was decided
            assert not bucket["note"].startswith("not called yet") if GPU else bucket["runs"] == "amk", bucket
    assert "- llama_mlp_decode_m1: 1 of 1 buckets ran amk's kernels" in table or GPU


def test_render_rewrites_the_table_from_the_json(smoke, tmp_path):
    copy = tmp_path / "copy.json"
    copy.write_text((smoke / "smoke.json").read_text())
    run_models("--render", str(copy))
    assert copy.with_suffix(".md").read_text() == (smoke / "smoke.md").read_text()


def test_missing_runs_only_the_rows_the_file_lacks(smoke, tmp_path):
    """The next part of a run split over several commands: with both rows in the file, nothing is measured again
    and the rows are kept as they were, the command recorded."""
    (tmp_path / "part.json").write_text((smoke / "smoke.json").read_text())
    result = run_models("--small", "--rows", "fp16_linear_layernorm,llama_mlp_decode_m1", "--contenders", "eager",
                        "--out", str(tmp_path), "--stem", "part", "--append", "--missing")
    assert "==" not in result.stdout  # no row started
    before, after = (json.loads(path.read_text()) for path in (smoke / "smoke.json", tmp_path / "part.json"))
    assert after["rows"] == before["rows"] and after["command"].endswith("--append --missing")


def test_rows_are_not_added_to_a_file_measured_on_another_gpu(smoke, tmp_path):
    """A table in parts must be one machine's: rows appended to a file measured on another GPU (or with other
    versions) would enter one geomean with its rows, so the run stops before measuring anything, saying why."""
    document = json.loads((smoke / "smoke.json").read_text())
    document["environment"]["gpu"] = "NVIDIA H200"
    (tmp_path / "part.json").write_text(json.dumps(document))
    for in_processes in ([], ["--process-per-row"]):  # there refused before any row's process starts
        result = run_models("--small", "--rows", "fp16_linear_layernorm", "--contenders", "eager", "--out",
                            str(tmp_path), "--stem", "part", "--append", *in_processes, check=False)
        assert result.returncode != 0 and "==" not in result.stdout, result
        assert "was measured elsewhere (gpu 'NVIDIA H200' there" in result.stderr, result.stderr
        assert "another --stem" in result.stderr and "its process exited" not in result.stdout, result
        assert json.loads((tmp_path / "part.json").read_text()) == document


def test_missing_rows_of_a_run_in_processes_start_no_process_for_the_others(smoke, tmp_path):
    """``--process-per-row --missing``: the rows the file has are left out before any process starts (each process
    started only to skip its row cost a second or more of a GPU call's time), so with both rows there the file is
    left as it was."""
    (tmp_path / "part.json").write_text((smoke / "smoke.json").read_text())
    result = run_models("--small", "--rows", "fp16_linear_layernorm,llama_mlp_decode_m1", "--contenders", "eager",
                        "--out", str(tmp_path), "--stem", "part", "--append", "--missing", "--process-per-row")
    assert "==" not in result.stdout  # no row started
    assert (tmp_path / "part.json").read_text() == (smoke / "smoke.json").read_text()


def models_module():
    sys.path.insert(0, str(MODELS.parent))
    try:
        import models
    finally:
        sys.path.remove(str(MODELS.parent))
    return models


@pytest.mark.parametrize("args, message", [
    (["--small", "--rows", "gpt2_mlp,gpt5"], "unknown rows gpt5; choose from fp32_linear_relu"),
    (["--small", "--contenders", "eager,tensorrt"], "unknown contenders tensorrt; choose from eager, compile"),
    (["--small", "--missing"], "--missing adds to an existing results file: use it with --append"),
    pytest.param(["--rows", "gpt2_mlp"], "without a GPU the kernels run in Triton's interpreter: use --small",
                 marks=pytest.mark.skipif(GPU, reason="full-size rows are refused without a GPU only")),
])
def test_bad_command_lines_are_refused_before_anything_runs(args, message, capsys):
    with pytest.raises(SystemExit) as exit_status:
        models_module().main(args)
    assert exit_status.value.code == 2 and message in capsys.readouterr().err


def test_speedups_compare_the_best_correct_contenders_of_each_side():
    models = models_module()
    contenders = {"compile": {"status": "ok", "ms": 2.0}, "max_autotune": {"status": "ok", "ms": 1.5},
                  "reduce_overhead": {"status": "wrong"}, "amk": {"status": "ok", "ms": 1.2},
                  "amk_graphs": {"status": "wrong"}}
    # 1.5 / 1.2: wrong outputs are not timed, so they never win
    assert models.speedup(contenders, models.TORCH_COMPILE, models.AMK) == 1.25
    assert models.speedup({"compile": {"status": "ok", "ms": 1.0}, "amk": {"status": "failed"}},
                          models.TORCH_COMPILE, models.AMK) is None
    assert models.geomean([1.25, None, 0.8]) == 1.0


def test_decode_rows_list_their_graph_replay_times():
    """Decode rows timed as graph replays (how run.py times D, E and F) get a table of their own; a contender whose
    calls could not be captured says so, one not run is a dash, rows without replays are left out."""
    models = models_module()
    ok = {"status": "ok", "ms": 0.2, "host_us": 9.0, "first_call_s": 1.0, "rel_l2": 1e-3, "max_abs": 1e-2}
    decode = {"row": "llama_mlp_decode_m1", "title": "decode", "speedup": None, "speedup_no_graphs": None,
              "contenders": {"eager": {**ok, "replay_ms": 0.1234}, "amk": {**ok, "replay_ms": 0.0851},
                             "max_autotune": {**ok, "replay_error": "RuntimeError: capture failed"}}}
    plain = {"row": "gpt2_mlp", "title": "GPT-2", "speedup": None, "speedup_no_graphs": None,
             "contenders": {"eager": ok, "amk": ok}}
    document = {"rows": [plain, decode], "geomean": {"speedup": None}}
    table = models.tables(document)
    assert ("| row | eager | max-autotune-no-cudagraphs | amk.compile |\n|---|---|---|---|\n"
            "| llama_mlp_decode_m1 | 0.1234 | not capturable | 0.0851 |\n") in table
    assert "| gpt2_mlp | 0.2000" not in table.split("back-to-back replays")[1].split("Relative L2")[0]
    assert "back-to-back replays" not in models.tables({"rows": [plain], "geomean": {"speedup": None}})


def test_a_contender_that_raises_while_timed_is_reported_failed_and_the_others_are_timed():
    models = models_module()
    calls = []

    def fine(x):
        calls.append("fine")
        return x

    def broken(x):
        raise RuntimeError("launch failed")

    inputs = [torch.ones(2)]
    times = models.interleaved_device_ms({"eager": (fine, inputs), "amk": (broken, inputs)}, models.INTERPRETER,
                                         replay=False)
    assert times["amk"] == {"status": "failed", "error": "RuntimeError: launch failed"}
    assert times["eager"]["ms"] >= 0 and len(times["eager"]["ms_rounds"]) == 1 and calls


def test_autocast_runs_a_row_as_mixed_precision_runs_its_model(tmp_path):
    """``--autocast bfloat16``: the module and inputs stay fp32 and every call runs under torch.autocast, the error
    held to bf16's tolerance; amk fuses the Linear (in bf16) with its LayerNorm (in fp32, as autocast computes it),
    leaving nothing to PyTorch."""
    run_models("--small", "--rows", "fp32_linear_layernorm", "--contenders", "eager,amk", "--autocast", "bfloat16",
               "--out", str(tmp_path), "--stem", "amp")
    document = json.loads((tmp_path / "amp.json").read_text())
    (row,) = document["rows"]
    assert document["autocast"] == "bfloat16" and row["dtype"] == "bfloat16"
    assert row["autocast"].startswith("float32 parameters and inputs under torch.autocast(")
    assert row["title"].endswith("; run as float32 under autocast to bfloat16")
    for name, result in row["contenders"].items():
        assert result["status"] == "ok" and result["rel_l2"] < 1e-2, (name, result)
    assert row["contenders"]["eager"]["rel_l2"] > 1e-4  # bf16's rounding, not fp32's: the calls ran under autocast
    assert not row["amk_ran"]["left_to_pytorch"], row["amk_ran"]
    assert "float32 modules and inputs under torch.autocast to bfloat16" in (tmp_path / "amp.md").read_text()
