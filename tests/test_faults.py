"""Fault injection: each fault leaves amk working (the candidate is skipped, the entry rebuilt, or the cache kept in
memory) and nothing corrupt on disk.

- the autotuner (:func:`amk.tuner.tune`, and :func:`amk.tuner.autotune_chooser` with its own candidate runner and
  output check): a Triton compile failure, an out-of-resources config, a ptxas failure and a config producing NaN
  are recorded (``failed`` / ``wrong``) and skipped; the search goes on and its choice, built and run in Triton's
  interpreter, is correct; recorded failures are not retried; when every candidate fails the heuristic configuration
  is used. Timing itself needs a GPU, so ``amk.tuner.measure`` is replaced by a fake clock; everything else (staging,
  emission, loading, launching) is the real thing, on the device kernels run on.
- the persistent cache (:mod:`amk.cache`): a process SIGKILLed in the middle of writing an entry (its index, a kernel
  source, entry.json or the config record); a full disk (ENOSPC) and a read-only directory (EROFS).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import amk
import amk.tuner
from amk import cache
from amk.build import known_trials, record_trials
from amk.dialects import tiled_loop
from amk.lowering.configs import KernelConfig
from amk.runtime import compiled_from_entry
from amk.tuner import TunerConfig, kernel_example_arguments, tune

pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid value encountered:RuntimeWarning",
    "ignore:divide by zero encountered:RuntimeWarning",
)

OPS = ["matmul", "add_bias", "gelu"]
SHAPES = [(24, 40), (40, 20), (20,)]


def reference(xs):
    return torch.nn.functional.gelu(xs[0].double() @ xs[1].double() + xs[2].double())


def inputs(dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x, w, b = (torch.randn(s, generator=generator) for s in SHAPES)
    return [x.to(DEVICE, dtype), (w / SHAPES[1][0] ** 0.5).to(DEVICE, dtype), b.to(DEVICE, dtype)]


def rel_error(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


# ----------------------------------------------------------------------------------------------------------------------
# The autotuner
# ----------------------------------------------------------------------------------------------------------------------

def tile_kernel(ops=OPS, shapes=SHAPES, dtype=torch.float32):
    """The ``tiled_loop.kernel`` the pipeline would hand to the tuner."""
    from amk.lowering.tile import TilePass
    from amk.oplist import build_module
    from amk.passes.fuse import FusePass
    from amk.pipeline import make_context

    module = build_module(ops, shapes, dtype)
    ctx = make_context()
    FusePass().apply(ctx, module)
    TilePass().apply(ctx, module)
    return next(op for op in module.walk() if isinstance(op, tiled_loop.KernelOp))


GRID = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16, 32]}  # 8 candidates (internal key names)


def triton_errors():
    """Triton's exception types (imported after amk.runtime, which switches Triton to its interpreter on CPU)."""
    import triton
    from triton.runtime.errors import OutOfResources, PTXASError

    return triton.CompilationError, OutOfResources, PTXASError


FAULTS = {
    # (BLOCK_M, BLOCK_N, BLOCK_K) -> what happens to that candidate
    (16, 16, 16): "compile",
    (32, 32, 32): "resources",
    (16, 32, 16): "nan",
    (32, 16, 16): "ptxas",
}


