"""DRA device selectors: CEL expressions compiled once and evaluated against devices, with
the semantics of kube's `k8s.io/dynamic-resource-allocation/cel` (compile.go).

The runtime is `cel-expr-python`, Google's C++ CEL runtime (cel-cpp) with Python bindings:
it type-checks like cel-go (a selector of type int is a compile error, as in kube), ships
the strings extension (version 2, as kube's base environment), `cel.bind`, optionals and
RE2 `matches`, and evaluates a typical selector in about 5 us. The other candidates, measured
on the same selectors (see README "DRA selectors"):

- `common-expression-language` (cel-rust): about 3 us per evaluation with a reused
  context, but it does not type-check (a non-bool selector is only found at run time),
  has no `cel.bind`, and like cel-expr-python it cannot carry a custom value type.
- `cel-python` (celpy, pure Python): about 1.3 ms per evaluation, 250x slower, and it lacks
  `cel.bind` and the string extension.
Of kube's compile_test.go cases that apply to gpusched's model (scalar attributes), 30 pass
with cel-expr-python and this module's extensions; the cases not ported are the list-typed
attributes (DRAListTypeAttributes, not in gpusched's model) and exact cost numbers.

Kubernetes' CEL library is added here as Python functions: `quantity()`/`isQuantity()` with
sign, isGreaterThan, isLessThan, compareTo, add, sub, asInteger, asApproximateFloat and
isInteger (exact, on Decimal, model/quantity.py); `semver()`/`isSemver()` (strict
blang/semver grammar, and the `normalize` variant) with major, minor, patch, isGreaterThan,
isLessThan and compareTo; the lists library (isSorted, sum, min, max: its indexOf and
lastIndexOf would clash with the strings extension's, which cel-cpp cannot overload from
Python); the regex library (find, findAll); the sets extension (sets.contains, sets.equivalent,
sets.intersects). cel-expr-python cannot hold an opaque value from Python, so a quantity or
a semver is a one-entry map tagged with its type (`{"kubernetes.Quantity": "<decimal>"}`)
holding a canonical form, which makes `==` compare values as kube does (`quantity("1") ==
quantity("1000m")`, build metadata ignored for semvers).

Semantics kept from compile.go and the allocator:
- `device.driver`, `device.attributes[domain][name]`, `device.capacity[domain][name]` (a
  quantity), `device.allowMultipleAllocations`. A missing name is the runtime error
  "no such key: <name>"; a missing domain is an empty map in kube, which gpusched keeps for
  the domains an expression names literally (`device.attributes["x"]`), so `has(...)`,
  `.size()` and macros on it behave as in kube.
- A runtime error is returned as a CelError: kube's allocator fails the allocation with
  it ("class X: selector #i: CEL runtime error: ..."), it does not skip the device.
- The result must be a bool: a compile-time type other than bool or dyn is a compile error,
  a non-bool value at run time is an error.

Known differences from kube, none of which a realistic selector meets:
- Cost: kube stops an evaluation above 1,000,000 cost units (CELSelectorExpressionMaxCost).
  cel-cpp tracks no cost; it stops a comprehension after 10,000 iterations in total
  ("iteration budget exceeded"), which bounds the work of an expression the same way
  (kube's "expensive" test case fails with an error in both).
- `"x" in device.attributes` is true when the expression also indexes
  `device.attributes["x"]` literally and the device has no domain "x" (the empty map put
  there for the lookup); a domain reached only through a variable is not pre-filled, so
  looking it up is "no such key" instead of an empty map.
- `device.attributes` is typed dyn, so `device.nosuchfield` is a runtime error instead of
  a compile error; the two-variable comprehensions, the URL, IP, CIDR, format and image
  libraries of kube's base environment are not provided (compile error "undeclared").
- Quantities are bounded by 2^63-1 in magnitude (model/quantity.py), kube's are not.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Context, Decimal
from functools import lru_cache
from itertools import pairwise
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from gpusched.model.dra import AttributeKind, Device
from gpusched.model.quantity import QuantityError, parse_quantity

__all__ = ["CelError", "Compiled", "Selectors"]

# resource.k8s.io CELSelectorExpressionMaxLength: the API rejects longer selectors, so a
# longer one here (only from a malformed object) is refused the same way.
MAX_EXPRESSION_LENGTH = 10 * 1024
_QUANTITY_TAG = "kubernetes.Quantity"
_SEMVER_TAG = "kubernetes.Semver"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Exact arithmetic on quantities: values have at most ~300 significant digits.
_EXACT = Context(prec=1000, Emax=10_000, Emin=-10_000)
# resource.ErrFormatWrong, kube's message for a string that is not a quantity.
_QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@dataclass(frozen=True, slots=True)
class CelError:
    """A selector that does not compile, or failed at run time; the allocator fails the
    claim with this message."""

    message: str


@dataclass(frozen=True, slots=True, eq=False)
class Compiled:
    expression: str
    program: Any  # cel_expr_python.cel.Expression (the binding is untyped)
    # Domains the expression indexes literally (device.attributes["d"], capacity["d"]):
    # a device without them gets empty maps there, as kube's map with default does.
    attribute_domains: frozenset[str]
    capacity_domains: frozenset[str]


class _EvalError(Exception):
    """Raised inside an extension function: cel-cpp turns it into the expression's error."""


