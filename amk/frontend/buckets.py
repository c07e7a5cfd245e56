"""Size buckets: how ``amk.compile`` tunes one symbolic subgraph for the sizes it is called with.

A subgraph's kernels are symbolic in its dynamic sizes (one kernel source per strategy and configuration serves every
size), but what is fast depends on the row count M: a decode step of 1 to 16 rows wants a split-K or skinny kernel
streaming the weight, a prefill of thousands a grid of large output tiles. So each bucket of M gets its own build,
with the tiling strategy and the configuration chosen (tuned on a GPU) as for the bucket's representative sizes, the
*size hints*. The buckets:

- ``M = 1``: a single row (greedy decoding);
- ``2 <= M <= 16``: one tile of ``tl.dot``'s smallest height (16) covers every row, so these share every choice;
- ``17 <= M <= 64``: the decode strategies' range (``skinny_m`` / ``split_k`` take up to 64 rows);
- beyond 64, one bucket per power of two (``65..128``, ``129..256``, ...): GEMM tile shapes change with M's
  magnitude, and a factor of two is as close as a bucket needs to be to tune for its sizes.

M is the product of the *row symbols*: the symbols of the subgraph's argument sizes that appear in the rows of its
results (their leading dims: batch, sequence) and in no last dim. Any other symbol is not bucketed: a feature size
(``dynamic=True``), or a leading dim of an argument that becomes a column of the results (``N`` in ``x @ w.t()``
with a weight passed as an argument); each of its values is its own build, tuned at that value, in which it is a
number (``amk-bind-sizes`` writes it into the types: constant loop bounds, no masks along it). A size that keeps
changing would then build and tune kernels on every call, so a value shares the build of its bucket (buckets as M's),
in which the symbol stays symbolic (masked tiles, loops bounded at run time), once ``MAX_EXACT_VALUES`` values have
been built, or at once when it is one away from a value built (attention's key length while decoding, one more each
step: its second step shares). A shared bucket is tuned at the bucket's upper bound (at its first call where a dim
computes with the symbol: see :meth:`SizeBuckets.hints`). A row bucket is built at its upper bound: the row
symbols multiply to the bucket's largest M (a kernel sees their product; a batched matmul's kernel, ``q @ k^T``, sees
the first, the innermost, as its rows and repeats over the others): the outer ones keep the values of the call that
asks for the bucket where they fit, the innermost (a sequence rather than a batch) makes up the rest.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from amk.errors import InvalidArgumentError

# The buckets' upper bounds below the powers of two (see the module's docstring).
SMALL_BUCKETS = (1, 16, 64)

# How many values of its exact symbols (tuples of them, when there are several) one subgraph builds for, each a
# number in its build; a value past them shares the build of its bucket (see the module's docstring).
MAX_EXACT_VALUES = 4


def bucket_of(rows: int) -> int:
    """The upper bound of the bucket of ``rows`` (1, 16, 64, then the power of two at or above it)."""
    for bound in SMALL_BUCKETS:
        if rows <= bound:
            return bound
    return 1 << (rows - 1).bit_length()


def bucket_label(bound: int, size: str = "M") -> str:
    """The sizes of the bucket of upper bound ``bound``: ``M = 1``, ``2 <= M <= 16``, ..."""
    if bound == 1:
        return f"{size} = 1"
    below = max(b for b in SMALL_BUCKETS if b < bound) if bound <= SMALL_BUCKETS[-1] else bound // 2
    return f"{below + 1} <= {size} <= {bound}"


@dataclass(frozen=True)
class SharedValues:
    """In a bucket's key, the value of an exact symbol past ``MAX_EXACT_VALUES``: the bucket of values it shares
    (``bucket_of``), the symbol symbolic in that bucket's build."""

    bound: int