class Harness:
    """A ``build_and_run`` as autotune_chooser makes it, on the device kernels run on, with faults injected per candidate (the
    ``fake_clock`` fixture stands in for CUDA-event timing)."""

    def __init__(self, kernel, faults):
        from amk.pipeline import heuristic_config, stage_and_emit
        from amk.runtime import load_source

        self.kernel, self.faults = kernel, faults
        self.stage_and_emit, self.load_source = stage_and_emit, load_source
        self.name = kernel.sym_name.data
        self.first = kernel.num_inputs.value.data
        self.outputs = len(kernel.outputs)
        self.heuristic = heuristic_config(kernel)
        args = kernel_example_arguments(kernel, self.heuristic, DEVICE)
        self.launch_source(self.heuristic)(*args)
        self.expected = [o.float().clone() for o in args[self.first:self.first + self.outputs]]
        self.built: list[KernelConfig] = []

    def launch_source(self, config):
        return self.load_source(self.stage_and_emit(self.kernel, config).source, self.name).launch

    def fault(self, config):
        return self.faults.get((config.BLOCK_M, config.BLOCK_N, config.BLOCK_K))

    def build_and_run(self, config):
        self.built.append(config)
        fault = self.fault(config)
        CompilationError, OutOfResources, PTXASError = triton_errors()
        if fault == "compile":
            raise CompilationError(None, object(), f"injected: cannot compile BLOCK_K={config.BLOCK_K}")
        if fault == "resources":
            raise OutOfResources(232448 * 2, 232448, "shared memory")
        if fault == "ptxas":
            raise PTXASError("injected: ptxas fatal: Unresolved extern function")
        launch = self.launch_source(config)
        candidate = kernel_example_arguments(self.kernel, config, DEVICE)
        outputs = candidate[self.first:self.first + self.outputs]

        def run():
            launch(*candidate)
            if fault == "nan":  # a miscompiled configuration: NaN in its output
                outputs[0].view(-1)[::7] = float("nan")

        def check():  # the check autotune_chooser makes (relative error to the heuristic's output)
            for have, want in zip(outputs, self.expected):
                error = ((have.float() - want).norm() / want.norm().clamp_min(1e-30)).item()
                if not error <= 2e-2:
                    return f"output differs from the heuristic configuration's (relative error {error:.2e})"
            return None

        return run, check


@pytest.fixture
def fake_clock(monkeypatch):
    def measure(fn, warmup, runs, give_up_above=None):
        fn()
        return measure.times.pop(0) if measure.times else 1.0

    measure.times = []
    monkeypatch.setattr(amk.tuner, "measure", measure)
    monkeypatch.setattr(amk.tuner, "FINALISTS", 1)  # these tests count builds; tests/test_tuner.py covers the finalists
    return measure


def statuses(trials):
    return {(t.config.BLOCK_M, t.config.BLOCK_N, t.config.BLOCK_K): t.status for t in trials}


def test_failing_candidates_are_recorded_and_skipped(fake_clock):
    kernel = tile_kernel()
    harness = Harness(kernel, FAULTS)
    # The fake clock times the good candidates in grid order: (16, 32, 32) is the fastest.
    fake_clock.times = [0.5, 0.2, 0.6, 0.7]
    config, trials = tune(kernel, TunerConfig(search="exhaustive"), GRID, harness.heuristic, harness.build_and_run)
    seen = statuses(trials)
    assert len(trials) == 8 and len(harness.built) == 8, "the search stopped at a failure"
    assert seen[(16, 16, 16)] == "failed" and seen[(32, 32, 32)] == "failed" and seen[(32, 16, 16)] == "failed"
    assert seen[(16, 32, 16)] == "wrong"
    assert sorted(seen.values()).count("ok") == 4
    details = {(t.config.BLOCK_M, t.config.BLOCK_N, t.config.BLOCK_K): t.detail for t in trials}
    assert details[(16, 16, 16)].startswith("CompilationError") and "cannot compile" in details[(16, 16, 16)]
    assert details[(32, 32, 32)].startswith("OutOfResources") and "shared memory" in details[(32, 32, 32)]
    assert details[(32, 16, 16)].startswith("PTXASError")
    assert "relative error nan" in details[(16, 32, 16)]
    assert all(t.time_ms is None for t in trials if t.status != "ok")
    assert (config.BLOCK_M, config.BLOCK_N, config.BLOCK_K) == (16, 32, 32)
    # The chosen configuration builds and runs correctly.
    args = kernel_example_arguments(kernel, config, DEVICE)
    harness.launch_source(config)(*args)
    out = args[harness.first]
    assert torch.isfinite(out).all()
    assert rel_error(out, harness.expected[0].double()) < 1e-5


