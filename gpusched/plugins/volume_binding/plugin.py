"""VolumeBinding (PreFilter, Filter, Reserve, PreBind): kube-scheduler's volume binder.

- PreFilter reads the pod's claims (persistentVolumeClaim volumes and the `<pod>-<volume>`
  claims of generic ephemeral volumes): a missing, lost or deleting claim, or an ephemeral
  claim another pod owns, is UnschedulableAndUnresolvable with kube's message; so is an
  unbound claim that is not WaitForFirstConsumer ("pod has unbound immediate
  PersistentVolumeClaims": the PV controller binds it, and that event wakes the pod). A pod
  without claims is skipped.
- Filter, per node: a bound claim's volume must exist and its node affinity match the node;
  an unbound WaitForFirstConsumer claim needs a free matching volume on the node
  (FindMatchingVolume: class, access modes, size, selector, volume mode, node affinity; the
  smallest fitting one, volumes chosen for the pod's other claims excluded), else dynamic
  provisioning: a class whose provisioner is not `kubernetes.io/no-provisioner` and whose
  allowedTopologies admit the node. A claim already annotated with another node's
  selected-node fails everywhere else. Rejections are UnschedulableAndUnresolvable.
- Reserve assumes the chosen volumes bound to their claims, and the claims to provision
  annotated with the node, in the plugin's assume cache, so the next pod does not take the
  same volume; Unreserve undoes it.
- PreBind writes the claimRefs and selected-node annotations, then waits on the watch until
  every claim is bound (the PV controller completes static bindings, a provisioner the
  dynamic ones), failing on `bindTimeoutSeconds`, on a claimRef reset, on a provisioner
  dropping the selected-node annotation, or on a write refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import FilterResult, Handle, Mask, PreFilterResult
from gpusched.framework.status import SUCCESS, Code, Status
from gpusched.model.pod import PodInfo
from gpusched.model.volume import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NO_PROVISIONER,
    Claim,
    ClaimRef,
    PersistentVolume,
    StorageClass,
    topology_matches,
)
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.volumes import (
    Candidates,
    ClaimNodes,
    NodeIndex,
    affinity_keys,
    candidates,
    claim_not_found,
    find_matching_volume,
    pod_claims,
    volume_not_found,
)
from gpusched.plugins.volume_binding.args import VolumeBindingArgs
from gpusched.plugins.volume_binding.assume import AssumeCache

NAME = "VolumeBinding"
# Returned for every pod without volumes (most pods): one object, not one per call.
_SKIP = Status(Code.SKIP, (), NAME)

# kube's ConflictReasons, in the order FindPodVolumes appends them.
REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
REASONS = (REASON_NODE_CONFLICT, REASON_BIND_CONFLICT, REASON_PV_NOT_EXIST)
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass(slots=True)
class PodVolumes:
    """What the pod needs on one node: volumes to bind to its claims, claims to provision."""

    static: list[tuple[PersistentVolume, Claim]] = field(default_factory=list)
    dynamic: list[Claim] = field(default_factory=list)


@dataclass(slots=True)
class _Delayed:
    """An unbound WaitForFirstConsumer claim and what can satisfy it."""

    cands: Candidates
    storage_class: StorageClass | None
    nodes: ClaimNodes | None = None  # the volumes by node, laid out at Filter


@dataclass(slots=True)
class _State:
    bound: list[tuple[Claim, PersistentVolume | None]]  # None: the volume does not exist
    delayed: list[_Delayed]  # smallest request first, as findMatchingVolumes sorts them
    by_row: dict[int, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False
    reserved: PodVolumes | None = None


_STATE: StateKey[_State] = StateKey("VolumeBinding/state")


def _newer(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is newer than `b` (etcd's are integers; anything else
    compares as not newer, so an unreadable version never blocks the wait)."""
    return a.isdigit() and b.isdigit() and int(a) > int(b)


