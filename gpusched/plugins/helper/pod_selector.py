"""Label selectors over pods and the namespaces they look in, as kube-scheduler reads them.

Shared by the plugins that count other pods (InterPodAffinity, PodTopologySpread):

- `parse_label_selector`: a metav1.LabelSelector compiled as apimachinery's
  `LabelSelectorAsSelector` does: nil matches nothing, `{}` matches everything, matchLabels
  and matchExpressions (In, NotIn, Exists, DoesNotExist) are ANDed. In: label present with
  one of the values; NotIn: absent, or a value not listed; Exists / DoesNotExist: presence.
  Malformed input (unknown operator, In/NotIn without values, Exists with values, a bad key
  or value) is reported with the API server's field wording, never raised.
- `with_label_keys`: matchLabelKeys / mismatchLabelKeys merged into a term's selector as
  kube-apiserver does when it admits a pod (`key In (the pod's value)`, `key NotIn (...)`,
  keys the pod lacks skipped, a nil selector left nil). Pods the API server admitted have
  them merged already; merging again adds the same conjunct, so pods that never went
  through it (the simulator's) read the same.
- `NamespaceScope`: a term's `namespaces` and `namespaceSelector` (framework
  `AffinityTerm`): both absent means the pod's own namespace; a `{}` selector means every
  namespace; else the listed names plus the namespaces whose labels the selector matches.
- `PodSelector`: a resolved namespace set and a label selector; it is the framework's
  `PodMatcher`, so `Handle.count_matching_pods` counts the pods it matches per node.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpusched.model.pod import PodInfo

OPERATORS = ("DoesNotExist", "Exists", "In", "NotIn")

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def _quote(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


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


def _label_value_error(value: str) -> str | None:
    if value == "" or (len(value) <= 63 and _NAME.match(value)):
        return None
    return (
        "a valid label value must be empty or 1-63 alphanumeric characters, '-', '_' or '.',"
        " starting and ending with an alphanumeric character"
    )


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # In | NotIn | Exists | DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.key)
        if self.op == "In":
            return got is not None and got in self.values
        if self.op == "NotIn":
            return got is None or got not in self.values
        if self.op == "Exists":
            return got is not None
        return got is None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """ANDed requirements; `requirements` None is the nil selector, which matches nothing."""

    requirements: tuple[Requirement, ...] | None

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


def _as_map(raw: Any, path: str, errors: list[str]) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        return raw
    errors.append(f"{path}: Invalid value: {_quote(raw)}: must be an object")
    return {}


def _as_list(raw: Any, path: str, errors: list[str]) -> Sequence[Any]:
    if raw is None:
        return ()
    if isinstance(raw, list | tuple):
        return raw
    errors.append(f"{path}: Invalid value: {_quote(raw)}: must be a list")
    return ()


def _key(key: Any, path: str, errors: list[str]) -> str | None:
    if not isinstance(key, str):
        errors.append(f"{path}: Invalid value: {_quote(key)}: must be a string")
        return None
    if (msg := label_key_error(key)) is not None:
        errors.append(f"{path}: Invalid value: {_quote(key)}: {msg}")
        return None
    return key


def _value(value: Any, path: str, errors: list[str]) -> str | None:
    if not isinstance(value, str):
        errors.append(f"{path}: Invalid value: {_quote(value)}: must be a string")
        return None
    if (msg := _label_value_error(value)) is not None:
        errors.append(f"{path}: Invalid value: {_quote(value)}: {msg}")
        return None
    return value


def parse_label_selector(raw: Any, path: str, errors: list[str]) -> LabelSelector:
    """A metav1.LabelSelector (None: the nil selector); problems are appended to `errors`
    and the selector returned then matches nothing."""
    if raw is None:
        return NOTHING
    before = len(errors)
    sel = _as_map(raw, path, errors)
    reqs: list[Requirement] = []
    match_labels = sel.get("matchLabels")
    if match_labels is not None:
        for k, v in _as_map(match_labels, f"{path}.matchLabels", errors).items():
            key = _key(k, f"{path}.matchLabels", errors)
            value = _value(v, f"{path}.matchLabels[{k!s}]", errors)
            if key is not None and value is not None:
                reqs.append(Requirement(key, "In", frozenset({value})))
    exprs = _as_list(sel.get("matchExpressions"), f"{path}.matchExpressions", errors)
    for i, raw_expr in enumerate(exprs):
        where = f"{path}.matchExpressions[{i}]"
        expr = _as_map(raw_expr, where, errors)
        key = _key(expr.get("key"), f"{where}.key", errors)
        op = expr.get("operator")
        raw_values = _as_list(expr.get("values"), f"{where}.values", errors)
        values = [_value(v, f"{where}.values[{j}]", errors) for j, v in enumerate(raw_values)]
        if op not in OPERATORS:
            supported = ", ".join(f'"{o}"' for o in OPERATORS)
            errors.append(
                f"{where}.operator: Unsupported value: {_quote(op)}: supported values: {supported}"
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
    for i, n in enumerate(_as_list(namespaces, f"{path}.namespaces", errors)):
        if isinstance(n, str):
            names.append(n)
        else:
            errors.append(f"{path}.namespaces[{i}]: Invalid value: {_quote(n)}: must be a string")
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