def test_recorded_failures_are_not_retried(fake_clock, tmp_path):
    kernel = tile_kernel()
    harness = Harness(kernel, FAULTS)
    fake_clock.times = [0.5, 0.2, 0.6, 0.7]
    _, trials = tune(kernel, TunerConfig(search="exhaustive"), GRID, harness.heuristic, harness.build_and_run)
    store = cache.Store(tmp_path)
    record_trials(store, "k" * 64, trials, {"kernel": harness.name})
    known = known_trials(cache.Store(tmp_path), "k" * 64)  # a new process reads them back
    assert {t.status for t in known.values()} == {"ok", "failed", "wrong"}
    again = Harness(kernel, FAULTS)
    config, retuned = tune(kernel, TunerConfig(search="exhaustive"), GRID, again.heuristic, again.build_and_run,
                           known)
    assert again.built == [], "a candidate timed (or failed) before on this device was run again"
    assert all(t.reused for t in retuned)
    assert statuses(retuned) == statuses(trials)
    assert (config.BLOCK_M, config.BLOCK_N, config.BLOCK_K) == (16, 32, 32)


def test_every_candidate_failing_falls_back_to_the_heuristic(fake_clock, caplog):
    kernel = tile_kernel()
    everything = {(m, n, k): "compile" for m in (16, 32) for n in (16, 32) for k in (16, 32)}
    harness = Harness(kernel, everything)
    with caplog.at_level("WARNING", logger="amk.tuner"):
        config, trials = tune(kernel, TunerConfig(search="exhaustive"), GRID, harness.heuristic,
                              harness.build_and_run)
    assert config == harness.heuristic
    assert [t.status for t in trials] == ["failed"] * 8
    assert "using the heuristic configuration" in caplog.text


def test_autotune_chooser_skips_faulty_candidates(fake_clock, monkeypatch):
    """The tuner's own candidate runner and output check (amk.tuner.autotune_chooser), on the kernels' device, with the
    faults raised where Triton raises them: at a candidate's first launch (when it compiles), or a launch that
    writes NaN."""
    import amk.pipeline
    import amk.runtime

    kernel = tile_kernel()
    real_arguments, real_stage, real_load = amk.tuner.kernel_example_arguments, amk.pipeline.stage_and_emit, \
        amk.runtime.load_source
    monkeypatch.setattr(amk.tuner, "kernel_example_arguments",
                        lambda kernel, config, device, *rest, **options: real_arguments(kernel, config, DEVICE, *rest,
                                                                                        **options))
    config_of: dict[str, KernelConfig] = {}

    def stage_and_emit(kernel, config, *options):
        staged = real_stage(kernel, config, *options)
        config_of[staged.source] = config
        return staged

    def load_source(source, name):
        module = real_load(source, name)
        config = config_of.get(source)
        fault = FAULTS.get((config.BLOCK_M, config.BLOCK_N, config.BLOCK_K)) if config is not None else None
        if fault is None:
            return module
        CompilationError, OutOfResources, PTXASError = triton_errors()

        def launch(*args):
            if fault == "compile":
                raise CompilationError(None, object(), "injected: cannot compile this configuration")
            if fault == "resources":
                raise OutOfResources(232448 * 2, 232448, "shared memory")
            if fault == "ptxas":
                raise PTXASError("injected: ptxas fatal")
            module.launch(*args)
            args[kernel.num_inputs.value.data].view(-1)[::7] = float("nan")

        return type("Faulty", (), {"launch": staticmethod(launch), "__file__": module.__file__})

    monkeypatch.setattr(amk.pipeline, "stage_and_emit", stage_and_emit)
    monkeypatch.setattr(amk.runtime, "load_source", load_source)
    tuned = []
    fake_clock.times = [0.5, 0.2, 0.6, 0.7]
    choose = amk.tuner.autotune_chooser(TunerConfig(search="exhaustive"), GRID,
                                        lambda kernel, config, trials: tuned.append((config, trials)))
    config = choose(kernel)
    (recorded, trials), = tuned
    assert recorded == config and (config.BLOCK_M, config.BLOCK_N, config.BLOCK_K) == (16, 32, 32)
    seen = statuses(trials)
    assert [seen[key] for key in FAULTS] == ["failed", "failed", "wrong", "failed"]
    assert sorted(seen.values()).count("ok") == 4
    wrong = next(t for t in trials if t.status == "wrong")
    assert "other non-finite values" in wrong.detail  # its NaN where the heuristic configuration's output is finite


