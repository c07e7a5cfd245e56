"""The persistent compilation cache (amk/cache.py, docs/cache.md): warm starts in a new process, damaged entries,
concurrent builders, unwritable directories, reuse of timings, export and import."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
import torch
from conftest import DEVICE
from triton import knobs
from triton.runtime.cache import FileCacheManager, RemoteCacheManager, get_cache_manager

import amk
import amk.build
import amk.tuner
from amk import cache, cli
from amk.build import BuildRequest, Built, entry_of, known_trials, record_trials
from amk.triton_cache import ScopedFileCacheManager
from amk.tuner import TunerConfig

OPS = ["matmul", "add_bias", "relu"]
SHAPES = [(16, 32), (32, 16), (16,)]


def inputs(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator).to(DEVICE) for shape in SHAPES]


def expected(xs):
    return torch.relu(xs[0] @ xs[1] + xs[2])


def build(root, **options):
    """A build into the cache at ``root``; not timed on a GPU unless asked (what is cached is the point here)."""
    options.setdefault("autotune", False)
    return amk.build_fused_kernel(OPS, SHAPES, torch.float32, tuner_config=TunerConfig(target_cache_dir=root),
                                  **options)


def assert_correct(kernel):
    xs = inputs()
    torch.testing.assert_close(kernel(*xs), expected(xs), rtol=1e-5, atol=1e-5)


# A build in a fresh process. Library imports (and the CUDA context, on a GPU) happen before the clock starts (amk
# first: it sets TRITON_INTERPRET before triton loads); the collector is off around the timed call in both processes,
# so that a collection landing in one of them does not decide the comparison.
BUILD_SCRIPT = textwrap.dedent("""
    import gc, json, os, sys, time
    import torch
    from amk.api import build_fused_kernel
    from amk.runtime import default_device
    import triton  # noqa: F401
    torch.empty(0, device=default_device())  # on a GPU, the CUDA context is made before the clock starts too
    barrier = os.environ.get("BARRIER")
    if barrier:  # start building together with the other processes
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.time() + 120
        while len(os.listdir(barrier)) < int(os.environ["BARRIER_COUNT"]) and time.time() < deadline:
            time.sleep(0.01)
    gc.disable()
    start = time.perf_counter()
    kernel = build_fused_kernel(%r, %r, torch.float32, autotune=False)
    seconds = time.perf_counter() - start
    gc.enable()
    xs = [torch.randn(s, device=default_device()) for s in %r]
    error = (kernel(*xs) - torch.relu(xs[0] @ xs[1] + xs[2])).abs().max().item()
    print(json.dumps({"hit": kernel.cache_hit, "key": kernel.cache_key, "seconds": seconds, "error": error,
                      "compiler_loaded": [m for m in ("amk.pipeline", "amk.passes.fuse", "amk.lowering.emit_triton",
                                                      "amk.dialects.tensor_op", "xdsl", "sympy")
                                          if m in sys.modules]}))
