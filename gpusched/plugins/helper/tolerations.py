"""Toleration matching exactly as k8s.io/component-helpers/scheduling/corev1 (and
core/v1 Toleration.ToleratesTaint) define it.

A pod's tolerations arrive as raw dicts from the pod spec; they are turned once into
hashable `Toleration` tuples so plugins can cache per-toleration-set results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from gpusched.model.node import Taint

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"

# The taint the node lifecycle controller puts on cordoned nodes; a pod that tolerates it
# also tolerates spec.unschedulable (NodeUnschedulable plugin).
TAINT_NODE_UNSCHEDULABLE = Taint("node.kubernetes.io/unschedulable", "", NO_SCHEDULE)


class Toleration(NamedTuple):
    key: str
    operator: str  # "" means Equal, as in the API before defaulting
    value: str
    effect: str  # "" matches every effect


def _text(raw: Any) -> str:
    return "" if raw is None else str(raw)


def parse_tolerations(raw: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    """Hashable tolerations, sorted so the same set in another order shares cache entries.

    tolerationSeconds is dropped: it matters to the taint manager (eviction), never to
    scheduling.
    """
    out = {
        Toleration(
            _text(t.get("key")),
            _text(t.get("operator")),
            _text(t.get("value")),
            _text(t.get("effect")),
        )
        for t in raw
    }
    return tuple(sorted(out))


def tolerates(t: Toleration, taint: Taint) -> bool:
    """Toleration.ToleratesTaint: empty effect matches all effects, empty key matches all
    keys (the API only allows that with Exists), Exists matches any value, "" or Equal
    compares values. Any other operator (the alpha Lt/Gt of the
    TaintTolerationComparisonOperators gate, off by default) matches nothing."""
    if t.effect and t.effect != taint.effect:
        return False
    if t.key and t.key != taint.key:
        return False
    if t.operator in ("", "Equal"):
        return t.value == taint.value
    return t.operator == "Exists"


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """TolerationsTolerateTaint: any toleration tolerating the taint is enough."""
    return any(tolerates(t, taint) for t in tolerations)


def taint_text(taint: Taint) -> str:
    """The `{key: value}` form kube-scheduler prints in its reasons."""
    return f"{{{taint.key}: {taint.value}}}"
