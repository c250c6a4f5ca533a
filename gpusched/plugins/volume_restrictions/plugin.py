"""VolumeRestrictions (PreFilter, Filter): volumes that only one pod may use.

- ReadWriteOncePod: a pod whose persistentVolumeClaim volume asks for that access mode is
  Unschedulable on every node while another scheduled pod (bound or assumed) uses the same
  claim; preempting that pod may help, and its deletion wakes this one. A missing claim is
  UnschedulableAndUnresolvable (`persistentvolumeclaim "x" not found`).
- In-tree disks: a GCE PD, AWS EBS volume, iSCSI target or Ceph RBD image that a pod on the
  node already mounts conflicts unless both mount it read-only (EBS: always), "node(s) had
  no available disk".

A pod with neither is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import FilterResult, Handle, Mask, PreFilterResult
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo
from gpusched.model.volume import READ_WRITE_ONCE_POD, Disk
from gpusched.plugins.helper.volumes import claim_not_found

NAME = "VolumeRestrictions"
# Returned for every pod without volumes (most pods): one object, not one per call.
_SKIP = Status(Code.SKIP, (), NAME)
REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)


@dataclass(frozen=True, slots=True)
class _State:
    disks: tuple[Disk, ...]
    rwop_in_use: bool  # a ReadWriteOncePod claim of the pod is used by a scheduled pod


_STATE: StateKey[_State] = StateKey("VolumeRestrictions/state")


def disks_conflict(new: Disk, old: Disk) -> bool:
    """isVolumeConflict for one pair of volumes."""
    if new.kind != old.kind or new.id != old.id:
        return False
    if new.kind == "aws":
        return True
    if new.kind == "rbd" and not new.monitors & old.monitors:
        return False  # the same pool and image behind different Ceph monitors
    return not (new.read_only and old.read_only)


def conflicts(disks: tuple[Disk, ...], pods: Iterable[PodInfo]) -> bool:
    for pod in pods:
        for vol in pod.volumes:
            if vol.disk is not None and any(disks_conflict(d, vol.disk) for d in disks):
                return True
    return False


class VolumeRestrictions:
    name: ClassVar[str] = NAME

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.volumes:
            return None, _SKIP
        disks = tuple(v.disk for v in pod.volumes if v.disk is not None)
        rwop: set[str] = set()
        port = self.handle.volumes
        for vol in pod.volumes:
            # Only persistentVolumeClaim volumes: an ephemeral volume's claim is the pod's own.
            if vol.disk is not None or vol.ephemeral:
                continue
            claim = port.claim(pod.namespace, vol.claim)
            if claim is None:
                return None, Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (claim_not_found(vol.claim),), NAME
                )
            if READ_WRITE_ONCE_POD in claim.access_modes:
                rwop.add(claim.name)
        in_use = bool(rwop) and self._claims_in_use(pod, rwop)
        if not disks and not in_use:
            return None, Status(Code.SKIP, (), NAME)
        state.write(_STATE, _State(disks, in_use))
        return None, Status()

    def _claims_in_use(self, pod: PodInfo, names: set[str]) -> bool:
        """IsPVCUsedByPods: a pod placed on any node (bound or assumed) mounts one of the
        claims. Walks the scheduled pods, only for pods with a ReadWriteOncePod claim."""
        snap = self.handle.snapshot
        for node in snap.names:
            if not node:
                continue
            for other in self.handle.pods_on_node(node):
                if other.namespace != pod.namespace or other.uid == pod.uid:
                    continue
                if any(v.claim in names and not v.ephemeral for v in other.volumes):
                    return True
        return False

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        st = state.get(_STATE)
        if st is None:
            return FilterResult(candidates)
        feasible = candidates.copy()
        codes: NDArray[np.int8] = np.zeros(len(candidates), np.int8)
        snap = self.handle.snapshot
        rows = np.flatnonzero(candidates)
        if st.disks:
            for row in rows:
                if conflicts(st.disks, self.handle.pods_on_node(snap.names[int(row)])):
                    feasible[row] = False
        if st.rwop_in_use:
            # Every node left fails the same way (the disk conflict is reported first).
            rest = feasible & candidates
            codes[rest] = 1
            feasible[:] = False
        return FilterResult(feasible, (REASON_DISK_CONFLICT, REASON_RWOP_CONFLICT), codes)