""") % (OPS, SHAPES, SHAPES)


def run_build(root, **env):
    environment = dict(os.environ, AMK_CACHE_DIR=str(root), **env)
    return subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT], env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result_of(process) -> dict:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_kernel_without_compiling(tmp_path):
    root = tmp_path / "cache"
    first = result_of(run_build(root))
    assert not first["hit"] and first["error"] < 1e-4
    assert (root / "entries" / first["key"] / "entry.json").is_file()

    second = result_of(run_build(root))
    assert second["hit"] and second["key"] == first["key"] and second["error"] < 1e-4
    # No pass, no emission, no tuning: the compiler, the IR, xDSL and sympy are not even imported on a hit.
    assert second["compiler_loaded"] == []
    # The faster of two warm processes: one process descheduled on a loaded 2-core machine is not a cache miss.
    third = result_of(run_build(root))
    assert third["hit"] and third["compiler_loaded"] == []
    warm = min(second["seconds"], third["seconds"])
    assert first["seconds"] >= 20 * warm, (first["seconds"], second["seconds"], third["seconds"])


def test_an_entry_holds_sources_plan_ir_and_checksums(tmp_path):
    kernel = build(tmp_path)
    directory = tmp_path / "entries" / kernel.cache_key
    doc = json.loads((directory / "entry.json").read_text())
    assert set(doc["files"]) == {"ir.json", "kernel_fused_0.py"}
    assert (directory / "kernel_fused_0.py").read_text() == kernel.source
    assert json.loads((directory / "ir.json").read_text()) == kernel.ir
    assert doc["kernels"]["fused_0"]["config"] == kernel.compiled.kernels["fused_0"].config.as_dict()
    assert [s["kind"] for s in doc["plan"]["steps"]] == ["launch", "return"]
    assert doc["device"] == cache.device_descriptor() and doc["dtype"] == "float32"
    assert set(doc["versions"]) == {"amk", "amk_source", "torch", "triton"}

    hit = build(tmp_path)
    assert hit.cache_hit and hit.cache_key == kernel.cache_key
    assert hit.ir == kernel.ir and hit.source == kernel.source and hit.config == kernel.config
    assert_correct(hit)


def test_a_hit_keeps_the_order_of_kernels_and_ir_levels(tmp_path):
    ops, shapes = ["matmul", "relu", "matmul", "gelu"], [(16, 32), (32, 16), (16, 16)]
    first = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    hit = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    assert hit.cache_hit
    assert list(hit.ir) == list(first.ir) == ["tensor_op", "fused", "tiled_loop", "memory_staged", "triton"]
    assert list(hit.compiled.kernels) == list(first.compiled.kernels) and hit.source == first.source
    assert hit.config == first.config
    xs = [torch.randn(s, device=DEVICE) for s in shapes]
    torch.testing.assert_close(hit(*xs), first(*xs))


def test_respecialized_shapes_are_cached_too(tmp_path):
    kernel = build(tmp_path)
    x, w, b = (torch.randn(s, device=DEVICE) for s in [(8, 32), (32, 16), (16,)])
    torch.testing.assert_close(kernel(x, w, b), torch.relu(x @ w + b))  # new leading dim: compiled and cached
    other = amk.build_fused_kernel(OPS, [(8, 32), (32, 16), (16,)], torch.float32,
                                   tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    assert other.cache_hit
    torch.testing.assert_close(other(x, w, b), torch.relu(x @ w + b))


def test_the_key_changes_with_what_changes_the_kernel(tmp_path):
    base = build(tmp_path)
    assert build(tmp_path, parameter_grid={"BLOCK_SIZE_N": [16]}).cache_key != base.cache_key
    other_dtype = amk.build_fused_kernel(OPS, SHAPES, torch.float16, tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    assert other_dtype.cache_key != base.cache_key and not other_dtype.cache_hit
    # hardtanh and clamp to [-1, 1] build the same IR: they share the entry.
    config = TunerConfig(target_cache_dir=tmp_path)
    hardtanh = amk.build_fused_kernel(["matmul", "add_bias", "hardtanh"], SHAPES, torch.float32, tuner_config=config, autotune=False)
    clamp = amk.build_fused_kernel(["matmul", "add_bias", ("clamp", {"min": -1.0, "max": 1.0})], SHAPES,
                                   torch.float32, tuner_config=config, autotune=False)
    assert not hardtanh.cache_hit and clamp.cache_hit and clamp.cache_key == hardtanh.cache_key


def test_an_op_run_in_pytorch_round_trips_through_the_plan(tmp_path):
    ops, shapes = [("sum", {"dim": 0})], [(4, 8)]
    first = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    second = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=TunerConfig(target_cache_dir=tmp_path), autotune=False)
    assert second.cache_hit
    x = torch.randn(4, 8, device=DEVICE)
    torch.testing.assert_close(second(x), x.sum(0))
    torch.testing.assert_close(first(x), x.sum(0))


def test_a_program_with_the_vendor_gemm_comes_back_from_its_entry_and_from_its_configs(tmp_path):
    """The tuner keeps that program only on a GPU; its entry (with ``program`` in the metadata) must bring it back as
    it was built, and so must its recorded configs once the compiled entry is gone."""
    from amk.build import anonymous_text
    from amk.oplist import build_module, normalize_ops
    from amk.pipeline import compile_module

    ops, shapes = normalize_ops(["matmul", "add_bias", "gelu", "layernorm"]), [(16, 32), (32, 24), (24,), (24,), (24,)]
    settings = TunerConfig(target_cache_dir=tmp_path)
    module = build_module(ops, shapes, torch.float32)
    request = BuildRequest(lambda: build_module(ops, shapes, torch.float32), shapes, torch.float32, ops,
                           autotune=False, tuner_config=settings)
    key, meta = cache.cache_key(anonymous_text(module), shapes, torch.float32, request.settings, ops)
    vendor = compile_module(module, vendor_gemm=True)
    cache.Store(tmp_path).save(entry_of(Built(vendor, key, {**meta, "program": "vendor_gemm"})))
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(shape, generator=generator).to(DEVICE) for shape in shapes]
    expected = torch.nn.functional.layer_norm(torch.nn.functional.gelu(xs[0] @ xs[1] + xs[2]), (24,), xs[3], xs[4])
    hit = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=settings, autotune=False)
    assert hit.cache_hit and hit.torch_ops == ["tensor_op.matmul"]
    for _ in range(2):  # the second call takes the hot path, which calls the matmul as the program does
        torch.testing.assert_close(hit(*xs), expected, rtol=1e-4, atol=1e-4)
    assert hit._hot is not None
    verified = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=settings, verify=True, autotune=False)
    assert verified.cache_hit and verified.verification.passed  # saved again, with its report and its program
    cache.Store(tmp_path).clear()  # entries go, recorded configs stay
    rebuilt = amk.build_fused_kernel(ops, shapes, torch.float32, tuner_config=settings, autotune=False)
    assert not rebuilt.cache_hit and rebuilt.torch_ops == ["tensor_op.matmul"]
    torch.testing.assert_close(rebuilt(*xs), expected, rtol=1e-4, atol=1e-4)


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flip":  # still valid text, one character different
        index = len(data) // 2
        path.write_bytes(data[:index] + (b"7" if data[index:index + 1] != b"7" else b"8") + data[index + 1:])
    else:
        path.unlink()


@pytest.mark.parametrize("name", ["entry.json", "ir.json", "kernel_fused_0.py"])
def test_a_damaged_entry_is_logged_and_rebuilt(tmp_path, caplog, name):
    key = build(tmp_path).cache_key
    path = tmp_path / "entries" / key / name
    for how in ("truncate", "flip", "delete"):
        caplog.clear()
        _damage(path, how)
        with caplog.at_level(logging.WARNING, logger="amk.cache"):
            kernel = build(tmp_path)
        assert not kernel.cache_hit, how
        assert_correct(kernel)
        records = [r for r in caplog.records if r.name == "amk.cache" and key[:12] in r.getMessage()]
        assert records, f"no log record for a {how}d {name}"
        again = build(tmp_path)  # the rebuilt entry replaced the damaged one
        assert again.cache_hit, how
        assert_correct(again)


@pytest.mark.parametrize("damage", ["entry.json a folder", "the entry's folder a file", "index files folders"])
def test_a_folder_or_file_in_the_way_is_removed_and_the_entry_rebuilt(tmp_path, damage):
    """A folder where the cache keeps a file (or the reverse) failed every write into it, which took the whole
    directory for unwritable: the entry was never rebuilt, and no other entry of the process was stored."""
    key = build(tmp_path).cache_key
    entry = tmp_path / "entries" / key
    if damage == "entry.json a folder":
        (entry / "entry.json").unlink()
        (entry / "entry.json").mkdir()
    elif damage == "the entry's folder a file":
        shutil_rmtree(entry)
        entry.write_text("")
    else:
        for index in (tmp_path / "index").iterdir():
            index.unlink()
            index.mkdir()
    cache._STORES.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = build(tmp_path)
    assert _cache_warnings(caught) == [] and not cache.store_for(tmp_path).memory_only
    assert_correct(kernel)
    cache._STORES.clear()
    again = build(tmp_path)
    assert again.cache_hit and again.cache_key == key
    assert_correct(again)
    assert all(path.is_file() for path in (tmp_path / "index").iterdir())  # the index rewritten, too


def test_damaged_index_and_config_records_are_harmless(tmp_path, caplog):
    key = build(tmp_path).cache_key
    for index in (tmp_path / "index").iterdir():
        index.write_text("not a key")
    cache._STORES.clear()  # forget the in-process index
    assert build(tmp_path).cache_hit
    shutil_rmtree(tmp_path / "entries")
    (tmp_path / "configs" / f"{key}.json").write_text("{ truncated")
    with caplog.at_level(logging.WARNING, logger="amk.cache"):
        kernel = build(tmp_path)
    assert not kernel.cache_hit
    assert_correct(kernel)
    assert any("unusable" in r.getMessage() for r in caplog.records if r.name == "amk.cache")


def test_an_index_file_naming_another_requests_entry_is_not_followed(tmp_path, caplog):
    """The index maps a request to its entry's key; one naming another valid entry (a sigmoid chain's for this
    relu chain's request) made the build load that program, a cache hit computing the other chain."""
    relu = build(tmp_path)
    other = amk.build_fused_kernel(["matmul", "add_bias", "sigmoid"], SHAPES, torch.float32, autotune=False,
                                   tuner_config=TunerConfig(target_cache_dir=tmp_path))
    index_of = {path.read_text().split()[0]: path for path in (tmp_path / "index").iterdir()}
    for damage in (other.cache_key, index_of[other.cache_key].read_text()):  # edited; copied from the other's file
        index_of[relu.cache_key].write_text(damage)
        cache._STORES.clear()  # forget the in-process index
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="amk"):
            again = build(tmp_path)
        assert again.cache_key == relu.cache_key
        assert_correct(again)
        assert any("does not name an entry for its request" in r.getMessage() for r in caplog.records)


