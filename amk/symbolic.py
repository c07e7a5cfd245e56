"""Symbolic dimensions: sympy expressions identified by their canonical string.

Every dimension in amk IR is a :class:`Dim`: ``4096``, ``B*S`` or ``cdiv(N, BLOCK_N)``. Equality and hashing go
through the canonical string, so IR attributes compare cheaply; the sympy object is built lazily and cached
(``parse_expr`` costs milliseconds). Every free symbol is a positive integer, so sympy can prove facts such as
``64*B/16`` being an integer.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

import sympy
from sympy.parsing.sympy_parser import parse_expr

_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


class cdiv(sympy.Function):  # noqa: N801 - spelled like Triton's helper on purpose
    """Ceiling division ``cdiv(a, b) = ceil(a / b)`` that stays unevaluated while symbolic."""

    is_integer = True
    is_positive = True

    @classmethod
    def eval(cls, numerator, denominator):
        if numerator.is_Integer and denominator.is_Integer:
            return sympy.Integer(-(-int(numerator) // int(denominator)))
        if denominator == 1:
            return numerator
        quotient = sympy.cancel(numerator / denominator)
        if quotient.is_integer:
            return quotient
        return None


class Mod(sympy.Function):
    """The remainder ``Mod(a, b)``, Python's ``a % b`` (a positive ``b``), that stays unevaluated while symbolic:
    sympy's own ``Mod`` rewrites ``Mod(k*Mod(a, n), m)`` as ``Mod(k*Mod(a, n)**2, m)`` (sympy issue 28744), a wrong
    size for a row count TorchDynamo writes so (a pad to a multiple of n, then another)."""

    is_integer = True

    @classmethod
    def eval(cls, dividend, divisor):
        if dividend.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(dividend) % int(divisor))
        if divisor == 1:
            return sympy.Integer(0)
        return None

    def _eval_is_nonnegative(self):
        return True if self.args[1].is_positive else None  # Python's remainder takes the divisor's sign


# The functions a dimension's text may call: amk's own, and those TorchDynamo writes sizes with
# (torch.utils._sympy.functions), each as the integer arithmetic it stands for on sizes.
_FUNCTIONS = {"cdiv": cdiv, "max": sympy.Max, "min": sympy.Min, "Max": sympy.Max, "Min": sympy.Min,
              "Mod": Mod, "PythonMod": Mod, "floor": sympy.floor, "ceiling": sympy.ceiling,
              "FloorToInt": sympy.floor, "CeilToInt": sympy.ceiling,
              "IntTrueDiv": lambda dividend, divisor: dividend / divisor,
              "ModularIndexing": lambda base, divisor, modulus: Mod(sympy.floor(base / divisor), modulus)}


@functools.cache
def symbol(name: str) -> sympy.Symbol:
    """The positive-integer symbol called ``name`` (one object per name)."""
    return sympy.Symbol(name, integer=True, positive=True)


_ALLOWED_TEXT = re.compile(r"[A-Za-z0-9_+\-*/(),\s]*")


@functools.lru_cache(maxsize=4096)
def parse_sympy(text: str) -> sympy.Expr:
    """Parse ``text`` into a sympy expression whose free symbols are positive integers.

    Only integer arithmetic over names is accepted (``+ - * / ( ) ,``, integers, symbols and the functions of
    :data:`_FUNCTIONS`: ``cdiv``, ``Min``, ``Max``, ``Mod``, ``floor``, ``ceiling`` and TorchDynamo's spellings of
    them): the text is checked before sympy sees it, because sympy's parser evaluates Python."""
    if not _ALLOWED_TEXT.fullmatch(text):
        raise ValueError(f"not a dimension expression: {text!r} (use integers, names, + - * / and parentheses)")
    names = {}
    for name in _IDENT.findall(text):
        if keyword.iskeyword(name) or name.startswith("_"):
            raise ValueError(f"not a dimension expression: {text!r} ({name!r} is not a dimension name)")
        names[name] = _FUNCTIONS.get(name) or symbol(name)
    try:
        expr = parse_expr(text, local_dict=names, global_dict={"Integer": sympy.Integer, "Symbol": sympy.Symbol},
                          evaluate=True)
    except Exception as error:  # sympy's parser raises many kinds (TokenError, TypeError, ...)
        raise ValueError(f"not a dimension expression: {text!r} ({type(error).__name__})") from None
    if not isinstance(expr, sympy.Expr) or expr.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo, sympy.Float):
        raise ValueError(f"not a dimension expression: {text!r}")
    if expr.is_negative:
        raise ValueError(f"not a dimension expression: {text!r} (dimensions are not negative)")
    return expr


