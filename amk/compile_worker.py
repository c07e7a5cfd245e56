"""Compile workers: processes that compile candidate kernels into Triton's on-disk cache while the tuning process
times others, so that timing a candidate only loads its binary.

A pool starts one ``python -m amk.compile_worker`` process, its fork server, which imports triton once (never
torch: its import took 3-5 s of every cold first call on the GPU hosts) and forks the workers, as Inductor's compile
pool forks its workers from one subprocess. Not a ``multiprocessing`` pool: a "spawn" or "forkserver" worker
re-imports the parent's ``__main__``, which re-runs a user script that has no ``if __name__ == "__main__":`` guard
and fails outright for a script read from standard input or given with ``python -c``; a ``python -m`` process has
this module as its main module, whatever started the parent (a script, a notebook, an embedded interpreter). Each
worker talks to the pool through a socket pair the pool made: JSON lines, requests one way, replies the other; a
worker's first line says it is ready, and it is handed no job before.

The tuning process does what needs torch and the GPU: it runs a job's launcher on meta tensors and records, for each
kernel launch, what Triton's JIT would compile (:func:`captured_specializations`: the specialization as Triton
serializes it, and the GPU's target); a worker compiles each with Triton's ``preload``
for that target, the binary landing where the tuning process's first launch finds it.

A worker that cannot start or dies leaves the candidates to be compiled in the tuning process when they are timed,
with one warning per process; it never fails a build.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import fcntl
import itertools
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

from amk.sources import emitted_module_name, import_source_file, write_source

log = logging.getLogger("amk")

# One compile job: the emitted source, the kernel's name, and each of its launches' specialization as Triton
# serializes it (:func:`captured_specializations`).
Job = tuple[str, str, list[str]]


def captured_specializations(source: str, name: str,
                              arguments: Sequence[tuple[Sequence[int], str, Sequence[int]]]) -> list[str]:
    """What Triton's JIT would compile for each kernel launch of emitted ``source`` (kernel ``name``), called on
    arguments of ``arguments``' shapes, torch dtype names and strides: each launch's specialization, serialized as
    Triton serializes it for ``JITFunction.preload`` (:func:`compile_specializations`, in a worker).

    The module's ``launch`` runs on meta tensors of those shapes and strides, in a private copy of the module whose
    kernels are called through Triton's ``warmup``: Triton specializes on the tensors' dtypes and on whether their
    addresses are 16-byte aligned (a meta tensor's, 0, is, as the timing process's fresh tensors are), and on the
    integers the launcher passes, so the specializations are exactly what the timing process and a program's calls
    look up. Each copied kernel's compile step (``JITFunction._do_compile``, the same in triton 3.6 and 3.9) is
    replaced, on that kernel alone, by one that records its arguments and compiles nothing: nothing global changes,
    and other threads' launches compile as ever."""
    import torch
    from triton.runtime.jit import JITFunction

    from amk.runtime import load_source

    path = Path(load_source(source, name).__file__)  # written to the build's sources folder, as timing will load it
    # What Triton compiles depends on its settings and the GPU too.
    key = (source, name, json.dumps(arguments), compile_target(),
           sorted((setting, value) for setting, value in os.environ.items() if setting.startswith("TRITON_")))
    known = _CAPTURED.get(json.dumps(key))
    if known is not None:
        return known
    module = import_source_file(emitted_module_name(source, name), path, source)
    captured: list[str] = []
    for attr, value in list(vars(module).items()):
        if isinstance(value, JITFunction):
            value._do_compile = _recorder(value, captured)
            setattr(module, attr, _Warmup(value))
    module.launch(*[torch.empty_strided(tuple(shape), tuple(strides), dtype=getattr(torch, dtype), device="meta")
                    for shape, dtype, strides in arguments])
    if len(_CAPTURED) >= CAPTURED_KEPT:
        _CAPTURED.clear()
    specializations = _CAPTURED[json.dumps(key)] = list(dict.fromkeys(captured))  # a relaunched kernel compiles once
    return specializations


