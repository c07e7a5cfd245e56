"""The persistent compilation cache: tuned, emitted kernels kept on disk so that a warm start runs no pass.

Where: ``TunerConfig.target_cache_dir`` if given, else ``AMK_CACHE_DIR``, else the platform's user cache directory
(``~/.cache/amk``). Layout under that root (see docs/cache.md)::

    entries/<key>/entry.json       metadata, chosen configs, tuning log, verification report, launch plan,
                                   and the sha256 of every other file (and of itself, in "checksum")
    entries/<key>/kernel_<k>.py    the emitted Triton source of each kernel
    entries/<key>/ir.json          the IR text at every level
    entries/<key>/triton/          Triton's own cache (compiled binaries) when running on a GPU
    configs/<key>.json             the chosen configs and tuning log alone (what ``amk cache export`` moves)
    timings/<timing key>.json      every timed trial of one kernel on one device and shape bucket, with the kernel's
                                   family (strategy, element size, dot precision, device) for ``Store.winners``
    locks/<name>.lock              file locks serializing writers (and readers) of one key
    sources/                       emitted sources imported by the runtime (Triton reads kernels from files);
                                   every file amk writes goes under the root, these included

``<key>`` is the sha256 of the canonical ``tensor_op`` IR, the shapes, the dtype, the device, the triton / torch /
amk versions (amk's by release and by a hash of its sources) and the tuning settings that affect the choice.
Writes go to a temporary file in the same directory and are moved into place with ``os.replace``, under a file
lock; temporary files (``.<name>.<random>.tmp``) older than ``STALE_TEMPORARY_S`` (10 minutes: a write takes
milliseconds, so they are what a writer killed mid-write left) are removed from a folder on a store's first write to
it and from configs/ and timings/ on ``clear``. An entry that fails to load (bad checksum, truncated JSON, missing
file) is logged on the ``amk.cache`` logger and rebuilt. A cache directory that cannot be written degrades to an
in-memory cache with one warning.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from amk.environment import float32_matmul_precision, initialize, interpreting

# The cache directory's rules live with the environment; the CLI and the tests name them here.
from amk.environment import resolve_root as resolve_root
from amk.errors import CacheError
from amk.sources import write_atomically

log = logging.getLogger("amk.cache")

FORMAT = 1
EXPORT_FORMAT = "amk-cache-export"
LOCK_TIMEOUT_S = 60.0
STALE_TEMPORARY_S = 600.0  # a temporary file this old belongs to no live writer (see Store.remove_stale_temporaries)
_KEY = re.compile(r"[0-9a-f]{64}")
_KEY_FILE = re.compile(r"[0-9a-f]{64}\.json")
# What amk writes in each folder that `clear` removes, besides the temporary files of a write (``.<name>.<random>.tmp``):
# a folder holding anything else is not amk's alone (a --cache-dir naming another directory), and clear refuses it.
_WRITTEN = {"entries": _KEY, "index": _KEY, "races": _KEY_FILE, "configs": _KEY_FILE, "timings": _KEY_FILE,
            "sources": re.compile(r"amk_generated_.+\.py|__pycache__")}  # runtime.load_source's modules
_TEMPORARY = re.compile(r"\..+\.tmp")
WINNERS_SCANNED = 256  # timings files Store.winners reads, the most recently written first
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ----------------------------------------------------------------------------------------------------------------------
# Keys
# ----------------------------------------------------------------------------------------------------------------------

def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def jsonable(value):
    """``value`` with torch dtypes and tuples turned into JSON types (for op parameters and shapes)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=8)
def _cuda_device(index: int) -> dict:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return {"name": torch.cuda.get_device_name(index), "capability": f"{major}.{minor}"}


def device_descriptor() -> dict:
    """The device kernels are built for: GPU name and compute capability, or the CPU interpreter."""
    import torch

    if torch.cuda.is_available() and not interpreting():
        return _cuda_device(torch.cuda.current_device())
    return {"name": "cpu-interpreter"}


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of amk's own Python sources: a changed compiler never reuses kernels of the old one."""
    digest = hashlib.sha256()
    files = {}
    for package in ("amk", "amk.dialects", "amk.lowering", "amk.passes"):
        spec = importlib.util.find_spec(package)
        for top in (spec.submodule_search_locations or []) if spec else []:
            for directory, subdirectories, names in os.walk(top):
                subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
                relative = os.path.relpath(directory, top)
                for name in names:
                    if name.endswith(".py"):
                        files[f"{package}/{relative}/{name}"] = os.path.join(directory, name)
    for name in sorted(files):
        try:
            with open(files[name], "rb") as stream:
                digest.update(name.encode() + b"\0" + stream.read() + b"\0")
        except OSError:
            continue
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    import torch

    import amk

    initialize()  # triton is imported below: the interpreter must be chosen first
    triton = importlib.import_module("triton")
    return {"amk": amk.__version__, "amk_source": source_fingerprint(), "torch": torch.__version__,
            "triton": triton.__version__}


