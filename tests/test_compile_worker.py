"""Compile workers are ``python -m amk.compile_worker`` processes: starting them never runs the user's main module,
whatever started Python, and a worker that fails leaves compilation to the tuning process with one warning."""

import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
from conftest import GPU

from amk.compile_worker import CompileWorkers


def ran(tag: str) -> str:
    """A job's source that a worker loading it reports, with ``tag``, in its reply."""
    return f"raise RuntimeError('{tag} ran in a worker')\n"


# A user script without a main guard: a top-level side effect (one line per run), then workers that compile two
# jobs. The jobs' sources raise as a worker loads them, so each worker's reply is an error that says so: proof that
# the workers ran them.
SCRIPT = textwrap.dedent("""
    import os
    with open(os.environ["COUNTER"], "a") as counter:
        counter.write("ran\\n")
    from amk.compile_worker import CompileWorkers
    pool = CompileWorkers(2)
    print(pool.compile([("raise RuntimeError('first ran in a worker')\\n", "first", []),
                        ("raise RuntimeError('second ran in a worker')\\n", "second", [])]))
    pool.close()
""")


@pytest.mark.parametrize("started_as", ["script", "stdin", "command"])
def test_workers_never_run_the_users_main_module(tmp_path, started_as):
    counter = tmp_path / "counter"
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    command = {"script": [sys.executable, str(script)], "stdin": [sys.executable, "-"],
               "command": [sys.executable, "-c", SCRIPT]}[started_as]
    env = dict(os.environ, COUNTER=str(counter), AMK_CACHE_DIR=str(tmp_path / "cache"))
    result = subprocess.run(command, input=SCRIPT if started_as == "stdin" else None, capture_output=True, text=True,
                            env=env, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert counter.read_text() == "ran\n"  # the user's code ran once: in the user's process, not in the workers
    errors = eval(result.stdout.strip().splitlines()[-1])
    assert len(errors) == 2 and all("ran in a worker" in error for error in errors), errors
    assert "bootstrapping" not in result.stderr and "Traceback" not in result.stderr


def test_a_worker_that_dies_leaves_compilation_to_this_process_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(2)
    dying = ("import os\nos._exit(3)\n", "dies", [])
    try:
        with pytest.warns(RuntimeWarning, match="compile worker stopped") as caught:
            assert pool.compile([dying, dying, dying]) == [None, None, None]
        assert len(caught) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert pool.compile([dying, dying]) == [None, None]  # said once; nothing more is sent to the workers
    finally:
        pool.close()


def test_the_workers_are_forks_of_one_server_and_end_with_the_pool(tmp_path, monkeypatch):
    """One process imports triton (never torch) and forks the workers (so their imports were done at one moment);
    closing the pool ends the server and every worker: its process group is left empty."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(3)
    try:
        errors = pool.compile([(ran(f"job{index}"), f"job{index}", []) for index in range(3)])
        assert all("ran in a worker" in error for error in errors), errors
        assert not any(worker.imported_torch for worker in pool.workers)
        deadline = time.monotonic() + 60
        while len(pool.boot_seconds) < 3 and time.monotonic() < deadline:  # one worker may have done all three jobs
            time.sleep(0.01)
        assert len({worker.import_seconds for worker in pool.workers}) == 1
        group = pool.server.process.pid
    finally:
        pool.close()
    assert group_ended(group)


def test_closing_the_pool_while_its_workers_start_ends_them(monkeypatch):
    pool = CompileWorkers(2)
    pool.start()
    group = pool.server.process.pid
    pool.close()
    assert pool.workers == [] and pool.server is None
    assert group_ended(group)


def group_ended(group: int, seconds: float = 30) -> bool:
    """Whether process group ``group`` is empty within ``seconds`` (killed workers whose server has died are orphans,
    reaped by init a moment later)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_fork_of_this_process_leaves_the_pool_to_it(tmp_path, monkeypatch):
    """A user's ``os.fork()`` child holds copies of the workers' channels: closing the pool there (its exit handlers
    do) must not end this process's workers, and its jobs compile in the child itself."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(2)
    try:
        assert "ran in a worker" in pool.compile([(ran("x1"), "before", [])])[0]
        child = os.fork()
        if child == 0:
            status = 1
            try:
                pool.close()
                status = 0 if pool.compile([(ran("x2"), "in_child", [])]) == [None] else 2
            finally:
                os._exit(status)
        assert os.waitpid(child, 0)[1] == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert "ran in a worker" in pool.compile([(ran("x3"), "after", [])])[0]
        assert pool.broken is None
    finally:
        pool.close()


def test_workers_that_cannot_start_leave_compilation_to_this_process(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    pool = CompileWorkers(2)
    assert pool.accepting()
    with pytest.warns(RuntimeWarning, match="could not start"):
        assert pool.compile([(ran("x1"), "first", []), (ran("y1"), "second", [])]) == [None, None]
    assert not pool.accepting()  # the tuner then prepares no jobs at all
    pool.close()


def test_no_workers_compile_nothing():
    pool = CompileWorkers(0)
    assert not pool.accepting()
    assert pool.compile([(ran("x1"), "first", [])]) == [None]
    assert pool.workers == []


def test_workers_write_sources_under_the_builds_cache_directory(tmp_path, monkeypatch):
    from amk.runtime import sources_under

    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path / "default"))
    pool = CompileWorkers(1)
    try:
        with sources_under(tmp_path / "build"):
            (error,) = pool.compile([(ran("x1"), "placed", [])])
    finally:
        pool.close()
    assert "ran in a worker" in error  # the worker loaded the source (which raises)
    assert [p.name.startswith("amk_generated_placed_") for p in (tmp_path / "build" / "sources").iterdir()] == [True]
    assert not (tmp_path / "default").exists()


def test_builds_in_two_threads_get_their_own_replies(tmp_path, monkeypatch):
    """The pool is shared by every build in the process: batches from two threads never cross replies."""
    import threading

    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(2)
    replies: dict[str, list] = {}

    def compile_batch(thread: str) -> None:
        jobs = [(f"raise RuntimeError('{thread}-{index}')\n", f"{thread}{index}", []) for index in range(4)]
        replies[thread] = pool.compile(jobs)

    try:
        threads = [threading.Thread(target=compile_batch, args=(name,)) for name in ("first", "second")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        pool.close()
    for name in ("first", "second"):
        assert [f"{name}-{index}" in reply for index, reply in enumerate(replies[name])] == [True] * 4, replies


def test_a_job_is_compiled_under_the_triton_variables_of_its_submission(tmp_path, monkeypatch):
    """Not those the worker started with: torch.compile points Triton to torch's ptxas once Inductor has compiled in
    the process, and a binary compiled with another ptxas has another cache key, which the tuning process would not
    find. The job's source reports what it sees."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRITON_STALE_SETTING", "from the worker's start")
    pool = CompileWorkers(1)
    source = ("import os\nraise RuntimeError(os.environ.get('TRITON_PTXAS_PATH', 'unset') + '|' + "
              "os.environ.get('TRITON_STALE_SETTING', 'unset'))\n")
    try:
        pool.start()
        monkeypatch.delenv("TRITON_STALE_SETTING")
        monkeypatch.setenv("TRITON_PTXAS_PATH", "/set/after/the/start/ptxas")
        (error,) = pool.compile([(source, "environment", [])])
    finally:
        pool.close()
    assert "/set/after/the/start/ptxas|unset" in error, error


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH (not putting the working directory first) is "
                    "Python 3.11's")