# ---- quantity ----------------------------------------------------------------------------


def _canonical(value: Decimal) -> str:
    if not value:
        return "0"
    return str(value.normalize(_EXACT))


@lru_cache(maxsize=4096)
def _decimal(text: str) -> Decimal:
    return Decimal(text)


def _quantity_value(value: Decimal) -> dict[str, str]:
    return {_QUANTITY_TAG: _canonical(value)}


def _as_quantity(value: object) -> Decimal | None:
    if isinstance(value, dict) and len(value) == 1:
        text = value.get(_QUANTITY_TAG)
        if isinstance(text, str):
            return _decimal(text)
    return None


@lru_cache(maxsize=4096)
def _parse_quantity(text: str) -> Decimal:
    # resource.ParseQuantity trims nothing; model/quantity.py trims ASCII space.
    if not text or text != text.strip():
        raise _EvalError(_QUANTITY_FORMAT_ERROR)
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise _EvalError(_QUANTITY_FORMAT_ERROR) from exc


def _quantity(text: str) -> dict[str, str]:
    return _quantity_value(_parse_quantity(text))


def _is_quantity(text: str) -> bool:
    try:
        _parse_quantity(text)
    except _EvalError:
        return False
    return True


def _int64(value: int) -> int:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _EvalError("integer overflow")
    return value


def _quantity_int(q: Decimal) -> int | None:
    """Quantity.AsInt64: the value when it is an integer within int64, else None."""
    if q != q.to_integral_value():
        return None
    value = int(q)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


# ---- semver ------------------------------------------------------------------------------

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_UINT64_MAX = 2**64 - 1

# (major, minor, patch, prerelease identifiers: int for numeric, str for alphanumeric)
Semver = tuple[int, int, int, tuple[int | str, ...]]


def _parse_number(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise _EvalError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise _EvalError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text or int(text) > _UINT64_MAX:
        raise _EvalError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text)


def parse_semver(text: str) -> Semver:
    """blang/semver/v4 Parse, the strict grammar kube's semver() uses; raises _EvalError
    with blang's message."""
    if not text:
        raise _EvalError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise _EvalError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "major")
    minor = _parse_number(parts[1], "minor")
    patch_text = parts[2]
    build: list[str] = []
    prerelease: list[str] = []
    if "+" in patch_text:
        patch_text, _, build_text = patch_text.partition("+")
        build = build_text.split(".")
    if "-" in patch_text:
        patch_text, _, pre_text = patch_text.partition("-")
        prerelease = pre_text.split(".")
    patch = _parse_number(patch_text, "patch")
    pre: list[int | str] = []
    for ident in prerelease:
        if not ident:
            raise _EvalError("Prerelease is empty")
        if set(ident) <= _NUMBERS:
            if len(ident) > 1 and ident[0] == "0":
                raise _EvalError(
                    f"Numeric PreRelease version must not contain leading zeroes {ident!r}"
                )
            pre.append(int(ident))
        elif set(ident) <= _ALPHANUM:
            pre.append(ident)
        else:
            raise _EvalError(f"Invalid character(s) found in prerelease {ident!r}")
    for meta in build:
        if not meta:
            raise _EvalError("Build meta data is empty")
        if not set(meta) <= _ALPHANUM:
            raise _EvalError(f"Invalid character(s) found in build meta data {meta!r}")
    return (major, minor, patch, tuple(pre))