@dataclass(frozen=True)
class SizeBuckets:
    """The dynamic sizes of one subgraph: ``symbols`` in the order a call's sizes are read, the first ``row_symbols``
    of them the row symbols (their product is M), the others the exact symbols (numbers in the builds of their first
    ``MAX_EXACT_VALUES`` values)."""

    symbols: tuple[str, ...]
    row_symbols: int
    # The symbols that no dim of the arguments or results computes with: each only ever a whole dim (a key length,
    # not a causal mask's slice [S - T:S]), so that any value of it, a bucket's bound too, makes sizes of some call.
    whole_dims: frozenset[str] = field(default=frozenset(), compare=False)

    @staticmethod
    def of(argument_dims: Sequence[Sequence], result_dims: Sequence[Sequence]) -> SizeBuckets:
        """The size buckets of a function whose arguments and results have the dims ``argument_dims`` and
        ``result_dims`` (each a sequence of :class:`~amk.symbolic.Dim`). The row symbols are those of the results'
        rows: a leading dim of an argument may be a column of the results (the N of ``x @ w.t()``)."""
        # A tensor whose dims are the leading dims of another's holds a value per row of it: a reduction over the
        # features without keepdim ([B, T] of [B, T, N]), a padding mask beside it. Its last dim is a row dim.
        leading_dims = {tuple(dims[:-1]) for dims in [*argument_dims, *result_dims] if len(dims) > 1}

        def per_row(dims: Sequence) -> bool:
            return tuple(dims) in leading_dims

        rows: dict[str, None] = {}
        columns: set[str] = set()
        for dims in result_dims:
            # A vector's one dim holds a value per row (a reduction over the features); otherwise the last dim holds
            # the columns.
            leading = dims if len(dims) == 1 or per_row(dims) else dims[:-1]
            # Innermost first: the bucket's rows go to the rows of one matrix (a batched matmul's kernel repeats
            # over the outer dims, so its tiles and tuning are for the inner ones).
            for dim in reversed(leading):
                rows.update(dict.fromkeys(sorted(dim.free_symbols)))
            if len(leading) < len(dims):
                columns.update(dims[-1].free_symbols)
        symbols: set[str] = set()
        for dims in argument_dims:
            for dim in dims:
                symbols.update(dim.free_symbols)
            if dims and not per_row(dims):
                columns.update(dims[-1].free_symbols)
        row_symbols = tuple(symbol for symbol in rows if symbol in symbols and symbol not in columns)
        # A dim that is an expression (s1 + 1, Min(128, s0 + s1)) computes with its symbols.
        computed = {symbol for dims in [*argument_dims, *result_dims] for dim in dims if len(dim.free_symbols) > 1
                    or dim.free_symbols and str(dim.expr) not in dim.free_symbols for symbol in dim.free_symbols}
        return SizeBuckets(row_symbols + tuple(sorted(symbols - set(row_symbols))), len(row_symbols),
                           frozenset(symbols - computed))

    @property
    def exact_symbols(self) -> tuple[str, ...]:
        """The symbols not bucketed as rows: each of their first ``MAX_EXACT_VALUES`` values is a build of its own, in
        which it is a number; later values share a build per bucket (:meth:`key`)."""
        return self.symbols[self.row_symbols:]

    def key(self, sizes: Sequence[int], built: Iterable[Hashable] = ()) -> Hashable:
        """The bucket of a call whose symbols have the values ``sizes`` (in ``symbols`` order): the bucket of the
        row count, with the exact values of the other symbols when there are any; when the buckets ``built`` so far
        hold ``MAX_EXACT_VALUES`` others of those, the buckets of the values instead (:class:`SharedValues`), but for
        a symbol that has had this one value in every build (a feature size beside a changing key length). A value
        one more or one less than a value built exact is a length stepping through the values, as a decoding step's
        keys do: it shares the bucket of its values, and so does every new value of a symbol shared in a bucket
        built, not after ``MAX_EXACT_VALUES`` builds."""
        bound = bucket_of(math.prod(sizes[:self.row_symbols]))
        if self.row_symbols == len(self.symbols):
            return bound
        exact = tuple(sizes[self.row_symbols:])
        values = {self._exact_part(key) for key in built} - {None}
        if exact in values:
            return (bound, *exact)
        capped = len(values) >= MAX_EXACT_VALUES
        stepping = {index for key in built if not isinstance(key, int)
                    for index, value in enumerate(key[1:]) if isinstance(value, SharedValues)}

        def shared(index: int, value: int) -> bool:
            seen = {built_values[index] for built_values in values}
            return index in stepping or value - 1 in seen or value + 1 in seen or (capped and seen != {value})

        return (bound, *(SharedValues(bucket_of(value)) if shared(index, value) else value
                         for index, value in enumerate(exact)))

    @staticmethod
    def _exact_part(key: Hashable) -> tuple[int, ...] | None:
        """The exact symbols' values in ``key``; None for a key without them or one whose values are shared."""
        if isinstance(key, int) or any(isinstance(value, SharedValues) for value in key[1:]):
            return None
        return tuple(key[1:])

    def bound_sizes(self, key: Hashable) -> dict[str, int]:
        """The symbols that are numbers in the build of bucket ``key``, with their values: its exact symbols, unless
        their values are shared."""
        exact = () if isinstance(key, int) else key[1:]
        return {symbol: value for symbol, value in zip(self.exact_symbols, exact) if isinstance(value, int)}

    def hints(self, key: Hashable, sizes: Sequence[int] | None = None) -> dict[str, int]:
        """The values the bucket ``key`` is built for: the row symbols multiply to the bucket's upper bound, the exact
        symbols take their values, and those whose values are shared their buckets' upper bounds, but for one that a
        dim computes with, which takes the call's value, where there is a call (a slice of a causal mask computed from
        two such symbols, each at its bound, had 0 rows and a contraction of 128 against 129: sizes of no call). With
        the ``sizes`` of the call that asks for the bucket (``symbols`` order), the outer row symbols keep the call's values where their product fits the
        bound and the first row symbol makes up the rest, rounded down (a batched matmul's kernel, which repeats over
        the outer ones, is then tuned for the call's batch: attention's queries 512 rows times 128 batch and heads,
        not 65536 rows of one matrix); otherwise the first row symbol takes the whole bound and the others 1. The
        product is never above the bound, and above half of it: more rows than the bucket holds would choose its
        strategy for another bucket (64 rows as 13 x 5 would be 65, past ``skinny_m``'s 64)."""
        bound, exact = (key, ()) if isinstance(key, int) else (key[0], key[1:])
        rows = self.symbols[:self.row_symbols]
        outer = list(sizes[1:self.row_symbols]) if sizes is not None else []
        if not outer or not 0 < math.prod(outer) <= bound:  # an empty batch (0) as well as one too large
            outer = [1] * (self.row_symbols - 1)
        first = bound // math.prod(outer)
        exact = [value if not isinstance(value, SharedValues)
                 else value.bound if sizes is None or symbol in self.whole_dims else sizes[self.row_symbols + i]
                 for i, (symbol, value) in enumerate(zip(self.exact_symbols, exact))]
        return {**dict(zip(rows, [first, *outer])), **dict(zip(self.exact_symbols, exact))}

    def key_for_rows(self, rows: int, example: Sequence[int]) -> Hashable:
        """The bucket of ``rows`` rows, the exact symbols taking their ``example`` values."""
        return self.key((rows, *(1,) * (self.row_symbols - 1), *example[self.row_symbols:]))

    def label(self, key: Hashable) -> str:
        """What a bucket covers: ``2 <= M <= 16`` (``, s3 = 4096`` for the exact symbols, ``, 17 <= s3 <= 64`` where
        their values are shared); ``static sizes`` for a subgraph without symbols."""
        if not self.symbols:
            return "static sizes"
        bound, exact = (key, ()) if isinstance(key, int) else (key[0], key[1:])
        parts = [bucket_label(bound)] if self.row_symbols else []
        parts += [bucket_label(value.bound, symbol) if isinstance(value, SharedValues) else f"{symbol} = {value}"
                  for symbol, value in zip(self.exact_symbols, exact)]
        return ", ".join(parts)


