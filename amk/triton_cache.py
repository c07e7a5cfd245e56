"""Which folder Triton compiles into, per thread: a cache entry's (its build and its kernels' first launches) or
Triton's own.

Triton finds its cache folder through ``TRITON_CACHE_DIR``, a process-wide variable: a build that set it for its
own entry put the binaries of every other thread compiling at the same time into that entry too (another build's
kernels, or a user's own Triton and torch.compile kernels), and two builds restoring it out of order left it set
for good. Here the folder is a context variable, which each thread (and each asyncio task) holds on its own, and
Triton's cache manager, its documented extension point (``knobs.cache.manager_class``, ``TRITON_CACHE_MANAGER``),
reads it. A leaf module: it imports Triton, nothing of amk.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from triton import knobs
from triton.runtime.cache import FileCacheManager

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


_INSTALLING = threading.Lock()


def user_manager() -> bool:
    """Whether Triton's cache manager is the user's own (``TRITON_CACHE_MANAGER`` or ``knobs.cache.manager_class``):
    amk then leaves Triton's cache alone, as it does a ``TRITON_CACHE_DIR`` the user set."""
    return knobs.cache.manager_class not in (None, FileCacheManager, ScopedFileCacheManager)


@contextmanager
def compiling_into(folder: Path):
    """Triton compiles into ``folder`` for this thread (or task) while this is active; its other threads are left
    alone. Triton's cache manager becomes :class:`ScopedFileCacheManager` on first use, unless the user has set one."""
    with _INSTALLING:
        if not user_manager():
            knobs.cache.manager_class = ScopedFileCacheManager
    token = _FOLDER.set(folder)
    try:
        yield
    finally:
        _FOLDER.reset(token)


def current_folder() -> Path | None:
    """The folder Triton compiles into for this thread (None: Triton's own): what a compile worker is given for the
    jobs this thread submits."""
    return _FOLDER.get()
