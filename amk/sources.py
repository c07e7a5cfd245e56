"""Emitted kernel sources as files and modules: a source's module name, writing its file, importing it.

A leaf module that imports neither torch nor any other part of amk: the compile workers, which never import torch,
load the sources they compile through it, as :func:`amk.runtime.load_source` does in the tuning process, so that a
kernel's module has the same name and file in both (Triton keys a compiled kernel by its function's source and
module).
"""

from __future__ import annotations

import hashlib
import importlib.util
import linecache
import os
import secrets
from pathlib import Path
from types import ModuleType


def emitted_module_name(source: str, name: str) -> str:
    """The module name of emitted ``source`` for kernel ``name``: the source's hash in it, so that a module is written
    and imported once per sources folder."""
    return f"amk_generated_{name}_{hashlib.sha256(source.encode()).hexdigest()[:20]}"


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder (``.<name>.<random>.tmp``) and
    ``os.replace``: a reader sees the old file or the new one, never part of one. The file gets the permissions
    ``open`` gives (0666 less the umask), not mkstemp's 0600: a cache built as another user (an image built as root,
    a directory shared by a group) stays readable."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write_source(path: Path, source: str) -> None:
    """Write ``source`` at ``path`` (:func:`write_atomically`) unless the file holds it already, compared as bytes (a
    damaged file need not be UTF-8)."""
    text = source.encode()
    if not path.exists() or path.read_bytes() != text:
        write_atomically(path, text)


def import_source_file(module_name: str, path: Path, source: str, builtins: dict | None = None) -> ModuleType:
    """The module of the emitted ``source`` written at ``path`` (``builtins``: the module's own, where given). Its
    lines are kept in ``linecache`` as a module's without a file to check (``mtime`` None): Triton reads a kernel's
    source again through ``inspect`` (the JIT at its definition, the interpreter at its first launch), which must not
    fail when ``amk cache clear`` in another process has removed the file meanwhile."""
    linecache.cache[str(path)] = (len(source), None, source.splitlines(keepends=True), str(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    if builtins is not None:
        module.__dict__["__builtins__"] = builtins
    spec.loader.exec_module(module)
    return module
