"""Autotuning settings and the choice of a kernel configuration.

``TunerConfig`` carries the user's tuning settings. Timing candidates needs a GPU; without one (or with
``autotune=False``) the heuristic configuration is used, restricted to ``parameter_grid`` when one is given.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from amk.errors import InvalidArgumentError
from amk.lowering.configs import PARAMETER_KEYS, KernelConfig

STRATEGIES = ("exhaustive", "random", "bayesian")


@dataclass(frozen=True)
class TunerConfig:
    """How to search for the fastest configuration of each kernel.

    ``search_budget``: most candidates to time; ``warmup_runs`` / ``measure_runs``: launches per candidate before and
    while timing; ``enable_warp_specialization``: allow Hopper warp-specialized pipelines; ``target_cache_dir``: where
    tuned kernels are kept (default: ``AMK_CACHE_DIR`` or the user cache directory); ``strategy``: one of
    ``exhaustive``, ``random`` or ``bayesian``.
    """

    search_budget: int = 32
    warmup_runs: int = 10
    measure_runs: int = 30
    enable_warp_specialization: bool = False
    target_cache_dir: str | os.PathLike | None = None
    strategy: str = "bayesian"

    def __post_init__(self):
        for name in ("search_budget", "warmup_runs", "measure_runs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "warmup_runs" else 1):
                raise InvalidArgumentError(f"TunerConfig.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.enable_warp_specialization, bool):
            raise InvalidArgumentError("TunerConfig.enable_warp_specialization must be True or False")
        if self.target_cache_dir is not None and not isinstance(self.target_cache_dir, str | os.PathLike):
            raise InvalidArgumentError(f"TunerConfig.target_cache_dir must be a path, got {self.target_cache_dir!r}")
        if self.strategy not in STRATEGIES:
            raise InvalidArgumentError(
                f"TunerConfig.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")


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
        if (not isinstance(values, Sequence) or not values
                or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values)):
            raise InvalidArgumentError(f"parameter_grid[{key!r}] must be a non-empty list of positive ints, got {values!r}")
        if key.startswith(("BLOCK", "GROUP")) or key == "num_warps":
            bad = [v for v in values if key != "GROUP_SIZE_M" and v & (v - 1)]
            if bad:
                raise InvalidArgumentError(f"parameter_grid[{key!r}] values must be powers of two, got {bad}")
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
