"""``amk cache list|show|clear|export|import|path`` and how the command reports bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch
from conftest import DEVICE, GPU, installed_script

import amk
from amk import cli
from amk.cache import _sealed
from amk.tuner import TunerConfig

OPS = ["matmul", "add_bias", "relu"]


def build(root, shapes=((16, 32), (32, 16), (16,))):
    return amk.build_fused_kernel(OPS, list(shapes), torch.float32, tuner_config=TunerConfig(target_cache_dir=root))


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def populated(tmp_path):
    first = build(tmp_path)
    second = build(tmp_path, [(8, 32), (32, 16), (16,)])
    return tmp_path, first, second


def test_list_shows_one_line_per_entry(populated, capsys):
    root, first, second = populated
    code, out, _ = run(capsys, "cache", "list", "--cache-dir", str(root))
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 2
    by_key = {line.split()[0]: line for line in lines}
    line = by_key[first.cache_key[:12]]
    assert "matmul,add_bias,relu" in line and "[16x32, 32x16, 16]" in line
    device_name = torch.cuda.get_device_name(DEVICE) if GPU else "cpu-interpreter"
    assert "float32" in line and device_name in line
    assert "[8x32, 32x16, 16]" in by_key[second.cache_key[:12]]


def test_list_of_an_empty_or_missing_directory(tmp_path, capsys):
    code, out, err = run(capsys, "cache", "list", "--cache-dir", str(tmp_path / "nothing"))
    assert code == 0 and out == "" and "no cache entries" in err
    assert not (tmp_path / "nothing").exists()


def test_list_uses_amk_cache_dir(populated, capsys, monkeypatch):
    root, first, _ = populated
    monkeypatch.setenv("AMK_CACHE_DIR", str(root))
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0 and first.cache_key[:12] in out
    assert run(capsys, "cache", "path")[1].strip() == str(root)


def test_show_prints_the_entry_config_and_tuning_summary(populated, capsys):
    root, first, _ = populated
    code, out, _ = run(capsys, "cache", "show", first.cache_key[:10], "--cache-dir", str(root))
    assert code == 0
    assert first.cache_key in out and '"kernels"' in out and '"plan"' in out
    config = first.compiled.kernels["fused_0"].config
    config_line = out.split("config:\n", 1)[1].splitlines()[0]
    assert config_line.startswith("  fused_0: ")
    assert f"BLOCK_K={config.BLOCK_K} " in config_line and f"num_warps={config.num_warps} " in config_line
    # a GPU build tunes (build_fused_kernel's default) and stores its trials; the interpreter has nothing to time
    summary = f"{len(first.tuning_log['fused_0'])} trials (" if GPU else "no tuning log"
    assert f"tuning:\n  fused_0: {summary}" in out


def test_show_summarizes_a_tuning_log(tmp_path, capsys):
    kernel = build(tmp_path)
    path = tmp_path / "entries" / kernel.cache_key / "entry.json"
    doc = {k: v for k, v in json.loads(path.read_text()).items() if k != "checksum"}
    doc["tuning_log"] = {"fused_0": [
        {"config": {"BLOCK_SIZE_M": 16}, "status": "ok", "time_ms": 0.25, "detail": "", "reused": True},
        {"config": {"BLOCK_SIZE_M": 32}, "status": "ok", "time_ms": 0.125, "detail": "", "reused": False},
        {"config": {"BLOCK_SIZE_M": 8}, "status": "pruned", "time_ms": None, "detail": "too small", "reused": False}]}
    path.write_bytes(_sealed(doc))
    code, out, _ = run(capsys, "cache", "show", kernel.cache_key, "--cache-dir", str(tmp_path))
    assert code == 0
    assert "fused_0: 3 trials (2 ok, 1 pruned), 1 reused from earlier timings; best 0.1250 ms" in out


@pytest.mark.parametrize("damage", [
    lambda doc: doc.update(verification={"results": [1]}), lambda doc: doc.update(kernels=[]),
    lambda doc: doc["tuning_log"].update(fused_0=[{"status": "ok", "time_ms": "1.0"}])],
    ids=["verification", "kernels", "time_ms"])
def test_show_of_an_entry_edited_since_amk_wrote_it_fails_cleanly(tmp_path, capsys, damage):
    """An entry.json that is JSON but not what amk wrote raised AttributeError or ValueError with a traceback."""
    kernel = build(tmp_path)
    path = tmp_path / "entries" / kernel.cache_key / "entry.json"
    doc = json.loads(path.read_text())
    doc.setdefault("tuning_log", {})
    damage(doc)
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "cache", "show", kernel.cache_key, "--cache-dir", str(tmp_path))
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith("amk: error: ") and "damaged" in err and "does not match its checksum" in err


@pytest.mark.parametrize("key, message", [
    ("0123456789abcdef", "no cache entry has a key starting with"),
    ("not-hex", "is not a cache key"),
])
def test_show_of_an_unknown_key_fails_cleanly(populated, capsys, key, message):
    root, _, _ = populated
    code, out, err = run(capsys, "cache", "show", key, "--cache-dir", str(root))
    assert code == 1 and out == ""
    assert err.startswith("amk: error: ") and message in err


def test_show_of_an_ambiguous_prefix_fails_cleanly(tmp_path, capsys):
    build(tmp_path)
    entries = tmp_path / "entries"
    key = next(entries.iterdir()).name
    twin = key[:4] + ("0" if key[4] != "0" else "1") + key[5:]
    shutil.copytree(entries / key, entries / twin)
    code, _, err = run(capsys, "cache", "show", key[:4], "--cache-dir", str(tmp_path))
    assert code == 1 and "2 cache entries have keys starting with" in err


def test_clear_removes_entries_without_asking(populated, capsys):
    root, first, _ = populated
    code, out, _ = run(capsys, "cache", "clear", "--cache-dir", str(root))
    assert code == 0 and "removed 2 entries" in out
    assert run(capsys, "cache", "list", "--cache-dir", str(root))[1] == ""
    assert list((root / "configs").iterdir())  # tuned configs are kept...
    rebuilt = build(root)
    assert not rebuilt.cache_hit and rebuilt.cache_key == first.cache_key
    code, out, _ = run(capsys, "cache", "clear", "--yes", "--all", "--cache-dir", str(root))
    assert code == 0 and "removed 1 entries and every tuned config and timing" in out
    assert not (root / "configs").exists()  # ...unless --all


def test_export_and_import_through_files(populated, tmp_path, capsys):
    root, first, second = populated
    exported = tmp_path / "export.json"
    code, out, _ = run(capsys, "cache", "export", str(exported), "--cache-dir", str(root))
    assert code == 0 and "exported 2 tuned configs" in out
    other = tmp_path / "other"
    code, out, _ = run(capsys, "cache", "import", str(exported), "--cache-dir", str(other))
    assert code == 0 and "imported 2 tuned configs" in out
    code, out, _ = run(capsys, "cache", "show", first.cache_key[:12], "--cache-dir", str(other))
    assert code == 0 and "config record" in out
    assert "BLOCK_K=32" in out.split("config:\n", 1)[1].splitlines()[0]
    code, out, _ = run(capsys, "cache", "export", "-", "--cache-dir", str(other))
    assert code == 0 and {r["key"] for r in json.loads(out)["configs"]} == {first.cache_key, second.cache_key}


def test_bad_import_and_export_files(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    code, _, err = run(capsys, "cache", "import", str(missing), "--cache-dir", str(tmp_path))
    assert code == 1 and err.startswith("amk: error: cannot read") and "Traceback" not in err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{ not json")
    code, _, err = run(capsys, "cache", "import", str(garbage), "--cache-dir", str(tmp_path))
    assert code == 1 and "is not valid JSON" in err
    garbage.write_text(json.dumps({"configs": []}))
    code, _, err = run(capsys, "cache", "import", str(garbage), "--cache-dir", str(tmp_path))
    assert code == 1 and "not an amk cache export" in err
    code, _, err = run(capsys, "cache", "export", str(tmp_path), "--cache-dir", str(tmp_path))  # a directory
    assert code == 1 and err.startswith("amk: error: cannot write")


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as error:
        cli.main(["cache", "frobnicate"])
    assert error.value.code == 2


def test_the_command_reports_errors_without_a_traceback(tmp_path):
    for args in (["cache", "show", "abc123"], ["cache", "import", str(tmp_path / "none.json")]):
        done = subprocess.run([installed_script("amk"), *args, "--cache-dir", str(tmp_path)], capture_output=True,
                              text=True, env=dict(os.environ), timeout=120)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("amk: error: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_cache_dir_is_refused_and_the_current_directory_kept(tmp_path, capsys, monkeypatch, empty):
    """``--cache-dir ""`` (a script's unset variable) would be the current directory: refused, as an empty
    TunerConfig.target_cache_dir is, before anything is read or removed."""
    monkeypatch.chdir(tmp_path)
    for folder, name in (("sources", "main.py"), ("entries", "notes.txt"), ("configs", "settings.json")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text("precious")
    before = sorted(tmp_path.rglob("*"))
    for args in (["path"], ["list"], ["clear"], ["clear", "--all"]):
        code, out, err = run(capsys, "cache", *args, "--cache-dir", empty)
        assert code == 1 and out == "", args
        assert err.startswith("amk: error: --cache-dir must be a non-empty path") and repr(empty) in err, args
    assert sorted(tmp_path.rglob("*")) == before


def test_clear_refuses_a_directory_that_is_not_an_amk_cache(tmp_path, capsys):
    """clear removes whole folders: where one holds anything amk does not write there, it removes nothing."""
    project = tmp_path / "project"
    for relative in ("sources/main.py", "entries/myproject/notes.txt", "configs/settings.json", "timings/run1.csv"):
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text("precious")
    before = sorted(project.rglob("*"))
    for args in (["clear"], ["clear", "--all"]):
        code, out, err = run(capsys, "cache", *args, "--cache-dir", str(project))
        assert code == 1 and out == "", args
        assert err.startswith(f"amk: error: {project} does not look like an amk cache: amk does not write "), args
        assert "nothing was removed" in err
    assert sorted(project.rglob("*")) == before

    # A real cache with one stranger in a folder that clear removes: refused too, and clearable once it is gone.
    build(tmp_path / "cache")
    stranger = tmp_path / "cache" / "sources" / "notes.txt"
    stranger.write_text("mine")
    code, _, err = run(capsys, "cache", "clear", "--cache-dir", str(tmp_path / "cache"))
    assert code == 1 and str(stranger) in err and (tmp_path / "cache" / "entries").is_dir()
    stranger.unlink()
    (tmp_path / "cache" / "sources" / "__pycache__").mkdir()  # Python's bytecode of the imported sources
    (tmp_path / "cache" / "index" / f".{'0' * 64}.k1ll3d.tmp").write_text("")  # what an interrupted write leaves
    code, out, _ = run(capsys, "cache", "clear", "--all", "--cache-dir", str(tmp_path / "cache"))
    assert code == 0 and "removed 1 entries" in out
    assert not any((tmp_path / "cache" / folder).exists() for folder in ("entries", "index", "sources", "configs"))


def test_an_export_with_a_program_without_kernels_imports(tmp_path, capsys):
    """A chain run wholly in PyTorch has a config record of no kernels: the export of its cache imports again, and the
    build from the imported record runs."""
    ops, shapes = [("sum", {"dim": 0})], [(8, 16)]
    settings = TunerConfig(target_cache_dir=tmp_path / "here")
    kernel = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False, tuner_config=settings)
    assert kernel.num_kernels == 0
    exported = tmp_path / "export.json"
    assert run(capsys, "cache", "export", str(exported), "--cache-dir", str(tmp_path / "here"))[0] == 0
    assert json.loads(exported.read_text())["configs"][0]["kernels"] == {}
    code, out, err = run(capsys, "cache", "import", str(exported), "--cache-dir", str(tmp_path / "there"))
    assert code == 0 and "imported 1 tuned configs" in out, err
    imported = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False,
                                      tuner_config=TunerConfig(target_cache_dir=tmp_path / "there"))
    assert imported.cache_key == kernel.cache_key and not imported.cache_hit
    x = torch.randn(shapes[0], device=DEVICE)
    torch.testing.assert_close(imported(x), x.sum(0))


@pytest.mark.parametrize("damage, message", [
    (lambda doc: doc["configs"][0].update(tuning_log={"fused_0": [{"status": "ok", "time_ms": "0.1", "config": {}}]}),
     "configs[0].tuning_log['fused_0'] must be a list of trials"),
    (lambda doc: doc["configs"][0].update(tuning_log={"fused_0": {"status": "ok"}}),
     "configs[0].tuning_log['fused_0'] must be a list of trials"),
    (lambda doc: doc.update(version=True), "version True is not supported"),
], ids=["time-as-text", "log-not-a-list", "version-true"])
def test_import_refuses_what_amk_cannot_read_back(tmp_path, capsys, damage, message):
    """An imported tuning log with a time as text made `amk cache show` end in a traceback (a format code applied
    to a string); ``"version": true`` passed for version 1."""
    build(tmp_path / "here")
    exported = tmp_path / "export.json"
    assert run(capsys, "cache", "export", str(exported), "--cache-dir", str(tmp_path / "here"))[0] == 0
    document = json.loads(exported.read_text())
    damage(document)
    exported.write_text(json.dumps(document))
    code, out, err = run(capsys, "cache", "import", str(exported), "--cache-dir", str(tmp_path / "there"))
    assert code == 1 and out == "" and "Traceback" not in err
    assert err.startswith("amk: error: not an amk cache export: ") and message in err

@pytest.mark.parametrize("field, value, message", [
    ("BLOCK_M", 24, "BLOCK_M must be a power of two from 1 to 1048576, got 24"),
    ("num_warps", 3, "num_warps must be one of 1, 2, 4, 8, 16, 32, got 3"),
    ("BLOCK_N", 1 << 21, "BLOCK_N must be a power of two from 1 to 1048576, got 2097152"),
    ("PERSISTENT", 2, "PERSISTENT must be 0 or 1, got 2"),
    ("num_stages", 0, "num_stages must be a positive int, got 0"),
])
def test_import_refuses_configs_no_kernel_can_be_built_with(tmp_path, capsys, field, value, message):
    """Such a config (hand-edited, or from elsewhere) would break every later build of its chain: the import is
    refused whole, naming the config and the value, and writes nothing."""
    kernel = build(tmp_path / "here")
    exported = tmp_path / "export.json"
    assert run(capsys, "cache", "export", str(exported), "--cache-dir", str(tmp_path / "here"))[0] == 0
    document = json.loads(exported.read_text())
    document["configs"][0]["kernels"]["fused_0"][field] = value
    exported.write_text(json.dumps(document))
    code, out, err = run(capsys, "cache", "import", str(exported), "--cache-dir", str(tmp_path / "there"))
    assert code == 1 and out == ""
    assert err.startswith("amk: error: not an amk cache export: configs[0].kernels['fused_0']: ") and message in err
    assert not (tmp_path / "there").exists()
    assert build(tmp_path / "here").cache_key == kernel.cache_key