def test_failures_do_not_stop_random_and_bayesian_search(fake_clock):
    kernel = tile_kernel()
    for strategy in ("random", "bayesian"):
        harness = Harness(kernel, FAULTS)
        fake_clock.times = []
        config, trials = tune(kernel, TunerConfig(search=strategy, search_budget=6), GRID, harness.heuristic,
                              harness.build_and_run)
        assert len(trials) == 6, strategy
        assert harness.fault(config) is None, f"{strategy} chose a faulty configuration {config}"
        assert any(t.status == "ok" for t in trials)


# ----------------------------------------------------------------------------------------------------------------------
# The cache: a process killed in the middle of a write
# ----------------------------------------------------------------------------------------------------------------------

# The child builds OPS with the cache in AMK_CACHE_DIR. With KILL_AT set, the write of the matching cache file stops
# half-way through its temporary file (flushed to disk), touches MARKER and hangs until the parent kills it.
CHILD = textwrap.dedent("""
    import json, os, sys, time
    kill_at, marker = os.environ.get("KILL_AT"), os.environ.get("MARKER")
    if kill_at:
        real_fdopen = os.fdopen

        def fdopen(fd, *args, **kwargs):
            stream = real_fdopen(fd, *args, **kwargs)
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return stream
            folder, name = os.path.split(path)
            wanted = {"index": os.path.basename(folder) == "index", "configs": os.path.basename(folder) == "configs",
                      "entry.json": name.startswith(".entry.json."), "kernel": name.startswith(".kernel_")}[kill_at]
            if not (wanted and name.startswith(".") and name.endswith(".tmp")):
                return stream

            class Stuck:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return stream.__exit__(*exc)

                def write(self, data):
                    stream.write(data[:max(1, len(data) // 2)])
                    stream.flush()
                    os.fsync(stream.fileno())
                    open(marker, "w").close()
                    time.sleep(600)

            return Stuck()

        os.fdopen = fdopen
    import torch
    import amk
    ops, shapes = json.loads(sys.argv[1])
    shapes = [tuple(s) for s in shapes]
    kernel = amk.build_fused_kernel(ops, shapes, torch.float32, autotune=False)
    generator = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(s, generator=generator).to(kernel.device) for s in shapes)
    w = w / shapes[1][0] ** 0.5
    ref = torch.nn.functional.gelu(x.double() @ w.double() + b.double())
    error = ((kernel(x, w, b).double() - ref).norm() / ref.norm()).item()
    print(json.dumps({"hit": kernel.cache_hit, "key": kernel.cache_key, "error": error}))
""")


def child(root: Path, **env):
    environment = dict(os.environ, AMK_CACHE_DIR=str(root), PYTHONWARNINGS="ignore", **env)
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps([OPS, SHAPES])], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process) -> dict:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1]) | {"stderr": stderr}


def assert_cache_sound(root: Path, key: str):
    """Every entry on disk loads (checksums, files, plan), and no temporary file sits in an entry's folder."""
    store = cache.Store(root)
    keys = [k for k, _ in store.entries()]
    assert key in keys
    for each in keys:
        entry = store.load(each)
        assert entry is not None, f"entry {each[:12]} does not load"
        compiled = compiled_from_entry(entry, root)
        assert compiled.kernels
        leftovers = [p.name for p in store.entry_dir(each).iterdir() if p.name.endswith(".tmp")]
        assert not leftovers, f"temporary files left in entry {each[:12]}: {leftovers}"
    # The config record (what `amk cache export` moves) is there, or, when its own write was killed, the export
    # still carries the entry's configs.
    exported = {record["key"] for record in store.export()["configs"]}
    assert key in exported
    return store


KILL_POINTS = ["index", "kernel", "entry.json", "configs"]


