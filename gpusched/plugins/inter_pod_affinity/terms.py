"""A pod's podAffinity / podAntiAffinity terms, compiled (kube-scheduler's framework.PodInfo:
RequiredAffinityTerms, RequiredAntiAffinityTerms, PreferredAffinityTerms,
PreferredAntiAffinityTerms).

Each term keeps its namespace scope unresolved (`NamespaceScope`): the incoming pod's terms
are resolved against every namespace's labels when they count existing pods, an existing
pod's terms are checked against the incoming pod's namespace only, as upstream does.
matchLabelKeys / mismatchLabelKeys are merged into the selector from the term owner's labels
(plugins/helper/pod_selector.py says why merging again is harmless).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.model.pod import PodInfo
from gpusched.model.selector import as_list, label_key_error, quote
from gpusched.plugins.helper.pod_selector import (
    LabelSelector,
    NamespaceScope,
    PodSelector,
    parse_label_keys,
    parse_label_selector,
    parse_namespace_scope,
    with_label_keys,
)

PREFIX = "spec.affinity"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    scope: NamespaceScope
    selector: LabelSelector
    topology_key: str

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str]) -> bool:
        """Whether `pod` (in a namespace labelled `ns_labels`) is what this term selects
        (AffinityTerm.Matches)."""
        return self.scope.contains(pod.namespace, ns_labels) and self.selector.matches(pod.labels)

    def resolved(self, namespaces: Mapping[str, Mapping[str, str]]) -> PodSelector:
        """The pods this term selects, its namespaceSelector resolved over `namespaces`."""
        return PodSelector(self.scope.resolve(namespaces), self.selector)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti: tuple[WeightedTerm, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.required_affinity
            or self.required_anti
            or self.preferred_affinity
            or self.preferred_anti
        )


NONE = PodTerms()


def _term(pod: PodInfo, raw: Any, path: str, errors: list[str]) -> AffinityTerm | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: Invalid value: {quote(raw)}: must be an object")
        return None
    before = len(errors)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        errors.append(f"{path}.topologyKey: Required value: can not be empty")
    elif (msg := label_key_error(key)) is not None:
        errors.append(f"{path}.topologyKey: Invalid value: {quote(key)}: {msg}")
    selector = parse_label_selector(raw.get("labelSelector"), f"{path}.labelSelector", errors)
    selector = with_label_keys(
        selector,
        pod.labels,
        parse_label_keys(raw.get("matchLabelKeys"), f"{path}.matchLabelKeys", errors),
        parse_label_keys(raw.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", errors),
    )
    scope = parse_namespace_scope(
        pod.namespace, raw.get("namespaces"), raw.get("namespaceSelector"), path, errors
    )
    if len(errors) > before:
        return None
    return AffinityTerm(scope, selector, str(key))


def _block(
    pod: PodInfo, raw: Any, path: str, errors: list[str]
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedTerm, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, Mapping):
        errors.append(f"{path}: Invalid value: {quote(raw)}: must be an object")
        return (), ()
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required = [
        _term(pod, t, f"{req_path}[{i}]", errors)
        for i, t in enumerate(as_list(raw.get(req_path.rsplit(".", 1)[1]), req_path, errors))
    ]
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred: list[WeightedTerm] = []
    for i, item in enumerate(as_list(raw.get(pref_path.rsplit(".", 1)[1]), pref_path, errors)):
        where = f"{pref_path}[{i}]"
        if not isinstance(item, Mapping):
            errors.append(f"{where}: Invalid value: {quote(item)}: must be an object")
            continue
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            errors.append(
                f"{where}.weight: Invalid value: {quote(weight)}: must be in the range 1-100"
            )
            continue
        term = _term(pod, item.get("podAffinityTerm"), f"{where}.podAffinityTerm", errors)
        if term is not None:
            preferred.append(WeightedTerm(weight, term))
    return tuple(t for t in required if t is not None), tuple(preferred)


def has_pod_affinity(pod: PodInfo) -> bool:
    aff = pod.affinity
    return bool(aff) and bool(aff.get("podAffinity") or aff.get("podAntiAffinity"))


def parse_pod_terms(pod: PodInfo) -> PodTerms:
    """The pod's terms; malformed input is listed in `errors` (the pod is then
    unschedulable with that text, as upstream's "parsing pod" status)."""
    if not has_pod_affinity(pod):
        return NONE
    errors: list[str] = []
    aff = pod.affinity
    req_aff, pref_aff = _block(pod, aff.get("podAffinity"), f"{PREFIX}.podAffinity", errors)
    req_anti, pref_anti = _block(
        pod, aff.get("podAntiAffinity"), f"{PREFIX}.podAntiAffinity", errors
    )
    return PodTerms(req_aff, req_anti, pref_aff, pref_anti, tuple(errors))
