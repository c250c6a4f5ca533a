"""Kubernetes resource quantities ("500m", "1.5Gi", "2e3") parsed exactly as the API does.

Decimal arithmetic, because float rounding would make "0.1" CPU 99 milli on some inputs
while Kubernetes says 100; values round up like resource.Quantity.Value()/MilliValue().

The grammar is Kubernetes' own, ASCII only: a regex `\\d` also matches '٣' (Arabic-Indic
three), which Decimal then reads as 3. A quantity may be at most 2^63-1 in magnitude
(resource.Quantity's documented limit): beyond it, and for exponents past +-999, it is an
error, so "1e999999" can neither overflow the int64 columns nor take seconds to convert.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Context, Decimal, DecimalException, InvalidOperation

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
_RE = re.compile(
    r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?",
    re.ASCII,
)
# resource.Quantity: "no quantity may represent a number greater than 2^63-1 in magnitude".
MAX_QUANTITY = 2**63 - 1
MAX_EXPONENT = 999
# Longer than any quantity the API server writes; bounds the Decimal work per value.
MAX_LENGTH = 128
# Exact arithmetic for every accepted input: at most MAX_LENGTH digits times a suffix factor.
_CONTEXT = Context(prec=2 * MAX_LENGTH + 40, Emax=4 * MAX_EXPONENT, Emin=-4 * MAX_EXPONENT)
_ASCII_SPACE = " \t\r\n"


class QuantityError(ValueError):
    pass


class QuantityRangeError(QuantityError):
    """A well-formed quantity beyond 2^63-1 in magnitude; `negative` says which way (a caller
    that must not under-count, the pod parser, clamps to its own bound instead)."""

    def __init__(self, message: str, negative: bool) -> None:
        super().__init__(message)
        self.negative = negative


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity in base units; raises QuantityError naming the input."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is not a number")
    if isinstance(value, int):
        return _bounded(Decimal(value), value)
    if isinstance(value, float):
        number = Decimal(repr(value))
        if not number.is_finite():
            raise QuantityError(f"quantity {value!r} is not a finite number")
        return _bounded(number, value)
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r} is not a string or number")
    if len(value) > MAX_LENGTH:
        raise QuantityError(f"quantity {value[:32]!r}... is longer than {MAX_LENGTH} characters")
    m = _RE.fullmatch(value.strip(_ASCII_SPACE))
    if not m:
        raise QuantityError(
            f"quantity {value!r} is not a Kubernetes quantity (ASCII digits, an optional"
            " suffix such as m, Ki, Gi, k, M, G or e3)"
        )
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise QuantityError(f"quantity {value!r} is not a number") from exc
    suffix = m.group(2) or ""
    try:
        if suffix in _BINARY:
            out = _CONTEXT.multiply(number, Decimal(_BINARY[suffix]))
        elif suffix in _DECIMAL:
            out = _CONTEXT.multiply(number, _DECIMAL[suffix])
        else:
            exponent = int(suffix[1:])
            if exponent > MAX_EXPONENT and number:
                raise QuantityRangeError(
                    f"quantity {value!r}: exponent {exponent} is out of range"
                    f" (-{MAX_EXPONENT} to {MAX_EXPONENT})",
                    number < 0,
                )
            if abs(exponent) > MAX_EXPONENT:
                raise QuantityError(
                    f"quantity {value!r}: exponent {exponent} is out of range"
                    f" (-{MAX_EXPONENT} to {MAX_EXPONENT})"
                )
            out = _CONTEXT.scaleb(number, Decimal(exponent))
    except DecimalException as exc:  # pragma: no cover - the bounds above keep it exact
        raise QuantityError(f"quantity {value!r} cannot be computed exactly ({exc!r})") from exc
    return _bounded(out, value)


def _bounded(number: Decimal, value: object) -> Decimal:
    if abs(number) > MAX_QUANTITY:
        raise QuantityRangeError(
            f"quantity {value!r} is out of range (magnitude above 2^63-1)", number < 0
        )
    return number


def to_milli(value: object) -> int:
    """MilliValue(): CPU in milli-cores, rounded up."""
    q = _CONTEXT.multiply(parse_quantity(value), Decimal(1000))  # exact, as MilliValue()
    return int(q.to_integral_value(rounding=ROUND_CEILING))


def to_int(value: object) -> int:
    """Value(): bytes or counts, rounded up."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))
