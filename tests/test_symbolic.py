"""amk.symbolic: canonical symbolic dimensions, cdiv, and the facts sympy can prove about them."""

from __future__ import annotations

import itertools
import re
import types

import pytest
import sympy

from amk.symbolic import (
    Dim,
    canonical,
    cdiv,
    evaluate,
    parse_sympy,
    provably_different,
    provably_divisible,
    provably_equal,
    symbol,
    to_python,
)

# ---------------------------------------------------------------------------------------------------------------------
# Dim identity
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("B*S", "S*B"),
        ("B*S", "S * B"),
        ("M + 1", "1 + M"),
        ("2*M", "M + M"),
        ("cdiv(N, 64)", "cdiv(N,64)"),
        (4096, "4096"),
        ("64*cdiv(N, 64)", "cdiv(N, 64)*64"),
    ],
)
def test_equivalent_spellings_are_equal_and_hash_alike(a, b):
    assert Dim(a) == Dim(b)
    assert hash(Dim(a)) == hash(Dim(b))
    assert Dim(a).text == Dim(b).text
    assert len({Dim(a), Dim(b)}) == 1


def test_canonical_text():
    assert Dim("S*B").text == "B*S"
    assert str(Dim("S*B")) == "B*S"
    assert repr(Dim("S*B")) == "Dim('B*S')"
    assert canonical(7) == "7"
    assert canonical(Dim("N*M")) == "M*N"
    assert canonical(symbol("K") * 2) == "2*K"


@pytest.mark.parametrize(
    "text",
    ["(M+1)*(2*cdiv(N, 64))", "2*(M + 1)*cdiv(N, 64)", "cdiv(2*(N+1), 64)*(M+1)*2", "(B*S + S)*2", "4*(K + 1)",
     "cdiv(M*(N+1), 2)*(K+1)", "Max(M, 64)*(N + 1)*3", "(M+1)*(N+1)*2"],
)
def test_canonical_text_is_a_fixed_point(text):
    """Regression: canonical("(M+1)*(2*cdiv(N, 64))") was "2*(M + 1)*cdiv(N, 64)", whose own canonical text is
    "(2*M + 2)*cdiv(N, 64)": printing and re-parsing changed the type."""
    once = Dim(text)
    twice = Dim(once.text)
    assert twice.text == once.text
    assert twice == once and hash(twice) == hash(once)
    assert canonical(once.expr) == once.text


def test_canonical_text_of_regrouped_product():
    assert Dim("(M+1)*(2*cdiv(N, 64))").text == "(2*M + 2)*cdiv(N, 64)"
    assert Dim("(M+1)*(2*cdiv(N, 64))") == Dim("2*(M + 1)*cdiv(N, 64)")


def test_different_dims_differ():
    assert Dim("M") != Dim("N")
    assert Dim("B*S") != Dim("B + S")
    assert Dim("M") != "M"  # a Dim never equals a plain string


def test_dim_from_dim_and_sympy():
    assert Dim(Dim("B*S")) == Dim("B*S")
    assert Dim(symbol("M") * symbol("N")) == Dim("N*M")


def test_static_and_symbolic():
    assert Dim(4096).is_static and Dim(4096).value == 4096
    assert Dim("64*2").is_static and Dim("64*2").value == 128
    assert not Dim("M").is_static
    with pytest.raises(ValueError, match="symbolic"):
        _ = Dim("M").value


def test_free_symbols_and_assumptions():
    assert Dim("cdiv(B*S, BLOCK_M)").free_symbols == {"B", "S", "BLOCK_M"}
    assert Dim(64).free_symbols == set()
    m = Dim("M").expr
    assert m.is_integer and m.is_positive
    # one symbol object per name, so expressions built separately combine
    assert symbol("M") is symbol("M")
    assert parse_sympy("M") == symbol("M")


def test_subs():
    assert Dim("M").subs({"M": "B*S"}) == Dim("B*S")
    assert Dim("cdiv(M, 64)").subs({"M": 128}) == Dim(2)
    assert Dim("BLOCK_M*pid_m").subs({"BLOCK_M": 64}) == Dim("64*pid_m")


@pytest.mark.parametrize("bad", ["M +", "", "*", True, 1.5, None])
def test_invalid_dims_raise_value_error(bad):
    with pytest.raises(ValueError):
        Dim(bad)


@pytest.mark.parametrize(
    ("bad", "kind"),
    [("M.foo", "use integers, names"), ("(", "TokenError"), ("M)", ""), ("M[0]", "use integers, names"),
     ("M**", "SyntaxError"), ("lambda", "'lambda' is not a dimension name")],
    # ("M)": TokenError from the tokenizer of Python 3.11, SyntaxError from that of 3.12)
)
def test_malformed_dims_raise_value_error(bad, kind):
    """Regression: sympy's parser errors other than SyntaxError/TypeError (AttributeError, TokenError) used to escape."""
    with pytest.raises(ValueError, match=re.escape(f"not a dimension expression: {bad!r} ({kind}")):
        Dim(bad)


