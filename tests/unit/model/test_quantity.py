import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.model.quantity import QuantityError, parse_quantity, to_int, to_milli


@pytest.mark.parametrize(
    ("raw", "milli"),
    [
        ("1", 1000),
        ("500m", 500),
        ("0.1", 100),
        ("1.5", 1500),
        ("2e3", 2_000_000),
        (2, 2000),
        ("100u", 1),
        ("1n", 1),
        (".5", 500),
    ],
)
def test_cpu_milli_rounds_up_like_kubernetes(raw: object, milli: int) -> None:
    assert to_milli(raw) == milli


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1Gi", 2**30),
        ("512Mi", 512 * 2**20),
        ("1G", 10**9),
        ("1.5Ki", 1536),
        ("1k", 1000),
        ("0.5", 1),
        ("123", 123),
        ("1E", 10**18),
        ("1e2", 100),
    ],
)
def test_memory_bytes(raw: str, value: int) -> None:
    assert to_int(raw) == value


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3", "1Qi", "--1", "1 Gi", None, [], True])
def test_malformed_quantities_name_the_input(raw: object) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(raw)
    assert repr(raw) in str(err.value)


def test_exact_decimal() -> None:
    assert parse_quantity("0.1") * 3 == Decimal("0.3")


# --- the grammar is ASCII, the values bounded, the arithmetic exact ----------------------


@pytest.mark.parametrize(
    "raw", ["\u0663", "\u0661\u0660Gi", "\uff11", "1\u0663m", "\u00b2", "\u30001"]
)
def test_non_ascii_digits_are_not_a_quantity(raw: str) -> None:
    """`\\d` matched '٣' (Arabic-Indic three) and Decimal read it as 3: to_milli('٣') was
    3000. Kubernetes' grammar is ASCII digits only."""
    with pytest.raises(QuantityError, match="is not a Kubernetes quantity"):
        to_milli(raw)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("1e999999999", "exponent 999999999 is out of range"),  # raised decimal.Overflow
        ("1e999999", "exponent 999999 is out of range"),  # took 35 s to convert to an int
        ("1e30", "out of range"),  # overflowed the int64 node columns
        ("8Ei", "out of range"),
        (2**64, "out of range"),
        (float("inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        ("1" * 129, "longer than 128 characters"),
    ],
)
def test_quantities_beyond_int64_or_absurd_exponents_are_errors(raw: object, match: str) -> None:
    with pytest.raises(QuantityError, match=match):
        to_int(raw)


def test_the_largest_quantity_is_kept_exactly() -> None:
    assert to_int(str(2**63 - 1)) == 2**63 - 1
    assert to_int("-" + str(2**63 - 1)) == -(2**63 - 1)
    assert to_milli("1e-999") == 1  # tiny but positive: rounds up to 1m, as MilliValue()


def test_milli_rounding_is_exact_past_28_digits() -> None:
    """Decimal's default 28-digit context rounded 1.000...01 (30 digits) * 1000 to 1000."""
    assert to_milli("1.00000000000000000000000000001") == 1001


_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(2 ** (10 * i)) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"], 1)},
}


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.text("0123456789", max_size=25),
    frac=st.none() | st.text("0123456789", max_size=25),
    suffix=st.sampled_from(sorted(_SUFFIX)) | st.integers(-40, 40).map(lambda e: f"e{e}"),
)
@settings(max_examples=300, deadline=None)
def test_every_ascii_quantity_is_exact_or_out_of_range(
    sign: str, whole: str, frac: str | None, suffix: str
) -> None:
    number = whole + ("" if frac is None else "." + frac)
    raw = sign + number + suffix
    if not any(ch.isdigit() for ch in number):
        with pytest.raises(QuantityError):
            to_milli(raw)
        return
    factor = _SUFFIX[suffix] if suffix in _SUFFIX else Fraction(10) ** int(suffix[1:])
    value = Fraction(sign + (number if not number.endswith(".") else number[:-1]) or "0")
    value *= factor
    if abs(value) > 2**63 - 1:
        with pytest.raises(QuantityError, match="out of range"):
            to_milli(raw)
        return
    assert to_milli(raw) == math.ceil(value * 1000)
    assert to_int(raw) == math.ceil(value)


@given(st.text(max_size=40) | st.from_regex(r"[+-]?[0-9.]{0,6}[a-zA-Z]{0,3}[0-9+-]{0,4}"))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_number_or_a_quantity_error_naming_it(raw: str) -> None:
    error = ""
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        error = str(exc)
    if error:
        assert repr(raw)[:20] in error
    else:
        assert abs(value) <= 2**63 - 1
        assert raw.strip(" \t\r\n").isascii()