class VolumeBinding:
    name: ClassVar[str] = NAME
    Args: ClassVar[type[VolumeBindingArgs]] = VolumeBindingArgs

    def __init__(self, args: VolumeBindingArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, VolumeBindingArgs)
        self.handle = handle
        self.cache = AssumeCache(handle.volumes)

    # -- PreFilter --------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.volumes or all(v.disk is not None for v in pod.volumes):
            return None, _SKIP
        claims, why = pod_claims(self.cache.claim, pod)
        if why is not None:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (why,), NAME)
        for _vol, claim in claims:
            if claim.errors:
                # The API server validates claims, so only a bypassed one gets here: say
                # which field is wrong rather than match no volume without a word.
                bad = f'persistentvolumeclaim "{claim.name}": {"; ".join(claim.errors)}'
                return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (bad,), NAME)
        volumes = self.handle.volumes
        bound: list[tuple[Claim, PersistentVolume | None]] = []
        delayed: list[Claim] = []
        immediate = False
        for _vol, claim in claims:
            if claim.fully_bound:
                bound.append((claim, self.cache.volume(claim.volume_name)))
                continue
            sc = volumes.storage_class(claim.storage_class) if claim.storage_class else None
            # IsDelayBindingMode: no class, or a class that does not exist, is Immediate; a
            # pre-bound claim (volumeName set, binding not complete) waits for the controller.
            if sc is not None and sc.delayed and not claim.volume_name:
                delayed.append(claim)
            else:
                immediate = True
        if immediate:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (UNBOUND_IMMEDIATE,), NAME)
        # Stable: claims of equal size keep the pod's volume order.
        delayed.sort(key=lambda c: c.request)
        pending: list[_Delayed] = []
        by_class: dict[str, list[PersistentVolume]] = {}
        for claim in delayed:
            pvs = by_class.get(claim.storage_class)
            if pvs is None:
                pvs = by_class[claim.storage_class] = list(
                    self.cache.volumes_of_class(claim.storage_class)
                )
            pending.append(
                _Delayed(candidates(claim, pvs), volumes.storage_class(claim.storage_class))
            )
        # The node label keys these volumes and classes read: watched, so a change to one
        # of them on a node counts as a label change and wakes the pods rejected here.
        keys = affinity_keys(pv for _c, pv in bound if pv is not None)
        for d in pending:
            keys |= affinity_keys((*d.cands.prebound, *d.cands.free))
            for term in d.storage_class.allowed_topologies if d.storage_class else ():
                keys.update(k for k, _v in term.requirements)
        if keys:
            self.handle.snapshot.watch_labels(sorted(keys))
        state.write(_STATE, _State(bound, pending))
        return None, Status()

    # -- Filter -----------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates_mask: Mask) -> FilterResult:
        st = state.get(_STATE)
        if st is None:
            return FilterResult(candidates_mask)
        if not st.delayed and all(
            pv is not None and pv.node_affinity is None for _, pv in st.bound
        ):
            # Every claim bound to a volume any node may use.
            return FilterResult(candidates_mask)
        snap = self.handle.snapshot
        feasible = candidates_mask.copy()
        # One row mask per reason: a node failing several ways counts under each, as
        # kube-scheduler counts a Filter status with several reasons.
        hits: NDArray[np.bool_] = np.zeros((len(REASONS), len(candidates_mask)), np.bool_)
        rows = np.flatnonzero(candidates_mask)
        # Volumes laid out by node once, so each node looks only at the volumes it may use
        # (1,000 nodes with a local volume each: one pass, not 1,000 x 1,000 tests).
        index = NodeIndex(snap, rows)
        for d in st.delayed:
            d.nodes = ClaimNodes.build(d.cands, index)
        for row in rows:
            node = snap.node_at(int(row))
            failed, found = self.find_pod_volumes(st, node.labels, node.name, int(row))
            if failed:
                feasible[row] = False
                hits[failed, row] = True
            elif found is not None:
                st.by_row[int(row)] = found
        return FilterResult(feasible, REASONS, unresolvable=True, hits=hits)

    def find_pod_volumes(
        self, st: _State, node_labels: Mapping[str, str], node: str, row: int
    ) -> tuple[list[int], PodVolumes | None]:
        """FindPodVolumes for one node: ([], what to bind there), or the indexes into
        REASONS of every reason the node fails (in kube's order) and None."""
        node_conflict = pv_missing = False
        for _claim, pv in st.bound:
            if pv is None:
                pv_missing = True
                break  # checkBoundClaims stops at a missing volume
            if not pv.node_matches(node_labels, node):
                node_conflict = True
                break
        bind_ok = True
        found = PodVolumes()
        if st.delayed:
            bind_ok = self._find_unbound(st, node_labels, node, row, found)
        failed = [i for i, bad in enumerate((node_conflict, not bind_ok, pv_missing)) if bad]
        if failed:
            return failed, None
        return [], (found if found.static or found.dynamic else None)

    def _find_unbound(
        self, st: _State, labels: Mapping[str, str], node: str, row: int, found: PodVolumes
    ) -> bool:
        to_provision: list[_Delayed] = []
        chosen: list[str] = []
        for d in st.delayed:
            selected = d.cands.claim.selected_node
            if selected is not None:
                if selected != node:
                    return False  # provisioning already started for another node
                to_provision.append(d)
                continue
            pv = (
                d.nodes.first_fit(row, labels, node, chosen)
                if d.nodes is not None
                else find_matching_volume(d.cands, labels, node, chosen)
            )
            if pv is None:
                to_provision.append(d)
                continue
            chosen.append(pv.name)
            found.static.append((pv, d.cands.claim))
        for d in to_provision:
            claim = d.cands.claim
            sc = d.storage_class
            if sc is None:
                # checkVolumeProvisions' error: the class went away since PreFilter.
                raise LookupError(f'failed to find storage class "{claim.storage_class}"')
            if sc.provisioner in ("", NO_PROVISIONER):
                return False
            if not topology_matches(sc.allowed_topologies, labels):
                return False
            found.dynamic.append(claim)
        return True

    # -- Reserve ----------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        st = state.get(_STATE)
        if st is None:
            return SUCCESS
        found = st.by_row.get(self.handle.snapshot.row_of(node))
        if found is None:
            # Nothing to bind on that node (every claim bound): nothing to assume.
            st.all_bound = True
            return Status()
        reserved = PodVolumes()
        for pv, claim in found.static:
            # GetBindVolumeToClaim: point the claimRef at the claim (with its uid), and mark
            # a binding the user did not pre-bind as the controller's.
            ref = pv.claim_ref
            annotations = dict(pv.annotations)
            if not pv.bound_to(claim):
                annotations.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
            assumed = pv
            if (
                ref is None
                or (ref.namespace, ref.name, ref.uid) != (claim.namespace, claim.name, claim.uid)
                or annotations != pv.annotations
            ):
                assumed = dataclasses.replace(
                    pv,
                    claim_ref=ClaimRef(claim.namespace, claim.name, claim.uid),
                    annotations=annotations,
                )
                self.cache.assume_volume(assumed, pv.resource_version)
            reserved.static.append((assumed, claim))
        for claim in found.dynamic:
            annotated = dataclasses.replace(
                claim, annotations={**claim.annotations, ANN_SELECTED_NODE: node}
            )
            self.cache.assume_claim(annotated, claim.resource_version)
            reserved.dynamic.append(annotated)
        st.reserved = reserved
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        st = state.get(_STATE)
        if st is None or st.reserved is None:
            return
        for pv, _claim in st.reserved.static:
            self.cache.restore_volume(pv)
        for claim in st.reserved.dynamic:
            self.cache.restore_claim(claim)
        st.reserved = None

    # -- PreBind ----------------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        st = state.get(_STATE)
        if st is None or st.all_bound:
            return SUCCESS
        reserved = st.reserved
        if reserved is None:
            return Status(Code.ERROR, (f'no pod volumes found for node "{node}"',), NAME)
        port = self.handle.volumes
        # bindAPIUpdate: no rollback of what was written; the PV controller takes over.
        written: list[tuple[PersistentVolume, Claim]] = []
        for pv, claim in reserved.static:
            got, status = await port.bind_volume(pv, claim)
            if got is None:
                return Status(Code.ERROR, status.reasons, NAME, status.error)
            written.append((got, claim))
        provisioned: list[Claim] = []
        for claim in reserved.dynamic:
            got_claim, status = await port.select_node(claim, node)
            if got_claim is None:
                return Status(Code.ERROR, status.reasons, NAME, status.error)
            provisioned.append(got_claim)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.args.bind_timeout_seconds
        while True:
            done, err = self.check_bindings(node, written, provisioned)
            if err is not None:
                return Status(Code.ERROR, (f"binding volumes: {err}",), NAME)
            if done:
                return Status()
            remaining = deadline - loop.time()
            if remaining <= 0:
                # wait.PollUntilContextTimeout's error, as kube-scheduler words it.
                return Status(Code.ERROR, ("binding volumes: context deadline exceeded",), NAME)
            await port.changed(remaining)

    def check_bindings(
        self, node: str, static: list[tuple[PersistentVolume, Claim]], dynamic: list[Claim]
    ) -> tuple[bool, str | None]:
        """checkBindings, on the watched (API) objects, not the assumed ones: (every claim
        fully bound, None), (False, None) to wait, or (False, why the binding failed)."""
        port = self.handle.volumes
        snap = self.handle.snapshot
        row = snap.row_of(node)
        if row < 0:
            return False, f'failed to get node "{node}": node "{node}" not found'
        labels = snap.node_at(row).labels
        for written, claim in static:
            pv = port.volume(written.name)
            if pv is None:
                return False, f"failed to check binding: {volume_not_found(written.name)}"
            pvc = port.claim(claim.namespace, claim.name)
            if pvc is None:
                return False, f"failed to check binding: {claim_not_found(claim.name)}"
            if _newer(written.resource_version, pv.resource_version):
                return False, None  # the watch has not shown our write yet
            if not pv.node_matches(labels, node):
                return False, (
                    f'pv "{pv.name}" node affinity doesn\'t match node "{node}": no matching'
                    " NodeSelectorTerms"
                )
            if pv.claim_ref is None or not pv.claim_ref.uid:
                return False, f'ClaimRef got reset for pv "{pv.name}"'
            if not pvc.fully_bound:
                return False, None
        for written_claim in dynamic:
            pvc = port.claim(written_claim.namespace, written_claim.name)
            if pvc is None:
                return False, (
                    f"failed to check provisioning pvc: {claim_not_found(written_claim.name)}"
                )
            if _newer(written_claim.resource_version, pvc.resource_version):
                return False, None
            if pvc.selected_node != node:
                # A provisioner that cannot provision removes the annotation to say so.
                return False, f'provisioning failed for PVC "{pvc.name}"'
            if pvc.volume_name:
                pv = port.volume(pvc.volume_name)
                if pv is None:
                    return False, None  # not seen yet
                if not pv.node_matches(labels, node):
                    return False, (
                        f'pv "{pv.name}" node affinity doesn\'t match node "{node}": no'
                        " matching NodeSelectorTerms"
                    )
            if not pvc.fully_bound:
                return False, None
        return True, None