def test_op_lists_of_one_computation_share_an_entry_without_warnings(tmp_path, caplog, monkeypatch):
    """(matmul, leaky_relu) and (matmul {transpose_b: False}, leaky_relu) give one IR, so one entry; the second's
    index file named an entry recorded for the first's request, and each warm start warned and built the IR."""
    spellings = (["matmul", "add_bias", "relu"], [("matmul", {"transpose_b": False}), "add_bias", "relu"])
    for ops in spellings:
        amk.build_fused_kernel(ops, SHAPES, torch.float32, autotune=False,
                               tuner_config=TunerConfig(target_cache_dir=tmp_path))
    cache._STORES.clear()  # as a new process finds the cache
    built_ir = []
    monkeypatch.setattr(amk.build, "anonymous_text", lambda module: built_ir.append(module) or "")
    with caplog.at_level(logging.WARNING, logger="amk"):
        for ops in spellings:
            kernel = amk.build_fused_kernel(ops, SHAPES, torch.float32, autotune=False,
                                            tuner_config=TunerConfig(target_cache_dir=tmp_path))
            assert kernel.cache_hit
            assert_correct(kernel)
    assert not caplog.records and not built_ir


def test_a_folder_removed_under_a_write_does_not_turn_the_cache_off(tmp_path, monkeypatch):
    """``amk cache clear`` in another process removed a folder between a writer's mkdir and its write: the store took
    the directory for unwritable and kept every later build of its process in memory, warning of permissions."""
    store = cache.Store(tmp_path)
    write, failures = cache.write_atomically, []

    def removed_once(path, data):
        if not failures:
            failures.append(path)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        write(path, data)

    monkeypatch.setattr(cache, "write_atomically", removed_once)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cannot be written" warning
        store.save_alias("0" * 64, "1" * 64)
    assert failures and not store.memory_only
    assert cache.Store(tmp_path).alias("0" * 64) == "1" * 64


