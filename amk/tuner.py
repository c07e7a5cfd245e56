"""Autotuning settings and the choice of a kernel configuration.

``TunerConfig`` carries the user's tuning settings. Timing candidates needs a GPU; without one (or with
``autotune=False``) the heuristic configuration is used, restricted to ``parameter_grid`` when one is given.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import logging
import math
import os
import random
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from amk import build_phases
from amk.benchmarking import EVENTS, timed_by  # the one timer, the benchmarks' too
from amk.build_phases import phase
from amk.environment import absolute_directory, interpreting
from amk.errors import InvalidArgumentError, UnknownArgumentError
from amk.lowering.configs import (
    PARAMETER_KEYS,
    SWITCHES,
    KernelConfig,
    check_values,
    whole_k_tile,
)

if TYPE_CHECKING:
    from concurrent.futures import Future

    from amk.symbolic import Dim

# How the tuner picks the candidates it times (TunerConfig.search).
SEARCH_METHODS = ("exhaustive", "random", "bayesian")
STRATEGIES = SEARCH_METHODS  # the name before TunerConfig.strategy became TunerConfig.search
_UNSET = object()  # TunerConfig(strategy=...) not given


@dataclass(frozen=True)
class TunerConfig:
    """How to search for the fastest configuration of each kernel.

    ``search_budget``: most candidates to time in the search (half of it for kernels without a matmul, which are
    memory-bound, and an eighth for the row passes of the vendor-GEMM program, ``vendor_gemm``; the strategy's
    heuristic, the configurations that won before on this device class and those that
    won for kernels of the same family in the cache come first; the fastest three are then timed in their persistent
    / TMA variants and against each other, and of those finalists within 1% of the fastest the first timed is kept);
    ``warmup_runs`` / ``measure_runs``: launches per candidate before (at most 25 ms of them) and while timing (at
    most 100 ms of them, at least five; a candidate 30% slower than the best after five launches is not timed
    further); ``enable_warp_specialization``: also time warp-specialized variants of persistent TMA kernels
    (``WARP_SPECIALIZE=1``); ``vendor_gemm``: where a row reduction follows a matmul or feeds one of at least 256
    rows, where a Linear's bias and ReLU or tanh GELU can be the vendor GEMM's epilogue, and for fp32 matmuls under
    PyTorch's "highest" precision, also build the chain with the matmul left to the vendor library (cuBLAS, through
    PyTorch, ``amk-vendor-epilogues`` first) and the rest fused (``amk-fuse{vendor_gemm=true}``), time both programs
    and keep the faster (for ``amk.build_fused_kernel`` and for ``amk.compile``'s subgraphs, at their size bucket);
    ``target_cache_dir``: the directory under which amk writes everything it keeps (tuned kernels, timings, locks
    and the emitted sources that Triton imports; default: ``AMK_CACHE_DIR`` or the user cache directory): a
    non-empty path that is a directory or does not exist yet (it is created), kept as an absolute path (a relative one
    is taken from the current directory when the config is made); ``search``: how candidates are picked,
    one of ``exhaustive``, ``random`` or ``bayesian``. ``strategy=`` is the deprecated name of ``search`` (a
    DeprecationWarning; "strategy" now means a tiling strategy, :mod:`amk.lowering.strategies`).
    """

    search_budget: int = 16
    warmup_runs: int = 10
    measure_runs: int = 30
    enable_warp_specialization: bool = False
    vendor_gemm: bool = True
    target_cache_dir: str | os.PathLike | None = None
    search: str = "bayesian"

    def __post_init__(self):
        for name in ("search_budget", "warmup_runs", "measure_runs"):
            value = getattr(self, name)
            least = 0 if name == "warmup_runs" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidArgumentError(f"TunerConfig.{name} must be an integer >= {least}, got {value!r}")
        for name in ("enable_warp_specialization", "vendor_gemm"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"TunerConfig.{name} must be True or False")
        check_directory_argument(self.target_cache_dir, "TunerConfig.target_cache_dir")
        if self.target_cache_dir is not None:  # relative to the directory of now: a later os.chdir does not move it
            object.__setattr__(self, "target_cache_dir", str(absolute_directory(self.target_cache_dir)))
        if self.search not in SEARCH_METHODS:
            raise InvalidArgumentError(
                f"TunerConfig.search must be one of {', '.join(SEARCH_METHODS)}, got {self.search!r}")


def _checked_init(init):
    """TunerConfig's ``__init__`` refusing arguments it does not have with an UnknownArgumentError (a TypeError, as
    the dataclass's own, and an amk error) that lists those it has, and also taking ``strategy=``, the deprecated
    name of ``search``."""
    names = [field.name for field in fields(TunerConfig)]

    @functools.wraps(init)
    def __init__(self, *args, strategy=_UNSET, **kwargs):
        unknown = sorted(set(kwargs) - set(names))
        if unknown or len(args) > len(names):
            what = (f"no argument named {', '.join(unknown)}" if unknown
                    else f"at most {len(names)} positional arguments, got {len(args)}")
            raise UnknownArgumentError(f"TunerConfig takes {what}; its arguments: {', '.join(names)}")
        if strategy is not _UNSET:
            warnings.warn("TunerConfig(strategy=...) is deprecated: use TunerConfig(search=...)", DeprecationWarning,
                          stacklevel=2)
            if strategy not in SEARCH_METHODS:
                raise InvalidArgumentError(f"TunerConfig.strategy (deprecated: use search) must be one of "
                                           f"{', '.join(SEARCH_METHODS)}, got {strategy!r}")
            if kwargs.get("search", strategy) != strategy:
                raise InvalidArgumentError(f"TunerConfig got search={kwargs['search']!r} and strategy={strategy!r}, "
                                           "its deprecated name: give search only")
            kwargs["search"] = strategy
        init(self, *args, **kwargs)

    return __init__


def _deprecated_strategy(self: TunerConfig) -> str:
    """``search``, under its deprecated name."""
    warnings.warn("TunerConfig.strategy is deprecated: use TunerConfig.search", DeprecationWarning, stacklevel=2)
    return self.search


TunerConfig.__init__ = _checked_init(TunerConfig.__init__)
TunerConfig.strategy = property(_deprecated_strategy)


def check_directory_argument(value, what: str, none_means: str = "the default") -> None:
    """A directory argument such as a cache's (``what`` names it) must name a directory, existing or to be created:
    an empty path would mean the current directory, and a file cannot hold one. None is accepted (``none_means``
    says what it stands for in the error message)."""
    if value is None:
        return
    accepted = f"a non-empty path (str or os.PathLike) of a directory, existing or not, or None for {none_means}"
    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise InvalidArgumentError(f"{what} must be {accepted}; got {value!r}")
    path = os.fspath(value)
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise InvalidArgumentError(f"{what} must be {accepted}; got {value!r}")
    named = str(absolute_directory(path))
    existing = named  # the path itself or, when it does not exist yet, its nearest existing parent
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = "exists and is not a directory" if existing == named else f"is under the file {existing!r}"
        raise InvalidArgumentError(f"{what} {path!r} {where}; it must be {accepted}")


def validate_grid(parameter_grid: Mapping | None) -> dict[str, list[int]] | None:
    """Check a ``parameter_grid`` (keys as in :data:`PARAMETER_KEYS`, values non-empty lists of positive ints)."""
    if parameter_grid is None:
        return None
    if not isinstance(parameter_grid, Mapping) or not parameter_grid:
        raise InvalidArgumentError(f"parameter_grid must be a non-empty dict of lists, got {parameter_grid!r}")
    grid = {}
    for key, values in parameter_grid.items():
        if key not in PARAMETER_KEYS:
            raise InvalidArgumentError(
                f"parameter_grid key {key!r} is not a tunable parameter; accepted: {', '.join(PARAMETER_KEYS)}")
        if isinstance(values, int) and not isinstance(values, bool):
            values = [values]
        low, high, accepted = (0, 1, "0 and/or 1") if key in SWITCHES else (1, None, "positive ints")
        if (not isinstance(values, Sequence) or not values
                or any(not isinstance(v, int) or isinstance(v, bool) or v < low or (high is not None and v > high)
                       for v in values)):
            raise InvalidArgumentError(
                f"parameter_grid[{key!r}] must be a non-empty list of {accepted}, got {values!r}")
        # A grouped tile grid binds GROUP_M as a tile size (the staged kernel's verifier: a power of two); the rest
        # is the rule recorded configurations follow.
        bad = [v for v in values if key == "GROUP_SIZE_M" and v & (v - 1)]
        if bad:
            raise InvalidArgumentError(f"parameter_grid[{key!r}] values must be powers of two, got {bad}")
        for value in values:
            try:
                check_values({PARAMETER_KEYS[key]: value})
            except ValueError as error:
                raise InvalidArgumentError(f"parameter_grid[{key!r}]: {error}") from None
        grid[PARAMETER_KEYS[key]] = list(values)
    return grid


def grid_configs(grid: dict[str, list[int]], base: KernelConfig) -> list[KernelConfig]:
    """Every configuration of ``grid``; parameters it leaves out keep ``base``'s values."""
    keys = list(grid)
    fields = base.as_dict()
    return [KernelConfig(**(fields | dict(zip(keys, values)))) for values in itertools.product(*(grid[k] for k in keys))]


def nearest_in_grid(grid: dict[str, list[int]], heuristic: KernelConfig) -> KernelConfig:
    """The grid point closest to the heuristic configuration (used when candidates cannot be timed)."""
    fields = heuristic.as_dict()
    for key, values in grid.items():
        fields[key] = min(values, key=lambda v: (abs(v.bit_length() - fields[key].bit_length()), v))
    return KernelConfig(**fields)


def untimed_in_grid(grid: dict[str, list[int]], heuristic: KernelConfig, kernel,
                    size_hints: Mapping[str, int] | None = None) -> KernelConfig:
    """:func:`nearest_in_grid`, without a Gluon kernel where the device or the kernel cannot take one (the
    interpreter, a GPU other than Hopper, a transposed operand): a grid allows ``GLUON``, it cannot make it run."""
    from amk.lowering.stage import kernel_problem, rotation_group
    from amk.lowering.strategies import strategy_named

    group = rotation_group(kernel)
    if group is not None and "BLOCK_N" in grid:
        whole = [value for value in grid["BLOCK_N"] if value % group == 0]
        if not whole:
            log.warning("parameter_grid's BLOCK_N values split the groups of %d columns that kernel %s rotates in "
                        "registers: BLOCK_N %d is used instead", group, kernel.sym_name.data, heuristic.BLOCK_N)
        grid = {**grid, "BLOCK_N": whole or [heuristic.BLOCK_N]}
    config = nearest_in_grid(grid, heuristic)
    if config.GLUON:
        rows, cols, contraction, element_bytes = kernel_problem(kernel, size_hints)
        reason = _gluon_prune_reason(config, strategy_named(kernel.strategy.data), contraction is not None,
                                     element_bytes, DeviceLimits.current(),
                                     gluon_fit(kernel, rows, cols, contraction, size_hints),
                                     contraction)
        if reason:
            log.warning("parameter_grid asks for GLUON=1, which kernel %s cannot use here (%s): its Triton kernel is "
                        "emitted instead", kernel.sym_name.data, reason)
            config = replace(config, GLUON=0)
    return config


# ----------------------------------------------------------------------------------------------------------------------
# Search space, pruning and measurement
# ----------------------------------------------------------------------------------------------------------------------

log = logging.getLogger("amk.tuner")

MAX_ACCUMULATOR_REGISTERS = 256  # fp32 accumulator values per thread beyond which the kernel spills
# Values per thread of a kernel without a dot (a row pass holding its rows' tiles) above which it is not timed: a
# row_resident pass over 4096 columns at 256 values per thread took 5-6 s to compile for sm_90 against at most 1.5 s
# at 128 (Triton 3.6; the PTX grows with the values a thread holds; benchmarks/results/
# 2026-12-01-cpu-sm90-compile-times.md), and a cold build waits on its slowest candidate.
MAX_ROW_TILE_VALUES = 128


@dataclass(frozen=True)
class DeviceLimits:
    name: str
    shared_memory: int
    sm_count: int
    tma: bool = False  # tensor descriptors (Hopper, compute capability 9.0, and newer)
    gluon: bool = False  # amk-emit-gluon's kernels run here: Hopper's wgmma (9.x only), a triton with Gluon

    @staticmethod
    def current() -> DeviceLimits:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            shared = getattr(props, "shared_memory_per_block_optin", 0) or 101376
            return DeviceLimits(props.name, shared, props.multi_processor_count, props.major >= 9,
                                props.major == 9 and _gluon_installed() and not interpreting())
        return DeviceLimits("cpu", 1 << 30, 1)


def _gluon_installed() -> bool:
    """Whether the installed triton has the Gluon API amk-emit-gluon writes (triton 3.6 and newer)."""
    import importlib.util

    import triton

    try:
        major, minor = (int(part) for part in triton.__version__.split(".")[:2])
        return (major, minor) >= (3, 6) and importlib.util.find_spec("triton.experimental.gluon") is not None
    except (ValueError, ImportError):  # an unparsable version, or no triton.experimental at all
        return False


def default_space(strategy: str, rows: Dim, has_dot: bool, limits: DeviceLimits | None = None,
                  warp_specialization: bool = False, contraction: Dim | None = None) -> dict[str, list[int]]:
    """The candidates searched when no ``parameter_grid`` is given: the tiling strategy's search space (for
    tile-grid GEMMs, with what the device offers: persistent and TMA variants on Hopper, warp-specialized ones when
    asked for; for chunk_recompute, whether the ``contraction`` is short enough to be one tile)."""
    from amk.lowering.strategies import strategy_named  # the IR and its passes load only when a kernel is tuned

    return strategy_named(strategy).search_space(rows, has_dot, contraction, limits, warp_specialization)


def offers_tf32x3(kernel, fp32_dot: str) -> bool:
    """Whether a tile-level kernel's dots may run as three TF32 products (``TF32X3``): dots of fp32 operands under
    PyTorch's float32 matmul precision "highest", whose IEEE dots run on the CUDA cores (under "high" they are TF32
    already; fp16 and bf16 dots are what they are)."""
    from xdsl.dialects.builtin import f32

    from amk.dialects import tiled_loop

    return fp32_dot == "ieee" and any(isinstance(op, tiled_loop.DotOp) and op.lhs.type.element_type == f32
                                      for op in kernel.walk())


def prune_reason(config: KernelConfig, strategy: str, has_dot: bool, element_bytes: int, limits: DeviceLimits,
                 cols: Dim | None = None, contraction: Dim | None = None, tf32x3: bool = False,
                 gluon: GluonFit | None = None, rotation_group: int | None = None) -> str | None:
    """Why ``config`` cannot run well (or at all) on this device, or None when it is worth timing (the general checks
    here, the tiling strategy's own through its ``prune_reason`` and ``tile_width``); ``tf32x3``: whether the kernel
    offers the switch ``TF32X3`` (:func:`offers_tf32x3`); ``gluon``: the kernel's :func:`gluon_fit`;
    ``rotation_group``: the columns of the groups that the kernel rotates in registers, which its ``BLOCK_N`` tiles
    must hold whole (:func:`amk.lowering.stage.rotation_group`; None where its tiles' width is not ``BLOCK_N``)."""
    from amk.lowering.strategies import STRATEGIES as TILING
    from amk.lowering.strategies import strategy_named

    tiling = strategy_named(strategy)
    if rotation_group is not None and config.BLOCK_N % rotation_group:
        return f"BLOCK_N {config.BLOCK_N} splits the groups of {rotation_group} columns the kernel rotates in registers"
    if (config.PERSISTENT or config.TMA) and not tiling.tile_grid:
        grids = ", ".join(name for name, each in TILING.items() if each.tile_grid)
        return f"PERSISTENT and TMA apply to the tile-grid strategies ({grids}), not {strategy}"
    if config.TMA and not limits.tma:
        return f"TMA needs tensor descriptors (compute capability 9.0 or newer); {limits.name} has none"
    if config.WARP_SPECIALIZE and not (config.PERSISTENT and config.TMA):
        return "WARP_SPECIALIZE applies to the tile loop of a persistent TMA kernel (PERSISTENT=1, TMA=1)"
    if config.GLUON:
        reason = _gluon_prune_reason(config, tiling, has_dot, element_bytes, limits, gluon, contraction)
        if reason:
            return reason
    if config.TF32X3 and not tf32x3:
        return ('TF32X3 applies to fp32 dots under PyTorch\'s float32 matmul precision "highest" (elsewhere the dots '
                "are TF32 or fp16/bf16 already)")
    reason = tiling.prune_reason(config, cols, limits)
    if reason:
        return reason
    if has_dot:
        if min(config.BLOCK_M, config.BLOCK_N, config.BLOCK_K) < 16:
            return "tl.dot needs tiles of at least 16 on every axis"
        if contraction is not None and contraction.is_static and config.BLOCK_K > whole_k_tile(contraction):
            return (f"BLOCK_K {config.BLOCK_K} is wider than K = {contraction.value} rounded up to a power of two: the "
                    "dot would multiply padding")
        staged = tiling.dot_shared_memory(config, element_bytes, contraction)
        if staged > limits.shared_memory:
            return f"shared memory: {config.num_stages} stages x tiles = {staged} bytes > {limits.shared_memory}"
        per_thread = config.BLOCK_M * config.BLOCK_N // (32 * config.num_warps)
        if per_thread > MAX_ACCUMULATOR_REGISTERS:
            return f"registers: the accumulator needs {per_thread} fp32 values per thread (> {MAX_ACCUMULATOR_REGISTERS})"
    else:
        width = tiling.tile_width(config, cols)
        if config.BLOCK_M * width // (32 * config.num_warps) > MAX_ROW_TILE_VALUES:
            return f"registers: the tile needs more than {MAX_ROW_TILE_VALUES} values per thread"
    return None


@dataclass(frozen=True)
class GluonFit:
    """What of a kernel, beyond one configuration, decides whether ``GLUON=1`` is worth a candidate: why not at all
    (None when it may), and the sizes of an element of the dot's operands (staged through the ring) and of the output
    (its tile is staged in shared memory for the TMA store)."""

    refusal: str | None
    operand_bytes: int
    output_bytes: int


def gluon_fit(kernel, rows: Dim, cols: Dim, contraction: Dim | None,
              size_hints: Mapping[str, int] | None = None) -> GluonFit:
    """The :class:`GluonFit` of a tile-level kernel at the sizes it is tuned for (``rows``, ``cols``,
    ``contraction``, and ``size_hints`` for a batched kernel's batch)."""
    from amk.dialects import tiled_loop
    from amk.dtypes import to_torch
    from amk.lowering.emit_gluon import gluon_kernel_problem
    from amk.lowering.stage import kernel_problem
    from amk.lowering.strategies import strategy_named
    from amk.symbolic import Dim

    num_inputs = kernel.num_inputs.value.data
    args = list(kernel.body.block.args)
    # the outputs' (a workspace of fp32 statistics is no output tile to stage)
    output_bytes = max((to_torch(a.type.element_type).itemsize for a in kernel.outputs), default=4)
    dot = next((op for op in kernel.walk() if isinstance(op, tiled_loop.DotOp)), None)
    operand_bytes = to_torch(dot.lhs.type.element_type).itemsize if dot is not None else 4

    def fit(refusal: str | None) -> GluonFit:
        return GluonFit(refusal, operand_bytes, output_bytes)

    tiling = strategy_named(kernel.strategy.data)
    problem = gluon_kernel_problem(tiling.gluon_form, kernel)
    if problem:
        return fit(f"its Gluon form cannot take it: {problem}")

    views = [v.data for v in kernel.arg_views.data] if kernel.arg_views is not None else []
    # A transposed weight (nn.Linear's) is loaded as tiles of its own rows, which wgmma reads as a K-major B; a
    # transposed lhs is not taken.
    weight = dot.rhs.owner.source if dot is not None and isinstance(dot.rhs.owner, tiled_loop.LoadOp) else None
    if any(view == "transpose" and arg is not weight for arg, view in zip(args[:num_inputs], views)):
        return fit("GLUON kernels read only the weight (the dot's rhs) transposed; this kernel reads another "
                   "operand so")
    if any(d is not None and d.is_static and d.value * size % 16
           for d, size in ((cols, operand_bytes), (contraction, operand_bytes), (cols, output_bytes))):
        return fit("GLUON kernels move rows by TMA, which needs them a multiple of 16 bytes long")
    # The sizes above are the hints' where the kernel's are symbols: a length that is a symbol may be any other.
    _, kernel_cols, kernel_contraction, _ = kernel_problem(kernel)
    if any(d is not None and not d.is_static for d in (kernel_cols, kernel_contraction)):
        return fit("GLUON kernels move rows by TMA, which needs them a multiple of 16 bytes long: a row length of "
                   f"symbolic size ({kernel_cols}, {kernel_contraction}) may not be one at every size")
    least = tiling.gluon_min_macs
    # A batched kernel's operands of rank 3 or more lead with its batch dims: the matrices it multiplies.
    batch = next((Dim(math.prod((d.expr for d in a.type.dims[:-2]), start=1)) for a in kernel.inputs
                  if a.type.rank >= 3), Dim(1)).subs(dict(size_hints or {}))
    if (all(d is not None and d.is_static for d in (batch, rows, cols, contraction))
            and batch.value * rows.value * cols.value * contraction.value < least):
        matrices = f"{batch.value} x " if kernel.batched else ""
        return fit(f"a GEMM of {matrices}{rows.value} x {cols.value} x {contraction.value} is too small for a GLUON "
                   f"kernel (under {least} multiply-adds)")
    return fit(None)


def _gluon_prune_reason(config: KernelConfig, tiling, has_dot: bool, element_bytes: int,
                        limits: DeviceLimits, fit: GluonFit | None, contraction: Dim | None = None) -> str | None:
    """Why ``config``'s ``GLUON=1`` cannot be emitted (amk-emit-gluon's own checks of the tiles) or is not worth it
    (``fit``, the kernel's), or None."""
    from amk.lowering.emit_gluon import gluon_config_problem

    if not (limits.gluon and tiling.gluon and has_dot):
        return (f"GLUON applies to the GEMM kernels of {', '.join(_gluon_strategies())} on Hopper (compute capability "
                f"9.x) with triton's Gluon (3.6 or newer); not to this {tiling.name} kernel on {limits.name}")
    if fit is not None and fit.refusal:
        return fit.refusal
    # without the kernel's fit (a bare configuration), its inputs' element size for both
    operand_bytes, output_bytes = (fit.operand_bytes, fit.output_bytes) if fit is not None else (element_bytes,) * 2
    if operand_bytes != 2:
        return "GLUON kernels multiply fp16 or bf16 operands"
    # a short K is loaded whole, padded to a power of two (chunk_recompute's column sweep)
    whole_k = whole_k_tile(contraction) if contraction is not None and contraction.is_static else None
    return gluon_config_problem(tiling.gluon_form, config, operand_bytes, output_bytes, whole_k, limits.shared_memory)


def _gluon_strategies() -> list[str]:
    from amk.lowering.strategies import STRATEGIES

    return [name for name, strategy in STRATEGIES.items() if strategy.gluon]


@dataclass
class Trial:
    config: KernelConfig
    status: str  # "ok", "failed", "wrong" (timed, see TIMED); "pruned"; "untimed" (kept without a search)
    time_ms: float | None = None
    detail: str = ""
    reused: bool = False  # taken from an earlier measurement on this device (amk's timings cache), not re-timed

    def as_dict(self) -> dict:
        return {"config": self.config.user_view(), "status": self.status, "time_ms": self.time_ms, "detail": self.detail,
                "reused": self.reused}

    @staticmethod
    def from_dict(data: Mapping) -> Trial:
        """The inverse of :meth:`as_dict` (raises KeyError, TypeError or ValueError on malformed data)."""
        config = KernelConfig.from_user_view(data["config"])
        time_ms = data.get("time_ms")
        return Trial(config, str(data["status"]), None if time_ms is None else float(time_ms),
                     str(data.get("detail", "")))


TIMED = ("ok", "failed", "wrong")  # the statuses of trials that were measured (and are worth keeping)

# A kernel that moves at most LAUNCH_BOUND_BYTES (its inputs and outputs), does at most LAUNCH_BOUND_MACS
# multiply-adds and walks at most LAUNCH_BOUND_LENGTH values in one program's loop (its contraction, or its row where
# it has none) is bound by its launch: its work takes well under the ~2-3 us that launching it costs on the GPUs amk
# tunes on (256 KiB is 0.06 us of H200 bandwidth) and no program loops long, so every configuration runs in about the
# same time and a search would only compile candidates. The small-sized buckets of amk.compile (a few rows of a small
# model) are where this saves most: examples/mlp_blocks.py --small tuned two dozen such buckets on the H200 and ran
# past 300 s. A decode step's long rows (a 32000-wide softmax, split_k over K = 4096) are tuned: there the tile sizes
# set how long one program loops.
LAUNCH_BOUND_BYTES = 256 * 1024
LAUNCH_BOUND_MACS = 2 ** 22
LAUNCH_BOUND_LENGTH = 1024


def launch_bound_reason(kernel, size_hints: Mapping[str, int] | None = None) -> str | None:
    """Why ``kernel`` is not worth searching at these sizes (see ``LAUNCH_BOUND_BYTES``), or None: also None where a
    size has no value (the tuner times concrete sizes)."""
    from amk.lowering.stage import element_size, kernel_problem
    from amk.symbolic import evaluate

    bindings = dict(size_hints or {})
    try:
        rows_dim, cols_dim, contraction_dim, _ = kernel_problem(kernel, size_hints)
        rows, cols = evaluate(rows_dim, bindings), evaluate(cols_dim, bindings)
        contraction = None if contraction_dim is None else evaluate(contraction_dim, bindings)
        moved = sum(math.prod(evaluate(dim, bindings) for dim in value.type.dims) * element_size(value.type.element_type)
                    for value in (*kernel.inputs, *kernel.outputs))
    except ValueError:  # a size without a value
        return None
    macs = rows * cols * (contraction or 0)
    length = contraction if contraction is not None else cols
    if moved > LAUNCH_BOUND_BYTES or macs > LAUNCH_BOUND_MACS or length > LAUNCH_BOUND_LENGTH:
        return None
    problem = " x ".join(str(d) for d in (rows, cols, contraction) if d is not None)
    return (f"launch-bound at {problem} ({moved} bytes moved, {macs} multiply-adds): kept without a search")


def config_key(config: KernelConfig) -> str:
    """A stable text key of a configuration (``BLOCK_M=64,BLOCK_N=64,...``), used to look up earlier timings."""
    return ",".join(f"{name}={value}" for name, value in config.as_dict().items())


def _select(candidates: list[KernelConfig], budget: int, search: str, seed: int = 0,
            keep_first: int = 0) -> list[KernelConfig]:
    """``budget`` of the candidates (all of them when exhaustive), at random; the first ``keep_first`` are kept."""
    if len(candidates) <= budget or search == "exhaustive":
        return candidates if search == "exhaustive" else candidates[:budget]
    kept = candidates[:min(keep_first, budget)]
    return kept + random.Random(seed).sample(candidates[len(kept):], budget - len(kept))


GRAPH_TIMING_BELOW_MS = 0.05
# The launches such a graph holds, in ms of the kernel's time (each of the ten replays runs them all). With Triton's
# 20 ms, each candidate of a 4-5 us row kernel cost 85 ms on the H200 (capturing and replaying them), and the first
# call of a Linear + RMSNorm row spent 2.0 s timing; with 5 ms, 28 ms and 0.7 s, still 150 or more launches a replay.
GRAPH_REP_MS = 5.0
EARLY_STOP_FACTOR = 1.3


def priors(strategy: str, has_dot: bool, limits: DeviceLimits) -> list[dict[str, int]]:
    """The configurations to time first after the heuristic for a kernel of ``strategy`` on this device."""
    from amk.lowering.strategies import strategy_named

    if not limits.tma:  # no prior measured elsewhere than on Hopper
        return []
    return strategy_named(strategy).priors(has_dot)


# Warm-up launches stop once they have run this long (a 7 ms GEMM needs no ten warm-up launches), and a candidate's
# timed launches once they would run longer than MEASURE_MS (C's 6.7 ms GEMM: 14 launches, not 30; its cold build
# spent 7.9 s timing, 2026-12-01-h200-build-time-CX).
WARMUP_MS = 25.0
MEASURE_MS = 100.0
# A candidate whose first EARLY_STOP_RUNS timed launches have a median above the bound it was given stops there.
EARLY_STOP_RUNS = 5


def measure(fn, warmup: int, runs: int, give_up_above: float | None = None,
            graph_below: float = GRAPH_TIMING_BELOW_MS) -> float:
    """Median milliseconds of ``fn`` over ``runs`` launches timed with CUDA events, flushing L2 before each.

    Up to ``warmup`` launches run first, fewer when they take over ``WARMUP_MS`` together, and up to ``runs`` are
    timed, fewer when they would take over ``MEASURE_MS`` (at least ``EARLY_STOP_RUNS``). With ``give_up_above``
    (ms), a candidate clearly slower than that after ``EARLY_STOP_RUNS`` launches is not timed further: its median
    so far is returned (the search only needs to know that it lost).

    A kernel faster than ``GRAPH_TIMING_BELOW_MS`` (decode shapes) is timed again as replays of a captured CUDA
    graph, as it runs in a decode step: with a host launch before each event pair, the launch latency dominates a
    ~10 us measurement and ranks configurations by what they do not control. Each call in the graph still finds a
    cold L2, as a decode step's layer finds its weights (:func:`amk.benchmarking.timed_by`). Another
    ``graph_below`` (ms) moves that bound: ``math.inf`` times every ``fn`` that can be captured as replays (ops run
    one by one from Python, whose host time would otherwise be timed).
    """
    return _measure(fn, warmup, runs, give_up_above, graph_below)[0]


def _measure(fn, warmup: int, runs: int, give_up_above: float | None = None,
             graph_below: float | None = GRAPH_TIMING_BELOW_MS) -> tuple[float, str]:
    with phase("time"):
        return timed_by(fn, runs=runs, warmup=warmup, warmup_ms=WARMUP_MS, give_up_above=give_up_above,
                        early_stop_runs=EARLY_STOP_RUNS, graph_below=graph_below, measure_ms=MEASURE_MS,
                        graph_rep_ms=GRAPH_REP_MS)


def fastest_program(programs: Mapping[str, Callable[[], object]],
                    settings: TunerConfig) -> tuple[str, dict[str, float], str]:
    """Time whole programs (each a call on prepared inputs) as candidates are timed; the fastest's name, every
    median in milliseconds, and how they were timed (:data:`~amk.benchmarking.GRAPH`, ``EVENTS``, ``WALL_CLOCK``).
    All are timed the same way: a program under ``GRAPH_TIMING_BELOW_MS`` is timed as CUDA-graph replays where it can
    be captured, one above it or one that cannot be captured keeps its event timing, which counts launch latency the
    replays leave out; where their ways differ, those replayed are timed again by events."""
    timed = {name: _measure(run, settings.warmup_runs, settings.measure_runs) for name, run in programs.items()}
    if len({how for _, how in timed.values()}) > 1:
        log.info("whole programs timed unevenly (%s): timed again by CUDA events",
                 ", ".join(f"{name} by {how}" for name, (_, how) in timed.items()))
        timed = {name: _measure(programs[name], settings.warmup_runs, settings.measure_runs, graph_below=None)
                 if how != EVENTS else (ms, how) for name, (ms, how) in timed.items()}
    times = {name: ms for name, (ms, _) in timed.items()}
    (how,) = {how for _, how in timed.values()}
    return min(times, key=times.__getitem__), times, how


def tune(kernel, settings: TunerConfig, grid: dict[str, list[int]] | None, heuristic: KernelConfig,
         build_and_run, known: Mapping[str, Trial] | None = None, prepare=None,
         batch: int = 1, size_hints: Mapping[str, int] | None = None,
         fp32_dot: str = "ieee", learned: Sequence[KernelConfig] = (),
         beaten_at_ms: float | None = None) -> tuple[KernelConfig, list[Trial]]:
    """:func:`tune_in_steps` in one go, against ``beaten_at_ms``."""
    steps = tune_in_steps(kernel, settings, grid, heuristic, build_and_run, known, prepare, batch, size_hints, fp32_dot,
                          learned)
    next(steps)
    return _finished(steps, beaten_at_ms)


def _finished(steps, beaten_at_ms: float | None) -> tuple[KernelConfig, list[Trial]]:
    """The configuration and log of a :func:`tune_in_steps` that yielded, sent ``beaten_at_ms``."""
    try:
        steps.send(beaten_at_ms)
    except StopIteration as done:
        return done.value
    raise AssertionError("tune_in_steps yields once")


def tune_in_steps(kernel, settings: TunerConfig, grid: dict[str, list[int]] | None, heuristic: KernelConfig,
                  build_and_run, known: Mapping[str, Trial] | None = None, prepare=None,
                  batch: int = 1, size_hints: Mapping[str, int] | None = None,
                  fp32_dot: str = "ieee", learned: Sequence[KernelConfig] = ()):
    """Time candidate configurations of one kernel and return the fastest with the log of every trial.

    ``build_and_run(config)`` compiles the kernel with ``config`` and returns a function launching it on prepared
    inputs and a check of its output. The heuristic, when the space holds it, is timed first; failures are recorded
    and skipped; the heuristic is the fallback. ``known``
    maps :func:`config_key` to trials measured before on this device and shape: those candidates are not run again
    (and do not count against the search budget). Switches with several values in the space (``PERSISTENT``,
    ``TMA``, ``WARP_SPECIALIZE``, ``TF32X3``, ``GLUON``) are not searched: the search runs with their first value, then every setting of
    them is timed on the fastest configurations found (:func:`_refine`). ``prepare(configs)``, when given, is called
    with each group of candidates (``batch`` at a time for the model-guided search) before any of them is timed, so
    that they can be compiled together. ``size_hints`` give a kernel of symbolic sizes the sizes it is tuned for (its
    search space and pruning see them). ``fp32_dot``: how the build multiplies fp32 tiles (``ieee`` under PyTorch's
    "highest"): where IEEE, fp32 dots also get the switch ``TF32X3`` (three TF32 products, as accurate).
    ``learned``: configurations that won for kernels of the same family on this device (other shapes, other size
    buckets), timed right after the heuristic and the priors, each with the parameters the space searches.

    A generator in two steps, so that a program's kernels can all be searched before any is refined: it yields the
    fastest time the search (and the dot-precision refinement) found (infinite where none ran), then is sent
    ``beaten_at_ms`` and returns the configuration and the log: ``beaten_at_ms`` is the time of a whole program that
    computes what the kernel's program does (the one with the vendor GEMM, tuned first), less what the kernel's
    program spends in its other kernels (divided by ``OUTRUN_MARGIN``: the margin is the whole program's), or None; a
    kernel that the search leaves more than ``OUTRUN_MARGIN`` slower than it is not refined: its program cannot win
    their race.
    """
    from amk.lowering.stage import kernel_problem, rotation_group
    from amk.lowering.strategies import strategy_named

    rows, cols, contraction, element_bytes = kernel_problem(kernel, size_hints)
    strategy = kernel.strategy.data
    has_dot = contraction is not None
    limits = DeviceLimits.current()
    # A tile-size symbol the kernel does not have (row_resident's BLOCK_N, a standalone kernel's BLOCK_K in a user's
    # grid), or a switch it ignores (a batched kernel's launches are neither persistent nor TMA, nor Gluon unless its
    # strategy's Gluon kernels take batches), would only make copies of the same kernel to time.
    batched_switches = ("TF32X3", "GLUON") if strategy_named(strategy).gluon_batches else ("TF32X3",)
    offered = batched_switches if kernel.batched else SWITCHES
    used = {param.data for param in kernel.tile_params.data} | {"num_warps", "num_stages", *offered}

    tf32x3 = offers_tf32x3(kernel, fp32_dot)
    gluon = gluon_fit(kernel, rows, cols, contraction, size_hints)
    rotated = rotation_group(kernel) if "BLOCK_N" in used else None

    def pruned(config: KernelConfig) -> str | None:
        return prune_reason(config, strategy, has_dot, element_bytes, limits, cols, contraction, tf32x3, gluon,
                            rotated)

    space = {key: values for key, values in (grid or {}).items() if key in used}
    if grid is not None and all(pruned(config) for config in grid_configs(space, heuristic)):
        # A program's kernels differ (a GEMM and a row_resident pass over 8192 columns): a grid written for one may
        # fit no configuration of another, which is then tuned over its own space rather than left at the heuristic.
        log.warning("parameter_grid fits no configuration of kernel %s (%s strategy: %s); tuning it over its own "
                    "default space instead", kernel.sym_name.data, strategy, pruned(grid_configs(space, heuristic)[0]))
        grid = None
    if grid is None:
        space = {key: values for key, values in default_space(strategy, rows, has_dot, limits,
                                                              settings.enable_warp_specialization,
                                                              contraction).items() if key in used}
        if tf32x3:
            # The search's own picks run three TF32 products (the switch's first value; the heuristic, a seed, keeps
            # IEEE dots): on tensor cores they are the likely winner, and the tiles fastest with IEEE dots are not
            # those fastest with TF32X3 (on the H200's fp32 LayerNorm row 64 x 64 won under IEEE, 128 x 64 under
            # TF32X3 by 30%). The IEEE dots are refined. (TMA stays off in the search: small GEMMs prune it.)
            space["TF32X3"] = [1, 0]
    trials: list[Trial] = []
    prepare = prepare or (lambda configs: None)

    def unseen(configs: list[KernelConfig]) -> list[KernelConfig]:
        """The configurations worth timing: pruned ones and those timed before are recorded as such instead."""
        fresh = []
        for config in configs:
            reason = pruned(config)
            previous = known.get(config_key(config)) if known else None
            if reason:
                trials.append(Trial(config, "pruned", detail=reason))
                log.info("pruned %s: %s", config.user_view(), reason)
            elif previous is not None and previous.status in TIMED:
                trials.append(Trial(config, previous.status, previous.time_ms, previous.detail, reused=True))
            else:
                fresh.append(config)
        return fresh

    # Switches (persistent, TMA, ...) refine the best tile shapes instead of multiplying the space searched.
    switches = {key: values for key, values in space.items() if key in SWITCHES and len(values) > 1}
    searched = grid_configs(space | {key: values[:1] for key, values in switches.items()}, heuristic)
    # The heuristic and the priors lead the search where the space holds them, a prior with the switches it names.
    siblings = [{key: value for key, value in config.as_dict().items() if key in space} for config in learned]
    seeds = [seed for seed in dict.fromkeys([heuristic, *(replace(heuristic, **prior)
                                                           for prior in [*priors(strategy, has_dot, limits),
                                                                         *siblings])])
             if all(value in space[key] if key in space else value == getattr(heuristic, key)
                    for key, value in seed.as_dict().items())]
    # Seeds first: trials reused from the cache are recorded in this order, as a fresh search would time them.
    fresh = unseen(seeds + [config for config in searched if config not in seeds])
    # The dot precision interacts with TMA: on the H200 the fp32 LayerNorm row's fused kernel took 0.89-1.02 ms with
    # TF32X3 alone against 0.80 with IEEE dots, and 0.64 with TF32X3 and TMA
    # (2026-12-02-h200-row-profile-fp32-layernorm-b17bc4a.log). So the finalists are timed with every setting of TF32X3
    # and TMA (3 x 3 variants), whatever the other program's time; the launch switches then refine the finalists that
    # come out. (Each switch's first value is the one the search ran with.)
    launch = {key: values for key, values in switches.items() if key != "TF32X3"}
    precision = ([{"TF32X3": switches["TF32X3"], **{key: values for key, values in launch.items() if key == "TMA"}}]
                 if "TF32X3" in switches else [])
    launch_switches = [launch] if launch else []
    groups = precision + launch_switches

    def compile_ahead() -> None:
        """The first refinement's variants of the finalists so far, handed to the compile workers while the search
        is still timed (once all its candidates are theirs): most are the refinement's, compiled by then."""
        prepare([config for config in _variants(trials, groups[0]) if not pruned(config)])

    budget = settings.search_budget if has_dot else math.ceil(settings.search_budget * ROW_PASS_BUDGET_SHARE)
    _search(fresh, budget, settings, build_and_run, trials, prepare, batch, seeds, compile_ahead if groups else None)
    for group in precision:
        _refine(trials, group, unseen, settings, build_and_run, prepare)
    beaten_at_ms = yield _fastest_ms(trials)
    if _outrun(trials, beaten_at_ms):
        log.info("%s: its fastest candidate (%.4f ms) is more than %.0f%% slower than what the whole other program "
                 "leaves it (%.4f ms: that program's time less this one's other kernels', negative where they alone "
                 "take longer): not refined", kernel.sym_name.data, _fastest_ms(trials), (OUTRUN_MARGIN - 1) * 100,
                 beaten_at_ms)
        retimed = {}
    else:
        for group in launch_switches:
            _refine(trials, group, unseen, settings, build_and_run, prepare)
        retimed = _final_round(trials, settings, build_and_run)
    best = _chosen(trials, retimed)
    if best is None:
        log.warning("no candidate of %s ran; using the heuristic configuration", kernel.sym_name.data)
        return heuristic, trials
    return best.config, trials


# A kernel without a matmul (a row pass: LayerNorm, softmax, a vendor GEMM's epilogue) searches this share of the
# search budget: it is memory-bound, its candidates' times lie close together, and each costs as much to compile and
# time as a GEMM's. In BERT's FFN on the H200 (2026-12-04-h200-build-bert-f4f415a.log) the first 8 of 16 candidates
# held the fastest GELU epilogue and a LayerNorm pass within 0.3 us (6%) of the fastest; the 32 took 3.1 s of a 15 s
# first call.
ROW_PASS_BUDGET_SHARE = 0.5

# A kernel whose search (and dot-precision refinement) leaves it this much slower than a whole program of the same
# work is not refined further (its launch switches and the finalists' re-timing). Its program, which runs it and
# more, loses their race; refining the finalists' launch switches has not gained so much: the largest gain measured
# on the H200 was B's 1.9% (persistent and TMA, 3.339 -> 3.276 ms); A's fused search ends 9% behind its cuBLAS
# program and its refinement (3.9 s of its build) has never closed that. (The dot precision, refined before this
# check, is another matter: see ``tune``.)
OUTRUN_MARGIN = 1.05


def _fastest_ms(trials: list[Trial]) -> float:
    """The time of the fastest trial that ran (infinite where none did)."""
    return min((t.time_ms for t in trials if t.status == "ok"), default=math.inf)


def _outrun(trials: list[Trial], beaten_at_ms: float | None) -> bool:
    """Whether the fastest trial that ran (none: infinitely slow) is more than ``OUTRUN_MARGIN`` slower than
    ``beaten_at_ms``."""
    return beaten_at_ms is not None and _fastest_ms(trials) > beaten_at_ms * OUTRUN_MARGIN


FINALISTS = 3  # the fastest candidates of a search, timed again against each other before one is chosen
# Candidates this close to the fastest are ties: the one timed first wins (the heuristic, then the priors and the
# family's winners, then the search's picks), so that builds do not pick between equals by the noise of their run
# (four cold builds of B on the H200 kept the same tiles, persistent and TMA, with 3 stages in three and 4 in one).
TIE_TOLERANCE = 0.01


def _chosen(trials: list[Trial], retimed: dict[int, float]) -> Trial | None:
    """The trial to keep. Without finalists timed against each other (``retimed``: each one's first time, by
    ``id``), the fastest that ran. With them, the fastest of those finalists, or the earliest timed of them within
    ``TIE_TOLERANCE`` of it (ties are judged only between times taken side by side); another trial wins only with a
    time below every finalist's first time (one reused from the timings cache, or a finalist that could not be
    re-timed and kept its first time: a fresh candidate that was no finalist was slower than them in the search).
    The finalists' re-timed medians are taken later, on a GPU a search has heated, so they are not compared with
    others' first times: on the H200 a candidate timed once at 3.24 ms, fourth in B's search, beat finalists re-timed
    at 3.34-3.58 and then ran 3.50 ms against the Gluon finalist's 3.34 (``2026-12-03-h200-B-output-descriptor``)."""
    ran = [t for t in trials if t.status == "ok"]
    if not ran:
        return None
    fastest = min(ran, key=lambda t: t.time_ms)
    if len(retimed) < 2:
        return fastest
    side_by_side = [t for t in ran if id(t) in retimed]
    best = min(side_by_side, key=lambda t: t.time_ms)
    others = [t for t in ran if id(t) not in retimed]
    if others and min(t.time_ms for t in others) < min(retimed.values()):
        return min(others, key=lambda t: t.time_ms)
    return next(t for t in side_by_side if t.time_ms <= best.time_ms * (1 + TIE_TOLERANCE))


FINAL_ROUNDS = 3


def _variants(trials: list[Trial], switches: dict[str, list[int]]) -> list[KernelConfig]:
    """Every setting of ``switches`` on the fastest configurations timed so far (the ``FINALISTS``), less those
    already tried."""
    finalists = sorted((t for t in trials if t.status == "ok"), key=lambda t: t.time_ms)[:FINALISTS]
    tried = {config_key(t.config) for t in trials}
    variants = dict.fromkeys(replace(trial.config, **dict(zip(switches, values)))
                             for trial in finalists for values in itertools.product(*switches.values()))
    return [config for config in variants if config_key(config) not in tried]


def _refine(trials: list[Trial], switches: dict[str, list[int]], unseen, settings: TunerConfig, build_and_run,
            prepare) -> None:
    """Time every setting of ``switches`` on the fastest configurations found so far (the ``FINALISTS``)."""
    candidates = unseen(_variants(trials, switches))
    log.info("refining the finalists with %s: %d variants", ", ".join(switches), len(candidates))
    prepare(candidates)
    for config in candidates:
        _time_one(config, settings, build_and_run, trials)


def _final_round(trials: list[Trial], settings: TunerConfig, build_and_run) -> dict[int, float]:
    """Time the finalists (the fastest candidates timed in this search) again, interleaved, and keep the median of
    the rounds as their time; returns the first time of each finalist so timed, by ``id`` (none where fewer than two
    could be).

    Candidates timed minutes apart see different clocks (a long search heats the GPU); on the H200 one
    configuration measured 7.05 and 7.83 ms in two searches. Interleaving the finalists makes their comparison fair.
    """
    finalists = sorted((t for t in trials if t.status == "ok" and not t.reused), key=lambda t: t.time_ms)[:FINALISTS]
    if len(finalists) < 2:
        return {}
    launches = []
    for trial in finalists:
        try:
            launches.append((trial, build_and_run(trial.config)[0]))
        except Exception as error:  # it built once in this search; if it no longer does, it keeps its time
            log.info("finalist %s could not be re-timed: %s", trial.config.user_view(), error)
    if len(launches) < 2:
        return {}
    first_times = {id(trial): trial.time_ms for trial, _ in launches}
    samples: dict[int, list[float]] = {id(trial): [] for trial, _ in launches}
    for _ in range(FINAL_ROUNDS):
        for trial, launch in launches:
            samples[id(trial)].append(measure(launch, settings.warmup_runs, settings.measure_runs))
    for trial, _ in launches:
        trial.time_ms = statistics.median(samples[id(trial)])
        trial.detail = f"finalist: median of {FINAL_ROUNDS} interleaved measurements"
        log.info("finalist %s: %.4f ms", trial.config.user_view(), trial.time_ms)
    return first_times


def _time_one(config: KernelConfig, settings: TunerConfig, build_and_run, trials: list[Trial],
              give_up_above: float | None = None) -> float | None:
    try:
        launch, check = build_and_run(config)
        with phase("compile_here"):  # unless a compile worker did it, the first launch compiles
            launch()
        with phase("verify"):
            problem = check()
        if problem:
            trials.append(Trial(config, "wrong", detail=problem))
            log.info("config %s gives wrong results: %s", config.user_view(), problem)
            return None
        elapsed = measure(launch, settings.warmup_runs, settings.measure_runs, give_up_above)
    except Exception as error:  # compile failures and out-of-resources are expected for some configurations
        trials.append(Trial(config, "failed", detail=f"{type(error).__name__}: {str(error)[:300]}"))
        log.info("config %s failed: %s", config.user_view(), error)
        return None
    trials.append(Trial(config, "ok", elapsed))
    log.info("config %s: %.4f ms", config.user_view(), elapsed)
    return elapsed


def _search(viable: list[KernelConfig], budget: int, settings: TunerConfig, build_and_run, trials: list[Trial],
            prepare, batch: int, firsts: Sequence[KernelConfig] = (), compile_ahead=None) -> None:
    """Time up to ``budget`` of ``viable``, starting with ``firsts`` (the strategy's default configuration and
    the configurations that won before on this device class) where they are among them. A candidate clearly slower
    than the best so far (``EARLY_STOP_FACTOR``) is not timed to the end. ``compile_ahead()``, when given, is called
    after each candidate timed once every candidate of the search has been prepared (the compile workers would idle
    otherwise)."""
    leading = [config for config in dict.fromkeys(firsts) if config in viable]
    viable = leading + [config for config in viable if config not in leading]
    progress = tqdm(total=min(budget, len(viable)), desc="amk autotune", unit="config", leave=False, disable=None)
    best = [math.inf]
    all_prepared = [False]

    def prepared(configs: list[KernelConfig], last: bool) -> None:
        prepare(configs)
        all_prepared[0] = last

    def evaluate(config: KernelConfig) -> float | None:
        elapsed = _time_one(config, settings, build_and_run, trials,
                            # a best re-timed by CUDA-graph replay (no launch latency) is not comparable with the
                            # first event-timed launches of the next candidate
                            best[0] * EARLY_STOP_FACTOR if GRAPH_TIMING_BELOW_MS <= best[0] < math.inf else None)
        if elapsed is not None and elapsed < best[0]:
            best[0] = elapsed
        clock = build_phases.current()
        progress.set_postfix(best_ms=f"{best[0]:.4f}" if best[0] < math.inf else "-",
                             **({"phases": clock.summary()} if clock is not None else {}))
        progress.update(1)
        if compile_ahead is not None and all_prepared[0]:
            compile_ahead()
        return elapsed

    modelled = settings.search == "bayesian" and len(viable) > budget
    # Nothing is timed before the last candidate of a single round is drawn: a model would learn nothing, and its
    # sampling (a hundred asks, most outside the viable configurations) made 0.8 s of a B-sized tile2d kernel's
    # search on a CPU. Those candidates are drawn as TPE draws before it has results.
    one_round = modelled and len(batch_sizes(budget, batch)) == 1
    try:  # the bar goes also when a search is stopped (first_round_chooser stops it at its first timing)
        if modelled and not one_round and importlib.util.find_spec("optuna") is not None:
            _bayesian(viable, budget, evaluate, prepared, batch, len(leading))
        else:
            if one_round:
                chosen = _independent_picks(viable, budget, len(leading))
            else:
                if modelled:
                    log.warning("optuna is not installed; the bayesian search falls back to random search")
                chosen = _select(viable, budget, "random" if modelled else settings.search, keep_first=len(leading))
            prepared(chosen, True)
            for config in chosen:
                evaluate(config)
    finally:
        progress.close()


def _bayesian(viable: list[KernelConfig], budget: int, evaluate, prepare, batch: int, keep_first: int = 0) -> None:
    """Model-guided search with optuna's TPE sampler over the viable configurations' parameters.

    Candidates are asked ``batch`` at a time (:func:`batch_sizes`; TPE's constant liar keeps pending ones apart),
    prepared together (``prepare(configs, last)``, ``last`` for the search's last batch), then timed one by one; the
    first ``keep_first`` viable configurations are enqueued as the study's first trials. It runs for searches of more
    than one round: :func:`_search` draws a search of one (the default budget of 16 on 11 workers or more) itself.
    """
    import optuna

    sizes = batch_sizes(min(budget, len(viable)), batch)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    values = {key: sorted({getattr(c, key) for c in viable}) for key in KernelConfig.__dataclass_fields__}
    by_key = {tuple(c.as_dict().values()): c for c in viable}
    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.TPESampler(seed=0, constant_liar=batch > 1))
    for config in viable[:min(keep_first, budget)]:
        study.enqueue_trial({key: getattr(config, key) for key in values})
    seen: dict[tuple, float] = {}
    questions = 0  # counted here: ``study.trials`` deep-copies every trial (seconds per build, profiled on the H200)
    for round_index, size in enumerate(sizes):
        if questions > 20 * budget:
            break
        pending: dict[tuple, list] = {}
        while len(pending) < size and questions <= 20 * budget:
            trial = study.ask()
            questions += 1
            key = tuple(trial.suggest_categorical(name, options) for name, options in values.items())
            if key not in by_key:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            elif key in seen:
                study.tell(trial, seen[key])
            else:
                pending.setdefault(key, []).append(trial)
        prepare([by_key[key] for key in pending], round_index == len(sizes) - 1)
        for key, asked in pending.items():
            elapsed = evaluate(by_key[key])
            seen[key] = elapsed if elapsed is not None else math.inf
            for trial in asked:
                study.tell(trial, seen[key] if elapsed is not None else 1e9)