def _normalize_and_parse(text: str) -> Semver:
    """kube's normalizeAndParse: strip one "v", drop leading zeros, fill in a missing minor
    and patch."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or trimmed[0] not in _NUMBERS:
                trimmed = "0" + trimmed
            parts[i] = trimmed
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise _EvalError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def compare_semver(a: Semver, b: Semver) -> int:
    """blang Version.Compare: -1, 0 or 1; build metadata never counts."""
    if a[:3] != b[:3]:
        return -1 if a[:3] < b[:3] else 1
    pre_a, pre_b = a[3], b[3]
    if not pre_a or not pre_b:
        return (not pre_a) - (not pre_b)  # a release is above its prereleases
    for x, y in zip(pre_a, pre_b, strict=False):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int):
            return -1  # numeric identifiers sort below alphanumeric ones
        if isinstance(y, int):
            return 1
        return -1 if x < y else 1
    return (len(pre_a) > len(pre_b)) - (len(pre_a) < len(pre_b))


def _semver_text(v: Semver) -> str:
    core = f"{v[0]}.{v[1]}.{v[2]}"
    return core + ("-" + ".".join(str(p) for p in v[3]) if v[3] else "")


def _semver_value(v: Semver) -> dict[str, str]:
    return {_SEMVER_TAG: _semver_text(v)}


@lru_cache(maxsize=4096)
def _semver_from_text(text: str) -> Semver:
    return parse_semver(text)


def _as_semver(value: object) -> Semver | None:
    if isinstance(value, dict) and len(value) == 1:
        text = value.get(_SEMVER_TAG)
        if isinstance(text, str):
            return _semver_from_text(text)
    return None


def _semver(text: str, normalize: bool = False) -> dict[str, str]:
    return _semver_value(_normalize_and_parse(text) if normalize else parse_semver(text))


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _normalize_and_parse(text) if normalize else parse_semver(text)
    except _EvalError:
        return False
    return True


def _to_int64(value: int) -> int:
    # Go's int64(uint64) conversion for a major/minor/patch above 2^63-1.
    return value - 2**64 if value > _INT64_MAX else value


# ---- functions shared by quantity and semver (one map-typed overload each) ---------------


def _no_overload(name: str) -> _EvalError:
    return _EvalError(f"no such overload: {name}")


def _compare(name: str, a: object, b: object) -> int:
    qa, qb = _as_quantity(a), _as_quantity(b)
    if qa is not None and qb is not None:
        return (qa > qb) - (qa < qb)
    sa, sb = _as_semver(a), _as_semver(b)
    if sa is not None and sb is not None:
        return compare_semver(sa, sb)
    raise _no_overload(name)


def _quantity_arg(name: str, value: object) -> Decimal:
    q = _as_quantity(value)
    if q is None:
        raise _no_overload(name)
    return q


def _semver_arg(name: str, value: object) -> Semver:
    v = _as_semver(value)
    if v is None:
        raise _no_overload(name)
    return v


def _add(a: object, b: object) -> dict[str, str]:
    other = Decimal(b) if isinstance(b, int) else _quantity_arg("add", b)
    return _quantity_value(_EXACT.add(_quantity_arg("add", a), other))


def _sub(a: object, b: object) -> dict[str, str]:
    other = Decimal(b) if isinstance(b, int) else _quantity_arg("sub", b)
    return _quantity_value(_EXACT.subtract(_quantity_arg("sub", a), other))


def _as_integer(a: object) -> int:
    value = _quantity_int(_quantity_arg("asInteger", a))
    if value is None:
        raise _EvalError("cannot convert value to integer")
    return value


def _sign(a: object) -> int:
    q = _quantity_arg("sign", a)
    return (q > 0) - (q < 0)


# ---- lists, regex and sets libraries -----------------------------------------------------


def _comparable(name: str, items: Sequence[object]) -> list[Any]:
    kinds = {type(x) for x in items}
    if kinds <= {int, float} or len(kinds) <= 1:
        if any(isinstance(x, (dict, list, bool)) for x in items) and len(kinds) > 1:
            raise _no_overload(name)
        return list(items)
    raise _no_overload(name)


def _is_sorted(items: list[Any]) -> bool:
    values = _comparable("isSorted", items)
    return all(a <= b for a, b in pairwise(values))


def _sum(items: list[Any]) -> Any:
    values = _comparable("sum", items)
    if not values:
        return 0
    total = values[0]
    for x in values[1:]:
        total = total + x
    return _int64(total) if isinstance(total, int) and not isinstance(total, bool) else total


def _min(items: list[Any]) -> Any:
    values = _comparable("min", items)
    if not values:
        raise _EvalError("min called on empty list")
    return min(values)


def _max(items: list[Any]) -> Any:
    values = _comparable("max", items)
    if not values:
        raise _EvalError("max called on empty list")
    return max(values)


def _same(a: object, b: object) -> bool:
    # CEL equality keeps bool apart from int (Python's True == 1 does not).
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise _EvalError(f"error parsing regexp: {exc}") from exc


def _find(text: str, pattern: str) -> str:
    m = _regex(pattern).search(text)
    return m.group(0) if m else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(any(_same(x, y) for y in a) for x in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_same(x, y) for y in a) for x in b)


# ---- the environment ---------------------------------------------------------------------

_T = cel.Type
_TAGGED = _T.Map(_T.STRING, _T.STRING)  # a quantity or a semver (see the module docstring)
_LIST = _T.List(_T.DYN)


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Any Python exception in an extension becomes the expression's error (cel-cpp does
    that for every exception; this only gives it kube's wording)."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except _EvalError:
            raise
        except (ArithmeticError, ValueError, TypeError) as exc:
            raise _EvalError(str(exc)) from exc

    return call


def _overload(
    ident: str, result: Any, params: list[Any], impl: Callable[..., Any], member: bool = False
) -> Any:
    return cel.Overload(ident, result, params, is_member=member, impl=_guard(impl))


def _functions() -> list[Any]:
    fn = cel.FunctionDecl
    ov = _overload
    return [
        fn("quantity", [ov("string_to_quantity", _TAGGED, [_T.STRING], _quantity)]),
        fn("isQuantity", [ov("is_quantity_string", _T.BOOL, [_T.STRING], _is_quantity)]),
        fn("semver", [
            ov("string_to_semver", _TAGGED, [_T.STRING], _semver),
            ov("string_bool_to_semver", _TAGGED, [_T.STRING, _T.BOOL], _semver),
        ]),
        fn("isSemver", [
            ov("is_semver_string", _T.BOOL, [_T.STRING], _is_semver),
            ov("is_semver_string_bool", _T.BOOL, [_T.STRING, _T.BOOL], _is_semver),
        ]),
        fn("isGreaterThan", [ov(
            "tagged_is_greater_than", _T.BOOL, [_TAGGED, _TAGGED],
            lambda a, b: _compare("isGreaterThan", a, b) == 1, True,
        )]),
        fn("isLessThan", [ov(
            "tagged_is_less_than", _T.BOOL, [_TAGGED, _TAGGED],
            lambda a, b: _compare("isLessThan", a, b) == -1, True,
        )]),
        fn("compareTo", [ov(
            "tagged_compare_to", _T.INT, [_TAGGED, _TAGGED],
            lambda a, b: _compare("compareTo", a, b), True,
        )]),
        fn("sign", [ov("quantity_sign", _T.INT, [_TAGGED], _sign, True)]),
        fn("isInteger", [ov(
            "quantity_is_integer", _T.BOOL, [_TAGGED],
            lambda a: _quantity_int(_quantity_arg("isInteger", a)) is not None, True,
        )]),
        fn("asInteger", [ov("quantity_get_int", _T.INT, [_TAGGED], _as_integer, True)]),
        fn("asApproximateFloat", [ov(
            "quantity_get_float", _T.DOUBLE, [_TAGGED],
            lambda a: float(_quantity_arg("asApproximateFloat", a)), True,
        )]),
        fn("add", [
            ov("quantity_add", _TAGGED, [_TAGGED, _TAGGED], _add, True),
            ov("quantity_add_int", _TAGGED, [_TAGGED, _T.INT], _add, True),
        ]),
        fn("sub", [
            ov("quantity_sub", _TAGGED, [_TAGGED, _TAGGED], _sub, True),
            ov("quantity_sub_int", _TAGGED, [_TAGGED, _T.INT], _sub, True),
        ]),
        fn("major", [ov(
            "semver_major", _T.INT, [_TAGGED],
            lambda a: _to_int64(_semver_arg("major", a)[0]), True,
        )]),
        fn("minor", [ov(
            "semver_minor", _T.INT, [_TAGGED],
            lambda a: _to_int64(_semver_arg("minor", a)[1]), True,
        )]),
        fn("patch", [ov(
            "semver_patch", _T.INT, [_TAGGED],
            lambda a: _to_int64(_semver_arg("patch", a)[2]), True,
        )]),
        fn("isSorted", [ov("list_is_sorted", _T.BOOL, [_LIST], _is_sorted, True)]),
        fn("sum", [ov("list_sum", _T.DYN, [_LIST], _sum, True)]),
        fn("min", [ov("list_min", _T.DYN, [_LIST], _min, True)]),
        fn("max", [ov("list_max", _T.DYN, [_LIST], _max, True)]),
        fn("find", [ov("string_find", _T.STRING, [_T.STRING, _T.STRING], _find, True)]),
        fn("findAll", [
            ov("string_find_all", _T.List(_T.STRING), [_T.STRING, _T.STRING], _find_all, True),
            ov(
                "string_find_all_n", _T.List(_T.STRING), [_T.STRING, _T.STRING, _T.INT],
                _find_all, True,
            ),
        ]),
        fn("sets.contains", [ov("sets_contains", _T.BOOL, [_LIST, _LIST], _sets_contains)]),
        fn("sets.equivalent", [
            ov("sets_equivalent", _T.BOOL, [_LIST, _LIST], _sets_equivalent)
        ]),
        fn("sets.intersects", [
            ov("sets_intersects", _T.BOOL, [_LIST, _LIST], _sets_intersects)
        ]),
    ]  # fmt: skip


def _new_env() -> Any:
    return cel.NewEnv(
        variables={"device": _T.DYN},
        extensions=[
            ext_strings.ExtStrings(2),  # kube's base environment: ext.StringsVersion(2)
            ext_bindings.ExtBindings(),
            ext_optional.ExtOptional(),
        ],
        functions=_functions(),
    )


# ---- messages ----------------------------------------------------------------------------

# cel-cpp prefixes an absl status code; kube's messages have none.
_STATUS = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX = re.compile(r" \[[A-Z_]+\]$")
_NO_KEY = re.compile(r'Key not found in map : "(.*)"')
_INDEXED_DOMAIN = re.compile(
    r"""\b(attributes|capacity)\s*\[\s*(?:"((?:[^"\\\n])*)"|'((?:[^'\\\n])*)')\s*\]"""
)
_TYPE_NAMES = {"BOOL": "bool", "INT": "int", "UINT": "uint", "DOUBLE": "double",
               "STRING": "string", "BYTES": "bytes", "NULL": "null_type", "DYN": "dyn"}  # fmt: skip