def cache_key(ir_text: str, shapes, dtype, settings: dict, ops=None) -> tuple[str, dict]:
    """The entry key of a build and the metadata describing it."""
    meta = {"shapes": [list(s) for s in shapes], "dtype": dtype_name(dtype), "device": device_descriptor(),
            "versions": versions(), "settings": settings}
    key = _sha256(_canonical_json({"format": FORMAT, "ir": ir_text, **meta}))
    if ops is not None:
        meta["ops"] = jsonable([[name, params] for name, params in ops])
    return key, meta


def request_key(ops, shapes, dtype, settings: dict) -> str:
    """The key of a build request (op list, shapes, dtype, device, versions, settings). It determines the entry key
    (amk's sources are part of it, so the same request always gives the same IR); the ``index`` folder maps one to
    the other so that a warm start need not build and print the IR."""
    return _sha256(_canonical_json({"format": FORMAT, "ops": jsonable([[n, p] for n, p in ops]),
                                    "shapes": [list(s) for s in shapes], "dtype": dtype_name(dtype),
                                    "device": device_descriptor(), "versions": versions(), "settings": settings}))


def _index_record(request: str, key: str) -> str:
    """An index file's text: the entry key and a digest binding it to the request its file is named after, so that
    a file damaged, copied or renamed onto another request's name is not followed (a hit computing another chain).
    Not the entry's recorded request: op lists that mean the same computation (``factor: 2`` and ``2.0``) share an
    entry built for one of them."""
    return f"{key} {_sha256(f'{request} {key}'.encode())[:16]}"


def timing_key(kernel_text: str, shapes, size_hints: dict[str, int] | None = None, fp32_dot: str = "ieee") -> str:
    """The key of the timings of one tile-level kernel on this device and shape bucket (``size_hints``: the values
    its symbolic sizes were timed at), with its fp32 dots multiplied as ``fp32_dot`` says (the kernel's text is the
    same under every float32 matmul precision, its times are not)."""
    v = versions()
    sizes = {"size_hints": size_hints} if size_hints else {}
    # "operands": candidates are timed on operands laid out as a program's calls hand them over (nn.Linear's weight
    # as the view W^T); times recorded before, on contiguous operands only, timed another binary and are not reused.
    # "graph replays": kernels under the tuner's graph bound are replayed from a cold L2; times recorded before, from
    # a warm one, would rank below every new one.
    return _sha256(_canonical_json({"format": FORMAT, "kernel": kernel_text, "shapes": [list(s) for s in shapes],
                                    "device": device_descriptor(), "triton": v["triton"], "amk": v["amk"],
                                    "fp32_dot": fp32_dot, "operands": "as called", "graph replays": "cold L2",
                                    **sizes}))


def race_key(entry_key: str, configs: dict[str, dict]) -> str:
    """The key of the race of entry ``entry_key``'s program, with its kernels configured as ``configs`` say, against
    the PyTorch ops it replaces (a bucket of ``amk.compile``): the entry's key names the device and versions, but
    not the configurations, which another tuning of the same key may choose otherwise; PyTorch's float32 matmul
    precision decides what its ops compute in."""
    return _sha256(_canonical_json({"format": FORMAT, "race": entry_key, "configs": configs,
                                    "float32_matmul_precision": float32_matmul_precision()}))


# ----------------------------------------------------------------------------------------------------------------------
# Entries
# ----------------------------------------------------------------------------------------------------------------------

@dataclass
class Entry:
    """One cached build: what entry.json, ir.json and the kernel sources hold."""

    key: str
    meta: dict  # ops, shapes, dtype, device, versions, settings (and created, once written)
    configs: dict[str, dict]  # kernel name -> KernelConfig fields
    sources: dict[str, str]  # kernel name -> emitted Triton source
    plan: dict  # runtime.Program.plan()
    ir: dict[str, str]
    tuning_log: dict = field(default_factory=dict)
    verification: dict | None = None


class CorruptEntry(Exception):
    """Raised inside the cache when an entry on disk cannot be trusted."""


def _source_file(name: str) -> str:
    return f"kernel_{name}.py" if _NAME.fullmatch(name) else f"kernel_{_sha256(name.encode())[:16]}.py"


def _config_fields(data) -> dict:
    """Checks a recorded config: parameter names to ints, with values a kernel can be built with
    (``check_values``); ``KernelConfig.from_dict`` checks the names."""
    from amk.lowering.configs import check_values

    if (not isinstance(data, dict) or not data
            or any(not isinstance(k, str) or not isinstance(v, int) or isinstance(v, bool) for k, v in data.items())):
        raise ValueError(f"a kernel config must map parameter names to ints, got {data!r}")
    check_values(data)
    return dict(data)


