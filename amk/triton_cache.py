"""Which folder Triton compiles into, per thread: a cache entry's (its build and its kernels' first launches) or
Triton's own.

Triton finds its cache folder through ``TRITON_CACHE_DIR``, a process-wide variable: a build that set it for its
own entry put the binaries of every other thread compiling at the same time into that entry too (another build's
kernels, or a user's own Triton and torch.compile kernels), and two builds restoring it out of order left it set
for good. Here the folder is a context variable, which each thread (and each asyncio task) holds on its own, and
Triton's cache manager, its documented extension point (``knobs.cache.manager_class``, ``TRITON_CACHE_MANAGER``),
reads it. A leaf module: it imports Triton and amk's environment.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from triton import knobs
from triton.runtime.cache import FileCacheManager

from amk.environment import renew_in_forked_children

_FOLDER: ContextVar[Path | None] = ContextVar("amk_triton_cache_folder", default=None)


class ScopedFileCacheManager(FileCacheManager):
    """Triton's file cache, in the folder of the calling thread's :func:`compiling_into` when there is one."""

    def __init__(self, key, override=False, dump=False):
        folder = _FOLDER.get()
        if folder is None or override or dump:
            super().__init__(key, override, dump)
            return
        # FileCacheManager's own attributes, as it sets them for its default folder
        self.key = key
        self.cache_dir = os.path.join(folder, key)
        self.lock_path = os.path.join(self.cache_dir, "lock")
        os.makedirs(self.cache_dir, exist_ok=True)


def user_manager() -> bool:
    """Whether Triton's cache manager is the user's own (``TRITON_CACHE_MANAGER``, or ``knobs.cache.manager_class``
    set in Python): amk then leaves Triton's cache alone, as it does a ``TRITON_CACHE_DIR`` the user set."""
    with _LOCK:
        manager = _replaced if _installed else knobs.cache.manager_class
    return manager not in (None, FileCacheManager) or bool(os.environ.get("TRITON_CACHE_MANAGER"))


# Triton's setting as it was before the first of the scopes now active installed amk's manager (put back when the last
# one ends, so that between builds Triton's settings are as the user left them), and how many scopes are active.
_LOCK = threading.Lock()
_installed = 0
_replaced: type | None = None
_replaced_in_python = False


@contextmanager
def compiling_into(folder: Path):
    """Triton compiles into ``folder`` for this thread (or task) while this is active; its other threads are left
    alone. Triton's cache manager is :class:`ScopedFileCacheManager` while a scope is active.

    A thread pool does not carry the context variable: a kernel compiled on the executor of Triton's asynchronous
    compile mode goes into Triton's own folder (compiled again by a later process; nothing wrong)."""
    renew_in_forked_children(_renew_lock)
    global _installed, _replaced, _replaced_in_python
    with _LOCK:
        if not _installed:
            _replaced_in_python = "manager_class" in vars(knobs.cache)
            _replaced = knobs.cache.manager_class
            knobs.cache.manager_class = ScopedFileCacheManager
        _installed += 1
    token = _FOLDER.set(folder)
    try:
        yield
    finally:
        _FOLDER.reset(token)
        with _LOCK:
            _installed -= 1
            if not _installed:
                if _replaced_in_python:
                    knobs.cache.manager_class = _replaced
                else:  # Triton reads TRITON_CACHE_MANAGER again
                    del knobs.cache.manager_class


def _renew_lock() -> None:
    global _LOCK
    _LOCK = threading.Lock()


def current_folder() -> Path | None:
    """The folder Triton compiles into for this thread (None: Triton's own): what a compile worker is given for the
    jobs this thread submits."""
    return _FOLDER.get()