def _clean(message: str) -> str:
    message = _STATUS_SUFFIX.sub("", _STATUS.sub("", message.strip()))
    message = _NO_KEY.sub(r"no such key: \1", message)
    if message == "Iteration budget exceeded":
        message = "iteration budget exceeded: a comprehension ran more than 10000 iterations"
    return message


def _type_name(t: Any) -> str:
    name = str(t.name())
    return _TYPE_NAMES.get(name, name.lower() if name.isupper() else name)


# ---- the API -----------------------------------------------------------------------------


_Entry = tuple[Device, Any]  # the device (kept so its id is not reused), its activation
_Key = tuple[int, str, frozenset[str], frozenset[str]]


class Selectors:
    """Compiles selector expressions (LRU by text) and evaluates them against devices
    (activation LRU per Device object: devices are frozen and reused across cycles).

    Not thread-safe: one allocator uses one instance."""

    def __init__(self, max_expressions: int = 4096, max_devices: int = 65536) -> None:
        self._env = _new_env()
        self._compiled: OrderedDict[str, Compiled | CelError] = OrderedDict()
        self._activations: OrderedDict[_Key, _Entry] = OrderedDict()
        self._max_expressions = max_expressions
        self._max_devices = max_devices

    def compile(self, expr: str) -> Compiled | CelError:
        hit = self._compiled.get(expr)
        if hit is not None:
            self._compiled.move_to_end(expr)
            return hit
        result = self._compile(expr)
        self._compiled[expr] = result
        if len(self._compiled) > self._max_expressions:
            self._compiled.popitem(last=False)
        return result

    def _compile(self, expr: str) -> Compiled | CelError:
        if len(expr) > MAX_EXPRESSION_LENGTH:
            return CelError(
                f"compilation failed: the expression is {len(expr)} characters long,"
                f" longer than the limit of {MAX_EXPRESSION_LENGTH}"
            )
        try:
            program = self._env.compile(expr)
        except RuntimeError as exc:
            return CelError("compilation failed: " + _clean(str(exc)))
        out = _type_name(program.return_type())
        if out not in ("bool", "dyn"):
            return CelError(f"must evaluate to bool or the unknown type, not {out}")
        attribute_domains: set[str] = set()
        capacity_domains: set[str] = set()
        for m in _INDEXED_DOMAIN.finditer(expr):
            domain = m.group(2) if m.group(2) is not None else m.group(3)
            (attribute_domains if m.group(1) == "attributes" else capacity_domains).add(domain)
        return Compiled(expr, program, frozenset(attribute_domains), frozenset(capacity_domains))

    def matches(self, compiled: Compiled, driver: str, device: Device) -> bool | CelError:
        activation = self._activation(compiled, driver, device)
        if isinstance(activation, CelError):
            return activation
        try:
            value = compiled.program.eval(activation)
        except RuntimeError as exc:  # cel-cpp reports some failures as exceptions
            return CelError(_clean(str(exc)))
        result = value.value()
        if isinstance(result, bool):  # only a CEL bool becomes one; type() costs 2 us
            return result
        kind = _type_name(value.type())
        if kind == "error":
            return CelError(_clean(str(result)))
        return CelError(f"CEL result of type {kind} could not be converted to bool")

    def _activation(self, compiled: Compiled, driver: str, device: Device) -> Any:
        # Keyed by the domains the expression names, not by those the device lacks: it is
        # known without looking at the device, and few distinct sets exist.
        key = (id(device), driver, compiled.attribute_domains, compiled.capacity_domains)
        entry = self._activations.get(key)
        if entry is not None and entry[0] is device:
            self._activations.move_to_end(key)
            return entry[1]
        built = _device_data(
            driver,
            device,
            compiled.attribute_domains - _domains(driver, device.attributes),
            compiled.capacity_domains - _domains(driver, device.capacity),
        )
        activation = built if isinstance(built, CelError) else self._env.Activation(built)
        self._activations[key] = (device, activation)
        if len(self._activations) > self._max_devices:
            self._activations.popitem(last=False)
        return activation


def _domains(driver: str, mapping: Mapping[str, object]) -> set[str]:
    return {name.partition("/")[0] if "/" in name else driver for name in mapping}


def _device_data(
    driver: str, device: Device, missing_attrs: frozenset[str], missing_caps: frozenset[str]
) -> dict[str, Any] | CelError:
    attributes: dict[str, dict[str, Any]] = {domain: {} for domain in missing_attrs}
    for name, attr in device.attributes.items():
        domain, _, ident = name.partition("/") if "/" in name else (driver, "", name)
        value: Any = attr.value
        if attr.kind is AttributeKind.VERSION:
            try:
                value = _semver_value(parse_semver(str(attr.value)))
            except _EvalError as exc:
                return CelError(f"attribute {name}: parse semantic version: {exc}")
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {domain: {} for domain in missing_caps}
    for name, cap in device.capacity.items():
        domain, _, ident = name.partition("/") if "/" in name else (driver, "", name)
        capacity.setdefault(domain, {})[ident] = _quantity_value(cap.value)
    return {
        "device": {
            "driver": driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": device.allow_multiple_allocations,
        }
    }