# Regression: sympy's parser evaluates Python, so the text is checked first; non-integers, division by zero, boolean
# operators, conditional expressions and attribute calls are rejected.
@pytest.mark.parametrize(
    "bad",
    ["2.5", "1/0", "-3", "M if N else K", "M and N", "M or N", "M.subs(M, 3)"],
)
def test_non_dimension_expressions_are_rejected(bad):
    with pytest.raises(ValueError):
        Dim(bad)


# ---------------------------------------------------------------------------------------------------------------------
# cdiv
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "d", "want"), [(130, 64, 3), (128, 64, 2), (1, 64, 1), (64, 1, 64), (4097, 4096, 2)])
def test_cdiv_of_integers(n, d, want):
    assert cdiv(sympy.Integer(n), sympy.Integer(d)) == want
    assert Dim(f"cdiv({n}, {d})") == Dim(want)


def test_cdiv_simplifies_exact_quotients_and_stays_symbolic_otherwise():
    assert Dim("cdiv(64*B, 64)") == Dim("B")
    assert Dim("cdiv(N, 1)") == Dim("N")
    assert Dim("cdiv(N, 64)").text == "cdiv(N, 64)"
    assert Dim("cdiv(N, 64)").expr.is_integer
    assert Dim("cdiv(N, 64)").expr.is_positive


@pytest.mark.parametrize(("n", "want"), [(1, 1), (63, 1), (64, 1), (65, 2), (128, 2), (129, 3), (4096, 64)])
def test_cdiv_evaluation(n, want):
    assert evaluate("cdiv(N, 64)", {"N": n}) == want


# ---------------------------------------------------------------------------------------------------------------------
# Proofs
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        ("64*B", 16, True),
        ("64*B", "16", True),
        ("B*S", 16, False),
        ("64*cdiv(N, 64)", 64, True),
        ("BLOCK_M*cdiv(M, BLOCK_M)", "BLOCK_M", True),
        (4096, 64, True),
        (4096, 48, False),
        ("M", 1, True),
        ("M", "M", True),
        ("M", "N", False),
        ("2*M", 4, False),
    ],
)
def test_provably_divisible(a, b, want):
    assert provably_divisible(a, b) is want


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (4096, 2048, True),
        (4096, 4096, False),
        ("M", "N", False),  # unknown: could be equal
        ("M + 1", "M", True),
        ("M", "M", False),
        ("2*M", "M + M", False),
        ("B*S", "S*B", False),
        ("B*S", 64, False),
    ],
)
def test_provably_different(a, b, want):
    assert provably_different(Dim(a), Dim(b)) is want


def test_provably_equal():
    assert provably_equal(Dim("2*M"), Dim("M + M"))
    assert provably_equal(Dim("B*S"), Dim("S*B"))
    assert not provably_equal(Dim("M"), Dim("N"))
    assert not provably_equal(Dim(4096), Dim(2048))


# ---------------------------------------------------------------------------------------------------------------------
# Evaluation and Python code
# ---------------------------------------------------------------------------------------------------------------------


def test_evaluate():
    assert evaluate("B*S", {"B": 4, "S": 128}) == 512
    assert evaluate(Dim("cdiv(B*S, BLOCK_M)"), {"B": 3, "S": 100, "BLOCK_M": 64}) == 5
    assert evaluate(4096, {}) == 4096
    assert evaluate("M", {"M": 7, "N": 9}) == 7  # extra bindings are ignored


def test_evaluate_names_missing_symbols():
    with pytest.raises(ValueError, match="needs values for N"):
        evaluate("M*N", {"M": 2})
    with pytest.raises(ValueError, match="B, S"):
        evaluate("B*S", {})


@pytest.mark.parametrize(
    ("dim", "want"),
    [
        ("cdiv(M, 64)", "triton.cdiv(M, 64)"),
        ("B*S", "B*S"),
        ("4096", "4096"),
        ("N/2", "((N) // (2))"),
        ("cdiv(B*S, BLOCK_M)", "triton.cdiv(B*S, BLOCK_M)"),
    ],
)
def test_to_python_text(dim, want):
    assert to_python(dim) == want


