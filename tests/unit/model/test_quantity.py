from decimal import Decimal

import pytest

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