def test_killed_mid_write_then_rebuilt(tmp_path):
    """All four kill points at once (one cache directory each), to keep the subprocess start-up cost down."""
    roots = {point: tmp_path / point for point in KILL_POINTS}
    victims = {}
    for point, root in roots.items():
        victims[point] = child(root, KILL_AT=point, MARKER=str(tmp_path / f"{point}.marker"))
    deadline = time.time() + 240
    for point, process in victims.items():
        marker = tmp_path / f"{point}.marker"
        while not marker.exists():
            assert process.poll() is None, f"{point}: the child ended before the write: {process.communicate()[1][-2000:]}"
            assert time.time() < deadline, f"{point}: the child never reached the write"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        assert process.returncode == -signal.SIGKILL
        partial = [p for p in roots[point].rglob("*.tmp")]
        assert partial, f"{point}: no half-written temporary file was left (the fault was not injected)"
        for path in partial:  # as if the kill was long ago: stale, so the next write to its folder removes it
            os.utime(path, (time.time() - 3600, time.time() - 3600))
    rebuilders = {point: child(root) for point, root in roots.items()}
    for point, process in rebuilders.items():
        result = finished(process)
        assert result["error"] < 1e-5, f"{point}: rebuilt kernel is wrong ({result['error']:.2e})"
        # Only a kill after entry.json was in place leaves a usable entry behind.
        assert result["hit"] is (point == "configs"), point
        if point == "entry.json":
            assert "unusable" in result["stderr"] and "rebuilding" in result["stderr"], result["stderr"][-2000:]
        store = assert_cache_sound(roots[point], result["key"])
        # What the next process would load: the rebuilt entry, giving correct results.
        compiled = compiled_from_entry(store.load(result["key"]), roots[point])
        xs = inputs()
        assert rel_error(compiled.program(*xs)[0], reference(xs)) < 1e-5, point
        # The rebuild wrote to the folder of the killed write and removed the leftover, except after a kill in the
        # config record's write: the entry was complete, so the rebuild was a hit and wrote nothing; clear removes it.
        leftovers = [p.relative_to(roots[point]).parts[0] for p in roots[point].rglob("*.tmp")]
        assert leftovers == (["configs"] if point == "configs" else []), f"{point}: {leftovers}"
        store.clear()
        assert not list(roots[point].rglob("*.tmp")), point


def test_stale_temporary_files_are_removed(tmp_path):
    """Leftovers of writers killed between mkstemp and os.replace go on the next write to their folder (or on clear)
    once older than STALE_TEMPORARY_S; a younger one may be a live writer's and stays. The entry still loads."""
    root = tmp_path / "cache"
    kernel = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False,
                                    tuner_config=TunerConfig(target_cache_dir=root))
    key = kernel.cache_key
    (root / "timings").mkdir()
    old = time.time() - cache.STALE_TEMPORARY_S - 60

    def leftover(folder: str, name: str, stale: bool = True) -> Path:
        path = root / folder / f".{name}.k1ll3d.tmp"
        path.write_bytes(b'{"format": 1, "key": "')  # half of a file
        if stale:
            os.utime(path, (old, old))
        return path

    stale_entry = leftover(f"entries/{key}", "entry.json")
    stale_kernel = leftover(f"entries/{key}", "kernel_0.py")
    stale_config = leftover("configs", f"{key}.json")
    stale_index = leftover("index", "0" * 64)
    stale_timings = leftover("timings", f"{key}.json")
    live = leftover("configs", f"{'e' * 64}.json", stale=False)
    store = cache.Store(root)  # what a new process sees
    assert store.save(store.load(key))  # a locked write of the entry and of its config record
    assert not stale_entry.exists() and not stale_kernel.exists() and not stale_config.exists()
    assert stale_index.exists() and stale_timings.exists()  # (nothing was written to those folders)
    assert live.exists()
    entry = cache.Store(root).load(key)
    compiled = compiled_from_entry(entry, root)
    xs = inputs()
    assert entry is not None and rel_error(compiled.program(*xs)[0], reference(xs)) < 1e-5
    assert store.clear() == 1
    assert not stale_timings.exists() and not stale_index.exists() and live.exists()
    assert store.load_config(key) is not None


