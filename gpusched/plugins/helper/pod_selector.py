"""Label selectors over pods and the namespaces they look in, as kube-scheduler reads them.

Shared by the plugins that count other pods (InterPodAffinity, PodTopologySpread):

- `parse_label_selector` (model/selector.py, re-exported: kube/disruption.py parses
  PodDisruptionBudgets' selectors with it too): a metav1.LabelSelector compiled as
  apimachinery's `LabelSelectorAsSelector` does: nil matches nothing, `{}` matches
  everything, matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) are ANDed.
  In: label present with one of the values; NotIn: absent, or a value not listed; Exists /
  DoesNotExist: presence.
  Malformed input (unknown operator, In/NotIn without values, Exists with values, a bad key
  or value) is reported with the API server's field wording, never raised.
- `with_label_keys`: matchLabelKeys / mismatchLabelKeys (`parse_label_keys`) merged into a
  selector as kube-apiserver does when it admits a pod (`key In (the pod's value)`,
  `key NotIn (...)`, keys the pod lacks skipped, a nil selector left nil). Pods the API
  server admitted have them merged already; merging again adds the same conjunct, so pods
  that never went through it (the simulator's) read the same. PodTopologySpread's
  matchLabelKeys are the same operation (kube-scheduler's mergeLabelSetWithSelector ANDs
  `key In (value)` too).
- `NamespaceScope`: a term's `namespaces` and `namespaceSelector` (framework
  `AffinityTerm`): both absent means the pod's own namespace; a `{}` selector means every
  namespace; else the listed names plus the namespaces whose labels the selector matches.
- `PodSelector`: a resolved namespace set and a label selector; it is the framework's
  `PodMatcher`, so `Handle.count_matching_pods` counts the pods it matches per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.model.pod import PodInfo
from gpusched.model.selector import (
    EVERYTHING,
    NOTHING,
    LabelSelector,
    Requirement,
    as_list,
    label_key_error,
    parse_label_selector,
    quote,
)

__all__ = [
    "EVERYTHING",
    "NOTHING",
    "LabelSelector",
    "NamespaceScope",
    "PodSelector",
    "Requirement",
    "label_key_error",
    "parse_label_keys",
    "parse_label_selector",
    "parse_namespace_scope",
    "with_label_keys",
]


def with_label_keys(
    selector: LabelSelector,
    labels: Mapping[str, str],
    match_keys: Sequence[str],
    mismatch_keys: Sequence[str],
) -> LabelSelector:
    """matchLabelKeys / mismatchLabelKeys merged as kube-apiserver merges them at admission."""
    if selector.requirements is None or (not match_keys and not mismatch_keys):
        return selector
    extra = [Requirement(k, "In", frozenset({labels[k]})) for k in match_keys if k in labels]
    extra += [Requirement(k, "NotIn", frozenset({labels[k]})) for k in mismatch_keys if k in labels]
    return LabelSelector(selector.requirements + tuple(extra)) if extra else selector


def parse_label_keys(raw: Any, path: str, errors: list[str]) -> list[str]:
    """matchLabelKeys / mismatchLabelKeys: a list of label keys."""
    out: list[str] = []
    for i, k in enumerate(as_list(raw, path, errors)):
        if not isinstance(k, str) or label_key_error(k) is not None:
            errors.append(f"{path}[{i}]: Invalid value: {quote(k)}: must be a label key")
        else:
            out.append(k)
    return out


@dataclass(frozen=True, slots=True)
class NamespaceScope:
    """Where a term looks: `names` plus the namespaces `selector` matches (NOTHING when the
    term has no namespaceSelector; EVERYTHING for `{}`: every namespace)."""

    names: frozenset[str]
    selector: LabelSelector = NOTHING

    def resolve(self, known: Mapping[str, Mapping[str, str]]) -> frozenset[str] | None:
        """The namespaces in scope given every namespace's labels; None: all of them
        (kube-scheduler's mergeAffinityTermNamespacesIfNotEmpty)."""
        if self.selector.everything:
            return None
        if self.selector.requirements is None:
            return self.names
        return self.names | {n for n, labels in known.items() if self.selector.matches(labels)}

    def contains(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod of `namespace` (whose labels are `labels`, empty when unknown) is in
        scope (kube-scheduler's AffinityTerm.Matches)."""
        return namespace in self.names or self.selector.matches(labels)


def parse_namespace_scope(
    own: str, namespaces: Any, ns_selector: Any, path: str, errors: list[str]
) -> NamespaceScope:
    names: list[str] = []
    for i, n in enumerate(as_list(namespaces, f"{path}.namespaces", errors)):
        if isinstance(n, str):
            names.append(n)
        else:
            errors.append(f"{path}.namespaces[{i}]: Invalid value: {quote(n)}: must be a string")
    if not names and ns_selector is None:
        return NamespaceScope(frozenset({own}))
    return NamespaceScope(
        frozenset(names), parse_label_selector(ns_selector, f"{path}.namespaceSelector", errors)
    )


@dataclass(frozen=True, slots=True)
class PodSelector:
    """Pods in `namespaces` (None: any) whose labels `selector` matches: a PodMatcher."""

    namespaces: frozenset[str] | None
    selector: LabelSelector

    @property
    def anchor(self) -> tuple[str, frozenset[str] | None] | None:
        return self.selector.anchor

    def matches(self, pod: PodInfo) -> bool:
        ns = self.namespaces
        return (ns is None or pod.namespace in ns) and self.selector.matches(pod.labels)