_TRITON = types.SimpleNamespace(cdiv=lambda a, b: -(-a // b))


@pytest.mark.parametrize(
    ("dim", "bindings"),
    [
        ("cdiv(M, 64)", {"M": 1000}),
        ("B*S", {"B": 3, "S": 77}),
        ("BLOCK_M*cdiv(M, BLOCK_M)", {"M": 1000, "BLOCK_M": 128}),
        ("N/2", {"N": 4096}),
        ("cdiv(N, 64) + M", {"N": 65, "M": 2}),
        ("Max(M, 64)", {"M": 10}),
        # TorchDynamo's shapes after x.reshape(B, T // 2, 2 * C), x[:, ::2], avg_pool1d: floor, ceiling and Mod
        ("B*floor(T/2)", {"B": 3, "T": 9}),
        ("ceiling(T/2)", {"T": 9}),
        ("2*floor((T - 1)/4) + 1", {"T": 17}),
        ("Mod(T, 4) + floor(T)", {"T": 9}),
    ],
)
def test_to_python_evaluates_like_evaluate(dim, bindings):
    code = to_python(dim)
    value = eval(code, {"triton": _TRITON, "Max": max, "Min": min}, dict(bindings))  # noqa: S307
    assert value == evaluate(dim, bindings)
    assert isinstance(value, int)


def test_a_remainder_is_nonnegative_only_for_a_positive_divisor():
    assert Dim("Mod(T, 4)").expr.is_nonnegative
    assert Dim("Mod(T, -4) + 4").expr.is_nonnegative is None  # Python's remainder takes the divisor's sign


@pytest.mark.parametrize(
    ("text", "truth"),
    [
        # sympy's Mod made the first Mod(T*(Mod(3*T, 4))**2, 3) (sympy issue 28744): a wrong row count
        ("B*T + Mod(B*(Mod(3*T, 4)), 3)", lambda B, T: B * T + (B * ((3 * T) % 4)) % 3),
        ("Mod(T + 2*Mod(B, 4), 3)", lambda B, T: (T + 2 * (B % 4)) % 3),
        # TorchDynamo's own spellings (torch.utils._sympy.functions)
        ("(T + PythonMod(-T, 2))//2", lambda B, T: (T + (-T) % 2) // 2),
        ("B*CeilToInt(IntTrueDiv(T, 3))", lambda B, T: B * -(-T // 3)),
        ("FloorToInt(IntTrueDiv(T, 2))", lambda B, T: T // 2),
        ("ModularIndexing(T, 2, 4)", lambda B, T: (T // 2) % 4),
    ],
)
def test_sizes_with_remainders_and_torch_functions_evaluate_exactly(text, truth):
    """Through the canonical text, :func:`evaluate` and the launcher's shape function (``to_python``) alike."""
    from amk.runtime import ShapeFunction

    dim = Dim(text)
    shape_function = ShapeFunction([dim])
    for B, T in itertools.product(range(1, 9), range(1, 14)):
        assert evaluate(dim, {"B": B, "T": T}) == shape_function({"B": B, "T": T})[0] == truth(B, T), (B, T)


@pytest.mark.parametrize(
    ("dim", "want"),
    [
        ("(N + 1)/2", "((N + 1) // (2))"),
        ("(N + 3)/4 + M", "((4*M + N + 3) // (4))"),
        ("cdiv(N, 64)/2", "((triton.cdiv(N, 64)) // (2))"),
    ],
)
def test_to_python_rational_sums_divide_once(dim, want):
    """Regression: to_python('(N + 1)/2') gave '((N) // (2)) + 1/2', a float 0.5 term."""
    assert to_python(dim) == want


@pytest.mark.parametrize(
    ("dim", "bindings"),
    [("(N + 1)/2", {"N": 3}), ("(N + 3)/4 + M", {"N": 5, "M": 2}), ("(B*S + S)/2", {"B": 3, "S": 4}),
     ("cdiv(N, 64)/2", {"N": 200})],
)
def test_to_python_rational_sum_stays_integral(dim, bindings):
    value = eval(to_python(dim), {"triton": _TRITON}, dict(bindings))  # noqa: S307
    assert value == evaluate(dim, bindings)
    assert isinstance(value, int)


def test_to_python_rational_sum_value():
    bindings = {"N": 3}
    value = eval(to_python("(N + 1)/2"), {"triton": _TRITON}, bindings)  # noqa: S307
    assert value == evaluate("(N + 1)/2", bindings) == 2
    assert isinstance(value, int)


def test_shape_functions_from_cached_texts_agree_with_sympys():
    """A cached plan's dim texts become shape functions; sums and products of sizes skip sympy and must compute the
    same values as the sympy path."""
    from amk.runtime import ShapeFunction

    texts = ["s0*s1", "M + 1", "4096", "2*M*N"]
    fast = ShapeFunction.from_texts(texts)
    assert not hasattr(fast, "value") and fast.texts == texts
    reference = ShapeFunction([Dim(text) for text in texts])
    for bindings in ({"s0": 3, "s1": 7, "M": 5, "N": 2}, {"s0": 1, "s1": 1, "M": 1, "N": 9}):
        assert fast(bindings) == reference(bindings)
    with pytest.raises(ValueError, match="not a dimension"):
        ShapeFunction.from_texts(["lambda"])


@pytest.mark.parametrize(("text", "emitted"), [("floor(T/2 - 1/2) + 1", True), ("Mod(T, 4)", True),
                                               ("ceiling(T/3)", True), ("T + Mod(-T, 4)", False)])
def test_a_kernel_divides_only_what_is_provably_nonnegative(text, emitted):
    """Triton's // and % truncate toward zero: ``Mod(-T, 4)`` (Python's, 4 - T % 4 or 0) would be computed wrong in a
    kernel, so the emitter refuses it there (the launcher, in Python, computes it right)."""
    from amk.lowering.emit_triton import _python_of

    if emitted:
        assert _python_of(text, (), frozenset({"T"}), "tl.cdiv")
    else:
        with pytest.raises(ValueError, match="may be negative, inside a kernel"):
            _python_of(text, (), frozenset({"T"}), "tl.cdiv")
