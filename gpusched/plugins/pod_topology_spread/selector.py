"""Label selectors (metav1.LabelSelector) over pod labels, and a pod's spread constraints.

A selector is parsed as apimachinery's LabelSelectorAsSelector does: matchLabels become
`key In (value)`, matchExpressions take In, NotIn, Exists and DoesNotExist, and every
requirement must hold. A nil selector selects nothing; an empty one (`{}`) selects every
pod, but kube-scheduler's countPodsMatchSelector counts no pod for it (only the incoming
pod's own self-match sees it), so `counts_nothing` is True for both.

Constraints are parsed from the pod's raw `spec.topologySpreadConstraints` with the
defaults kube-scheduler applies (filterTopologySpreadConstraints): minDomains 1,
nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore; `matchLabelKeys` takes each key's value
from the incoming pod's labels (keys it lacks are skipped) and ANDs `key In (value)` into
the selector (kube-apiserver 1.34+ already merged them into labelSelector at creation;
merging again changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
FIELD = "spec.topologySpreadConstraints"


def _quote(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.key)
        if self.op == "In":
            return got is not None and got in self.values
        if self.op == "NotIn":
            return got is None or got not in self.values
        if self.op == "Exists":
            return got is not None
        return got is None  # DoesNotExist


@dataclass(frozen=True, slots=True)
class Selector:
    """Requirements ANDed; `nothing` for a nil selector. Hashable: counts are cached per
    selector within a cycle."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    @property
    def counts_nothing(self) -> bool:
        return self.nothing or not self.requirements

    def with_labels(self, extra: Mapping[str, str]) -> Selector:
        """kube's mergeLabelSetWithSelector: `key In (value)` for each of `extra`, first."""
        if not extra or self.nothing:
            # A nil selector stays nil upstream too (Requirements() reports not ok).
            return self
        merged = tuple(Requirement(k, "In", frozenset({v})) for k, v in sorted(extra.items()))
        return Selector(merged + self.requirements)


def parse_selector(raw: Any, path: str, errors: list[str]) -> Selector:
    if raw is None:
        return Selector(nothing=True)
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: Invalid value: {_quote(raw)}: must be an object")
        return Selector(nothing=True)
    reqs: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        errors.append(f"{path}.matchLabels: Invalid value: {_quote(match_labels)}: must be a map")
        match_labels = {}
    for k, v in sorted(match_labels.items(), key=lambda kv: str(kv[0])):
        if not isinstance(v, str):
            errors.append(f"{path}.matchLabels[{k}]: Invalid value: {_quote(v)}: must be a string")
            continue
        reqs.append(Requirement(str(k), "In", frozenset({v})))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, Sequence) or isinstance(exprs, str):
        errors.append(f"{path}.matchExpressions: Invalid value: {_quote(exprs)}: must be a list")
        exprs = []
    for i, e in enumerate(exprs):
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(e, Mapping):
            errors.append(f"{where}: Invalid value: {_quote(e)}: must be an object")
            continue
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if not isinstance(key, str) or not key:
            errors.append(f"{where}.key: Invalid value: {_quote(key)}: must be a non-empty string")
            continue
        if op not in OPERATORS:
            supported = ", ".join(f'"{o}"' for o in OPERATORS)
            errors.append(
                f"{where}.operator: Unsupported value: {_quote(op)}: supported values: {supported}"
            )
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            errors.append(f"{where}.values: Invalid value: {_quote(values)}: must be strings")
            continue
        if op in ("In", "NotIn") and not values:
            errors.append(
                f"{where}.values: Invalid value: []: for 'in', 'notin' operators, values set"
                " can't be empty"
            )
            continue
        if op in ("Exists", "DoesNotExist") and values:
            errors.append(
                f"{where}.values: Invalid value: {_quote(values)}: values set must be empty for"
                " exists and does not exist"
            )
            continue
        reqs.append(Requirement(key, str(op), frozenset(values)))
    return Selector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class Constraint:
    """One topologySpreadConstraint, parsed and defaulted."""

    max_skew: int
    topology_key: str
    selector: Selector
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy
    honor_taints: bool = False  # nodeTaintsPolicy
    # Set for the cluster's default constraints: pods of the same controller (by uid)
    # stand for the selector kube-scheduler builds from Services and controllers.
    controller_uid: str = ""


def _positive_int(raw: Any, where: str, errors: list[str]) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        errors.append(f"{where}: Invalid value: {_quote(raw)}: must be greater than zero")
        return None
    return raw


def _policy(raw: Any, where: str, default: str, errors: list[str]) -> bool:
    """Whether the policy is Honor."""
    if raw is None:
        return default == HONOR
    if raw not in (HONOR, IGNORE):
        errors.append(
            f'{where}: Unsupported value: {_quote(raw)}: supported values: "{HONOR}", "{IGNORE}"'
        )
        return default == HONOR
    return bool(raw == HONOR)


def parse_constraint(
    raw: Mapping[str, Any], labels: Mapping[str, str], where: str, errors: list[str]
) -> Constraint | None:
    before = len(errors)
    max_skew = _positive_int(raw.get("maxSkew"), f"{where}.maxSkew", errors)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        errors.append(f"{where}.topologyKey: Required value: can not be empty")
    action = raw.get("whenUnsatisfiable")
    if action not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        errors.append(
            f"{where}.whenUnsatisfiable: Unsupported value: {_quote(action)}: supported values:"
            f' "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"'
        )
    min_domains = 1
    if raw.get("minDomains") is not None:
        got = _positive_int(raw.get("minDomains"), f"{where}.minDomains", errors)
        min_domains = got if got is not None else 1
    affinity = _policy(raw.get("nodeAffinityPolicy"), f"{where}.nodeAffinityPolicy", HONOR, errors)
    taints = _policy(raw.get("nodeTaintsPolicy"), f"{where}.nodeTaintsPolicy", IGNORE, errors)
    selector = parse_selector(raw.get("labelSelector"), f"{where}.labelSelector", errors)
    keys = raw.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        errors.append(f"{where}.matchLabelKeys: Invalid value: {_quote(keys)}: must be strings")
        keys = []
    extra = {k: labels[k] for k in keys if k in labels}
    if len(errors) > before or max_skew is None or not isinstance(key, str):
        return None
    return Constraint(
        max_skew,
        key,
        selector.with_labels(extra),
        action == DO_NOT_SCHEDULE,
        min_domains,
        affinity,
        taints,
    )


def pod_constraints(
    raw: Sequence[Mapping[str, Any]], labels: Mapping[str, str]
) -> tuple[tuple[Constraint, ...], tuple[str, ...]]:
    """Every constraint of the pod (hard and soft, in order) and the problems found."""
    errors: list[str] = []
    out: list[Constraint] = []
    for i, item in enumerate(raw):
        c = parse_constraint(item, labels, f"{FIELD}[{i}]", errors)
        if c is not None:
            out.append(c)
    return tuple(out), tuple(errors)
