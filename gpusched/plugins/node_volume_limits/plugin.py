"""NodeVolumeLimits (PreFilter, Filter): a node's CSI attach limits (kube's CSILimits).

A node's limits come from its CSINode object (`spec.drivers[].allocatable.count`, per
driver); a node without a CSINode, or a driver without a count, has no limit. The pod's
claim volumes (persistentVolumeClaim and generic ephemeral) are counted per CSI driver: a
bound claim by its volume's `csi.driver`/`csi.volumeHandle`, an unbound one by its class's
provisioner (a volume that does not exist yet). The volumes of the pods already on the node
(bound or assumed) are counted the same way, each unique volume once; a node where a driver
would exceed its count is "node(s) exceed max volume count" (Unschedulable: preempting a pod
frees attachments). A claim the pod needs that does not exist is UnschedulableAndUnresolvable.
A pod without claim volumes is skipped.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import FilterResult, Handle, Mask, PreFilterResult
from gpusched.framework.status import SUCCESS, Code, Status
from gpusched.framework.volumes import VolumePort
from gpusched.model.pod import PodInfo
from gpusched.model.volume import Claim
from gpusched.plugins.helper.volumes import claim_not_found, ephemeral_for_pod, not_for_pod

NAME = "NodeVolumeLimits"
# Returned for every pod without volumes (most pods): one object, not one per call.
_SKIP = Status(Code.SKIP, (), NAME)
REASON = "node(s) exceed max volume count"


class NodeVolumeLimits:
    name: ClassVar[str] = NAME

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle
        # kube's random volume id prefix for claims not bound yet: such a claim counts as a
        # volume of its own, never as one already attached to the node.
        self._prefix = secrets.token_hex(16)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if pod.volumes and any(v.disk is None for v in pod.volumes):
            return None, SUCCESS
        return None, _SKIP

    def _driver_info(self, port: VolumePort, claim: Claim) -> tuple[str, str]:
        """getCSIDriverInfo: (driver, volume handle), ("", "") when not a CSI volume."""
        if claim.volume_name:
            pv = port.volume(claim.volume_name)
            if pv is not None:
                return pv.csi_driver, pv.csi_handle
        # Unbound, or bound to a volume not seen (deleted, or pre-bound to one not created
        # yet): counted by its class's provisioner, as a volume of its own.
        if not claim.storage_class:
            return "", ""
        sc = port.storage_class(claim.storage_class)
        if sc is None:
            return "", ""
        return sc.provisioner, f"{self._prefix}-{claim.namespace}/{claim.name}"

    def attachable(self, pod: PodInfo, new: bool) -> tuple[dict[str, str], str | None]:
        """filterAttachableVolumes: unique volume name -> driver for the pod's claims; for
        the pod being scheduled, a missing claim (or another pod's ephemeral claim) is the
        reason it cannot go anywhere; an existing pod's such volume is not counted."""
        port = self.handle.volumes
        out: dict[str, str] = {}
        for vol in pod.volumes:
            if vol.disk is not None:
                continue
            if not vol.claim:
                if new:
                    return out, "PersistentVolumeClaim had no name"
                continue
            claim = port.claim(pod.namespace, vol.claim)
            if claim is None:
                if new:
                    return (
                        out,
                        f"looking up PVC {pod.namespace}/{vol.claim}: {claim_not_found(vol.claim)}",
                    )
                continue
            if vol.ephemeral and not ephemeral_for_pod(claim, pod):
                if new:
                    return out, not_for_pod(claim, pod)
                continue
            driver, handle = self._driver_info(port, claim)
            if driver and handle:
                out[f"{driver}/{handle}"] = driver
        return out, None

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        new, why = self.attachable(pod, True)
        if why is not None:
            return FilterResult(np.zeros_like(candidates), (why,), unresolvable=True)
        if not new:
            return FilterResult(candidates)
        port = self.handle.volumes
        snap = self.handle.snapshot
        feasible = candidates.copy()
        for row in candidates.nonzero()[0]:
            name = snap.names[int(row)]
            csi = port.csi_node(name)
            if csi is None or not csi.limits:
                continue
            if self.exceeds(new, csi.limits, self.handle.pods_on_node(name)):
                feasible[row] = False
        return FilterResult(feasible, (REASON,))

    def exceeds(
        self, new: Mapping[str, str], limits: Mapping[str, int], pods: Iterable[PodInfo]
    ) -> bool:
        """Whether adding the pod's `new` volumes to those of `pods` passes a driver's
        limit (only drivers with a limit count)."""
        attached: dict[str, str] = {}
        for other in pods:
            if any(v.disk is None for v in other.volumes):
                got, _ = self.attachable(other, False)
                attached.update(got)
        count: dict[str, int] = {}
        for driver in attached.values():
            count[driver] = count.get(driver, 0) + 1
        adding: dict[str, int] = {}
        for unique, driver in new.items():
            if unique not in attached:  # a volume shared with a pod there is attached once
                adding[driver] = adding.get(driver, 0) + 1
        for driver, n in adding.items():
            limit = limits.get(driver)
            if limit is not None and count.get(driver, 0) + n > limit:
                return True
        return False
