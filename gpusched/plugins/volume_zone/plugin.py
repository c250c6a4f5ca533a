"""VolumeZone (PreFilter, Filter): a pod goes where its bound volumes are.

PreFilter reads the zone and region labels (`topology.kubernetes.io/zone`, `.../region` and
their `failure-domain.beta.kubernetes.io/` forms; a value may list several zones separated
by `__`) of the volumes bound to the pod's persistentVolumeClaim volumes. Unbound
WaitForFirstConsumer claims are left to VolumeBinding. A pod whose volumes carry none is
skipped. Missing claims, volumes or classes, an unbound claim without a class, or an unbound
claim of an Immediate class are UnschedulableAndUnresolvable with kube's wording.

Filter: a node with none of the four labels passes (a single-zone cluster); otherwise every
volume label must be matched by the node's label of the same key (a beta key falls back to
the GA one), else "node(s) had no available volume zone" (UnschedulableAndUnresolvable).
The verdict depends on the node's labels only: it is computed once per label set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import FilterResult, Handle, Mask, PreFilterResult
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.volumes import claim_not_found, class_not_found, volume_not_found

NAME = "VolumeZone"
# Returned for every pod without volumes (most pods): one object, not one per call.
_SKIP = Status(Code.SKIP, (), NAME)
REASON = "node(s) had no available volume zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
ZONE_DELIMITER = "__"


def zones(value: str) -> frozenset[str] | None:
    """LabelZonesToSet: the `__`-separated zones, None if one of them is empty."""
    out = [z.strip() for z in value.split(ZONE_DELIMITER)]
    return None if any(not z for z in out) else frozenset(out)


@dataclass(frozen=True, slots=True)
class Topology:
    pv: str
    key: str
    values: frozenset[str]


def node_fits(topologies: tuple[Topology, ...], labels: Mapping[str, str]) -> bool:
    if not any(k in labels for k in TOPOLOGY_LABELS):
        return True
    for t in topologies:
        got = labels.get(t.key)
        if got is None:
            got = labels.get(_GA.get(t.key, t.key))
        if got is None or got not in t.values:
            return False
    return True


_STATE: StateKey[tuple[Topology, ...]] = StateKey("VolumeZone/topologies")


def _unresolvable(reason: str) -> tuple[None, Status]:
    return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,), NAME)


class VolumeZone:
    name: ClassVar[str] = NAME

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.volumes:
            return None, _SKIP
        port = self.handle.volumes
        topologies: list[Topology] = []
        for vol in pod.volumes:
            if vol.disk is not None or vol.ephemeral:
                continue  # kube reads persistentVolumeClaim volumes only
            if not vol.claim:
                return _unresolvable("PersistentVolumeClaim had no name")
            claim = port.claim(pod.namespace, vol.claim)
            if claim is None:
                return _unresolvable(claim_not_found(vol.claim))
            if not claim.volume_name:
                if not claim.storage_class:
                    return _unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = port.storage_class(claim.storage_class)
                if sc is None:
                    return _unresolvable(class_not_found(claim.storage_class))
                if sc.delayed:
                    continue  # VolumeBinding picks a volume that fits the node
                return _unresolvable("PersistentVolume had no name")
            pv = port.volume(claim.volume_name)
            if pv is None:
                return _unresolvable(volume_not_found(claim.volume_name))
            for key in TOPOLOGY_LABELS:
                value = pv.labels.get(key)
                if value is None:
                    continue
                values = zones(value)
                if values is not None:  # kube logs and ignores a malformed label
                    topologies.append(Topology(pv.name, key, values))
        if not topologies:
            return None, Status(Code.SKIP, (), NAME)
        # Watched, so a zone label change on a node wakes the pods rejected here.
        self.handle.snapshot.watch_labels(TOPOLOGY_LABELS)
        state.write(_STATE, tuple(topologies))
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        topologies = state.get(_STATE)
        if topologies is None:
            return FilterResult(candidates)
        snap = self.handle.snapshot
        feasible = candidates.copy()
        verdicts: dict[int, bool] = {}
        for row in candidates.nonzero()[0]:
            labelset = int(snap.node_labelset[row])
            ok = verdicts.get(labelset)
            if ok is None:
                # The label set holds the four keys (watched at PreFilter).
                labels = (
                    snap.labels_of(labelset) if labelset >= 0 else snap.node_at(int(row)).labels
                )
                ok = verdicts[labelset] = node_fits(topologies, labels)
            if not ok:
                feasible[row] = False
        return FilterResult(feasible, (REASON,), unresolvable=True)