def canonical(value: int | str | sympy.Expr | Dim) -> str:
    """The canonical text of a dimension given as an int, a string, a sympy expression or a Dim."""
    if isinstance(value, Dim):
        return value.text
    if isinstance(value, bool):
        raise ValueError(f"not a dimension: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | sympy.Basic):
        return _canonical_text(value)
    raise ValueError(f"not a dimension: {value!r}")


@functools.lru_cache(maxsize=16384)
def _canonical_text(value: str | sympy.Basic) -> str:
    """:func:`canonical` of a string or a sympy expression, remembered: emitting one kernel makes tens of thousands of
    dims from a few hundred expressions, and printing one costs tens of microseconds."""
    if isinstance(value, str):
        value = parse_sympy(value)
    # Printing and re-parsing can regroup terms; iterate to the fixed point so the text is an identity.
    text = sympy.sstr(value)
    for _ in range(4):
        again = sympy.sstr(parse_sympy(text))
        if again == text:
            break
        text = again
    return text


class Dim:
    """One symbolic dimension. Compares and hashes by canonical text; ``.expr`` is the sympy object."""

    __slots__ = ("text",)

    def __init__(self, value: int | str | sympy.Expr | Dim):
        self.text = canonical(value)

    @property
    def expr(self) -> sympy.Expr:
        return parse_sympy(self.text)

    @property
    def is_static(self) -> bool:
        return self.expr.is_Integer

    @property
    def value(self) -> int:
        """The integer value; only for static dims."""
        if not self.is_static:
            raise ValueError(f"dimension {self.text} is symbolic")
        return int(self.expr)

    @property
    def free_symbols(self) -> set[str]:
        return {str(s) for s in self.expr.free_symbols}

    def subs(self, bindings: dict[str, int | str | Dim]) -> Dim:
        """Substitute symbols by values (ints or other dims)."""
        if self.is_static:
            return self
        return Dim(_substituted(self.text, tuple(sorted((name, canonical(value)) for name, value in bindings.items()))))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dim) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Dim({self.text!r})"

    def __str__(self) -> str:
        return self.text


def provably_equal(a: Dim, b: Dim) -> bool:
    return a == b or _difference(a.text, b.text) == 0


def emptied(dims: Iterable[Dim], values: Mapping[str, int], zero: AbstractSet[str]) -> list[Dim]:
    """Those of ``dims`` that read a symbol of ``zero`` (symbols of value 0) and that ``values`` make 0: an empty
    cache's length ``s`` empties ``s`` but not the keys' ``s + T``."""
    return [dim for dim in dims if dim.free_symbols & zero and dim.subs(values) == Dim(0)]


def provably_different(a: Dim, b: Dim) -> bool:
    """True when the two dimensions can never be equal (e.g. 4096 vs 2048)."""
    difference = _difference(a.text, b.text)
    return difference.is_number and difference != 0


def provably_divisible(a: Dim | int | str, b: Dim | int | str) -> bool:
    """True when ``a`` is a multiple of ``b`` for every value of the symbols."""
    a, b = Dim(a), Dim(b)
    if b.is_static and b.value == 1:
        return True
    if a.is_static and b.is_static:
        return a.value % b.value == 0
    return _divisible(a.text, b.text)


@functools.lru_cache(maxsize=16384)
def _substituted(text: str, bindings: tuple[tuple[str, str], ...]) -> str:
    """``text`` with each named symbol replaced by a dimension's text, remembered as :func:`_canonical_text` is:
    staging a candidate substitutes its tile sizes into the same dims as every other candidate of its kernel."""
    return canonical(parse_sympy(text).subs({symbol(name): parse_sympy(value) for name, value in bindings}))