def test_a_worker_imports_amk_from_where_this_process_did_not_from_its_working_directory(tmp_path, monkeypatch):
    """Started in a folder holding another ``amk/`` (a source checkout, here a decoy that cannot be imported), a
    worker still imports the amk its parent imported."""
    decoy = tmp_path / "amk"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy amk in the working directory was imported')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path / "cache"))
    pool = CompileWorkers(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a worker that died would warn
            (error,) = pool.compile([(ran("x1"), "placed", [])])
    finally:
        pool.close()
    assert "ran in a worker" in error  # the worker ran the job: the real amk loaded its source
    (boot,) = pool.boot_seconds  # its start (imports, warm-up), known from its first reply
    assert 0 < boot < 300


def test_submitted_jobs_finish_each_on_its_own(tmp_path, monkeypatch):
    """submit returns at once; a quick job's reply does not wait for a slow one (the tuner times the first
    candidates while the workers compile the next)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(2)
    try:
        slow, quick = pool.submit([("import time\ntime.sleep(10)\n", "slow", []), (ran("x1"), "quick", [])])
        done, _ = wait([slow, quick], timeout=60, return_when=FIRST_COMPLETED)
        assert done == {quick} and "ran in a worker" in quick.result()
        assert not slow.done()
    finally:
        pool.close()


def test_the_pool_is_producing_once_a_worker_is_ready(tmp_path, monkeypatch):
    """Until a worker is ready the workers are starting, and the tuner compiles its candidates itself rather than
    wait for them; a pool that gave up compiles nothing, which nobody need wait for either; a pool started again
    after close() is starting again."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(1)
    try:
        assert not pool.producing()
        (job,) = pool.submit([(ran("x1"), "quick", [])])
        job.result(timeout=120)
        assert pool.producing()
    finally:
        pool.close()
    try:
        pool.start()
        assert not pool.producing()
    finally:
        pool.close()
    broken = CompileWorkers(1)
    broken.broken = "a compile worker stopped"
    assert broken.producing()


def test_no_job_leaves_the_queue_before_a_worker_is_ready(tmp_path, monkeypatch):
    """A starting worker (importing torch and triton: seconds) takes no job: its caller can still take it back and
    compile it itself (the tuner does, for the process's first kernel); 15 workers used to take the first 15 jobs
    at once and hold them until they had started (7 s on the H200 host). Closing the pool meanwhile stops the
    starting workers at once, without a warning."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(2)
    try:
        first, second = pool.submit([(ran("x1"), "first", []), (ran("x2"), "second", [])])
        assert not pool.producing()
        assert first.cancel() and not second.running()
        assert "ran in a worker" in second.result(timeout=120)
        assert pool.producing() and len(pool.boot_seconds) >= 1
    finally:
        pool.close()
    starting = CompileWorkers(2)
    starting.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        started = time.perf_counter()
        starting.close()
    assert starting.workers == [] and starting.broken is None
    assert time.perf_counter() - started < 1.0


def test_a_job_submitted_again_while_in_flight_shares_its_compile(tmp_path, monkeypatch):
    """A build hands its fused kernel's first round to the workers ahead of tuning it (amk.build), then submits the
    same jobs when it tunes: one compile each. The same source under other Triton settings is another job."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(1)
    try:
        job = ("import time\ntime.sleep(1)\n" + ran("slow"), "slow", [])
        first, again = pool.submit([job, job])
        assert again is first
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
        (other,) = pool.submit([job])
        assert other is not first
        assert "ran in a worker" in first.result(timeout=60) and "ran in a worker" in other.result(timeout=60)
        for _ in range(100):  # a landed job leaves the table (its callback may run just after result() returns)
            if not pool.in_flight:
                break
            time.sleep(0.05)
        assert not pool.in_flight
    finally:
        pool.close()


def test_jobs_waited_for_go_before_jobs_compiled_ahead(tmp_path, monkeypatch):
    """A build hands the fused kernels' first round to the workers ahead, then tunes the vendor program: that
    program's jobs, which its tuning waits for, are compiled first; an ahead job submitted again by the tuning that
    needs it moves up with them."""
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(1)
    finished = []
    try:
        (busy,) = pool.submit([("import time\ntime.sleep(1)\n" + ran("busy"), "busy", [])])
        for _ in range(200):  # the one worker has taken it: what follows queues behind it
            if busy.running():
                break
            time.sleep(0.05)
        assert busy.running()
        jobs = {name: (ran(name), name, []) for name in ("ahead_1", "ahead_2", "needed")}
        futures = dict(zip(["ahead_1", "ahead_2"], pool.submit([jobs["ahead_1"], jobs["ahead_2"]], ahead=True)))
        (futures["needed"],) = pool.submit([jobs["needed"]])
        (promoted,) = pool.submit([jobs["ahead_2"]])
        assert promoted is futures["ahead_2"]
        for name, future in futures.items():
            future.add_done_callback(lambda _, name=name: finished.append(name))
        for future in futures.values():
            assert "ran in a worker" in future.result(timeout=60)
    finally:
        pool.close()
    assert finished == ["needed", "ahead_2", "ahead_1"]


def test_an_unexpected_failure_feeding_a_worker_answers_every_job(tmp_path, monkeypatch):
    """Whatever goes wrong while a job is handed to a worker, its callers get an answer (None: compile it in this
    process), the pool stops compiling with one warning, the jobs after it are answered too, and it closes."""
    import amk.compile_worker

    def failing_request(self, job, submission):
        raise LookupError("an unforeseen failure")

    monkeypatch.setattr(amk.compile_worker._Worker, "request", failing_request)
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(1)
    try:
        with pytest.warns(RuntimeWarning, match="feeding thread failed"):
            first, second = pool.submit([(ran("x1"), "first", []), (ran("x2"), "second", [])])
            assert first.result(timeout=60) is None and second.result(timeout=60) is None
        assert "LookupError" in pool.broken
        assert pool.submit([(ran("x3"), "third", [])])[0].result(timeout=60) is None
    finally:
        pool.close()
    assert pool.workers == [] and pool.feeders == []


def test_closing_the_pool_cancels_the_jobs_still_queued(tmp_path, monkeypatch):
    monkeypatch.setenv("AMK_CACHE_DIR", str(tmp_path))
    pool = CompileWorkers(1)
    busy, queued = pool.submit([("import time\ntime.sleep(1)\n" + ran("busy"), "busy", []), (ran("x1"), "queued", [])])
    for _ in range(2400):  # the worker takes it once it has started (triton imported)
        if busy.running():
            break
        time.sleep(0.05)
    assert busy.running()
    pool.close()
    assert "ran in a worker" in busy.result() and queued.cancelled()
    try:  # used again, a closed pool starts new workers
        assert "ran in a worker" in pool.submit([(ran("x2"), "after", [])])[0].result(timeout=60)
    finally:
        pool.close()


@pytest.fixture
def timed_builds(monkeypatch, tmp_path):
    """Builds as on a GPU, the tuning faked (each kernel gets its heuristic configuration): ``build(ops=...)`` runs
    one and returns the order in which the compile workers were started and the module was made."""
    import torch

    import amk.build
    import amk.oplist
    from amk.pipeline import heuristic_config

    events: list[str] = []
    monkeypatch.setattr(amk.build, "start_compile_workers", lambda: events.append("workers"))
    monkeypatch.setattr(amk.build, "autotune_chooser", lambda *args, **kwargs: heuristic_config)
    monkeypatch.setattr(amk.build.BuildRequest, "timed", property(lambda self: True))
    settings = amk.TunerConfig(target_cache_dir=tmp_path, vendor_gemm=False)

    def build(ops, shapes=((4096, 256), (256, 256), (256,))):
        def make_module():
            events.append("module")
            return amk.oplist.build_module(["matmul", "add_bias", "relu"], list(shapes), torch.float16)

        events.clear()
        amk.build.build(amk.build.BuildRequest(make_module, list(shapes), torch.float16, tuner_config=settings,
                                               ops=amk.oplist.normalize_ops(ops) if ops else None))
        return list(events)

    return build


def test_a_new_build_starts_its_compile_workers_before_it_makes_its_module(timed_builds):
    """They boot (seconds) while the IR is built and its passes run, not from the first kernel tuned."""
    assert timed_builds(["matmul", "add_bias", "relu"]) == ["workers", "module"]
    assert timed_builds(["matmul", "add_bias", "relu"]) == [], "a cache hit starts no workers"


def test_a_captured_subgraph_starts_them_once_its_module_misses_the_cache(timed_builds):
    """A subgraph amk.compile captured has no op list to look up: whether it is built before is known from its
    module's key, and a miss starts the workers before its passes run."""
    assert timed_builds(None) == ["module", "workers"]
    assert timed_builds(None) == ["module"], "a cache hit starts no workers"


def test_builds_that_may_tune_nothing_leave_them_to_their_first_kernel_tuned(timed_builds):
    """Operands a launch-bound kernel could move: all its kernels may be bound by their launch (the tuning here is
    faked, and starts none)."""
    small = [(4, 256), (256, 256), (256,)]  # 130 KB
    assert timed_builds(["matmul", "add_bias", "relu"], small) == ["module"]
    assert timed_builds(None, small) == ["module"]


class _Weight:
    """What :func:`amk.build.expect_tuned_builds` reads of a tensor, for a CUDA tensor on a machine without a GPU."""

    def __init__(self, nbytes: int, floating: bool = True, cuda: bool = True, sparse: bool = False):
        import torch

        self.size, self.floating, self.is_cuda, self.sparse = nbytes, floating, cuda, sparse
        self.layout = torch.sparse_coo if sparse else torch.strided

    def is_floating_point(self) -> bool:
        return self.floating

    @property
    def nbytes(self) -> int:
        if self.sparse:
            raise RuntimeError("nbytes is not defined for sparse tensors")  # as torch says
        return self.size


def test_weights_a_tuned_kernel_reads_start_them_before_the_first_build(monkeypatch, tmp_path):
    """On a GPU with a cache that holds no program yet, a floating-point CUDA tensor larger than a launch-bound kernel
    moves (LAUNCH_BOUND_BYTES) starts the workers; smaller, integer, sparse or CPU tensors do not, nor anything under
    Triton's interpreter or once the cache holds a program (a warm start may build nothing)."""
    import torch

    import amk.build
    from amk.tuner import LAUNCH_BOUND_BYTES

    events: list[str] = []
    monkeypatch.setattr(amk.build, "start_compile_workers", lambda: events.append("workers"))
    monkeypatch.setattr(amk.build, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    settings = amk.TunerConfig(target_cache_dir=tmp_path)
    large = LAUNCH_BOUND_BYTES + 2
    for tensors in ([_Weight(LAUNCH_BOUND_BYTES)], [_Weight(large, floating=False)], [_Weight(large, cuda=False)],
                    [_Weight(large, sparse=True)], []):
        amk.build.expect_tuned_builds(tensors, settings)
    assert events == []
    amk.build.expect_tuned_builds([_Weight(16), _Weight(large)], settings)
    assert events == ["workers"]
    (tmp_path / "entries" / ("a" * 64)).mkdir(parents=True)
    amk.build.expect_tuned_builds([_Weight(large)], settings)
    assert events == ["workers"], "a cache holding a program: the builds may all be hits"
    monkeypatch.setattr(amk.build, "interpreting", lambda: True)
    amk.build.expect_tuned_builds([_Weight(large)], amk.TunerConfig(target_cache_dir=tmp_path / "empty"))
    assert events == ["workers"]


def test_a_store_holds_no_program_until_an_entry_is_saved(tmp_path):
    from amk import cache

    store = cache.Store(tmp_path / "new")
    assert store.holds_no_program()
    (tmp_path / "new" / "entries" / "not-a-key").mkdir(parents=True)  # a stray folder is no program
    assert store.holds_no_program()
    (tmp_path / "new" / "entries" / ("b" * 64)).mkdir()
    assert not store.holds_no_program()


def test_amk_compile_hands_the_modules_weights_over_when_it_will_tune(monkeypatch):
    """amk.compile(module) lets the build service start the workers from the module's parameters and buffers, so that
    they boot while TorchDynamo traces the first call; not with autotune=False."""
    import torch

    import amk
    import amk.frontend.compile

    seen: list[list] = []
    monkeypatch.setattr(amk.frontend.compile, "expect_tuned_builds",
                        lambda tensors, tuner_config: seen.append(list(tensors)))
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    module.register_buffer("scale", torch.ones(8))
    amk.compile(module)
    assert [len(tensors) for tensors in seen] == [5]
    assert all(any(t is p for t in seen[0]) for p in [*module.parameters(), module.scale])
    amk.compile(module, autotune=False)
    amk.compile(lambda x: x + 1)
    assert len(seen) == 1


def test_the_first_call_hands_its_tensor_arguments_over_when_it_will_tune(monkeypatch):
    """A compiled module's or function's first call lets the build service start the workers from its tensor
    arguments (attention's q and k: no weight to start them at amk.compile), so that they boot while TorchDynamo
    traces it; once, not on later calls, and not with autotune=False."""
    import torch

    import amk
    import amk.frontend.compile

    seen: list[list] = []
    monkeypatch.setattr(amk.frontend.compile, "expect_tuned_builds",
                        lambda tensors, tuner_config: seen.append(list(tensors)))
    q, k = torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    scores = amk.compile(lambda q, k, scale=1.0: torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1))
    scores(q, k, scale=0.5)
    assert [[t is q for t in tensors] for tensors in seen] == [[True, False]]
    assert seen[0][1] is k
    scores(torch.randn(3, 4, 8), torch.randn(3, 4, 8))
    assert len(seen) == 1
    module = torch.nn.Linear(8, 8)
    amk.compile(module)(torch.randn(3, 8))
    assert len(seen) == 3, "the module's weights at amk.compile, then its first call's input"
    amk.compile(torch.nn.Linear(8, 8), autotune=False)(torch.randn(3, 8))
    assert len(seen) == 3


@pytest.mark.skipif(not GPU, reason="compiles and launches a kernel on a GPU")
@pytest.mark.parametrize("ptxas_changed", [False, True], ids=["same-ptxas", "ptxas-changed-after-first-compile"])
def test_a_kernel_a_worker_compiled_launches_here_without_compiling_anything(tmp_path, monkeypatch, ptxas_changed):
    """The worker leaves the kernel and its launcher (triton 3.6 builds one with the C compiler per signature) in
    the build's Triton cache: the tuning process's first launch finds both and writes nothing there. Also after the
    process pointed ``TRITON_PTXAS_PATH`` at another ptxas once Triton had read its version, as Inductor does (Triton
    keeps keying by the version it read first)."""
    import torch
    import triton
    from conftest import tile_level_kernel

    from amk.compile_worker import ptxas_version_in_cache_keys
    from amk.pipeline import heuristic_config, stage_and_emit
    from amk.runtime import load_source
    from amk.tuner import compile_job, kernel_example_arguments

    triton.runtime.driver.active.utils  # noqa: B018 - the driver's own module, built once per process, not here
    if ptxas_changed:
        keyed_by = ptxas_version_in_cache_keys()  # read now, as a process's first compile does
        other = Path(torch.__file__).parent / "bin" / "ptxas"  # Inductor's choice
        if not other.is_file() or subprocess.run([other, "--version"], capture_output=True, text=True).stdout == keyed_by:
            pytest.skip("torch ships no ptxas of another version than Triton's")
        monkeypatch.setenv("TRITON_PTXAS_PATH", str(other))
    # nn.Linear's weight, read transposed: the calls hand the kernel W^T (strides (1, K)), as the worker compiles it.
    kernel = tile_level_kernel([("matmul", {"transpose_b": True}), "add_bias", "relu"],
                               [(256, 128), (64, 128), (64,)], torch.float16)
    config = heuristic_config(kernel)
    source = stage_and_emit(kernel, config).source
    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    pool = CompileWorkers(1)
    try:
        assert pool.compile([compile_job(kernel, config, source)]) == [None]
    finally:
        pool.close()
    written = sorted(cache.rglob("*"))
    assert written, "the worker compiled into the build's Triton cache"
    launch = load_source(source, kernel.sym_name.data, tmp_path / "sources").launch
    arguments = kernel_example_arguments(kernel, config, torch.device("cuda"))
    launch(*arguments)
    arguments[1] = torch.randn(64, 128, device="cuda", dtype=torch.float16).t()  # as a program's call views W
    launch(*arguments)
    torch.cuda.synchronize()
    x, weight, bias, out = arguments[:4]
    torch.testing.assert_close(out, torch.relu(x @ weight + bias), atol=2e-2, rtol=2e-2)
    assert sorted(cache.rglob("*")) == written


# Run in a process of its own, which compiles for Hopper on this CPU (the test process runs kernels in Triton's
# interpreter): amk's choice of the interpreter is skipped, and Triton's active driver is a worker's, for sm_90.
_CAPTURE_COMPILE_FIND = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import amk.environment
    amk.environment._INITIALIZED.set()
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    sys.path.insert(0, sys.argv[1])
    from conftest import tile_level_kernel
    from amk.compile_worker import CompileWorkers, _OfflineDriver, _Warmup
    from amk.lowering.configs import KernelConfig
    from amk.pipeline import stage_and_emit
    from amk.runtime import load_source
    from amk.tuner import call_arguments, compile_job

    driver.set_active(_OfflineDriver(GPUTarget("cuda", 90, 32)))
    # A persistent launcher sizes its grid by the GPU's SMs: an H100's 132.
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_properties = lambda device: type("Properties", (), {"multi_processor_count": 132})
    cache = Path(sys.argv[2])
    kernel = tile_level_kernel([("matmul", {"transpose_b": True}), "add_bias", "relu"],
                               [(256, 128), (128, 128), (128,)], torch.float16)
    config = KernelConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, **json.loads(sys.argv[3]))
    source = stage_and_emit(kernel, config).source
    job = compile_job(kernel, config, source)
    copies = []  # the module copies a capture makes: none for a job captured before
    import amk.compile_worker
    copy = amk.compile_worker.import_source_file
    amk.compile_worker.import_source_file = lambda *args, **kwargs: copies.append(args) or copy(*args, **kwargs)
    again = compile_job(kernel, config, source)
    amk.compile_worker.import_source_file = copy
    module = load_source(source, kernel.sym_name.data)
    jit = next(value for attr, value in vars(module).items() if attr.endswith("_kernel"))
    result = {"launches": len(job[2]), "compiled_here": cache.exists(), "captured_again": bool(copies) or again != job,
              "left_alone": "_do_compile" not in vars(jit) and triton.knobs.runtime.jit_cache_hook is None}
    pool = CompileWorkers(1)
    try:
        result["replies"] = pool.compile([job])
        result["worker_imported_torch"] = pool.workers[0].imported_torch
    finally:
        pool.close()
    written = sorted(map(str, cache.rglob("*")))
    result["cubins"] = sum(name.endswith(".cubin") for name in written)
    for attr, value in list(vars(module).items()):
        if attr.endswith("_kernel"):
            setattr(module, attr, _Warmup(value))
    module.launch(*[torch.empty_strided(shape, strides, dtype=getattr(torch, dtype), device="meta")
                    for shape, dtype, strides in call_arguments(kernel, config)])
    result["new_files"] = sorted(set(map(str, cache.rglob("*"))) - set(written))
    print(json.dumps(result))
