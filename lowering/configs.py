"""Kernel configurations: the values bound to a kernel's tile-size symbols plus its launch parameters.

The heuristic used when nothing is tuned is each tiling strategy's ``default_config``
(:mod:`amk.lowering.strategies`): it looks at the problem size of a ``tiled_loop.kernel`` only, so it works on the CPU
as well as on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amk.symbolic import Dim

# Keys as users spell them in ``parameter_grid`` and the symbols they bind.
PARAMETER_KEYS = {"BLOCK_SIZE_M": "BLOCK_M", "BLOCK_SIZE_N": "BLOCK_N", "BLOCK_SIZE_K": "BLOCK_K",
                  "GROUP_SIZE_M": "GROUP_M", "SPLIT_K": "SPLIT_K", "SPLIT_N": "SPLIT_N", "num_warps": "num_warps",
                  "num_stages": "num_stages", "PERSISTENT": "PERSISTENT", "TMA": "TMA",
                  "WARP_SPECIALIZE": "WARP_SPECIALIZE", "TF32X3": "TF32X3", "GLUON": "GLUON"}
# The switches among them: 0 or 1.
SWITCHES = ("PERSISTENT", "TMA", "WARP_SPECIALIZE", "TF32X3", "GLUON")
# What check_values accepts, as the stages using these values do: the staged kernel's verifier (memory_staged.kernel)
# takes tile sizes that are powers of two and num_warps from WARPS. GROUP_M only needs to be positive: kernels without
# grouped tiles ignore it, and configurations recorded from earlier amk versions' grids may hold any (a parameter_grid
# now takes powers of two only, amk.tuner.validate_grid).
POWER_OF_TWO_TILE_SIZES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "SPLIT_N")
WARPS = (1, 2, 4, 8, 16, 32)

# Configurations that won on Hopper (the H200) in the committed benchmark runs for tile-grid GEMMs with an epilogue
# (A, B, C and G's fused programs: benchmarks/results/2026-11-30-h200-refined-tuner-B, -merge-all-AC, -unrounded-G;
# B's persistent TMA variants: 2026-12-01-h200-build-time; B's Gluon kernel, 3.21 ms against the Triton one's 3.43 at
# the same tiles: 2026-12-01-h200-gluon-smoke): the tuner's priors for every strategy with a K loop that
# does not bring its own (TilingStrategy.priors). Each tile shape comes with its launch switches, persistent and TMA
# (which strategies without a tile grid drop), so that a cold build times the likely winners in its first round of
# compilation instead of finding their switches in a later one.
GEMM_HOPPER_PRIORS: list[dict[str, int]] = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1, TMA=1, GLUON=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, PERSISTENT=1, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, PERSISTENT=1, TMA=1),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_warps=4, num_stages=5),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_warps=4, num_stages=5, PERSISTENT=1, TMA=1),
]

# The winners of fp32 tile grids under PyTorch's "highest", their dots as three TF32 products with TMA loads (the
# fp32 Linear + ReLU / GELU / LayerNorm model rows: benchmarks/results/2026-12-02-h200-models-11, -models-12). A kernel
# without the switch TF32X3 (fp16 and bf16 dots, TF32 dots) never times them.
TF32X3_HOPPER_PRIORS: list[dict[str, int]] = [
    dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, num_warps=8, num_stages=3, TMA=1, TF32X3=1),
    dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=32, num_warps=8, num_stages=3, TMA=1, TF32X3=1),
]

# A static K at most this long makes a cheap GEMM next to the row reductions around it (amk-tile's choices).
SHORT_CONTRACTION = 256


def is_short_contraction(contraction: Dim | None) -> bool:
    """A static K of at most ``SHORT_CONTRACTION``: amk-tile's short-K strategies, and chunk_recompute's single K tile
    (which its search space agrees with)."""
    return contraction is not None and contraction.is_static and contraction.value <= SHORT_CONTRACTION


def whole_k_tile(contraction: Dim) -> int:
    """The K width of a tile that holds a static contraction whole: padded to a power of two, at least 16 (a GPU's
    ``tl.dot`` refuses K < 16)."""
    return max(16, next_power_of_two(contraction.value))


@dataclass(frozen=True)
class KernelConfig:
    BLOCK_M: int = 64
    BLOCK_N: int = 64
    BLOCK_K: int = 32
    GROUP_M: int = 8
    SPLIT_K: int = 4
    # chunk_recompute: programs sharing each row strip's columns.
    SPLIT_N: int = 8
    num_warps: int = 4
    num_stages: int = 3
    # Tile-grid GEMM kernels only: one program per SM walking the output tiles (so Triton can pipeline the next
    # tile's loads under this tile's epilogue) ...
    PERSISTENT: int = 0
    # ... operands staged through tensor descriptors (TMA, Hopper and newer) where their layout allows ...
    TMA: int = 0
    # ... and, on a persistent TMA kernel, Triton's warp specialization of the tile loop.
    WARP_SPECIALIZE: int = 0
    # fp32 dots as three TF32 products (Triton's "tf32x3"): fp32-accurate, on the tensor cores, where PyTorch's
    # float32 matmul precision is "highest" (IEEE dots run on the CUDA cores). A candidate the tuner times there.
    TF32X3: int = 0
    # Persistent TMA tile-grid GEMMs on Hopper: emitted in Gluon (amk-emit-gluon, a TMA producer warp feeding the
    # wgmma warps through an mbarrier ring) instead of Triton.
    GLUON: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def constants(self, tile_params: list[str]) -> dict[str, int]:
        """The tile-size symbols a kernel uses, bound."""
        values = self.as_dict()
        return {name: values[name] for name in tile_params}

    def user_view(self) -> dict[str, int]:
        """The configuration under the ``parameter_grid`` key names."""
        values = self.as_dict()
        return {key: values[field] for key, field in PARAMETER_KEYS.items()}

    @classmethod
    def from_dict(cls, fields: Mapping[str, int]) -> KernelConfig:
        """The inverse of :meth:`as_dict` for recorded fields (a cache entry's); raises ValueError unless they are
        exactly this amk version's fields, with values a kernel can be built with (:func:`check_values`)."""
        try:
            config = cls(**fields)
        except TypeError as error:
            raise ValueError(f"{dict(fields)} is not a configuration of this amk version ({error})") from None
        if config.as_dict() != dict(fields):
            raise ValueError(f"{dict(fields)} lacks fields of this amk version's configurations")
        check_values(fields)
        return config

    @staticmethod
    def from_user_view(values: Mapping[str, int]) -> KernelConfig:
        """The inverse of :meth:`user_view` (raises KeyError on an unknown key, ValueError on a non-integer)."""
        return KernelConfig(**{PARAMETER_KEYS[key]: int(value) for key, value in values.items()})


def check_values(fields: Mapping[str, object]) -> None:
    """Raises ValueError, naming the field and what it accepts, where ``fields`` (:class:`KernelConfig` fields by name,
    all or some; other names are not looked at) hold a value no kernel can be built with: switches other than 0 or 1,
    a tile size that is not a power of two or above Triton's largest block, num_warps not in :data:`WARPS`, a count
    below 1 (a configuration from an import, or edited by hand). Which block sizes pair into a tile depends on the
    kernel's strategy (a row kernel's BLOCK_K is unused), so their products are checked where the kernel is staged
    (``amk.pipeline.stage_and_emit``): a recorded configuration that does not build is rebuilt without
    (``amk.build``)."""
    from triton.language import TRITON_MAX_TENSOR_NUMEL

    defaults = KernelConfig().as_dict()
    for name, value in fields.items():
        if name not in defaults:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{name} must be an int, got {value!r}")
        if name in SWITCHES:
            if value not in (0, 1):
                raise ValueError(f"{name} must be 0 or 1, got {value}")
        elif name == "num_warps":
            if value not in WARPS:
                raise ValueError(f"num_warps must be one of {', '.join(map(str, WARPS))}, got {value}")
        elif name in POWER_OF_TWO_TILE_SIZES:
            if value < 1 or value & (value - 1) or value > TRITON_MAX_TENSOR_NUMEL:
                raise ValueError(f"{name} must be a power of two from 1 to {TRITON_MAX_TENSOR_NUMEL}, got {value}")
        elif value < 1:
            raise ValueError(f"{name} must be a positive int, got {value}")


def next_power_of_two(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def bounded(dim: Dim, preferred: int, minimum: int) -> int:
    """``preferred``, shrunk to the power of two covering a small static ``dim``."""
    if dim.is_static:
        return max(minimum, min(preferred, next_power_of_two(dim.value)))
    return preferred