def _independent_picks(viable: list[KernelConfig], wanted: int, keep_first: int = 0, seed: int = 0) -> list[KernelConfig]:
    """``wanted`` of the viable configurations, the first ``keep_first`` kept: each parameter's value drawn on its own,
    uniformly, as the model-guided search draws its first candidates, a draw outside the viable ones drawn again.
    Uniform over the viable configurations would favour small tiles, which more combinations leave viable."""
    rng = random.Random(seed)
    values = {key: sorted({getattr(c, key) for c in viable}) for key in KernelConfig.__dataclass_fields__}
    by_key = {tuple(c.as_dict().values()): c for c in viable}
    chosen = dict.fromkeys(viable[:min(keep_first, wanted)])
    for _ in range(20 * wanted):
        if len(chosen) >= wanted:
            break
        key = tuple(rng.choice(options) for options in values.values())
        if key in by_key:
            chosen.setdefault(by_key[key])
    rest = [config for config in viable if config not in chosen]  # a space the draws rarely hit: filled uniformly
    chosen.update(dict.fromkeys(rng.sample(rest, min(len(rest), wanted - len(chosen)))))
    return list(chosen)


def batch_sizes(wanted: int, batch: int) -> list[int]:
    """How many candidates each round of a batched search asks for: ``batch`` (the compile workers) at a time, a last
    round of fewer than half a batch folded into the one before. Such a round would wait a whole compile for a few
    candidates (16 on the H200 host's 15 workers: one, compiled alone after the other 15 were timed); folded in, they
    compile on the first workers to free up while the others are timed."""
    sizes = [batch] * (wanted // batch) + ([wanted % batch] if wanted % batch else [])
    if len(sizes) > 1 and 2 * sizes[-1] < batch:
        last = sizes.pop()
        sizes[-1] += last
    return sizes


def _configs(views: Sequence[Mapping[str, int]]) -> list[KernelConfig]:
    """Configurations from their ``user_view`` dicts, those this amk version cannot read left out."""
    configs = []
    for view in views:
        try:
            configs.append(KernelConfig.from_user_view(view))
        except (KeyError, TypeError, ValueError):
            continue
    return configs


def compile_workers() -> int:
    """Processes that compile candidates ahead of timing: ``AMK_COMPILE_WORKERS``, else the CPUs less one, at most 16
    (a cold build's first round of candidates, the heuristic, the priors and the search's first picks, compiles at
    once on a 16-core GPU host)."""
    value = os.environ.get("AMK_COMPILE_WORKERS")
    if value is not None:
        if not value.isdigit():
            raise InvalidArgumentError(f"AMK_COMPILE_WORKERS must be a non-negative integer, got {value!r}")
        return int(value)
    return max(0, min(16, (os.cpu_count() or 1) - 1))


def start_compile_workers():
    """The process's compile workers (:func:`compile_workers` of them), started now: they boot, importing triton (a
    second or less), while the caller goes on."""
    from amk.compile_worker import shared_pool

    pool = shared_pool(compile_workers())
    pool.start()
    return pool


def call_arguments(kernel, config: KernelConfig, bindings: Mapping[str, int] | None = None
                   ) -> list[tuple[tuple[int, ...], str, tuple[int, ...]]]:
    """Each argument of ``kernel`` under ``config`` as a program's calls hand it over: its shape (``bindings`` give
    the symbols' values), torch dtype name and strides (:meth:`amk.runtime.KernelArgument.call_strides`)."""
    from amk.runtime import kernel_arguments

    sizes = dict(bindings or {})
    arguments = []
    for spec in kernel_arguments(kernel, config.constants([p.data for p in kernel.tile_params.data])):
        shape = spec.shape(sizes)
        arguments.append((shape, str(spec.dtype).removeprefix("torch."), spec.call_strides(shape)))
    return arguments


def compile_job(kernel, config: KernelConfig, source: str, bindings: Mapping[str, int] | None = None
                ) -> tuple[str, str, list[str]]:
    """What a compile worker (:mod:`amk.compile_worker`) needs to compile ``kernel`` under ``config`` (its emitted
    ``source``): the source, the kernel's name and what Triton's JIT would compile for each of its launches on
    :func:`call_arguments` (:func:`amk.compile_worker.captured_specializations`)."""
    from amk.compile_worker import captured_specializations

    name = kernel.sym_name.data
    return source, name, captured_specializations(source, name, call_arguments(kernel, config, bindings))


def kernel_example_arguments(kernel, config: KernelConfig, device, bindings: Mapping[str, int] | None = None,
                             seed: int = 0, inputs: dict | None = None):
    """Random inputs, empty outputs and zeroed workspace shaped like a kernel's arguments under ``config``, each
    laid out as a program's call lays it out (:meth:`amk.runtime.KernelArgument.call_strides`: ``nn.Linear``'s
    weight transposed), so that a candidate is timed, and compiled, as the calls will run it.

    ``inputs``, when given, keeps the random inputs between calls: the candidates of one kernel then share them (a
    large operand is drawn once, not once per candidate).
    """
    import torch

    from amk.dtypes import from_normal_draw
    from amk.runtime import kernel_arguments

    # Drawn where the kernel runs: B's 65536 x 4096 input took seconds to draw on the CPU, a cold build's
    # largest cost outside compiling and timing.
    generator = torch.Generator(device=device).manual_seed(seed)
    tensors = []
    for index, spec in enumerate(kernel_arguments(kernel, config.constants([p.data for p in kernel.tile_params.data]))):
        shape = spec.shape(dict(bindings or {}))
        if spec.kind != "input":
            tensors.append(torch.zeros(shape, device=device, dtype=spec.dtype))
        elif inputs is not None and (index, shape) in inputs:
            tensors.append(inputs[index, shape])
        else:
            values = torch.randn(shape, generator=generator, device=device)
            values.div_(math.sqrt(shape[-1] if len(shape) == 2 else 1))  # in place: B's fp32 draw alone is 1 GiB
            tensor = torch.empty_strided(shape, spec.call_strides(shape), dtype=spec.dtype, device=device)
            tensors.append(tensor.copy_(from_normal_draw(values, spec.dtype)))
            del values
            if inputs is not None:
                inputs[index, shape] = tensors[-1]
    return tensors


# Candidates' emitted sources by kernel (its IR's text), configuration, dot precision and interpreter mode: a build
# that hands a kernel's first round to the workers before tuning it (amk.build) emits each candidate once. At most
# EMITTED_KEPT are kept (a few MB).
_EMITTED: dict[tuple[str, KernelConfig, str, bool], str] = {}
EMITTED_KEPT = 256


class _CandidateCompiles:
    """A kernel's candidates, each emitted once and handed to the compile workers ahead of its timing. ``ahead``: the
    kernel is not being tuned yet (:func:`first_round_chooser`), so its jobs wait behind those of kernels that are."""

    def __init__(self, kernel, fp32_dot: str, bindings: Mapping[str, int], compiler, ahead: bool = False):
        self.kernel, self.fp32_dot, self.bindings, self.compiler = kernel, fp32_dot, bindings, compiler
        self.ahead = ahead
        self.kernel_text = str(kernel)
        self.compiling: dict[KernelConfig, Future] = {}  # handed to the workers, not timed yet

    def source(self, config: KernelConfig) -> str:
        from amk.pipeline import stage_and_emit

        key = (self.kernel_text, config, self.fp32_dot, interpreting())
        source = _EMITTED.get(key)
        if source is None:
            source = stage_and_emit(self.kernel, config, self.fp32_dot).source
            if len(_EMITTED) >= EMITTED_KEPT:
                _EMITTED.clear()
            _EMITTED[key] = source
        return source

    def prepare(self, configs: list[KernelConfig]) -> None:
        """Hand ``configs`` to the workers and return: the first are timed while the next compile. Each goes to the
        workers as soon as it is emitted, so that they compile while the rest are emitted."""
        ahead = [config for config in dict.fromkeys(configs) if config not in self.compiling]
        # One candidate compiles as fast in this process, when it is first launched; without workers to take them,
        # preparing jobs (emitting, capturing what to compile) is wasted.
        if len(ahead) < 2 or not self.compiler.accepting():
            return
        for config in ahead:
            try:
                job = compile_job(self.kernel, config, self.source(config), self.bindings)
            except Exception as error:  # left to fail, and be recorded, when the candidate is timed
                log.info("config %s not compiled ahead: %s", config.user_view(), error)
                continue
            self.compiling[config] = self.compiler.submit([job], ahead=self.ahead)[0]


class _FirstRoundHanded(BaseException):
    """Stops :func:`tune` at its first timing, for :func:`first_round_chooser`: the candidates drawn before it are
    with the workers. Not an ``Exception``: the tuner records those as failed candidates and goes on."""


def first_round_chooser(settings: TunerConfig, grid: dict[str, list[int]] | None, known=None, fp32_dot: str = "ieee",
                        size_hints: Mapping[str, int] | None = None, learned=None):
    """A ``choose_config`` that hands each kernel's first round of candidates (those :func:`tune` times first, drawn
    as it draws them) to the compile workers and returns the heuristic configuration at once. A build runs it ahead
    of work that does not need the workers (tuning another program): the kernel's tuning then finds its first round
    compiling or compiled. ``known`` and ``learned`` are :func:`autotune_chooser`'s."""
    from amk.pipeline import heuristic_config

    bindings = dict(size_hints or {})

    def stop(config: KernelConfig):
        raise _FirstRoundHanded

    def choose(kernel) -> KernelConfig:
        heuristic = heuristic_config(kernel, bindings)
        compiler = start_compile_workers()
        try:
            tune(kernel, settings, grid, heuristic, stop, known(kernel) if known else None,
                 _CandidateCompiles(kernel, fp32_dot, bindings, compiler, ahead=True).prepare,
                 batch=max(1, compiler.count),
                 size_hints=bindings, fp32_dot=fp32_dot, learned=_configs(learned(kernel)) if learned else ())
        except _FirstRoundHanded:
            pass
        return heuristic

    return choose


def autotune_chooser(settings: TunerConfig, grid: dict[str, list[int]] | None, on_tuned=None, known=None,
                     fp32_dot: str = "ieee", size_hints: Mapping[str, int] | None = None, learned=None,
                     beaten_at_ms: float | None = None):
    """A ``choose_config`` for the pipeline that times candidates on the GPU (``on_tuned(kernel, config, trials)``
    receives each result; ``known(kernel)``, when given, returns the trials measured before, see :func:`tune`;
    ``learned(kernel)`` the configurations, as ``user_view`` dicts, that won for kernels of its family before).
    Candidates are compiled ahead of timing by :func:`compile_workers` worker processes (:mod:`amk.compile_worker`).
    A kernel of symbolic sizes is timed at the sizes ``size_hints`` give its symbols (a size bucket's);
    ``beaten_at_ms``: the time of the build's other program, which this program's kernels must beat together: a
    kernel is not refined where it and the program's other kernels searched so far, at their fastest times, take more
    than ``OUTRUN_MARGIN`` times it (on the H200, BERT's FFN: a GEMM + GELU kernel at 0.052 ms and a GEMM + LayerNorm
    kernel at 0.063 against 0.094 for the vendor GEMMs' program, whose refinements took 2.0 and 2.9 s of the
    model's first call). Each was timed from a cold L2, where in the program it may find its producer's output: the
    margin allows for that. The chooser's ``search(kernel)`` searches a kernel without refining it, so that a
    caller that searches every kernel of the program first (``compile_module``) has each refined, or not, against the
    whole program."""
    import torch

    from amk.numerics import relative_error
    from amk.pipeline import heuristic_config
    from amk.runtime import load_source

    bindings = dict(size_hints or {})
    fastest_ms: dict[str, float] = {}  # by kernel name, each kernel searched so far: its fastest time
    # Kernels searched and not refined yet: their tuning's steps, their candidates with the workers, their failure.
    searched: dict[str, tuple] = {}

    def abandon() -> None:
        """Candidates never timed (a search that stopped early, or failed) leave the shared pool's queue."""
        for _, compiling, _ in searched.values():
            for future in compiling.values():
                future.cancel()
        searched.clear()

    def search(kernel) -> None:
        heuristic = heuristic_config(kernel, bindings)
        name = kernel.sym_name.data
        device = torch.device("cuda")
        outputs_count = len(kernel.outputs)
        first = kernel.num_inputs.value.data
        expected, failure, ready = [], [], []
        inputs: dict = {}  # drawn once, shared by every candidate
        # Started by the build when it found nothing to reuse (amk.build), else at the first kernel actually tuned.
        compiler = start_compile_workers()
        candidates = _CandidateCompiles(kernel, fp32_dot, bindings, compiler)
        source, compiling = candidates.source, candidates.compiling

        def compiled_ahead(config: KernelConfig) -> None:
            """Wait for the worker compiling ``config``, if one is (the wait is the build's compile phase)."""
            future = compiling.pop(config, None)
            if future is None:
                return
            if not future.done() and not compiler.producing() and future.cancel():
                # The workers are starting (the process's first tuned kernel) and none has taken this job: rather
                # than wait seconds for them, it compiles here, at its first launch; later ones find theirs
                # compiled by then.
                log.debug("%s %s compiles here: the compile workers are starting", name, config.user_view())
                return
            if not future.done():
                log.debug("%s %s: waiting for its compile worker", name, config.user_view())
            with phase("compile"):
                try:
                    error = future.result()
                except CancelledError:  # a build sharing the job stopped it: compiled when first launched
                    return
            if error is not None:
                log.info("ahead-of-time compilation of %s failed (the candidate will fail when timed): %s",
                         config.user_view(), error)

        def reference() -> None:  # the heuristic's outputs, computed when the first candidate is timed
            try:
                compiled_ahead(heuristic)
                with phase("prepare"):
                    args = kernel_example_arguments(kernel, heuristic, device, bindings, inputs=inputs)
                    launch = load_source(source(heuristic), name).launch
                with phase("compile_here"):
                    launch(*args)
            except Exception as error:
                failure.append(error)
                raise
            expected.extend(o.float().clone() for o in args[first:first + outputs_count])
            ready.append(True)

        def build_and_run(config: KernelConfig):
            if failure:
                raise failure[0]
            if not ready:
                reference()
            compiled_ahead(config)
            with phase("prepare"):
                launch = load_source(source(config), name).launch
                # Workspace shapes depend on the tile sizes: each candidate gets its own (same seed, same inputs).
                candidate = kernel_example_arguments(kernel, config, device, bindings, inputs=inputs)

            def check() -> str | None:
                for have, want in zip(candidate[first:first + outputs_count], expected):
                    error = relative_error(have.float(), want)
                    if not error <= 2e-2:
                        problem = "other non-finite values" if error == math.inf else f"relative error {error:.2e}"
                        return f"output differs from the heuristic configuration's ({problem})"
                return None

            return (lambda: launch(*candidate)), check

        steps = tune_in_steps(kernel, settings, grid, heuristic, build_and_run, known(kernel) if known else None,
                              candidates.prepare, batch=max(1, compiler.count), size_hints=bindings,
                              fp32_dot=fp32_dot, learned=_configs(learned(kernel)) if learned else ())
        searched[name] = (steps, compiling, failure)
        try:
            fastest = next(steps)
        except BaseException:
            abandon()
            raise
        if failure:  # the heuristic configuration itself does not run: a compiler bug, not a bad candidate
            abandon()
            raise failure[0]
        fastest_ms[name] = fastest if math.isfinite(fastest) else 0.0

    def choose(kernel) -> KernelConfig:
        name = kernel.sym_name.data
        if name not in searched:
            search(kernel)
        steps, compiling, failure = searched.pop(name)
        others_ms = sum(ms for other, ms in fastest_ms.items() if other != name)
        try:
            config, trials = _finished(steps, None if beaten_at_ms is None else beaten_at_ms - others_ms / OUTRUN_MARGIN)
        except BaseException:
            abandon()
            raise
        finally:
            for future in compiling.values():
                future.cancel()
        if failure:
            abandon()
            raise failure[0]
        fastest_ms[name] = min(fastest_ms[name], _fastest_ms(trials))
        if on_tuned is not None:
            on_tuned(kernel, config, trials)
        return config

    choose.search = search
    return choose
