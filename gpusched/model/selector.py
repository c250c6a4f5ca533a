"""Label requirements and selectors with apimachinery's semantics, shared by every parser of
a selector: node selectors (NodeAffinity, PodTopologySpread's nodeAffinityPolicy), label
selectors over pods and namespaces (InterPodAffinity, PodTopologySpread), and a
PersistentVolume's node affinity or a claim's volume selector (`model/volume.py`).

One `Requirement` matches all six operators:
- In: label present with one of the values. NotIn: label absent, or its value not listed.
- Exists / DoesNotExist: presence.
- Gt / Lt: label present, both sides base-10 int64, and a strict comparison; a label that
  is not an integer, or a bound that is not exactly one integer, matches nothing.

Which operators a field accepts is its parser's business, and they differ: a
metav1.LabelSelector takes `LABEL_OPERATORS`, a v1.NodeSelectorRequirement `NODE_OPERATORS`
(with Gt / Lt). The helpers below (quoting, key and value syntax, list and object coercion)
are what those parsers have in common; their field wording is the API server's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LABEL_OPERATORS = ("DoesNotExist", "Exists", "In", "NotIn")
NODE_OPERATORS = ("DoesNotExist", "Exists", "Gt", "In", "Lt", "NotIn")

_INT64 = re.compile(r"[+-]?[0-9]+\Z")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): optional sign, ASCII digits, in range; else None.
    (Python's int() would also take spaces, underscores and other scripts' digits.)"""
    if not _INT64.match(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def quote(value: Any) -> str:
    """A value as the API server's field errors print it (JSON where it can be)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def invalid(path: str, value: Any, message: str) -> str:
    """The API server's field.Invalid text: `path: Invalid value: "v": message`."""
    return f"{path}: Invalid value: {quote(value)}: {message}"


def label_key_error(key: str) -> str | None:
    """Why `key` is not a qualified label key (None when it is)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            "name part must be 1-63 alphanumeric characters, '-', '_' or '.', starting and"
            " ending with an alphanumeric character"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Why `value` is not a valid label value (None when it is)."""
    if value == "" or (len(value) <= 63 and _NAME.match(value)):
        return None
    return (
        "a valid label value must be empty or 1-63 alphanumeric characters, '-', '_' or '.',"
        " starting and ending with an alphanumeric character"
    )


def as_list(raw: Any, path: str, errors: list[str]) -> Sequence[Any]:
    """A JSON list field: absent is empty; anything else but a list is an error."""
    if raw is None:
        return ()
    if isinstance(raw, list | tuple):
        return raw
    errors.append(invalid(path, raw, "must be a list"))
    return ()


def as_map(raw: Any, path: str, errors: list[str]) -> Mapping[str, Any]:
    """A JSON object field; anything else (null too) is an error and reads as empty."""
    if isinstance(raw, Mapping):
        return raw
    errors.append(invalid(path, raw, "must be an object"))
    return {}


def freeze(obj: Any) -> Any:
    """A hashable, order-insensitive-for-maps signature of raw spec data (a cache key)."""
    if isinstance(obj, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in obj.items()))
    if isinstance(obj, list | tuple):
        return tuple(freeze(v) for v in obj)
    if isinstance(obj, bool | float):
        # True == 1 == 1.0 hash alike; tag them so `weight: true` never reuses `weight: 1`.
        return (type(obj).__name__, obj)
    if isinstance(obj, str | int) or obj is None:
        return obj
    return repr(obj)


def _bound(op: str, values: frozenset[str]) -> int | None:
    if op not in ("Gt", "Lt") or len(values) != 1:
        return None
    return parse_int64(next(iter(values)))


