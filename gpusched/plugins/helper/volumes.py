"""What the volume plugins share: kube's not-found wording, a pod's claims looked up as
kube-scheduler's VolumeBinding does, and k8s.io/component-helpers' FindMatchingVolume.

The not-found messages are client-go listers' (apierrors.NewNotFound with the resource's
group-qualified name), which kube-scheduler puts verbatim into FailedScheduling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpusched.framework.snapshot import NodeColumns
from gpusched.model.pod import PodInfo
from gpusched.model.volume import (
    OBJECT_NAME_FIELD,
    Claim,
    NodeSelectorTerm,
    PersistentVolume,
    PodVolume,
)


def claim_not_found(name: str) -> str:
    return f'persistentvolumeclaim "{name}" not found'


def volume_not_found(name: str) -> str:
    return f'persistentvolume "{name}" not found'


def class_not_found(name: str) -> str:
    return f'storageclass.storage.k8s.io "{name}" not found'


def not_for_pod(claim: Claim, pod: PodInfo) -> str:
    """ephemeral.VolumeIsForPod's error."""
    return (
        f"PVC {claim.namespace}/{claim.name} was not created for pod"
        f" {pod.namespace}/{pod.name} (pod is not owner)"
    )


def ephemeral_for_pod(claim: Claim, pod: PodInfo) -> bool:
    return claim.namespace == pod.namespace and claim.controller_uid == pod.uid


ClaimLookup = Callable[[str, str], Claim | None]
"""(namespace, name) -> the claim, None when there is none."""


def pod_claims(
    lookup: ClaimLookup, pod: PodInfo
) -> tuple[list[tuple[PodVolume, Claim]], str | None]:
    """The pod's claims in volume order, or the reason the pod cannot be scheduled (kube
    VolumeBinding's podHasPVCs): a missing claim, a claim whose volume is lost, a claim being
    deleted, or an ephemeral volume's claim that another pod owns."""
    out: list[tuple[PodVolume, Claim]] = []
    for vol in pod.volumes:
        if vol.disk is not None:
            continue
        claim = lookup(pod.namespace, vol.claim)
        if claim is None:
            if vol.ephemeral:
                # Normal right after the pod's creation: the controller has not made it yet.
                return out, (
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim"
                    f' "{vol.claim}"'
                )
            return out, claim_not_found(vol.claim)
        if claim.phase == "Lost":
            return out, (
                f'persistentvolumeclaim "{claim.name}" bound to non-existent persistentvolume'
                f' "{claim.volume_name}"'
            )
        if claim.deleting:
            return out, f'persistentvolumeclaim "{claim.name}" is being deleted'
        if vol.ephemeral and not ephemeral_for_pod(claim, pod):
            return out, not_for_pod(claim, pod)
        out.append((vol, claim))
    return out, None


# -- FindMatchingVolume -----------------------------------------------------------------


def access_modes_fit(claim: Claim, pv: PersistentVolume) -> bool:
    """CheckAccessModes: the volume offers every mode the claim asks for."""
    return set(claim.access_modes) <= set(pv.access_modes)


def static_fit(claim: Claim, pv: PersistentVolume) -> bool:
    """Everything FindMatchingVolume checks about an unbound volume that does not depend on
    the node: free, big enough, the same volume mode, not being deleted, Available, the
    claim's selector, the same class, the access modes."""
    return (
        pv.claim_ref is None
        and pv.capacity >= claim.request
        and pv.volume_mode == claim.volume_mode
        and not pv.deleting
        and pv.phase == "Available"
        and (claim.selector is None or claim.selector.matches(pv.labels))
        and pv.storage_class == claim.storage_class
        and access_modes_fit(claim, pv)
    )


@dataclass(frozen=True, slots=True)
class Candidates:
    """A claim's volumes, sorted once per attempt: a volume pre-bound to the claim (it wins
    whatever its size, on a node it fits), else the statically fitting free volumes,
    smallest first (ties by name, so the choice is deterministic)."""

    claim: Claim
    prebound: tuple[PersistentVolume, ...]
    free: tuple[PersistentVolume, ...]


def candidates(claim: Claim, pvs: Iterable[PersistentVolume]) -> Candidates:
    prebound: list[PersistentVolume] = []
    free: list[PersistentVolume] = []
    for pv in pvs:
        if pv.claim_ref is not None:
            if (
                pv.bound_to(claim)
                and pv.capacity >= claim.request
                and pv.volume_mode == claim.volume_mode
                and not pv.deleting
            ):
                prebound.append(pv)
            continue
        if static_fit(claim, pv):
            free.append(pv)
    free.sort(key=lambda pv: (pv.capacity, pv.name))
    return Candidates(claim, tuple(prebound), tuple(free))


