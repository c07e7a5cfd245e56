"""The registry of tiling strategies, by name (as ``lowering/rules.py`` registers lowering rules by op).

``@register_strategy`` on a :class:`~amk.lowering.strategies.base.TilingStrategy` subclass makes it known to every
pass and to the tuner: amk-tile's ``auto`` choice and ``reduction_strategy`` option, the ``tiled_loop.kernel``
verifier, amk-stage's heuristic, the Triton emitter and the autotuner all look strategies up here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace

from amk.errors import InvalidArgumentError
from amk.lowering.plan import GroupPlan, Section, Space
from amk.lowering.strategies.base import AUTO, TilingStrategy

# name -> strategy, in registration order (the order error messages list them in).
STRATEGIES: dict[str, TilingStrategy] = {}


def _check_strategy_class(cls) -> None:
    name = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, TilingStrategy)):
        raise InvalidArgumentError(f"register_strategy takes a TilingStrategy subclass, got {name}")
    for attribute in ("name", "description"):
        if not isinstance(getattr(cls, attribute, None), str) or not getattr(cls, attribute):
            raise InvalidArgumentError(f"strategy {name} has no {attribute}: set the class attribute {attribute} "
                                       "(a non-empty str)")
    if cls.priority is not None and cls.chosen_for is TilingStrategy.chosen_for:
        raise InvalidArgumentError(f"strategy {name} has priority {cls.priority} but does not override chosen_for: "
                                   "auto would never take it (set priority = None to take it only by name)")
    if cls.row_reduction and cls.build is TilingStrategy.build:
        raise InvalidArgumentError(f"strategy {name} lowers row reductions (row_reduction = True) but does not "
                                   "override build: the base build writes elementwise output tiles only")


def register_strategy(cls: type[TilingStrategy]) -> type[TilingStrategy]:
    """Class decorator: register one instance of ``cls`` under ``cls.name`` (replacing one of that name, with a
    warning). A class that could never lower a kernel (not a TilingStrategy, without a name or description, with a
    priority but no ``chosen_for``, a row reduction without its own ``build``) is an InvalidArgumentError."""
    _check_strategy_class(cls)
    replaced = STRATEGIES.get(cls.name)
    if replaced is not None and type(replaced) is not cls:
        warnings.warn(f"register_strategy: {cls.__qualname__} replaces {type(replaced).__qualname__} as the strategy "
                      f"named {cls.name!r}", stacklevel=2)
    STRATEGIES[cls.name] = cls()
    return cls


def strategy_names() -> tuple[str, ...]:
    return tuple(STRATEGIES)


def strategy_named(name: str) -> TilingStrategy:
    """The registered strategy called ``name``; a KeyError listing the registered names otherwise."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"no tiling strategy is registered as {name!r}; registered: {', '.join(STRATEGIES)}") from None


def auto_strategy(plan: GroupPlan, size_hints: Mapping[str, int] | None = None) -> TilingStrategy:
    """amk-tile's ``auto``: the first strategy, by ascending ``priority``, whose :meth:`~TilingStrategy.chosen_for`
    takes ``plan`` (strategies without a priority are taken only by name). ``size_hints`` (symbol -> a representative
    value) make the choice for symbolic sizes the one made for those sizes: a decode strategy for a row count that is
    small in the size bucket being built (:func:`at_sizes`)."""
    sized = at_sizes(plan, size_hints) if size_hints else plan
    ranked = sorted((s for s in STRATEGIES.values() if s.priority is not None), key=lambda s: s.priority)
    for strategy in ranked:
        if strategy.chosen_for(sized) and (strategy.batches or not plan.batched):
            return strategy
    raise LookupError(f"no registered tiling strategy takes this group (asked: {', '.join(s.name for s in ranked)})")


def choose_strategy(plan: GroupPlan, requested: str = AUTO,
                    size_hints: Mapping[str, int] | None = None) -> TilingStrategy:
    """The strategy that lowers ``plan``: ``requested`` (a name, or ``auto``, which sees ``size_hints``), followed
    through :meth:`~TilingStrategy.instead` while it cannot lower the plan (asked of the plan itself: whether a
    strategy can lower a kernel does not depend on the sizes it is tuned for)."""
    name, seen = requested, []
    while True:
        strategy = auto_strategy(plan, size_hints) if name == AUTO else strategy_named(name)
        if strategy.name in seen:
            raise LookupError(f"tiling strategies refer to each other in a circle: {' -> '.join(seen + [name])}")
        seen.append(strategy.name)
        name = strategy.instead(plan)
        if name is None:
            return strategy


def at_sizes(plan: GroupPlan, size_hints: Mapping[str, int]) -> GroupPlan:
    """A shallow copy of ``plan`` whose iteration spaces and contraction have the symbols of ``size_hints`` replaced
    by their values, for choosing a strategy only: the kernel is built from ``plan`` and stays symbolic."""

    def sized(section: Section) -> Section:
        space = section.space
        return replace(section, space=Space(tuple(d.subs(size_hints) for d in space.lead),
                                            space.cols.subs(size_hints), tuple(d.subs(size_hints) for d in space.batch)))

    return replace(plan, main=sized(plan.main), prologue=None if plan.prologue is None else sized(plan.prologue),
                   contraction=None if plan.contraction is None else plan.contraction.subs(size_hints))
