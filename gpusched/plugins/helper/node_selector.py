"""Node selectors parsed and matched exactly as k8s.io/component-helpers/scheduling/corev1/
nodeaffinity and apimachinery's labels.Requirement do.

- nodeSelector: every key must be present with exactly that value.
- required nodeSelectorTerms: ORed; a term with neither matchExpressions nor matchFields
  matches nothing; inside a term every requirement must hold (ANDed).
- In: label present with one of the values. NotIn: label absent, or its value not listed.
  Exists / DoesNotExist: presence. Gt / Lt: label present, both sides base-10 int64, and a
  strict comparison; a label that is not an integer does not match. (One `Requirement`
  for every selector, `gpusched/model/selector.py`; node selectors alone take Gt / Lt.)
- matchFields: only `metadata.name`, operators In/NotIn with exactly one value.
- preferred terms: the weights of the matching terms add up; weight 0 and empty terms are
  skipped.

Parsing is strict where the API server is (operator, value count, Gt/Lt integers, label
key and value syntax) so a malformed pod gets a message naming the field and value instead
of silently matching nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.model.selector import (
    NODE_OPERATORS,
    Requirement,
    as_list,
    as_map,
    freeze,
    invalid,
    label_key_error,
    label_value_error,
    parse_int64,
    quote,
)

__all__ = [
    "FieldRequirement",
    "Preferred",
    "Required",
    "Requirement",
    "Term",
    "freeze",
    "parse_preferred",
    "parse_required",
    "parse_term",
]

OBJECT_NAME_FIELD = "metadata.name"
FIELD_OPERATORS = ("In", "NotIn")


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    op: str  # In | NotIn, on metadata.name
    name: str

    def matches(self, node_name: str) -> bool:
        return (node_name == self.name) == (self.op == "In")


@dataclass(frozen=True, slots=True)
class Term:
    """One nodeSelectorTerm; `labels` None when it has no matchExpressions."""

    labels: tuple[Requirement, ...] | None
    fields: tuple[FieldRequirement, ...] = ()

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        return self.labels is None or all(r.matches(labels) for r in self.labels)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        return self.matches_labels(labels) and all(f.matches(node_name) for f in self.fields)

    def names_in(self) -> frozenset[str] | None:
        """Node names this term is limited to by metadata.name In (intersected), or None."""
        names: frozenset[str] | None = None
        for f in self.fields:
            if f.op == "In":
                names = frozenset({f.name}) if names is None else names & {f.name}
        return names


@dataclass(frozen=True, slots=True)
class Required:
    """nodeSelector AND (required terms ORed); `terms` None when there is no required
    node affinity (only the nodeSelector applies)."""

    node_selector: tuple[tuple[str, str], ...]
    terms: tuple[Term, ...] | None

    def matches_selector(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_selector)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.matches_selector(labels):
            return False
        return self.terms is None or any(t.matches(labels, node_name) for t in self.terms)


@dataclass(frozen=True, slots=True)
class Preferred:
    terms: tuple[tuple[int, Term], ...]

    def score(self, labels: Mapping[str, str], node_name: str) -> int:
        return sum(w for w, t in self.terms if t.matches(labels, node_name))


# -- parsing ---------------------------------------------------------------------------------


def _as_map(raw: Any, path: str, errors: list[str]) -> Mapping[str, Any]:
    """An object field where null reads as empty (a null term is an empty term)."""
    return {} if raw is None else as_map(raw, path, errors)


def _values(expr: Mapping[str, Any], path: str, errors: list[str]) -> list[str]:
    raw = as_list(expr.get("values"), f"{path}.values", errors)
    out: list[str] = []
    for i, v in enumerate(raw):
        if not isinstance(v, str):
            errors.append(f"{path}.values[{i}]: Invalid value: {quote(v)}: must be a string")
            continue
        out.append(v)
    return out


def _requirement(expr: Mapping[str, Any], path: str, errors: list[str]) -> Requirement | None:
    before = len(errors)
    key = expr.get("key")
    op = expr.get("operator")
    values = _values(expr, path, errors)
    if not isinstance(key, str):
        errors.append(f"{path}.key: Invalid value: {quote(key)}: must be a string")
        key = ""
    elif (msg := label_key_error(key)) is not None:
        errors.append(f"{path}.key: Invalid value: {quote(key)}: {msg}")
    if op not in NODE_OPERATORS:
        supported = ", ".join(f'"{o}"' for o in NODE_OPERATORS)
        errors.append(
            f"{path}.operator: Unsupported value: {quote(op)}: supported values: {supported}"
        )
        return None
    if op in ("In", "NotIn") and not values:
        errors.append(
            invalid(f"{path}.values", [], "for 'In', 'NotIn' operators, values set can't be empty")
        )
    elif op in ("Exists", "DoesNotExist") and values:
        msg = "values set must be empty for exists and does not exist"
        errors.append(invalid(f"{path}.values", values, msg))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            msg = "for 'Gt', 'Lt' operators, exactly one value is required"
            errors.append(invalid(f"{path}.values", values, msg))
        for i, v in enumerate(values):
            if parse_int64(v) is None:
                msg = "for 'Gt', 'Lt' operators, the value must be an integer"
                errors.append(invalid(f"{path}.values[{i}]", v, msg))
    for i, v in enumerate(values):
        if (msg := label_value_error(v)) is not None:
            errors.append(f"{path}.values[{i}]: Invalid value: {quote(v)}: {msg}")
    if len(errors) > before:
        return None
    return Requirement(key, str(op), frozenset(values))


def _field_requirement(
    expr: Mapping[str, Any], path: str, errors: list[str]
) -> FieldRequirement | None:
    before = len(errors)
    key = expr.get("key")
    op = expr.get("operator")
    values = _values(expr, path, errors)
    if key != OBJECT_NAME_FIELD:
        errors.append(
            f'{path}.key: Unsupported value: {quote(key)}: supported values: "{OBJECT_NAME_FIELD}"'
        )
    if op not in FIELD_OPERATORS:
        errors.append(
            f'{path}.operator: Unsupported value: {quote(op)}: supported values: "In", "NotIn"'
        )
    elif len(values) != 1:
        msg = "must have one element for 'In', 'NotIn' operators on a node field selector"
        errors.append(invalid(f"{path}.values", values, msg))
    if len(errors) > before:
        return None
    return FieldRequirement(str(op), values[0])


def parse_term(raw: Any, path: str, errors: list[str]) -> Term | None:
    """A nodeSelectorTerm, or None for an empty term (which selects nothing) or an error."""
    term = _as_map(raw, path, errors)
    exprs = as_list(term.get("matchExpressions"), f"{path}.matchExpressions", errors)
    fields = as_list(term.get("matchFields"), f"{path}.matchFields", errors)
    if not exprs and not fields:
        return None
    before = len(errors)
    labels = [
        _requirement(
            _as_map(e, f"{path}.matchExpressions[{i}]", errors),
            f"{path}.matchExpressions[{i}]",
            errors,
        )
        for i, e in enumerate(exprs)
    ]
    fr = [
        _field_requirement(
            _as_map(e, f"{path}.matchFields[{i}]", errors), f"{path}.matchFields[{i}]", errors
        )
        for i, e in enumerate(fields)
    ]
    if len(errors) > before:
        return None
    return Term(
        tuple(r for r in labels if r is not None) if exprs else None,
        tuple(f for f in fr if f is not None),
    )


def parse_required(
    node_selector: Mapping[str, Any], node_affinity: Mapping[str, Any], path: str, errors: list[str]
) -> Required | None:
    """None when there is nothing to enforce (no nodeSelector, no required affinity)."""
    ns = tuple(sorted((str(k), str(v)) for k, v in node_selector.items()))
    raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if raw is None:
        return Required(ns, None) if ns else None
    where = f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    raw_terms = as_list(_as_map(raw, where, errors).get("nodeSelectorTerms"), where, errors)
    terms = [parse_term(t, f"{where}[{i}]", errors) for i, t in enumerate(raw_terms)]
    # Present but empty (or only empty terms): matches no node, as upstream.
    return Required(ns, tuple(t for t in terms if t is not None))


def parse_preferred(
    node_affinity: Mapping[str, Any], path: str, errors: list[str]
) -> Preferred | None:
    where = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    raw = as_list(node_affinity.get(where.rsplit(".", 1)[1]), where, errors)
    out: list[tuple[int, Term]] = []
    for i, item in enumerate(raw):
        p = f"{where}[{i}]"
        pref = _as_map(item, p, errors)
        weight = pref.get("weight", 0)
        if not isinstance(weight, int) or isinstance(weight, bool):
            errors.append(f"{p}.weight: Invalid value: {quote(weight)}: must be an integer")
            continue
        term = parse_term(pref.get("preference"), f"{p}.preference", errors)
        if weight == 0 or term is None:
            continue  # upstream skips zero weights and empty preferences
        out.append((weight, term))
    return Preferred(tuple(out)) if out else None