def _sealed(doc: dict) -> bytes:
    """``doc`` with its own checksum, as the bytes to write."""
    doc = {k: v for k, v in doc.items() if k != "checksum"}
    doc["checksum"] = _sha256(_canonical_json(doc))
    return json.dumps(doc, indent=1, default=str).encode()  # insertion order kept: kernels, IR levels


def _unsealed(data: bytes, what: str) -> dict:
    """The document in ``data`` after checking its checksum; raises CorruptEntry."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CorruptEntry(f"{what} is not valid JSON ({error})") from None
    if not isinstance(doc, dict) or "checksum" not in doc:
        raise CorruptEntry(f"{what} has no checksum")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if _sha256(_canonical_json(body)) != doc["checksum"]:
        raise CorruptEntry(f"{what} does not match its checksum")
    if body.get("format") != FORMAT:
        raise CorruptEntry(f"{what} has format {body.get('format')!r}, expected {FORMAT}")
    return body


# ----------------------------------------------------------------------------------------------------------------------
# The store
# ----------------------------------------------------------------------------------------------------------------------

_WARNED = False
_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def _warn_degraded(root: Path, error: BaseException) -> None:
    global _WARNED
    log.debug("cache directory %s is not writable: %s", root, error)
    if _WARNED:
        return
    _WARNED = True
    warnings.warn(f"amk: the cache directory {root} cannot be written ({error}); compiled kernels are kept in memory "
                  "for this process only (set AMK_CACHE_DIR or TunerConfig.target_cache_dir to a writable directory)",
                  RuntimeWarning, stacklevel=3)


def store_for(override: str | os.PathLike | None = None) -> Store:
    """The process-wide store of a cache directory (it remembers whether that directory could be written)."""
    name = os.path.abspath(resolve_root(override))  # absolute: a later chdir does not move the cache
    with _STORES_LOCK:
        if name not in _STORES:
            _STORES[name] = Store(name)
        return _STORES[name]


class Store:
    """Reads and writes one cache directory. With ``strict=True`` (the CLI) write failures raise CacheError;
    otherwise the first failure switches the store to memory for the rest of the process, with one warning."""

    def __init__(self, root: str | os.PathLike, strict: bool = False):
        self.root = Path(root)
        self.strict = strict
        self.memory_only = False
        self._memory: dict[str, dict] = {"entries": {}, "configs": {}, "timings": {}, "index": {}, "races": {}}
        self._swept: set[Path] = set()  # folders already rid of stale temporary files by this store
        self._writable: set[Path] = set()  # Triton folders a file was written to (see triton_directory)

    # -- plumbing ------------------------------------------------------------------------------------------------------

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / key

    @contextmanager
    def _lock(self, name: str, writing: bool):
        """Holds ``locks/<name>.lock``. Readers go on without it where it cannot be taken (a read-only cache)."""
        lock = None
        try:
            path = self.root / "locks" / f"{name}.lock"
            if writing:
                path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(path, timeout=LOCK_TIMEOUT_S)
            lock.acquire()
        except Timeout:
            if writing:
                raise
            log.warning("cache lock %s is held for more than %.0f s; reading without it", name, LOCK_TIMEOUT_S)
            lock = None
        except OSError:
            if writing:
                raise
            lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

    def remove_stale_temporaries(self, folder: Path) -> int:
        """Removes the temporary files of :meth:`_write_file` (``.<name>.<random>.tmp``) older than
        STALE_TEMPORARY_S from ``folder``: what a writer killed between creating one and ``os.replace`` left behind.
        A writer holds its temporary file for milliseconds, so a younger one may be a live writer's and stays (a
        writer stopped for longer loses its write: ``os.replace`` fails and the store degrades to memory, as for any
        write error). Returns how many were removed; errors (a read-only or missing folder) are ignored."""
        removed, cutoff = 0, time.time() - STALE_TEMPORARY_S
        try:
            with os.scandir(folder) as items:
                for item in items:
                    if not (item.name.startswith(".") and item.name.endswith(".tmp")):
                        continue
                    try:
                        if item.is_file(follow_symlinks=False) and item.stat(follow_symlinks=False).st_mtime < cutoff:
                            os.unlink(item.path)
                            removed += 1
                    except OSError:
                        pass
        except OSError:
            return removed
        if removed:
            log.info("removed %d stale temporary file(s) from %s", removed, folder)
        return removed

    def _make_folder(self, folder: Path) -> None:
        """``folder`` made, with its parents. A file where the cache keeps a folder (``entries/<key>``, its
        ``triton``), which amk never writes, is damage: it is removed and the folder made, as a damaged entry is
        rebuilt and overwritten, rather than taking the whole directory for unwritable."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            if not folder.is_relative_to(self.root):
                raise
            current = self.root
            for part in folder.relative_to(self.root).parts:
                current = current / part
                if current.exists() and not current.is_dir():
                    log.warning("removing %s from the cache: a file where amk keeps a folder", current)
                    current.unlink()
            folder.mkdir(parents=True, exist_ok=True)

    def _write_file(self, path: Path, data: bytes) -> None:
        """Atomically: a temporary file in the same directory, then ``os.replace``. The first write to a folder
        removes the stale temporary files in it. A folder where the file goes (damage, as in :meth:`_make_folder`)
        is removed and the file written."""
        self._make_folder(path.parent)
        if path.parent not in self._swept:
            self._swept.add(path.parent)
            self.remove_stale_temporaries(path.parent)
        try:
            write_atomically(path, data)
        except IsADirectoryError:
            log.warning("removing %s from the cache: a folder where amk keeps a file", path)
            shutil.rmtree(path)
            write_atomically(path, data)

    def _writing(self, what: str, write, optional: bool = False) -> bool:
        """Runs ``write()``; a failure degrades the store to memory (or raises CacheError when strict); that of an
        ``optional`` write, outside strict mode, is only logged."""
        if self.memory_only:
            return False
        for attempt in range(2):
            try:
                write()
                return True
            except Timeout:
                if self.strict:
                    raise CacheError(f"cannot write {what}: the cache lock is held by another process") from None
                log.warning("cache lock for %s is held for more than %.0f s; not writing it", what, LOCK_TIMEOUT_S)
                return False
            except OSError as error:
                if attempt == 0 and error.errno in (errno.ENOENT, errno.EEXIST):
                    # A folder removed under the write (`amk cache clear` in another process) or made by another
                    # writer between two steps: once more, before taking the directory for unwritable.
                    log.debug("writing %s again after %s", what, error)
                    continue
                if optional and not self.strict:
                    log.debug("%s not written in %s: %s", what, self.root, error)
                    return False
                if self.strict:
                    raise CacheError(f"cannot write {what} in {self.root}: {error}") from None
                self.memory_only = True
                _warn_degraded(self.root, error)
                return False

    # -- entries -------------------------------------------------------------------------------------------------------

    def alias(self, request: str) -> str | None:
        """The entry key recorded for a :func:`request_key`, or None."""
        if request in self._memory["index"]:
            return self._memory["index"][request]
        try:
            text = (self.root / "index" / request).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        key = text.partition(" ")[0]
        if _KEY.fullmatch(key) and text == _index_record(request, key):
            return key
        log.warning("the cache's index file %s does not name an entry for its request (damaged or edited); "
                    "building the IR instead", request[:12])
        return None

    def save_alias(self, request: str, key: str) -> None:
        """Records ``key`` as the entry of ``request`` (:func:`request_key`). The index only saves a later process
        building the IR to find the entry: a cache that cannot take it (read-only) still serves its entries, so a
        failure here is no reason to stop writing, nor to warn."""
        self._memory["index"][request] = key
        self._writing(f"index {request[:12]}", lambda: self._write_file(self.root / "index" / request,
                                                                        _index_record(request, key).encode()),
                      optional=True)

    def save(self, entry: Entry) -> bool:
        """Writes (or overwrites) an entry and its config record. Returns False when it stayed in memory."""
        entry.meta.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
        record = self._config_record(entry)
        if self.memory_only:
            self._memory["entries"][entry.key] = entry
            self._memory["configs"][entry.key] = record
            return False
        files = {_source_file(name): source.encode() for name, source in entry.sources.items()}
        files["ir.json"] = json.dumps(entry.ir, indent=1).encode()  # the levels in pipeline order
        doc = {"format": FORMAT, "key": entry.key, **entry.meta,
               "kernels": {name: {"config": entry.configs[name], "source": _source_file(name)} for name in entry.sources},
               "plan": entry.plan, "tuning_log": entry.tuning_log, "verification": entry.verification,
               "files": {name: _sha256(data) for name, data in files.items()},
               "triton_cache_dir": None if interpreting() or _user_triton_cache() else "triton"}

        def write() -> None:
            directory = self.entry_dir(entry.key)
            with self._lock(entry.key, writing=True):
                self._make_folder(directory)
                for name, data in files.items():
                    self._write_file(directory / name, data)
                self._write_file(directory / "entry.json", _sealed(doc))  # last: it makes the entry valid
                for stale in directory.iterdir():
                    if stale.name not in files and stale.name not in ("entry.json", "triton"):
                        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
                self._write_file(self.root / "configs" / f"{entry.key}.json", _sealed(record))

        if self._writing(f"cache entry {entry.key[:12]}", write):
            return True
        self._memory["entries"][entry.key] = entry
        self._memory["configs"][entry.key] = record
        return False

    def load(self, key: str) -> Entry | None:
        """The entry of ``key``, or None (a miss; a corrupt entry is logged and treated as a miss)."""
        if key in self._memory["entries"]:
            return self._memory["entries"][key]
        directory = self.entry_dir(key)
        if not directory.is_dir():
            return None
        try:
            with self._lock(key, writing=False):
                try:
                    raw = (directory / "entry.json").read_bytes()
                except FileNotFoundError:
                    leftovers = [p.name for p in directory.iterdir() if p.name != "triton"]
                    if leftovers:
                        raise CorruptEntry(f"entry.json is missing (found {', '.join(sorted(leftovers))})") from None
                    return None
                doc = _unsealed(raw, "entry.json")
                files = {}
                for name, digest in doc["files"].items():
                    try:
                        data = (directory / name).read_bytes()
                    except FileNotFoundError:
                        raise CorruptEntry(f"{name} is missing") from None
                    if _sha256(data) != digest:
                        raise CorruptEntry(f"{name} does not match its checksum")
                    files[name] = data
            return self._entry(key, doc, files)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except CorruptEntry as error:
            self._corrupt(key, str(error))
        except (OSError, KeyError, TypeError, ValueError, AttributeError) as error:
            self._corrupt(key, f"{type(error).__name__}: {error}")
        return None

    def entry_document(self, key: str) -> dict | None:
        """The document of ``key``'s ``entry.json`` as amk wrote it (None where there is none); raises
        :class:`CacheError` where the file is damaged (its checksum or format does not hold)."""
        try:
            raw = (self.entry_dir(key) / "entry.json").read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return _unsealed(raw, "entry.json")
        except CorruptEntry as error:
            raise CacheError(f"entry {key[:12]} is damaged ({error}); `amk cache clear` removes it") from None

    def _entry(self, key: str, doc: dict, files: dict[str, bytes]) -> Entry:
        if doc.get("key") != key:
            raise CorruptEntry(f"entry.json belongs to key {doc.get('key')!r}")
        configs, sources = {}, {}
        for name, kernel in doc["kernels"].items():
            configs[name] = _config_fields(kernel["config"])
            sources[name] = files[kernel["source"]].decode()
        ir = json.loads(files["ir.json"])
        if not isinstance(ir, dict) or not isinstance(doc["plan"], dict):
            raise CorruptEntry("ir.json or the launch plan is malformed")
        meta = {k: doc[k] for k in ("ops", "shapes", "dtype", "device", "versions", "settings", "created", "program")
                if k in doc}
        return Entry(key, meta, configs, sources, doc["plan"], ir, doc.get("tuning_log") or {}, doc.get("verification"))

    def _corrupt(self, key: str, reason: str) -> None:
        log.warning("cache entry %s in %s is unusable (%s); rebuilding it", key[:12], self.root, reason)

    def discard(self, key: str, reason: str) -> None:
        """Drop an entry that was read but cannot be used (a plan or source that does not load): it is logged and
        rebuilt by the next build, which overwrites it."""
        self._corrupt(key, reason)
        self._memory["entries"].pop(key, None)

    def triton_directory(self, key: str) -> Path | None:
        """``entries/<key>/triton``, where Triton keeps the binaries of the entry's kernels; None when Triton's cache
        is left alone (kernels run in the interpreter, the user set TRITON_CACHE_DIR, or the cache is unwritable).

        The folder is tried with a file written as Triton writes its own (a temporary file, then ``os.replace``):
        Triton does not survive a cache it cannot write (a full or read-only disk fails the compilation), so such a
        cache degrades to memory here, before Triton is pointed at it."""
        if self._triton_cache_left_alone():
            return None
        try:
            return self._written_triton_folder(key)
        except OSError as error:
            if self.strict:
                raise CacheError(f"cannot write Triton's binaries in {self.entry_dir(key) / 'triton'}: {error}") from None
            self.memory_only = True
            _warn_degraded(self.root, error)
            return None

    def _triton_cache_left_alone(self) -> bool:
        return interpreting() or _user_triton_cache() or self.memory_only

    def _written_triton_folder(self, key: str) -> Path:
        """``entries/<key>/triton`` once a file could be written there as Triton writes its own; raises OSError."""
        directory = self.entry_dir(key) / "triton"
        if directory not in self._writable:
            self._write_file(directory / ".writable", b"")
            self._writable.add(directory)
        return directory

    @contextmanager
    def triton_cache(self, key: str):
        """Triton compiles into the entry's folder while this is active (the tuning and build of a miss)."""
        directory = self.triton_directory(key)
        if directory is None:
            yield
            return
        with _triton_cache_dir(directory):
            yield

    def attach_triton_cache(self, key: str, kernel) -> None:
        """Make the first launch of ``kernel`` (where Triton compiles it, or loads its binary) use the entry's folder
        as Triton's cache; later launches run the kernel unwrapped.

        A hit from a cache that cannot be written (a read-only one) leaves Triton's cache alone: Triton fails a
        compilation it cannot store (a launch specialized otherwise than the stored binaries), so the kernel compiles
        into Triton's own cache. The store is not degraded and nothing warns: serving a hit writes nothing of amk's."""
        if self._triton_cache_left_alone():
            return
        try:
            directory = self._written_triton_folder(key)
        except OSError as error:
            log.debug("the cache cannot take Triton's binaries of %s (%s): Triton's own cache is used", key, error)
            return
        launch = kernel.launch

        @functools.wraps(launch)
        def first_launch(*args, **kwargs):
            with _triton_cache_dir(directory):
                result = launch(*args, **kwargs)
            kernel.launch = launch
            return result

        # What a launch replay built on the wrapper (amk.replay.record) records the emitted launcher (__wrapped__)
        # within, so that the recording launch, the kernel's first, compiles into the entry's folder too.
        first_launch.triton_cache_scope = lambda: _triton_cache_dir(directory)
        kernel.launch = first_launch

    # -- configs (what export/import move) -----------------------------------------------------------------------------

    @staticmethod
    def _config_record(entry: Entry) -> dict:
        return {"format": FORMAT, "key": entry.key, **entry.meta, "kernels": dict(entry.configs),
                "tuning_log": entry.tuning_log}

    def load_config(self, key: str) -> dict | None:
        """The recorded (or imported) configs of ``key``: ``{"kernels": {name: fields}, "tuning_log": ...}``."""
        if key in self._memory["configs"]:
            return self._memory["configs"][key]
        path = self.root / "configs" / f"{key}.json"
        try:
            record = _unsealed(path.read_bytes(), path.name)
            for fields in record["kernels"].values():
                _config_fields(fields)
            return record
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (CorruptEntry, OSError, KeyError, TypeError, ValueError, AttributeError) as error:
            log.warning("tuned config %s in %s is unusable (%s); ignoring it", key[:12], self.root, error)
            return None

    # -- timings -------------------------------------------------------------------------------------------------------

    def _read_sealed(self, folder: str, key: str, required: str | None = None) -> dict:
        """The document ``<folder>/<key>.json`` (or the one kept in memory where the folder could not be written),
        {} where there is none; a damaged one, or one without the object ``required``, is logged and {}."""
        if key in self._memory[folder]:
            return self._memory[folder][key]
        path = self.root / folder / f"{key}.json"
        try:
            doc = _unsealed(path.read_bytes(), path.name)
            if required is not None and not isinstance(doc.get(required), dict):
                raise CorruptEntry(f"no {required}")
            return doc
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except (CorruptEntry, OSError) as error:
            log.warning("%s %s in %s unusable (%s); ignoring it", folder, key[:12], self.root, error)
            return {}

    def _read_timings(self, key: str) -> dict:
        return self._read_sealed("timings", key, required="trials")

    def timings(self, key: str) -> dict[str, dict]:
        """The trials timed before for a timing key, as the store keeps them: ``{config key: trial data}``."""
        trials = self._read_timings(key).get("trials", {})
        return trials if isinstance(trials, dict) else {}

    def merge_timings(self, key: str, trials: dict, meta: dict, overwrite: bool = True) -> None:
        def merged() -> dict:
            doc = dict(self._read_timings(key)) or {"format": FORMAT, "key": key, **meta, "trials": {}}
            if overwrite:  # this process's description wins (older files lack the family Store.winners reads)
                doc.update(meta)
            doc["trials"] = ({**doc["trials"], **trials} if overwrite else {**trials, **doc["trials"]})
            return doc

        def write() -> None:
            with self._lock(f"timings-{key}", writing=True):
                self._write_file(self.root / "timings" / f"{key}.json", _sealed(merged()))

        if not self._writing(f"timings {key[:12]}", write):
            self._memory["timings"][key] = merged()

    # -- races ---------------------------------------------------------------------------------------------------------

    def race(self, key: str) -> dict | None:
        """The race recorded under ``key`` (:func:`race_key`) as :meth:`save_race` kept it, or None."""
        return self._read_sealed("races", key) or None

    def save_race(self, key: str, record: dict) -> None:
        """Keep ``record``, a size bucket's race against PyTorch, under ``key``. Races go with the entries (``amk
        cache clear``) and stay out of exports: they were measured on this machine, for programs it holds."""
        doc = {"format": FORMAT, "key": key, **record}

        def write() -> None:
            with self._lock(f"race-{key}", writing=True):
                self._write_file(self.root / "races" / f"{key}.json", _sealed(doc))

        if not self._writing(f"race {key[:12]}", write):
            self._memory["races"][key] = doc

    def winners(self, match: dict, limit: int) -> list[dict[str, int]]:
        """The fastest configuration (its ``user_view``) of each kernel timed before whose timings' metadata has every
        item of ``match``, the most recently timed first, at most ``limit`` distinct ones: the tuner seeds a new
        kernel of the same strategy on the same device with what won for its siblings (other shapes, other size
        buckets)."""
        docs = dict(self._memory["timings"])
        dated = []
        try:
            for path in (self.root / "timings").glob("*.json"):
                try:
                    dated.append((path.stat().st_mtime, path))
                except OSError:  # removed since it was listed (a concurrent clear)
                    continue
        except OSError:
            pass
        paths = [path for _, path in sorted(dated, reverse=True)]
        # The most recent files only: a cache of a long-lived machine holds thousands, each a read and a checksum.
        keys = list(docs) + [p.stem for p in paths[:WINNERS_SCANNED] if p.stem not in docs and _KEY.fullmatch(p.stem)]
        found: list[dict[str, int]] = []
        for key in keys:
            doc = self._read_timings(key)
            if not doc or any(doc.get(name) != value for name, value in match.items()):
                continue
            timed = [t for t in doc["trials"].values() if isinstance(t, dict) and t.get("status") == "ok"
                     and isinstance(t.get("time_ms"), int | float) and isinstance(t.get("config"), dict)]
            best = min(timed, key=lambda t: t["time_ms"], default=None)
            if best is not None and best["config"] not in found:
                found.append(best["config"])
                if len(found) == limit:
                    break
        return found

    # -- listing, clearing, export and import --------------------------------------------------------------------------

    def _keys(self, folder: str, suffix: str = "") -> list[str]:
        try:
            names = [p.name.removesuffix(suffix) for p in (self.root / folder).iterdir()]
        except OSError:
            return []
        return sorted(n for n in names if _KEY.fullmatch(n))

    def holds_no_program(self) -> bool:
        """Whether nothing has been built into this directory yet (no entry on disk or, for a store kept in memory,
        there): every build will be a cold one."""
        return not self._memory["entries"] and not self._keys("entries")

    def entries(self) -> list[tuple[str, dict | None]]:
        """Every entry on disk with its entry.json (None when it cannot be read)."""
        result = []
        for key in self._keys("entries"):
            try:
                doc = json.loads((self.entry_dir(key) / "entry.json").read_bytes())
                result.append((key, doc if isinstance(doc, dict) else None))
            except (OSError, ValueError):
                result.append((key, None))
        return result

    def find(self, prefix: str) -> str:
        """The one key (of an entry or a config record) starting with ``prefix``; raises CacheError."""
        prefix = prefix.strip().lower()
        if not prefix or not re.fullmatch(r"[0-9a-f]+", prefix):
            raise CacheError(f"{prefix!r} is not a cache key (a hex prefix, as `amk cache list` shows)")
        matches = sorted({k for k in self._keys("entries") + self._keys("configs", ".json") if k.startswith(prefix)})
        if not matches:
            raise CacheError(f"no cache entry has a key starting with {prefix!r} in {self.root}")
        if len(matches) > 1:
            raise CacheError(f"{len(matches)} cache entries have keys starting with {prefix!r}: "
                             f"{', '.join(m[:16] for m in matches)}; give more of the key")
        return matches[0]

    def clear(self, everything: bool = False) -> int:
        """Removes every entry (with the imported sources and the races of their programs); with ``everything``,
        tuned configs and timings too. Stale temporary files (:meth:`remove_stale_temporaries`) go from the folders
        it keeps. Raises CacheError, removing nothing, where a folder it would remove holds anything amk does not
        write there: the directory is not (only) an amk cache."""
        count = len(self._keys("entries"))
        folders = ["entries", "index", "sources", "races"] + (["configs", "timings"] if everything else [])
        stranger = self._not_written_by_amk(folders)
        if stranger is not None:
            raise CacheError(f"{self.root} does not look like an amk cache: amk does not write {stranger}; nothing was "
                             "removed (is it the cache directory you meant?)")
        for folder in folders:
            try:
                shutil.rmtree(self.root / folder)
            except FileNotFoundError:
                pass
            except OSError as error:
                raise CacheError(f"cannot remove {self.root / folder}: {error}") from None
        for folder in ("configs", "timings"):
            self.remove_stale_temporaries(self.root / folder)
        self._swept.clear()
        self._memory["entries"].clear()
        self._memory["index"].clear()
        self._memory["races"].clear()
        if everything:
            self._memory["configs"].clear()
            self._memory["timings"].clear()
        return count

    def _not_written_by_amk(self, folders: list[str]) -> Path | None:
        """The first item in ``folders`` that amk does not write there (:data:`_WRITTEN`), or None."""
        for folder in folders:
            try:
                names = os.listdir(self.root / folder)
            except FileNotFoundError:
                continue
            except NotADirectoryError:
                return self.root / folder
            except OSError as error:
                raise CacheError(f"cannot read {self.root / folder}: {error}") from None
            for name in sorted(names):
                if not (_WRITTEN[folder].fullmatch(name) or _TEMPORARY.fullmatch(name)):
                    return self.root / folder / name
        return None

    def export(self) -> dict:
        """Tuned configs and timings (no sources, no binaries) as one JSON-serializable document."""
        configs = {}
        for key in self._keys("configs", ".json"):
            record = self.load_config(key)
            if record is not None:
                configs[key] = record
        for key, _ in self.entries():
            if key not in configs:
                entry = self.load(key)
                if entry is not None:
                    configs[key] = self._config_record(entry)
        timings = [doc for doc in (self._read_timings(k) for k in self._keys("timings", ".json")) if doc]
        return {"format": EXPORT_FORMAT, "version": FORMAT,
                "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "configs": [configs[k] for k in sorted(configs)], "timings": timings}

    def import_(self, document) -> tuple[int, int, int]:
        """Merges an exported document: config records replace local ones of the same key (and local entries that
        use other configs are dropped, so the next build uses the imported ones); timings are added where this
        cache has none for a config. Returns (configs, timing tables, entries dropped)."""
        configs, timings = _validated_export(document)
        dropped = 0
        for record in configs:
            key = record["key"]
            local = self.load(key)
            if local is not None and local.configs != record["kernels"]:
                try:
                    shutil.rmtree(self.entry_dir(key))
                except OSError as error:
                    raise CacheError(f"cannot replace entry {key[:12]}: {error}") from None
                dropped += 1
            record = {**record, "format": FORMAT}

            def write(record=record, key=key) -> None:
                with self._lock(key, writing=True):
                    self._write_file(self.root / "configs" / f"{key}.json", _sealed(record))

            self._writing(f"config {key[:12]}", write)
        for doc in timings:
            meta = {k: v for k, v in doc.items() if k not in ("trials", "checksum", "format")}
            self.merge_timings(doc["key"], doc["trials"], meta, overwrite=False)
        return len(configs), len(timings), dropped


def _validated_export(document) -> tuple[list[dict], list[dict]]:
    def bad(message: str):
        raise CacheError(f"not an amk cache export: {message}")

    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        bad(f"the top level must be an object with \"format\": \"{EXPORT_FORMAT}\"")
    if type(document.get("version")) is not int or document["version"] != FORMAT:  # (True == 1)
        bad(f"version {document.get('version')!r} is not supported (expected {FORMAT})")
    configs, timings = document.get("configs", []), document.get("timings", [])
    if not isinstance(configs, list) or not isinstance(timings, list):
        bad("\"configs\" and \"timings\" must be lists")
    for index, record in enumerate(configs):
        if not isinstance(record, dict) or not isinstance(record.get("key"), str) or not _KEY.fullmatch(record["key"]):
            bad(f"configs[{index}] has no valid \"key\" (64 hex digits)")
        kernels = record.get("kernels")
        if not isinstance(kernels, dict):  # empty for a program without kernels (its ops all run in PyTorch)
            bad(f"configs[{index}] has no \"kernels\" object")
        for name, fields in kernels.items():
            try:
                _config_fields(fields)
            except ValueError as error:
                bad(f"configs[{index}].kernels[{name!r}]: {error}")
        log = record.get("tuning_log", {})
        if not isinstance(log, dict):
            bad(f"configs[{index}].tuning_log must be an object")
        for name, trials in log.items():
            if not isinstance(trials, list) or not all(_is_trial(trial) for trial in trials):
                bad(f"configs[{index}].tuning_log[{name!r}] must be a list of trials")
    for index, doc in enumerate(timings):
        if not isinstance(doc, dict) or not isinstance(doc.get("key"), str) or not _KEY.fullmatch(doc["key"]):
            bad(f"timings[{index}] has no valid \"key\" (64 hex digits)")
        if not isinstance(doc.get("trials"), dict):
            bad(f"timings[{index}] has no \"trials\" object")
        for config_key, trial in doc["trials"].items():
            if not _is_trial(trial):
                bad(f"timings[{index}].trials[{config_key!r}] is not a trial")
    return configs, timings


def _is_trial(trial) -> bool:
    """The shape of ``Trial.as_dict()`` (checked without importing the tuner, to keep the CLI fast)."""
    return (isinstance(trial, dict) and isinstance(trial.get("status"), str) and isinstance(trial.get("config"), dict)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in trial["config"].values())
            and (trial.get("time_ms") is None or isinstance(trial["time_ms"], int | float)))


def _user_triton_cache() -> bool:
    """Whether the user chose where Triton keeps its binaries (``TRITON_CACHE_DIR``, or a cache manager of their own):
    amk then leaves Triton's cache alone."""
    from amk.triton_cache import user_manager

    return bool(os.environ.get("TRITON_CACHE_DIR")) or user_manager()


@contextmanager
def _triton_cache_dir(directory: Path):
    """Triton compiles into ``directory`` for the duration, in this thread only."""
    from amk.triton_cache import compiling_into

    with compiling_into(directory):
        yield