# The most rows tune_sizes may ask a bucket for: a bucket's build allocates its bound's rows to tune at, and the
# bound is the power of two at or above the count (2^31 - 1 rows asked for a 2^31-row bucket).
MAX_TUNE_ROWS = 2 ** 30


def check_tune_sizes(tune_sizes) -> tuple[int, ...]:
    """``amk.compile``'s ``tune_sizes``: None or row counts M (ints up to ``MAX_TUNE_ROWS``) whose buckets are built
    ahead of the first call; anything else is an :class:`~amk.errors.InvalidArgumentError`."""
    if tune_sizes is None:
        return ()
    accepted = f"None or a non-empty list of row counts M (ints from 1 to {MAX_TUNE_ROWS}), e.g. [1, 16, 4096]"
    try:  # a 0-d tensor or array is an Iterable whose iteration raises
        given = None if isinstance(tune_sizes, str | bytes | Mapping) else list(tune_sizes)
    except TypeError:
        given = None
    if given is None:
        raise InvalidArgumentError(f"tune_sizes must be {accepted}; got {tune_sizes!r}")
    sizes, bad = [], []
    for size in given:
        try:  # ints and what behaves as one (numpy's and torch's integers); not floats, nor bools (a bool tensor
            # passes operator.index, numpy's bools do not)
            is_bool = isinstance(size, bool) or getattr(size, "dtype", None) == torch.bool
            value = None if is_bool else operator.index(size)
        except TypeError:
            value = None
        if value is None or not 1 <= value <= MAX_TUNE_ROWS:
            bad.append(size)
        else:
            sizes.append(value)
    if bad or not sizes:
        raise InvalidArgumentError(f"tune_sizes must be {accepted}; got {tune_sizes!r}"
                                   + (f" ({', '.join(map(repr, bad))} not such a count)" if bad else ""))
    return tuple(sizes)
