"""AutoMegaKernel: fuse chains of PyTorch ops into one autotuned Triton kernel.

Heavy submodules load on first use, so ``amk-opt`` and ``import amk.dialects...`` stay fast.
"""

from __future__ import annotations

import importlib

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
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(_EXPORTS[name])
        value = module if name in ("errors", "verification") else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'amk' has no attribute {name!r}")
