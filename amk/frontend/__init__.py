"""The PyTorch front end: ``amk.compile(model)``, ``torch.compile(model, backend="amk")`` and ``amk.explain``.

TorchDynamo captures the model as FX graphs; :mod:`amk.frontend.importer` turns connected runs of supported nodes
into ``tensor_op`` functions, which the amk pipeline compiles into fused Triton kernels; :mod:`amk.frontend.compile`
puts the kernels back into the graph (with a backward by recomputation) and leaves everything else to PyTorch.
"""

from __future__ import annotations

from amk import _lazy_getattr

# ``amk.compile`` is ``amk.frontend.compile.compile``; the name ``compile`` here is the submodule.
_EXPORTS = {
    "explain": "amk.frontend.compile",
    "amk_backend": "amk.frontend.compile",
    "STATS": "amk.frontend.compile",
    "ExplainReport": "amk.frontend.compile",
    "analyze": "amk.frontend.importer",
    "import_subgraph": "amk.frontend.importer",
}

__all__ = sorted(_EXPORTS)


__getattr__ = _lazy_getattr("amk.frontend", _EXPORTS)