# Remembered by the dims' texts: staging one candidate asks about the same few dozen pairs of dims as every other
# candidate of its kernel. Differences and quotients are normalized by sympy's ``cancel`` (common factors of
# polynomials; dims are polynomials in their symbols and in the calls they make, cdiv, Max...): it decides what
# ``simplify`` did here for a tenth of its time or less (``simplify(s0/128)`` took 7 ms, 109 ms as a process's
# first: it imports sympy.physics.units, a tenth of an ``amk-opt`` run).
@functools.lru_cache(maxsize=16384)
def _difference(a: str, b: str) -> sympy.Expr:
    return sympy.cancel(parse_sympy(a) - parse_sympy(b))


@functools.lru_cache(maxsize=16384)
def _divisible(a: str, b: str) -> bool:
    return bool(sympy.cancel(parse_sympy(a) / parse_sympy(b)).is_integer)


def evaluate(dim: Dim | str | int, bindings: dict[str, int]) -> int:
    """The integer value of ``dim`` under concrete symbol values."""
    value = Dim(dim).subs(bindings).expr
    if not value.is_Integer:
        missing = sorted(str(s) for s in value.free_symbols)
        raise ValueError(f"dimension {dim} needs values for {', '.join(missing)}")
    return int(value)


def to_python(dim: Dim | str | int | sympy.Expr, cdiv_name: str = "triton.cdiv", min_name: str = "min",
              max_name: str = "max") -> str:
    """Python source for ``dim``: ``cdiv``/``Min``/``Max`` become the given functions; division stays integral."""
    expr = dim if isinstance(dim, sympy.Basic) else Dim(dim).expr
    numerator, denominator = sympy.fraction(sympy.together(expr))
    printer = _PythonPrinter(cdiv_name, min_name, max_name)
    if denominator != 1:
        return f"(({printer.doprint(numerator)}) // ({printer.doprint(denominator)}))"
    return printer.doprint(expr)


class _PythonPrinter(sympy.printing.str.StrPrinter):
    def __init__(self, cdiv_name: str, min_name: str, max_name: str):
        super().__init__()
        self.cdiv_name, self.min_name, self.max_name = cdiv_name, min_name, max_name

    def _print_cdiv(self, expr):
        return f"{self.cdiv_name}({self._print(expr.args[0])}, {self._print(expr.args[1])})"

    def _nested(self, name: str, args) -> str:
        """Binary calls, nested (``tl.minimum`` takes two operands)."""
        text = self._print(args[0])
        for arg in args[1:]:
            text = f"{name}({text}, {self._print(arg)})"
        return text

    def _print_Max(self, expr):
        return self._nested(self.max_name, expr.args)

    def _print_Min(self, expr):
        return self._nested(self.min_name, expr.args)

    def _quotient(self, expr) -> tuple[str, str | None]:
        """``expr`` as the source of its numerator and denominator (None where it is whole)."""
        numerator, denominator = sympy.fraction(sympy.together(expr))
        return self._print(numerator), None if denominator == 1 else self._print(denominator)

    def _print_floor(self, expr):  # integer division written as TorchDynamo's shapes write it: floor(s0/2)
        numerator, denominator = self._quotient(expr.args[0])
        return numerator if denominator is None else f"(({numerator}) // ({denominator}))"

    def _print_ceiling(self, expr):
        numerator, denominator = self._quotient(expr.args[0])
        return numerator if denominator is None else f"{self.cdiv_name}({numerator}, {denominator})"

    def _print_Mod(self, expr):
        return f"(({self._print(expr.args[0])}) % ({self._print(expr.args[1])}))"

    def _print_Mul(self, expr):
        numerator, denominator = expr.as_numer_denom()
        if denominator != 1:
            return f"(({self._print(numerator)}) // ({self._print(denominator)}))"
        return super()._print_Mul(expr)