# Specializations captured, by what they depend on (:func:`captured_specializations`): a build hands a kernel's first
# round to the workers ahead of its tuning, then submits the same jobs when it tunes it (10-20 ms a capture). At most
# CAPTURED_KEPT are kept.
_CAPTURED: dict[str, list[str]] = {}
CAPTURED_KEPT = 256


def _recorder(jit, captured: list[str]):
    """A ``_do_compile`` for ``jit`` that appends the specialization it was asked to compile, serialized by Triton's
    ``serialize_specialization_data`` (triton 3.9's also names the target), to ``captured`` and compiles nothing
    (the JIT's ``run`` then returns without launching)."""
    import inspect

    from triton.runtime.jit import get_full_name, serialize_specialization_data

    names_target = "target" in inspect.signature(serialize_specialization_data).parameters

    def record(key, signature, device, constexprs, options, attrs, warmup):
        target = {"target": jit.device_caches[device][2]} if names_target else {}
        captured.append(serialize_specialization_data(get_full_name(jit.fn), signature, constexprs, attrs, options,
                                                      key, **target))

    return record


class _Warmup:
    """A kernel's ``[grid]`` that specializes and compiles (``JITFunction.warmup``) instead of launching."""

    def __init__(self, jit):
        self.jit = jit

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.jit.warmup(*args, grid=grid, **kwargs)


def compile_target() -> list:
    """The GPU of Triton's active driver in this process, as Triton compiles for it: backend, architecture, warp
    size."""
    from triton.runtime import driver

    target = driver.active.get_current_target()
    return [target.backend, target.arch, target.warp_size]


class _OfflineDriver:
    """Triton's active driver in a worker: the tuning process's GPU as the target, device 0, the null stream, and no
    CUDA call (nor torch, which Triton's own CUDA driver imports in triton 3.6)."""

    def __init__(self, target):
        self.target = target
        self._utils = None

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0

    @property
    def utils(self):
        """The CUDA utilities module (triton 3.9's launcher reads its generic launch from it), built at first use."""
        if self._utils is None:
            from triton.backends.nvidia.driver import CudaUtils

            self._utils = CudaUtils()
        return self._utils


def _without_torch(name: str, *args, **kwargs):
    """``__import__`` for an emitted module in a worker: its ``import torch`` (its launcher's, never run here) gets a
    placeholder."""
    if name == "torch" or name.startswith("torch."):
        return _TORCH_PLACEHOLDER
    return builtins.__import__(name, *args, **kwargs)


_TORCH_PLACEHOLDER = types.ModuleType("torch", "not imported in a compile worker")