""")


@pytest.mark.parametrize("switches", [{}, {"PERSISTENT": 1, "TMA": 1}, {"PERSISTENT": 1, "TMA": 1, "GLUON": 1}],
                         ids=["pointers", "persistent-tma", "gluon"])
def test_a_worker_without_torch_compiles_what_this_processs_launch_then_finds(tmp_path, switches):
    """For Hopper (sm_90, with Triton's own ptxas), on any machine: the submitting process records what Triton's JIT
    would compile for the job's launch, compiling nothing and changing nothing outside its private copy of the
    module (the module its launches use, Triton's hooks), and the same job made again is not captured again; a worker, which never imports torch, compiles it; the
    submitting process's JIT then compiles that launch itself and finds the worker's binary: Triton's cache gains
    nothing."""
    import json

    if switches.get("GLUON"):
        pytest.importorskip("triton.experimental.gluon", reason="this triton has no Gluon")
    env = {name: value for name, value in os.environ.items() if not name.startswith("TRITON_")}
    env.update(TRITON_INTERPRET="0", TRITON_CACHE_DIR=str(tmp_path / "triton"), AMK_CACHE_DIR=str(tmp_path / "amk"))
    done = subprocess.run([sys.executable, "-c", _CAPTURE_COMPILE_FIND, str(Path(__file__).parent),
                           str(tmp_path / "triton"), json.dumps(switches)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["launches"] == 1 and not result["compiled_here"] and result["left_alone"], result
    assert not result["captured_again"], result
    assert result["replies"] == [None] and result["worker_imported_torch"] is False, result
    assert result["cubins"] >= 1 and result["new_files"] == [], result


def test_a_job_is_compiled_into_the_triton_folder_of_the_thread_that_submits_it(tmp_path, monkeypatch):
    """A build's Triton folder is its thread's, not the process's environment; a job it submits takes it along."""
    from amk import cache
    from amk.compile_worker import triton_environment

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert "TRITON_CACHE_DIR" not in triton_environment()
    with cache._triton_cache_dir(tmp_path):
        assert triton_environment()["TRITON_CACHE_DIR"] == str(tmp_path)
        assert "TRITON_CACHE_DIR" not in os.environ