def find_matching_volume(
    cands: Candidates, labels: Mapping[str, str], node: str, excluded: Iterable[str]
) -> PersistentVolume | None:
    """FindMatchingVolume on the scheduler path: the pre-bound volume if the node fits it
    (else nothing), or the smallest free volume whose node affinity the node satisfies and
    that no other claim of the pod took already."""
    taken = set(excluded)
    for pv in cands.prebound:
        if pv.name not in taken:
            return pv if pv.node_matches(labels, node) else None
    for pv in cands.free:
        if pv.name not in taken and pv.node_matches(labels, node):
            return pv
    return None


def affinity_keys(pvs: Iterable[PersistentVolume]) -> set[str]:
    """The node label keys the volumes' node affinity reads (to declare them watched)."""
    keys: set[str] = set()
    for pv in pvs:
        for term in pv.node_affinity or ():
            keys.update(r.key for r in term.labels)
    return keys


# -- node affinity over many nodes at once ---------------------------------------------

Row = int


class NodeIndex:
    """The candidate nodes of one attempt, indexed by label value on demand, so a volume's
    node affinity finds its nodes without testing every node: a term with an `In` on a
    label (kubernetes.io/hostname for a local volume) or on metadata.name is evaluated only
    on the nodes that have one of those values. Terms without one are tested node by
    node."""

    def __init__(self, snap: NodeColumns, rows: Iterable[Row]) -> None:
        self.snap = snap
        self.rows = [int(r) for r in rows]
        self._by_key: dict[str, dict[str, list[Row]]] = {}
        self._names: dict[str, Row] | None = None

    def _with_key(self, key: str) -> dict[str, list[Row]]:
        got = self._by_key.get(key)
        if got is None:
            got = {}
            for row in self.rows:
                value = self.snap.node_at(row).labels.get(key)
                if value is not None:
                    got.setdefault(value, []).append(row)
            self._by_key[key] = got
        return got

    def _seeds(self, term: NodeSelectorTerm) -> list[Row]:
        """The fewest candidate nodes one `In` of the term allows (all when it has none)."""
        best: list[Row] | None = None
        for req in term.labels:
            if req.op == "In":
                by_value = self._with_key(req.key)
                rows = [r for v in req.values for r in by_value.get(v, ())]
                if best is None or len(rows) < len(best):
                    best = rows
        for req in term.fields:
            if req.key == OBJECT_NAME_FIELD and req.op == "In":
                if self._names is None:
                    self._names = {self.snap.names[r]: r for r in self.rows}
                names = self._names
                rows = [names[v] for v in req.values if v in names]
                if best is None or len(rows) < len(best):
                    best = rows
        return self.rows if best is None else best

    def matching(self, pv: PersistentVolume) -> set[Row] | None:
        """The candidate rows whose node the volume's node affinity admits; None: all."""
        if pv.node_affinity is None:
            return None
        out: set[Row] = set()
        for term in pv.node_affinity:
            for row in self._seeds(term):
                if row not in out:
                    node = self.snap.node_at(row)
                    if term.matches(node.labels, node.name):
                        out.add(row)
        return out


@dataclass(slots=True)
class ClaimNodes:
    """A claim's free volumes laid out by node: `at_row[row]` the volumes only some nodes
    may use that this node may (smallest first), `everywhere` those without node affinity
    (smallest first). `first_fit` is find_matching_volume for one node in O(volumes there)."""

    cands: Candidates
    at_row: dict[Row, list[PersistentVolume]]
    everywhere: list[PersistentVolume]

    @classmethod
    def build(cls, cands: Candidates, index: NodeIndex) -> ClaimNodes:
        at_row: dict[Row, list[PersistentVolume]] = {}
        everywhere: list[PersistentVolume] = []
        for pv in cands.free:  # already smallest first
            rows = index.matching(pv)
            if rows is None:
                everywhere.append(pv)
                continue
            for row in rows:
                at_row.setdefault(row, []).append(pv)
        return cls(cands, at_row, everywhere)

    def first_fit(
        self, row: Row, labels: Mapping[str, str], node: str, excluded: Iterable[str]
    ) -> PersistentVolume | None:
        taken = set(excluded)
        for pv in self.cands.prebound:
            if pv.name not in taken:
                return pv if pv.node_matches(labels, node) else None
        here = next((pv for pv in self.at_row.get(row, ()) if pv.name not in taken), None)
        anywhere = next((pv for pv in self.everywhere if pv.name not in taken), None)
        if here is None or anywhere is None:
            return here if anywhere is None else anywhere
        return (
            here if (here.capacity, here.name) <= (anywhere.capacity, anywhere.name) else anywhere
        )
