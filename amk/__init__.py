"""AutoMegaKernel: fuse chains of PyTorch ops into one autotuned Triton kernel.

Heavy submodules load on first use, so ``amk-opt`` and ``import amk.dialects...`` stay fast.
"""

from __future__ import annotations

import importlib
import sys

__version__ = "0.1.0"

_EXPORTS = {
    "build_fused_kernel": "amk.api",
    "FusedKernel": "amk.api",
    "TunerConfig": "amk.tuner",
    "verify": "amk.verification",
    "VerificationReport": "amk.verification",
    "errors": "amk.errors",
    "register_pass": "amk.opt",
    "verification": "amk.verification",
    "compile": "amk.frontend.compile",
    "explain": "amk.frontend.compile",
    "cuda_graphed": "amk.frontend.graphs",
}

__all__ = sorted(_EXPORTS)


def _lazy_getattr(package: str, exports: dict[str, str], whole_modules: tuple[str, ...] = ()):
    """A module ``__getattr__`` importing ``exports[name]`` on first use (the module itself for the names in
    ``whole_modules``, else the attribute of that name) and keeping the value in ``package``."""

    def __getattr__(name: str):
        if name in exports:
            module = importlib.import_module(exports[name])
            value = module if name in whole_modules else getattr(module, name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = _lazy_getattr("amk", _EXPORTS, ("errors", "verification"))
