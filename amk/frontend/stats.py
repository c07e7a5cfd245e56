"""The front end's counters over the whole process: :data:`STATS` (a :class:`CompileStats`) counts the graphs
TorchDynamo hands the backend, the subgraphs imported and compiled, cache hits, kernel calls, fallbacks to PyTorch,
backward recomputations and verification failures. It is reachable as ``amk.frontend.compile.STATS``."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class CompileStats:
    """Counters over the whole process (``reset()`` clears them).

    ``graphs``: FX graphs TorchDynamo handed to the backend (one per (re)compilation of a frame);
    ``subgraphs``: fused subgraphs imported; ``pipeline_runs``: runs of the amk pipeline (cache misses);
    ``cache_hits``: subgraphs that reused an identical compiled program; ``kernels``: Triton kernels emitted;
    ``kernel_calls``: calls that ran compiled kernels; ``fallbacks``: calls that ran a subgraph's PyTorch code instead;
    ``backward_recomputes``: backward passes through fused subgraphs; ``verification_failures``: subgraphs whose
    kernels disagreed with PyTorch (they run PyTorch from then on).
    """

    graphs: int = 0
    subgraphs: int = 0
    pipeline_runs: int = 0
    cache_hits: int = 0
    kernels: int = 0
    kernel_calls: int = 0
    fallbacks: int = 0
    backward_recomputes: int = 0
    verification_failures: int = 0

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


STATS = CompileStats()
