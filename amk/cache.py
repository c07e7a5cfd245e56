"""Where amk keeps files: ``AMK_CACHE_DIR`` if set, else the platform's user cache directory (``~/.cache/amk``)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """The cache directory: ``override`` (a TunerConfig's target_cache_dir), ``AMK_CACHE_DIR``, or the default."""
    if override is not None:
        root = Path(override)
    elif os.environ.get("AMK_CACHE_DIR"):
        root = Path(os.environ["AMK_CACHE_DIR"])
    else:
        root = Path(platformdirs.user_cache_dir("amk"))
    root.mkdir(parents=True, exist_ok=True)
    return root
