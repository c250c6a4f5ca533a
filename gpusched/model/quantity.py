"""Kubernetes resource quantities ("500m", "1.5Gi", "2e3") parsed exactly as the API does.

Decimal arithmetic, because float rounding would make "0.1" CPU 99 milli on some inputs
while Kubernetes says 100; values round up like resource.Quantity.Value()/MilliValue().
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity in base units; raises QuantityError naming the input."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is not a number")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r} is not a string or number")
    m = _RE.match(value.strip())
    if not m:
        raise QuantityError(f"quantity {value!r} is not a Kubernetes quantity")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"quantity {value!r} is not a number") from exc
    suffix = m.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def to_milli(value: object) -> int:
    """MilliValue(): CPU in milli-cores, rounded up."""
    q = parse_quantity(value) * 1000
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def to_int(value: object) -> int:
    """Value(): bytes or counts, rounded up."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))