def compile_specializations(source: str, name: str, specializations: Sequence[str], sources: str,
                            target: Sequence | None, launchers: bool = False) -> None:
    """In a worker: compile each of ``specializations`` (:func:`captured_specializations`) of emitted ``source``
    (kernel ``name``, its file under the folder ``sources``, as the tuning process wrote it) for ``target``, into
    Triton's cache, with Triton's ``JITFunction.preload``; with ``launchers``, each kernel's launcher too (triton 3.6
    builds one with the C compiler per signature, 0.7-1 s of a cold build's tuning process on the H200 otherwise).
    The module is imported without torch (:func:`_without_torch`) under the name and file the tuning process gives
    it: Triton keys a binary by its function's source and module."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction, get_full_name

    module_name = emitted_module_name(source, name)
    path = Path(sources) / f"{module_name}.py"
    write_source(path, source)
    module = import_source_file(module_name, path, source, builtins={**vars(builtins), "__import__": _without_torch})
    if not specializations:
        return
    driver.set_active(_OfflineDriver(GPUTarget(*target)))
    kernels = {get_full_name(jit.fn): jit for jit in vars(module).values() if isinstance(jit, JITFunction)}
    for data in specializations:
        kernel = kernels[json.loads(data)["name"]].preload(data)
        if launchers and target[0] == "cuda":
            from triton.backends.nvidia.driver import CudaLauncher

            CudaLauncher(kernel.src, kernel.metadata)  # as a first launch makes it (CompiledKernel._init_handles)


def triton_environment() -> dict[str, str]:
    """This process's ``TRITON_*`` variables now, and the ptxas version it keys its binaries by. A job is compiled
    under those of the process that submitted it, not those the worker was started with (Inductor's compile pool does
    the same): they choose Triton's cache folder (a build's own) and settings read at each compile, and a binary
    compiled under other ones would be compiled again by the tuning process."""
    from amk.triton_cache import current_folder  # (it imports Triton, which this module imports where it runs)

    # Names first, values read one by one: another thread may change the environment meanwhile.
    environment = {name: value for name in list(os.environ)
                   if name.startswith("TRITON_") and (value := os.environ.get(name)) is not None}
    folder = current_folder()  # the folder of the build submitting the job (a worker runs one job at a time)
    if folder is not None:
        environment["TRITON_CACHE_DIR"] = str(folder)
    version = ptxas_version_in_cache_keys()
    if version is not None:
        environment.setdefault("TRITON_MOCK_PTX_VERSION", version)
    return environment


def ptxas_version_in_cache_keys() -> str | None:
    """The ptxas version this process's Triton puts into the cache keys of the kernels it compiles for the current
    GPU (None without a CUDA GPU).

    Triton reads that version once per process, at its first compile, and keeps it: a process that has changed
    ``TRITON_PTXAS_PATH`` since keys its kernels by the old version while it compiles them with the new ptxas. Inductor
    does that (it points the variable at torch's own ptxas); after a torch.compile'd model had run, every candidate
    the workers compiled, keyed by the new version, was compiled again by the tuning process (on the H200, 34.6 s of
    a model's first call). Given as ``TRITON_MOCK_PTX_VERSION``, Triton's own setting for the version in its keys,
    the submitter's version makes a worker key its binaries as the submitter would; they are still compiled by the
    ptxas that ``TRITON_PTXAS_PATH`` names, as in the submitter.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    from triton.backends.nvidia.compiler import get_ptxas_version
    from triton.runtime import driver

    target = driver.active.get_current_target()
    return get_ptxas_version(target.arch) if target.backend == "cuda" else None


def serve(requests, replies) -> None:
    """The worker's loop: one JSON request per line (``{"job": [source, name, specializations], "environment":
    {...}, "sources": folder, "target": [...], "launchers": bool}``: the submitter's :func:`triton_environment`, its
    sources folder, :func:`compile_target` and whether it has a GPU to build launchers for), one JSON reply per line
    (``{"error": null}`` or the error's text, the job's ``seconds``, and whether torch has been imported)."""
    for line in requests:
        request = json.loads(line)
        environment = request.get("environment", {})
        for name in [name for name in os.environ if name.startswith("TRITON_") and name not in environment]:
            del os.environ[name]
        os.environ.update(environment)
        started = time.perf_counter()
        try:
            compile_specializations(*request["job"], request["sources"], request.get("target"),
                                    request.get("launchers", False))
            error = None
        except Exception as failure:  # reported to the tuning process, where the candidate fails when timed
            error = f"{type(failure).__name__}: {failure}"
        replies.write(json.dumps({"error": error, "seconds": time.perf_counter() - started,
                                  "torch": "torch" in sys.modules}) + "\n")
        replies.flush()


class WorkerDied(RuntimeError):
    pass


class _ForkServer:
    """The one ``python -m amk.compile_worker`` process a pool starts: it imports triton once, never torch, then forks
    a worker per channel (as Inductor's compile pool forks its workers from one subprocess). Fifteen processes
    importing torch at once each took 3-4.5 s on the H200's 16-core host, the server's single import of torch and
    triton 3.0-5.1 s of every cold first call; triton's alone takes a fraction of a second, and a fork milliseconds.
    Nothing in it or its workers calls CUDA (their driver is :class:`_OfflineDriver`). It exits once every worker
    has, and its process group (the workers in it) is killed if it does not within ``EXIT_WAIT`` seconds of the
    pool's close."""

    EXIT_WAIT = 10.0

    def __init__(self, channels: Sequence[socket.socket]):
        # The workers' too: what they print, and the last words of one that dies. Append-only, since the server and
        # every worker share its file offset, which last_words() moves.
        self.stderr = tempfile.TemporaryFile()
        descriptor = self.stderr.fileno()
        fcntl.fcntl(descriptor, fcntl.F_SETFL, fcntl.fcntl(descriptor, fcntl.F_GETFL) | os.O_APPEND)
        # The workers find amk (and whatever the parent could import) where the parent found it: the parent's path,
        # in its order, and not the working directory first, as ``-m`` would put it (PYTHONSAFEPATH, Python 3.11+): a
        # source checkout there holds ``amk/`` without the folders an installed amk maps into it (amk.lowering).
        path = os.pathsep.join(os.path.abspath(p) if p else os.getcwd() for p in sys.path)
        env = dict(os.environ, PYTHONPATH=path, PYTHONSAFEPATH="1")
        self.started = time.time()
        descriptors = [channel.fileno() for channel in channels]
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "amk.compile_worker", *map(str, descriptors)],
                                            stdin=subprocess.DEVNULL, stdout=self.stderr, stderr=self.stderr, env=env,
                                            pass_fds=descriptors, start_new_session=True)
        except OSError:
            self.stderr.close()
            raise

    def last_words(self) -> str:
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def close(self, kill: bool = False) -> None:
        """Wait for the server to exit (its workers have been told to stop), or kill it and its workers now."""
        try:
            if not kill:
                self.process.wait(timeout=self.EXIT_WAIT)
        except subprocess.TimeoutExpired:
            kill = True
        if kill:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.stderr.close()


