"""A pod's topologySpreadConstraints, parsed with the defaults kube-scheduler applies
(filterTopologySpreadConstraints): minDomains 1, nodeAffinityPolicy Honor, nodeTaintsPolicy
Ignore.

The labelSelector is a metav1.LabelSelector read by plugins/helper/pod_selector.py, as
InterPodAffinity's terms are. A nil selector selects nothing; an empty one (`{}`) selects
every pod, but kube-scheduler's countPodsMatchSelector counts no pod for either (only the
incoming pod's own self-match sees `{}`). `matchLabelKeys` takes each key's value from the
incoming pod's labels (keys it lacks are skipped) and ANDs `key In (value)` into the
selector: kube-scheduler's mergeLabelSetWithSelector, the same operation as the API
server's merge of pod affinity's matchLabelKeys (`with_label_keys`); kube-apiserver 1.34+
already merged them into labelSelector at creation, and merging again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.model.selector import quote
from gpusched.plugins.helper.pod_selector import (
    LabelSelector,
    parse_label_keys,
    parse_label_selector,
    with_label_keys,
)

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
FIELD = "spec.topologySpreadConstraints"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One topologySpreadConstraint, parsed and defaulted."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    hard: bool  # whenUnsatisfiable: DoNotSchedule
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy
    honor_taints: bool = False  # nodeTaintsPolicy
    # Set for the cluster's default constraints: pods of the same controller (by uid)
    # stand for the selector kube-scheduler builds from Services and controllers.
    controller_uid: str = ""


def _positive_int(raw: Any, where: str, errors: list[str]) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        errors.append(f"{where}: Invalid value: {quote(raw)}: must be greater than zero")
        return None
    return raw


def _policy(raw: Any, where: str, default: str, errors: list[str]) -> bool:
    """Whether the policy is Honor."""
    if raw is None:
        return default == HONOR
    if raw not in (HONOR, IGNORE):
        errors.append(
            f'{where}: Unsupported value: {quote(raw)}: supported values: "{HONOR}", "{IGNORE}"'
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
            f"{where}.whenUnsatisfiable: Unsupported value: {quote(action)}: supported values:"
            f' "{DO_NOT_SCHEDULE}", "{SCHEDULE_ANYWAY}"'
        )
    min_domains = 1
    if raw.get("minDomains") is not None:
        got = _positive_int(raw.get("minDomains"), f"{where}.minDomains", errors)
        min_domains = got if got is not None else 1
    affinity = _policy(raw.get("nodeAffinityPolicy"), f"{where}.nodeAffinityPolicy", HONOR, errors)
    taints = _policy(raw.get("nodeTaintsPolicy"), f"{where}.nodeTaintsPolicy", IGNORE, errors)
    selector = parse_label_selector(raw.get("labelSelector"), f"{where}.labelSelector", errors)
    keys = parse_label_keys(raw.get("matchLabelKeys"), f"{where}.matchLabelKeys", errors)
    if len(errors) > before or max_skew is None or not isinstance(key, str):
        return None
    return Constraint(
        max_skew,
        key,
        with_label_keys(selector, labels, keys, ()),
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