# ----------------------------------------------------------------------------------------------------------------------
# The cache: full and read-only directories
# ----------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def fresh_warning(monkeypatch):
    """amk warns once per process about an unwritable cache: reset that for the test."""
    monkeypatch.setattr(cache, "_WARNED", False)


def under(root: Path, path) -> bool:
    try:
        return Path(os.fspath(path)).resolve().is_relative_to(root.resolve())
    except (TypeError, ValueError):
        return False


def cache_warnings(caught):
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "cannot be written" in str(w.message)]


def build_twice_and_check(root: Path):
    """Two builds of one chain and one of another: all correct, the repeat served from memory."""
    settings = TunerConfig(target_cache_dir=root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
        again = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False, tuner_config=settings)
        other = amk.build_fused_kernel(["matmul", "relu"], SHAPES[:2], torch.float32, autotune=False,
                                       tuner_config=settings)
        xs = inputs()
        for kernel in (first, again):
            assert rel_error(kernel(*xs), reference(xs)) < 1e-5
        assert rel_error(other(*xs[:2]), torch.relu(xs[0].double() @ xs[1].double())) < 1e-5
    assert not first.cache_hit and again.cache_hit, "the repeated build was not served from the in-memory cache"
    assert cache.store_for(root).memory_only
    found = cache_warnings(caught)
    assert len(found) == 1, [str(w.message) for w in found]
    return str(found[0].message)


def test_full_disk_degrades_to_memory(tmp_path, monkeypatch, fresh_warning):
    root = tmp_path / "full"
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if under(root, target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    message = build_twice_and_check(root)
    assert "No space left on device" in message and str(root) in message
    monkeypatch.undo()
    # Nothing half-written stays behind: no temporary file, no entry without its entry.json.
    assert not list(root.rglob("*.tmp")), list(root.rglob("*.tmp"))
    assert not [p for p in root.rglob("entry.json")]
    store = cache.Store(root)
    assert all(store.load(key) is None for key, _ in store.entries())
    # Once there is room again, a new process (a fresh store) writes the entry.
    kernel = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False,
                                    tuner_config=TunerConfig(target_cache_dir=tmp_path / "roomy"))
    assert cache.Store(tmp_path / "roomy").load(kernel.cache_key) is not None


def test_read_only_directory_degrades_to_memory(tmp_path, monkeypatch, fresh_warning):
    root = tmp_path / "readonly"
    root.mkdir()
    # Running as root ignores chmod, so the file system's refusal is injected: nothing may be created under root.
    real_open, real_mkdir = os.open, os.mkdir

    def read_only_open(path, flags, *args, **kwargs):
        if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR) and under(root, path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    def read_only_mkdir(path, *args, **kwargs):
        if under(root, path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    monkeypatch.setattr(os, "mkdir", read_only_mkdir)
    message = build_twice_and_check(root)
    assert "Read-only file system" in message
    monkeypatch.undo()
    assert list(root.iterdir()) == [], list(root.rglob("*"))


def test_read_only_directory_still_serves_existing_entries(tmp_path, monkeypatch, fresh_warning):
    """A cache filled earlier and mounted read-only later: hits are served, nothing is written, no crash."""
    root = tmp_path / "shipped"
    kernel = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False,
                                    tuner_config=TunerConfig(target_cache_dir=root))
    kernel(*inputs())  # on a GPU, Triton compiles at the first launch, into the entry's folder: filled earlier too
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())
    monkeypatch.setattr(cache, "_STORES", {})  # a new process
    real_open = os.open

    def read_only_open(path, flags, *args, **kwargs):
        if flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR) and under(root, path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        again = amk.build_fused_kernel(OPS, SHAPES, torch.float32, autotune=False,
                                       tuner_config=TunerConfig(target_cache_dir=root))
        xs = inputs()
        assert rel_error(again(*xs), reference(xs)) < 1e-5
    assert again.cache_hit and again.cache_key == kernel.cache_key
    monkeypatch.undo()
    after = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())
    assert after == before
