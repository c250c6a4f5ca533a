"""Node rows a pod may use whatever runs there, and a topology tier's domain per row: what
GangScheduling and Preemption both need before any Filter has run for the pod (a gang
planned or preempted for as a whole)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.interfaces import Mask
from gpusched.framework.snapshot import NodeColumns
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.label_index import LabelIndex, synced_index
from gpusched.plugins.helper.node_selector import freeze, parse_required
from gpusched.plugins.helper.tolerations import parse_tolerations, tolerated

HOSTNAME = "kubernetes.io/hostname"
_MAX_SHAPES = 256


class StaticRows:
    """Per row, whether the pod's nodeSelector and required node affinity match the node
    and every NoSchedule/NoExecute taint is tolerated; cached per (selector, affinity,
    tolerations) until a node joins or leaves or a label or taint set changes (the
    snapshot's stamps)."""

    def __init__(self) -> None:
        self._cache: dict[object, tuple[tuple[int, int, int], Mask]] = {}

    def rows(self, snap: NodeColumns, pod: PodInfo, *, malformed: bool) -> Mask:
        """`malformed`: the value of every row when the pod's node affinity does not parse
        (NodeAffinity refuses the pod naming the field; a caller that plans for it may say
        True, one that evicts for it must say False)."""
        n = len(snap.node_valid)
        affinity = pod.affinity.get("nodeAffinity") or {}
        sig = (
            freeze(pod.node_selector),
            freeze(affinity),
            parse_tolerations(pod.tolerations),
            malformed,
        )
        stamp = (snap.membership, snap.generation, n)
        cached = self._cache.get(sig)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        errors: list[str] = []
        required = parse_required(pod.node_selector, affinity, "spec.affinity.nodeAffinity", errors)
        ok = np.full(n, not errors or malformed, np.bool_)
        if not errors:
            tolerations = sig[2]
            for row in snap.valid_rows().tolist():
                node = snap.nodes[row]
                if node is None:
                    continue
                if (required is not None and not required.matches(node.labels, node.name)) or any(
                    t.effect in ("NoSchedule", "NoExecute") and not tolerated(tolerations, t)
                    for t in node.taints
                ):
                    ok[row] = False
        if len(self._cache) >= _MAX_SHAPES:
            self._cache.clear()
        self._cache[sig] = (stamp, ok)
        return ok


class TierDomains:
    """Per row, the id of the row's domain in a topology tier ("rack", "spine", the
    hostname, or any node label key; -1: the node is in none)."""

    def __init__(self) -> None:
        self._index: LabelIndex | None = None

    def of(self, snap: NodeColumns, tier: str) -> NDArray[np.int64] | None:
        if not tier:
            return None
        if tier == "rack":
            return snap.node_rack.astype(np.int64)
        if tier == "spine":
            return snap.node_spine.astype(np.int64)
        if tier == HOSTNAME:
            return np.arange(len(snap.node_valid), dtype=np.int64)
        # Any other label key: the label index PodTopologySpread and InterPodAffinity read
        # domains from (the key declared watched first, so label sets carry it).
        snap.watch_labels((tier,))
        index = self._index = synced_index(self._index, snap)
        return index.rows(tier)[0].astype(np.int64)