@dataclass(frozen=True, slots=True)
class Requirement:
    """apimachinery's labels.Requirement: NotIn and DoesNotExist hold for an absent key."""

    key: str
    op: str
    values: frozenset[str] = frozenset()
    # The Gt / Lt bound, derived from `values`; None: no usable bound (matches nothing).
    number: int | None = field(init=False, default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "number", _bound(self.op, self.values))

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.key)
        op = self.op
        if op == "In":
            return got is not None and got in self.values
        if op == "NotIn":
            return got is None or got not in self.values
        if op == "Exists":
            return got is not None
        if op == "DoesNotExist":
            return got is None
        bound = self.number
        if got is None or bound is None:
            return False
        value = parse_int64(got)
        if value is None:
            return False
        if op == "Gt":
            return value > bound
        return op == "Lt" and value < bound


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """ANDed requirements; `requirements` None is the nil selector, which matches nothing,
    and () matches every label set (`{}`)."""

    requirements: tuple[Requirement, ...] | None = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        reqs = self.requirements
        if reqs is None:
            return False
        # A loop, not all(genexpr), which costs a generator per call: this runs once per
        # candidate pod when the cache counts matches.
        for r in reqs:  # noqa: SIM110
            if not r.matches(labels):
                return False
        return True

    @property
    def everything(self) -> bool:
        """No requirement: matches every label set (`{}`)."""
        return self.requirements == ()

    @property
    def anchor(self) -> tuple[str, frozenset[str] | None] | None:
        """The narrowest In (fewest values), else an Exists: a label every match carries."""
        best: tuple[str, frozenset[str] | None] | None = None
        for r in self.requirements or ():
            if r.op == "In" and (best is None or best[1] is None or len(r.values) < len(best[1])):
                best = (r.key, r.values)
            elif r.op == "Exists" and best is None:
                best = (r.key, None)
        return best


NOTHING = LabelSelector(None)
EVERYTHING = LabelSelector(())


# -- metav1.LabelSelector ----------------------------------------------------------------
# (plugins/helper/pod_selector.py re-exports it for the plugins; kube/disruption.py reads
# PodDisruptionBudgets' selectors with it, and kube may not import plugins.)


def _checked(
    raw: Any, syntax_error: Callable[[str], str | None], path: str, errors: list[str]
) -> str | None:
    """`raw` if it is a string `syntax_error` finds nothing wrong with (a label key or
    value); else None, with the reason appended to `errors`."""
    if not isinstance(raw, str):
        errors.append(invalid(path, raw, "must be a string"))
        return None
    if (msg := syntax_error(raw)) is not None:
        errors.append(invalid(path, raw, msg))
        return None
    return raw


def parse_label_selector(raw: Any, path: str, errors: list[str]) -> LabelSelector:
    """A metav1.LabelSelector (None: the nil selector); problems are appended to `errors`
    and the selector returned then matches nothing."""
    if raw is None:
        return NOTHING
    before = len(errors)
    sel = as_map(raw, path, errors)
    reqs: list[Requirement] = []
    match_labels = sel.get("matchLabels")
    if match_labels is not None:
        for k, v in as_map(match_labels, f"{path}.matchLabels", errors).items():
            key = _checked(k, label_key_error, f"{path}.matchLabels", errors)
            value = _checked(v, label_value_error, f"{path}.matchLabels[{k!s}]", errors)
            if key is not None and value is not None:
                reqs.append(Requirement(key, "In", frozenset({value})))
    exprs = as_list(sel.get("matchExpressions"), f"{path}.matchExpressions", errors)
    for i, raw_expr in enumerate(exprs):
        where = f"{path}.matchExpressions[{i}]"
        expr = as_map(raw_expr, where, errors)
        key = _checked(expr.get("key"), label_key_error, f"{where}.key", errors)
        op = expr.get("operator")
        raw_values = as_list(expr.get("values"), f"{where}.values", errors)
        values = [
            _checked(v, label_value_error, f"{where}.values[{j}]", errors)
            for j, v in enumerate(raw_values)
        ]
        if op not in LABEL_OPERATORS:
            supported = ", ".join(f'"{o}"' for o in LABEL_OPERATORS)
            errors.append(
                f"{where}.operator: Unsupported value: {quote(op)}: supported values: {supported}"
            )
            continue
        if op in ("In", "NotIn") and not raw_values:
            errors.append(
                f"{where}.values: Required value: must be specified when `operator` is"
                " 'In' or 'NotIn'"
            )
        elif op in ("Exists", "DoesNotExist") and raw_values:
            errors.append(
                f"{where}.values: Forbidden: may not be specified when `operator` is"
                " 'Exists' or 'DoesNotExist'"
            )
        if key is not None:
            reqs.append(Requirement(key, str(op), frozenset(v for v in values if v is not None)))
    if len(errors) > before:
        return NOTHING
    return LabelSelector(tuple(reqs))