def shutil_rmtree(path):
    import shutil

    shutil.rmtree(path)


def test_a_kernel_runs_though_its_source_file_is_cleared_away_meanwhile(tmp_path, monkeypatch):
    """``amk cache clear`` in another process removes the emitted sources; Triton reads a kernel's source through
    ``inspect`` more than once (the interpreter twice at its first launch), and a file gone between two reads raised
    "@jit functions should be defined in a Python file" from the kernel's call."""
    import inspect

    kernel = build(tmp_path, verify=False)  # nothing launched yet
    sources = list((tmp_path / "sources").glob("*.py"))
    assert sources
    read = inspect.getsourcelines

    def read_then_clear(obj):
        lines = read(obj)
        for path in sources:
            path.unlink(missing_ok=True)
        return lines

    monkeypatch.setattr(inspect, "getsourcelines", read_then_clear)
    assert_correct(kernel)


def test_concurrent_builders_all_succeed_and_leave_one_valid_entry(tmp_path):
    root, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    processes = [run_build(root, BARRIER=str(barrier), BARRIER_COUNT="4") for _ in range(4)]
    results = [result_of(p) for p in processes]
    assert all(r["error"] < 1e-4 for r in results)
    keys = {r["key"] for r in results}
    assert len(keys) == 1
    entries = list((root / "entries").iterdir())
    assert [e.name for e in entries] == list(keys)
    # (on a GPU the entry also holds Triton's binaries of its kernels, in triton/)
    assert sorted(p.name for p in entries[0].iterdir() if p.name != "triton") == ["entry.json", "ir.json",
                                                                                  "kernel_fused_0.py"]
    assert cache.Store(root).load(keys.pop()) is not None


def _cache_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "cannot be written" in str(w.message)]


def test_a_cache_path_that_is_a_file_degrades_to_memory_with_one_warning(tmp_path, monkeypatch):
    """AMK_CACHE_DIR naming a file (a TunerConfig.target_cache_dir naming one is refused up front)."""
    monkeypatch.setattr(cache, "_WARNED", False)
    root = tmp_path / "a-file"
    root.write_text("not a directory")
    other = tmp_path / "another-file"
    other.write_text("not a directory")

    def build_under(path):
        monkeypatch.setenv("AMK_CACHE_DIR", str(path))
        return amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = build_under(root)
        second = build_under(root)
        third = build_under(other)
    assert len(_cache_warnings(caught)) == 1
    assert not first.cache_hit and second.cache_hit and not third.cache_hit
    for kernel in (first, second, third):
        assert_correct(kernel)