class _Worker:
    """One forked worker of a :class:`_ForkServer`, reached through its end of a socket pair: JSON lines each way."""

    def __init__(self, channel: socket.socket, server: _ForkServer):
        self.channel = channel
        self.server = server
        self.requests = channel.makefile("w")
        self.replies = channel.makefile("r")
        self.boot_seconds: float | None = None  # from the server's start to its first line, once ready
        self.import_seconds: float | None = None  # from the server's start to its imports done (triton, amk's leaves)
        self.imported_torch: bool | None = None  # whether it had imported torch, ready or after a job (never should)
        self.stopping = False  # stopped by the pool's close() while it was starting: its end is no failure

    def wait_ready(self) -> float:
        """Wait for the worker's first line, sent once it is forked and ready; the seconds from the start to then."""
        line = self._reply()
        try:
            ready = json.loads(line)
            self.boot_seconds = float(ready["ready"]) - self.server.started
            self.import_seconds = float(ready["imported"]) - self.server.started
            self.imported_torch = bool(ready["torch"])
        except (ValueError, KeyError, TypeError) as error:  # something else wrote to the reply stream
            raise WorkerDied(f"unreadable first line {line[:200]!r} ({error})") from None
        return self.boot_seconds

    def _reply(self, request: str | None = None) -> str:
        """The worker's next line (after sending ``request``, when given)."""
        try:
            if request is not None:
                self.requests.write(request)
                self.requests.flush()
            line = self.replies.readline()
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise WorkerDied(self.server.last_words() or str(error)) from error
        if not line:
            raise WorkerDied(self.server.last_words() or "it closed its channel")
        return line

    def request(self, job: Job, submission: dict) -> tuple[str | None, float]:
        """Compile ``job`` as ``submission`` says (:meth:`CompileWorkers.submit`: the ``TRITON_*`` variables, the
        sources folder, the target); the error's text if it did not compile, and the seconds it took."""
        request = {"job": job, **submission}
        line = self._reply(json.dumps(request) + "\n")
        try:
            reply = json.loads(line)
            self.imported_torch = self.imported_torch or bool(reply["torch"])
            return reply["error"], float(reply["seconds"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # something else wrote to the reply stream
            raise WorkerDied(f"unreadable reply {line[:200]!r} ({error})") from None

    def abandon(self) -> None:
        """Stop waiting for a worker still starting: its feeder's read ends now."""
        self.stopping = True
        with contextlib.suppress(OSError):
            self.channel.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Tell the worker to stop (it reads the end of its requests once its current job is done)."""
        with contextlib.suppress(OSError):
            self.channel.shutdown(socket.SHUT_WR)  # also where a fork of this process holds a copy of the channel
        for stream in (self.requests, self.replies):
            with contextlib.suppress(OSError):
                stream.close()
        self.channel.close()


class CompileWorkers:
    """A pool of compile workers, started on first use and shared by every kernel tuned in this process.

    :meth:`submit` hands jobs to the workers and returns at once, a future per job (its error text, None where it
    compiled), so that the tuning process times the first candidates while the workers compile the next;
    :meth:`compile` waits for them all. Builds in several threads share the pool. Each worker has a thread that feeds
    it the next job once it is ready: jobs someone waits for before jobs compiled ahead of their tuning (``ahead``),
    each kind in the order submitted. Once a worker has failed, the pool compiles nothing more (each candidate then
    compiles in the tuning process when it is timed) and says so once.
    """

    def __init__(self, count: int):
        self.count = count
        self.workers: list[_Worker] = []
        self.server: _ForkServer | None = None
        self.owner: int | None = None  # the process that started the workers
        self.feeders: list[threading.Thread] = []
        # (rank, sequence, (future, job, cache folder, environment)); rank 0: a job someone waits for, 1: ahead of its
        # tuning; FEEDER_STOP ranks first. The sequence keeps each rank in submission order.
        self.pending: queue.PriorityQueue = queue.PriorityQueue()
        self.sequence = itertools.count()
        self.broken: str | None = None
        self.exit_registered = False
        self.lock = threading.Lock()
        self.job_seconds: list[float] = []  # each job's compile time in its worker, in the order they finished
        self.boot_seconds: list[float] = []  # each worker's start (the server importing triton), once it is ready
        # Jobs handed to the workers and not finished, by what they compile: a job submitted again meanwhile (a build
        # that compiles its candidates ahead, then tunes them) shares the first one's compile.
        self.in_flight: dict[str, Future] = {}
        # Its own lock: a job's future lands (cancelled, by close() while it holds ``lock``, or finished) in whatever
        # thread ends it.
        self.in_flight_lock = threading.Lock()

    def start(self) -> None:
        """Start the workers (they import torch and triton while the caller goes on)."""
        if self.forked():  # checked before the lock, which a thread of the owner may have held as it forked
            return
        with self.lock:
            if self.workers or self.broken is not None or self.count < 1:
                return
            pairs: list[tuple[socket.socket, socket.socket]] = []
            try:
                pairs += [socket.socketpair() for _ in range(self.count)]
                self.server = _ForkServer([theirs for _, theirs in pairs])
            except OSError as error:
                for ours, _ in pairs:
                    ours.close()
                self._give_up(f"could not start {sys.executable!r} -m amk.compile_worker: {error}")
                return
            finally:
                for _, theirs in pairs:
                    theirs.close()  # the server's now
            self.owner = os.getpid()
            log.debug("starting %d compile workers", self.count)
            self.workers = [_Worker(ours, self.server) for ours, _ in pairs]
            self.feeders = [threading.Thread(target=self._feed, args=(worker,), name=f"amk-compile_{index}",
                                             daemon=True)
                            for index, worker in enumerate(self.workers)]
            for feeder in self.feeders:
                feeder.start()
            if not self.exit_registered:
                atexit.register(self.close)
                self.exit_registered = True

    def submit(self, jobs: Sequence[Job], ahead: bool = False) -> list[Future]:
        """Compile ``jobs`` in the workers, in order as workers come free, after the jobs already submitted that are
        not ``ahead`` (compiled before their tuning needs them, which waits for nothing yet): a future per job, whose
        result is the job's error text (None where it compiled, or where no worker could take it). A job the same as
        one still in flight (same source, specializations, sources folder and ``TRITON_*`` settings) gets that job's
        future,
        moved up among the jobs someone waits for if it was submitted ``ahead``; one caller's ``cancel`` then cancels
        it for every caller. (A job: the source, the kernel's name, its launches' specializations.)"""
        self.start()
        if self.forked():
            return [_done(None) for _ in jobs]
        submission = _submission(jobs)
        rank = 1 if ahead else 0
        futures, started = [], []
        with self.lock:
            if not self.workers or self.broken is not None:
                return [_done(None) for _ in jobs]
            for job in jobs:
                key = json.dumps([job, submission["sources"], sorted(submission["environment"].items())])
                with self.in_flight_lock:
                    future = self.in_flight.get(key)
                    if future is None or future.cancelled():
                        future = self.in_flight[key] = Future()
                        started.append((key, future))
                    elif ahead or future.running():
                        futures.append(future)
                        continue
                    # New, or waited for now after it was submitted ahead: queued at this rank (a second entry of a
                    # job is skipped by whichever feeder finds it taken).
                    self.pending.put((rank, next(self.sequence), (future, job, submission)))
                futures.append(future)
        for key, future in started:  # outside the lock: a future already done calls back in this thread
            future.add_done_callback(lambda done, key=key: self._landed(key, done))
        return futures

    def accepting(self) -> bool:
        """Whether jobs submitted now may reach a worker: the pool has workers (ready or starting), has not given up,
        and this is the process that started them. Otherwise preparing a job is wasted work."""
        return self.count >= 1 and self.broken is None and not self.forked()

    def forked(self) -> bool:
        """Whether this is a fork of the process that started the workers (a user's ``os.fork()``): the workers, their
        channels and feeding threads are that process's, and this copy of the pool neither uses nor closes them."""
        return self.owner is not None and self.owner != os.getpid()

    def producing(self) -> bool:
        """Whether a worker is ready to compile, or the pool gave up (it compiles nothing then, so nobody waits for
        it): until then the workers are starting (the server importing triton), and no job has
        left the queue, so a caller can take its own back (``Future.cancel``) and compile it itself."""
        return any(worker.boot_seconds is not None for worker in self.workers) or self.broken is not None

    def _landed(self, key: str, future: Future) -> None:
        with self.in_flight_lock:
            if self.in_flight.get(key) is future:
                del self.in_flight[key]

    def compile(self, jobs: Sequence[Job]) -> list[str | None]:
        return [future.result() for future in self.submit(jobs)]

    def _feed(self, worker: _Worker) -> None:
        """A feeding thread: ``worker``'s next jobs, until :meth:`close`. It takes none before the worker is ready:
        meanwhile they stay queued, where their callers may take them back."""
        try:
            self.boot_seconds.append(worker.wait_ready())
            log.debug("a compile worker is ready, %.2f s after the pool started (its imports %.2f s)",
                      worker.boot_seconds, worker.import_seconds)
        except BaseException as failure:  # the jobs are still answered below (the pool compiles nothing then)
            if worker.stopping:  # close() stopped it while it was starting
                return
            self._give_up(f"a compile worker did not start ({type(failure).__name__}: {failure})")
        while True:
            rank, _, entry = self.pending.get()
            if rank == FEEDER_STOP:
                return
            future, job, submission = entry
            with self.in_flight_lock:  # the job's other entry may be in another feeder's hands
                if future.running() or future.done() or not future.set_running_or_notify_cancel():
                    continue
            if self.broken is not None:
                future.set_result(None)
                continue
            error = None
            try:
                error, seconds = worker.request(job, submission)
                self.job_seconds.append(seconds)
                log.debug("a compile worker compiled %s in %.2f s%s", job[1], seconds, "" if rank else ", waited for")
            except WorkerDied as died:
                if not worker.stopping:  # abandoned by close() as it became ready: no failure
                    self._give_up(f"a compile worker stopped ({died})")
            except BaseException as failure:  # this thread goes on serving, and the job's callers get their answer
                self._give_up(f"a compile worker's feeding thread failed ({type(failure).__name__}: {failure})")
            finally:
                future.set_result(error)

    def _give_up(self, reason: str) -> None:
        with self.in_flight_lock:  # feeders of other workers may give up at the same time: one warning
            if self.broken is not None:
                return
            self.broken = reason
        with contextlib.suppress(Warning):  # warnings turned into errors must not stop a feeding thread
            warnings.warn(f"amk: {reason}; candidates are compiled in this process from now on (slower tuning). "
                          "Set AMK_COMPILE_WORKERS=0 to compile in this process from the start.", RuntimeWarning,
                          stacklevel=3)

    def close(self) -> None:
        """Stop the workers once their current jobs are done (those still starting at once); the jobs still queued
        are cancelled."""
        if self.forked():  # the exit of a fork of the owner (its exit handlers call this) leaves the workers alone
            return
        with self.lock:
            starting = [worker for worker in self.workers if worker.boot_seconds is None]
            try:
                for _ in self.feeders:
                    self.pending.put((FEEDER_STOP, next(self.sequence), None))
                for worker in starting:  # its feeder waits for it to be ready: no job of its to finish
                    worker.abandon()
                for feeder in self.feeders:
                    feeder.join()
            finally:
                # Also after an interrupted join: a stop entry left queued would stop a feeder of the next start.
                while not self.pending.empty():
                    rank, _, entry = self.pending.get()
                    if rank != FEEDER_STOP:
                        entry[0].cancel()
                self.feeders = []
                for worker in self.workers:
                    worker.close()
                if self.server is not None:
                    self.server.close(kill=bool(starting))  # a worker still starting is not waited for
                    self.server = None
                self.workers = []


def _submission(jobs: Sequence[Job]) -> dict:
    """What the workers need beside the jobs submitted now, read in the submitting thread (the feeding threads do not
    see its context, and the build's Triton cache folder may have changed by the time a worker comes free): the
    ``TRITON_*`` variables, the sources folder, and, where a job has kernels to compile, the target and whether this
    process has a GPU to build their launchers for."""
    import torch

    from amk.runtime import source_directory

    submission = {"environment": triton_environment(), "sources": str(source_directory())}
    if any(specializations for _, _, specializations in jobs):
        submission.update(target=compile_target(), launchers=torch.cuda.is_available())
    return submission


# The rank of the entry that stops a feeding thread: before any job.
FEEDER_STOP = -1


def _done(result) -> Future:
    future: Future = Future()
    future.set_result(result)
    return future


_POOLS: dict[int, CompileWorkers] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(count: int) -> CompileWorkers:
    """The process's pool of ``count`` workers: started once, kept for every kernel tuned later (a worker's start,
    importing triton, costs a second). Another count (``AMK_COMPILE_WORKERS`` changed) gets a pool of its
    own; the pools in use go on."""
    with _POOLS_LOCK:
        if count not in _POOLS:
            _POOLS[count] = CompileWorkers(count)
        return _POOLS[count]


def main(descriptors: Sequence[int]) -> None:
    """The fork server (:class:`_ForkServer`): with this module's imports done, and Triton's, fork a worker per
    channel (a socket's file descriptor), then wait for them all."""
    import triton  # noqa: F401 - imported once here rather than in every worker

    with contextlib.suppress(ImportError):  # Gluon's kernels import it (triton 3.5 on)
        import triton.experimental.gluon  # noqa: F401
    imported = time.time()
    workers = []
    for index, descriptor in enumerate(descriptors):
        with warnings.catch_warnings():
            # Python 3.12 warns of a fork in a process with threads (none of this server's own; a library's would
            # hold no lock a worker takes).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            for later in descriptors[index + 1:]:  # the earlier workers' channels the server has closed already
                os.close(later)
            os.set_inheritable(descriptor, False)  # not kept open by the compilers it runs should it die
            status = 1
            try:
                serve_channel(socket.socket(fileno=descriptor), imported)
                status = 0
            except BaseException:  # its end is its feeder's failure, with the last line printed here as the reason
                traceback.print_exc()
            finally:
                os._exit(status)  # never back into the server's loop, nor its exit handlers
        workers.append(pid)
        os.close(descriptor)
    for pid in workers:
        os.waitpid(pid, 0)


def serve_channel(channel: socket.socket, imported: float) -> None:
    """A forked worker: say it is ready (when the imports were done, whether torch is among them: it should not be),
    then serve requests until the pool closes the channel."""
    replies, requests = channel.makefile("w"), channel.makefile("r")
    # Ready: the pool hands this worker jobs from now on (until then they wait in its queue, where the tuning process
    # may still take them back and compile them itself).
    replies.write(json.dumps({"ready": time.time(), "imported": imported, "torch": "torch" in sys.modules}) + "\n")
    replies.flush()
    serve(requests, replies)


if __name__ == "__main__":
    main([int(argument) for argument in sys.argv[1:]])
