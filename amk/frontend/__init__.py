"""The PyTorch front end: ``amk.compile(model)``, ``torch.compile(model, backend="amk")`` and ``amk.explain``.

TorchDynamo captures the model as FX graphs; :mod:`amk.frontend.analysis` decides which nodes have a ``tensor_op``
equivalent (through :mod:`~amk.frontend.converters` and :mod:`~amk.frontend.patterns`), :mod:`amk.frontend.importer`
turns connected runs of them into ``tensor_op`` functions, which the amk pipeline compiles into fused Triton kernels;
:mod:`amk.frontend.backend` puts the kernels back into the graph as :mod:`~amk.frontend.subgraph` modules (with a
backward by recomputation) and leaves everything else to PyTorch. :mod:`amk.frontend.compile` holds the entry points.
"""

from __future__ import annotations

from amk import _lazy_getattr

# ``amk.compile`` is ``amk.frontend.compile.compile``; the name ``compile`` here is the submodule.
_EXPORTS = {
    "explain": "amk.frontend.compile",
    "amk_backend": "amk.frontend.compile",
    "STATS": "amk.frontend.compile",
    "ExplainReport": "amk.frontend.reports",
    "analyze": "amk.frontend.analysis",
    "import_subgraph": "amk.frontend.importer",
}

__all__ = sorted(_EXPORTS)


__getattr__ = _lazy_getattr("amk.frontend", _EXPORTS)