def make_read_only(root, monkeypatch):
    """Renames into ``root`` fail as on a read-only file system (tests run as root, where chmod does not stop writes);
    elsewhere, as in Triton's own cache, files are written as usual."""
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if os.path.abspath(target).startswith(os.path.join(os.path.abspath(root), "")):
            raise OSError(errno.EROFS, "Read-only file system", str(target))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def test_a_read_only_cache_degrades_to_memory_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_WARNED", False)
    make_read_only(tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = build(tmp_path)
        second = build(tmp_path)
    assert len(_cache_warnings(caught)) == 1
    assert not first.cache_hit and second.cache_hit
    assert_correct(second)
    assert not list((tmp_path / "entries").glob("*/entry.json"))


@pytest.mark.parametrize("index", [True, False], ids=["through the index", "through the IR's key"])
def test_a_populated_read_only_cache_still_serves_hits(tmp_path, monkeypatch, index):
    """Without its index a hit is found through the IR's key and records the request in the index: a read-only cache
    refused that optional write, and the store warned and stopped writing for the rest of the process."""
    key = build(tmp_path).cache_key
    if not index:
        shutil_rmtree(tmp_path / "index")
    monkeypatch.setattr(cache, "_WARNED", False)
    make_read_only(tmp_path, monkeypatch)
    cache._STORES.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = build(tmp_path)
        assert_correct(kernel)
    assert kernel.cache_hit and kernel.cache_key == key
    assert _cache_warnings(caught) == [] and not cache.store_for(tmp_path).memory_only


def test_a_hit_from_a_read_only_cache_leaves_tritons_cache_alone(tmp_path, monkeypatch):
    """Where Triton compiles (on a GPU; the store is told so here), a hit whose entry cannot take Triton's binaries
    launches with Triton's own cache, and the store stays writable for what comes next: the hit wrote nothing."""
    kernel = build(tmp_path).compiled.kernels["fused_0"]
    monkeypatch.setattr(cache, "interpreting", lambda: False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    launch = kernel.launch
    cache.Store(tmp_path).attach_triton_cache("an-entry", kernel)
    assert kernel.launch is not launch  # a writable cache: the first launch compiles into the entry's folder
    kernel.launch = launch
    make_read_only(tmp_path, monkeypatch)
    store = cache.Store(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.attach_triton_cache("another-entry", kernel)
    assert kernel.launch is launch and not store.memory_only and _cache_warnings(caught) == []


def test_a_builds_triton_folder_is_its_threads_alone(tmp_path, monkeypatch):
    """Two threads compiling into their entries' folders at once, a third into Triton's own: each Triton cache
    manager opens in its own thread's folder. TRITON_CACHE_DIR, swapped process-wide, put the third thread's binaries
    in an entry's folder, and two builds restoring it out of order left it set for good, which amk then took for
    the user's own setting (Triton's cache left alone for every later build)."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache, "interpreting", lambda: False)
    own = tmp_path / "triton-own"
    monkeypatch.setattr(knobs.cache, "home_dir", str(own))
    entered, exits = threading.Barrier(3), [threading.Event(), threading.Event()]
    folders: dict[str, str] = {}

    def build(name: str, exit_first: threading.Event | None, exit_after: threading.Event | None) -> None:
        with cache._triton_cache_dir(tmp_path / name):
            entered.wait()
            if exit_after is not None:
                exit_after.wait()
            folders[name] = get_cache_manager("ab" * 32).cache_dir
        if exit_first is not None:
            exit_first.set()

    def outside() -> None:
        entered.wait()
        folders["outside"] = get_cache_manager("cd" * 32).cache_dir

    # "a" enters first and leaves first, "b" leaves after it: the out-of-order restore of TRITON_CACHE_DIR
    threads = [threading.Thread(target=build, args=("a", exits[0], None)),
               threading.Thread(target=build, args=("b", None, exits[0])), threading.Thread(target=outside)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert Path(folders["a"]).parent == tmp_path / "a" and Path(folders["b"]).parent == tmp_path / "b"
    assert Path(folders["outside"]).is_relative_to(own)
    assert "TRITON_CACHE_DIR" not in os.environ and not cache._user_triton_cache()
    assert cache.Store(tmp_path / "store").triton_directory("an-entry") is not None


@pytest.fixture
def users_manager():
    """A Triton cache manager the user set in Python (taken away after the test: Triton reads its variable again)."""
    class UsersManager(FileCacheManager):
        pass

    knobs.cache.manager_class = UsersManager
    yield UsersManager
    del knobs.cache.manager_class


def test_a_triton_cache_manager_of_the_users_leaves_tritons_cache_alone(tmp_path, monkeypatch, users_manager):
    monkeypatch.setattr(cache, "interpreting", lambda: False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert cache.Store(tmp_path).triton_directory("an-entry") is None


def test_between_builds_tritons_cache_manager_is_as_the_user_left_it(tmp_path, monkeypatch):
    """amk's cache manager is Triton's only while a build compiles: a library that names its own in
    TRITON_CACHE_MANAGER after amk's first build (vLLM does) gets it, and amk leaves Triton's cache alone from then."""
    monkeypatch.setattr(cache, "interpreting", lambda: False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with cache._triton_cache_dir(tmp_path / "entry"):
        assert knobs.cache.manager_class is ScopedFileCacheManager
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:RemoteCacheManager")
    assert knobs.cache.manager_class is RemoteCacheManager
    assert cache.Store(tmp_path).triton_directory("an-entry") is None


def test_verification_reports_are_kept_with_the_entry(tmp_path):
    first = build(tmp_path, verify=True)
    assert first.verification.passed and not first.cache_hit
    doc = json.loads((tmp_path / "entries" / first.cache_key / "entry.json").read_text())
    assert doc["verification"]["results"][0]["dtype"] == "float32"
    second = build(tmp_path, verify=True)
    assert second.cache_hit and second.verification.passed
    assert str(second.verification) == str(first.verification)


# ---------------------------------------------------------------------------------------------------------------------
# Timings: only configurations never timed before are measured
# ---------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def tile_kernel():
    from amk.dialects import tiled_loop
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass
    from amk.pipeline import heuristic_config, make_context

    module = build_module(OPS, [(64, 64), (64, 64), (64,)], torch.float16)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    kernel = next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))
    return kernel, heuristic_config(kernel)


def fake_timer(monkeypatch):
    """build_and_run that counts its calls, and a measure() that needs no GPU (time grows with BLOCK_M)."""
    calls = []

    def build_and_run(config):
        calls.append(config)
        return (lambda: config), (lambda: None)

    monkeypatch.setattr(amk.tuner, "measure", lambda launch, warmup, runs, give_up_above=None: launch().BLOCK_M / 100 + launch().BLOCK_N / 1e4)
    return calls, build_and_run


def test_tune_times_only_configs_never_timed_before(tmp_path, monkeypatch, tile_kernel):
    kernel, heuristic = tile_kernel
    settings = TunerConfig(search="exhaustive")
    calls, build_and_run = fake_timer(monkeypatch)
    narrow = amk.tuner.validate_grid({"BLOCK_SIZE_M": [32, 64], "BLOCK_SIZE_N": [32, 64], "BLOCK_SIZE_K": [32]})
    best, trials = amk.tuner.tune(kernel, settings, narrow, heuristic, build_and_run)
    assert len(set(calls)) == 4 and best.BLOCK_M == 32 and best.BLOCK_N == 32  # (finalists are timed twice)

    store = cache.Store(tmp_path)
    key = cache.timing_key(str(kernel), [(64, 64)])
    record_trials(store, key, trials)
    known = known_trials(cache.Store(tmp_path), key)  # read back from disk
    assert len(known) == 4

    calls.clear()
    wide = amk.tuner.validate_grid({"BLOCK_SIZE_M": [16, 32, 64], "BLOCK_SIZE_N": [16, 32, 64], "BLOCK_SIZE_K": [32]})
    best, trials = amk.tuner.tune(kernel, settings, wide, heuristic, build_and_run, known=known)
    assert len(set(calls)) == 5  # 9 candidates, 4 timed before
    assert not any(c.BLOCK_M in (32, 64) and c.BLOCK_N in (32, 64) for c in calls)
    assert sum(t.reused for t in trials) == 4 and best.BLOCK_M == 16 and best.BLOCK_N == 16
    assert all(t.as_dict()["reused"] for t in trials if t.reused)

    record_trials(store, key, trials)  # only the 5 new ones are added
    calls.clear()
    amk.tuner.tune(kernel, settings, wide, heuristic, build_and_run, known=known_trials(store, key))
    assert calls == []


def test_failed_trials_are_remembered_too(tmp_path, monkeypatch, tile_kernel):
    kernel, heuristic = tile_kernel
    calls = []

    def build_and_run(config):
        calls.append(config)
        raise RuntimeError("out of resources")

    grid = amk.tuner.validate_grid({"BLOCK_SIZE_M": [32, 64]})
    _, trials = amk.tuner.tune(kernel, TunerConfig(search="exhaustive"), grid, heuristic, build_and_run)
    assert [t.status for t in trials] == ["failed", "failed"]
    store = cache.Store(tmp_path)
    record_trials(store, "a" * 64, trials)
    calls.clear()
    best, again = amk.tuner.tune(kernel, TunerConfig(search="exhaustive"), grid, heuristic, build_and_run,
                                 known=known_trials(store, "a" * 64))
    assert calls == [] and best == heuristic and all(t.reused for t in again)


# ---------------------------------------------------------------------------------------------------------------------
# Export and import
# ---------------------------------------------------------------------------------------------------------------------

def test_export_import_round_trip_uses_the_imported_config_without_tuning(tmp_path, monkeypatch, capsys):
    here, there, exported = tmp_path / "here", tmp_path / "there", tmp_path / "tuned.json"
    kernel = build(here)
    timing = cache.timing_key("some kernel", SHAPES)
    cache.Store(here).merge_timings(timing, {"BLOCK_M=16": {"config": {"BLOCK_SIZE_M": 16}, "status": "ok",
                                                            "time_ms": 0.5}}, {"kernel": "fused_0"})
    assert cli.main(["cache", "export", str(exported), "--cache-dir", str(here)]) == 0
    document = json.loads(exported.read_text())
    assert [r["key"] for r in document["configs"]] == [kernel.cache_key]
    assert [t["key"] for t in document["timings"]] == [timing]
    assert "def fused_0_kernel" not in exported.read_text() and "plan" not in document["configs"][0]

    # Another machine's tuning chose BLOCK_K=16: the build after the import must use it, without tuning.
    document["configs"][0]["kernels"]["fused_0"]["BLOCK_K"] = 16
    exported.write_text(json.dumps(document))
    assert cli.main(["cache", "import", str(exported), "--cache-dir", str(there)]) == 0
    assert cli.main(["cache", "import", str(exported), "--cache-dir", str(there)]) == 0  # merging twice is fine
    import amk.pipeline

    def no_choice(*args, **kwargs):
        raise AssertionError("the configuration was chosen instead of taken from the import")

    monkeypatch.setattr(amk.tuner, "tune", no_choice)
    monkeypatch.setattr(amk.pipeline, "heuristic_config", no_choice)
    imported = build(there)
    assert not imported.cache_hit and imported.cache_key == kernel.cache_key
    assert imported.config["BLOCK_SIZE_K"] == 16
    assert_correct(imported)
    assert build(there).cache_hit
    assert known_trials(cache.Store(there), timing)["BLOCK_M=16"].time_ms == 0.5

    # Importing into the original cache replaces its entry (built with another config).
    capsys.readouterr()
    assert cli.main(["cache", "import", str(exported), "--cache-dir", str(here)]) == 0
    assert "1 entries built with other configs were dropped" in capsys.readouterr().out
    rebuilt = build(here)
    assert not rebuilt.cache_hit and rebuilt.config["BLOCK_SIZE_K"] == 16


def import_edited_config(kernel, here, there, field: str, value: int) -> None:
    """Import into ``there`` the config record of ``kernel`` (built in ``here``) with ``field`` set to ``value``."""
    record = cache.Store(here).load_config(kernel.cache_key)
    record["kernels"]["fused_0"][field] = value
    document = {"format": cache.EXPORT_FORMAT, "version": cache.FORMAT, "configs": [record], "timings": []}
    cache.Store(there, strict=True).import_(document)


def test_an_imported_config_of_another_amk_version_is_ignored(tmp_path, caplog):
    kernel = build(tmp_path / "here")
    import_edited_config(kernel, tmp_path / "here", tmp_path / "there", "NOT_A_PARAMETER", 2)
    with caplog.at_level(logging.WARNING, logger="amk"):
        rebuilt = build(tmp_path / "there")
    assert rebuilt.config == kernel.config
    assert_correct(rebuilt)
    assert any("ignoring the recorded configuration" in r.getMessage() for r in caplog.records)


GROUPED_GEMM = (["matmul", "relu"], [(256, 64), (64, 256)])


def grouped_gemm(root):
    """A GEMM of a grouped tile grid (its kernel binds GROUP_M as a tile size)."""
    ops, shapes = GROUPED_GEMM
    return amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False,
                                  tuner_config=TunerConfig(target_cache_dir=root))


def assert_grouped_gemm_correct(kernel):
    generator = torch.Generator().manual_seed(0)
    x, w = (torch.randn(shape, generator=generator).to(DEVICE) for shape in GROUPED_GEMM[1])
    torch.testing.assert_close(kernel(x, w), torch.relu(x @ w), rtol=1e-4, atol=1e-4)


def test_an_imported_config_that_does_not_build_is_left_out_of_the_build(tmp_path, caplog):
    """GROUP_M = 3 is a config value (kernels without grouped tiles ignore it, and grids of earlier amk versions
    allowed it), so the import takes it; a grouped tile grid's verifier refuses it. The build says so and is
    done again without the recorded configs, whose record its entry then replaces."""
    kernel = grouped_gemm(tmp_path / "here")
    assert "GROUP_M" in kernel.ir["memory_staged"]
    import_edited_config(kernel, tmp_path / "here", tmp_path / "there", "GROUP_M", 3)
    with caplog.at_level(logging.WARNING, logger="amk"):
        rebuilt = grouped_gemm(tmp_path / "there")
    assert not rebuilt.cache_hit and rebuilt.config == kernel.config
    assert_grouped_gemm_correct(rebuilt)
    warning = [r.getMessage() for r in caplog.records if "do not build here" in r.getMessage()]
    assert warning and kernel.cache_key[:12] in warning[0] and "GROUP_M = 3" in warning[0]
    assert cache.Store(tmp_path / "there").load_config(kernel.cache_key)["kernels"]["fused_0"]["GROUP_M"] == 8
    assert grouped_gemm(tmp_path / "there").cache_hit


def test_an_imported_config_whose_tile_triton_cannot_hold_is_left_out_of_the_build(tmp_path, caplog):
    """BLOCK_M = 2**20 is a value the import takes (each size is checked alone); with BLOCK_N it makes a tile past
    Triton's 2**20 elements, refused at the first launch. The build says so and is done again without it."""
    kernel = grouped_gemm(tmp_path / "here")
    import_edited_config(kernel, tmp_path / "here", tmp_path / "there", "BLOCK_M", 2**20)
    with caplog.at_level(logging.WARNING, logger="amk"):
        rebuilt = grouped_gemm(tmp_path / "there")
    assert not rebuilt.cache_hit and rebuilt.config == kernel.config
    assert_grouped_gemm_correct(rebuilt)
    assert any("do not build here" in r.getMessage() and "1048576" in r.getMessage() for r in caplog.records)


def test_a_recorded_config_with_a_value_no_kernel_takes_is_ignored(tmp_path, caplog):
    """A config record on disk that the import of an earlier amk let through (BLOCK_M = 24) is unusable: logged and
    ignored, and the build chooses its own configuration."""
    kernel = grouped_gemm(tmp_path)
    store = cache.Store(tmp_path)
    record = store.load_config(kernel.cache_key)
    record["kernels"]["fused_0"]["BLOCK_M"] = 24
    store.clear()
    (tmp_path / "configs" / f"{kernel.cache_key}.json").write_bytes(cache._sealed(record))
    cache._STORES.clear()
    with caplog.at_level(logging.WARNING, logger="amk.cache"):
        rebuilt = grouped_gemm(tmp_path)
    assert not rebuilt.cache_hit and rebuilt.config == kernel.config
    assert_grouped_gemm_correct(rebuilt)
    assert any("unusable" in r.getMessage() and "BLOCK_M must be a power of two" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("fields, message", [
    ({"BLOCK_M": 24}, "BLOCK_M must be a power of two from 1 to 1048576, got 24"),
    ({"SPLIT_K": 0}, "SPLIT_K must be a power of two"),
    ({"num_warps": 64}, "num_warps must be one of 1, 2, 4, 8, 16, 32, got 64"),
    ({"num_stages": -1}, "num_stages must be a positive int, got -1"),
    ({"TMA": 2}, "TMA must be 0 or 1, got 2"),
    ({"BLOCK_K": True}, "BLOCK_K must be an int, got True"),
    ({"BLOCK_N": 1 << 21}, "BLOCK_N must be a power of two from 1 to 1048576, got 2097152"),
])
def test_kernel_config_from_dict_refuses_values_no_kernel_takes(fields, message):
    from amk.lowering.configs import KernelConfig

    with pytest.raises(ValueError, match=re.escape(message)):
        KernelConfig.from_dict({**KernelConfig().as_dict(), **fields})
    assert KernelConfig.from_dict({**KernelConfig().as_dict(), "GROUP_M": 3}).GROUP_M == 3  # a positive int
    # A row kernel's 1 x 16384 tile with an unused BLOCK_K of 128: block sizes pair by strategy, so no product check
    assert KernelConfig.from_dict({**KernelConfig().as_dict(), "BLOCK_M": 1, "BLOCK_N": 16384, "BLOCK_K": 128})


def test_the_config_rule_takes_the_warps_of_the_staged_kernels_verifier():
    from amk.dialects.memory_staged import KernelOp
    from amk.lowering.configs import WARPS

    assert WARPS == KernelOp.WARPS


def test_import_keeps_local_timings_and_adds_new_ones(tmp_path):
    store = cache.Store(tmp_path)
    key = "b" * 64
    trial = {"config": {"BLOCK_SIZE_M": 16}, "status": "ok"}
    store.merge_timings(key, {"x": {**trial, "time_ms": 1.0}}, {})
    document = {"format": cache.EXPORT_FORMAT, "version": cache.FORMAT, "configs": [],
                "timings": [{"key": key, "trials": {"x": {**trial, "time_ms": 2.0}, "y": {**trial, "time_ms": 3.0}}}]}
    assert store.import_(document) == (0, 1, 0)
    trials = cache.Store(tmp_path)._read_timings(key)["trials"]
    assert trials["x"]["time_ms"] == 1.0 and trials["y"]["time_ms"] == 3.0


@pytest.mark.parametrize("document, message", [
    ([], "top level"),
    ({"format": "something else"}, "top level"),
    ({"format": cache.EXPORT_FORMAT, "version": 99}, "version"),
    ({"format": cache.EXPORT_FORMAT, "version": cache.FORMAT, "configs": [{"key": "zz"}]}, "configs[0]"),
    ({"format": cache.EXPORT_FORMAT, "version": cache.FORMAT,
      "configs": [{"key": "c" * 64, "kernels": {"k": {"BLOCK_M": 0}}}]}, "BLOCK_M must be a power of two"),
    ({"format": cache.EXPORT_FORMAT, "version": cache.FORMAT,
      "configs": [{"key": "c" * 64, "kernels": {"k": {"BLOCK_M": "64"}}}]}, "parameter names to ints"),
    ({"format": cache.EXPORT_FORMAT, "version": cache.FORMAT, "timings": [{"key": "c" * 64, "trials": {"x": 1}}]},
     "not a trial"),
])
def test_malformed_imports_are_refused(tmp_path, document, message):
    from amk.errors import CacheError

    with pytest.raises(CacheError, match=message.replace("[", r"\[")):
        cache.Store(tmp_path, strict=True).import_(document)
    assert not (tmp_path / "configs").exists()


def test_cache_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path / "env"))
    assert cache.resolve_root() == tmp_path / "env"
    assert cache.resolve_root(tmp_path / "explicit") == tmp_path / "explicit"
    monkeypatch.delenv("AMK_CACHE_DIR")
    assert cache.resolve_root().name == "amk"


def test_races_stay_with_their_program_and_out_of_exports(tmp_path):
    """A bucket's race is kept per entry key and kernel configurations (another tuning of the same key gets none),
    read back only as written (a damaged or odd record is none), cleared with the entries, and never exported, so
    that an export of a cache that raced buckets still imports."""
    store = cache.Store(tmp_path)
    configs = {"fused_0": {"BLOCK_SIZE_M": 16}}
    key = cache.race_key("a" * 64, configs)
    assert key != cache.race_key("a" * 64, {"fused_0": {"BLOCK_SIZE_M": 32}})
    store.save_race(key, {"program": "a" * 64, "amk_ms": 0.02, "pytorch_ms": 0.03, "verified": True})
    assert cache.Store(tmp_path).race(key)["amk_ms"] == 0.02
    record_trials(store, "b" * 64, [amk.tuner.Trial(amk.tuner.KernelConfig(BLOCK_M=16), "ok", 0.01)], {"kernel": "k"})
    document = store.export()
    assert [doc["key"] for doc in document["timings"]] == ["b" * 64]
    elsewhere = cache.Store(tmp_path / "elsewhere")
    assert elsewhere.import_(json.loads(json.dumps(document)))[1] == 1
    (tmp_path / "races" / f"{key}.json").write_text("{}")
    assert cache.Store(tmp_path).race(key) is None
    store.save_race(key, {"amk_ms": 0.02})
    store.clear()
    assert cache.Store(tmp_path).race(key) is None and not (tmp_path / "races").exists()


def test_a_recorded_race_is_read_only_when_it_reads_as_one(tmp_path):
    """recorded_race gives the times and the verification as record_race kept them, for a program from the cache;
    a record with times that are not positive finite numbers, or a verification that is not a boolean, is none."""
    from types import SimpleNamespace

    from amk.build import record_race, recorded_race

    compiled = SimpleNamespace(kernels={"fused_0": SimpleNamespace(config=amk.tuner.KernelConfig(BLOCK_M=16))})
    built = Built(compiled, "c" * 64, {}, entry=object())  # an entry: it came from the cache
    config = TunerConfig(target_cache_dir=tmp_path)
    assert recorded_race(built, config) is None
    record_race(built, config, 0.02, 0.03, verified=True)
    assert recorded_race(built, config) == {"amk_ms": 0.02, "pytorch_ms": 0.03, "verified": True}
    assert recorded_race(Built(compiled, "c" * 64, {}), config) is None  # built here: raced on its first call
    for odd in ({"amk_ms": float("nan")}, {"pytorch_ms": -1.0}, {"verified": "false"}):
        record_race(built, config, **{"amk_ms": 0.02, "pytorch_ms": 0.03, "verified": True, **odd})
        assert recorded_race(built, config) is None, odd
