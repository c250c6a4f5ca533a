"""The storage port the volume plugins read and write through (Handle.volumes).

The daemon implements it over watches of PersistentVolumeClaims, PersistentVolumes,
StorageClasses and CSINodes (gpusched/kube/volumes.py) and writes the two things
kube-scheduler writes for volumes: a PersistentVolume's `spec.claimRef` (a static binding,
which the PV controller then completes) and a claim's `volume.kubernetes.io/selected-node`
annotation (dynamic provisioning). The simulator's pods have no volumes: it uses
`NoVolumes`, which holds nothing (a claim is then "not found", as in a cluster without it).
`FrozenVolumes` is the daemon's view copied at one instant for `explain` (read-only).

Reads are synchronous (the scheduling cycle never awaits); writes and the wait for the PV
controller are coroutines of the binding cycle. Writes return a Status, never raise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Protocol

from gpusched.framework.status import Code, Status
from gpusched.model.volume import Claim, CSINode, PersistentVolume, StorageClass


class VolumePort(Protocol):
    def claim(self, namespace: str, name: str) -> Claim | None: ...

    def volume(self, name: str) -> PersistentVolume | None: ...

    def volumes_of_class(self, storage_class: str) -> Iterable[PersistentVolume]:
        """Every PersistentVolume whose class (GetPersistentVolumeClass) is this one."""
        ...

    def storage_class(self, name: str) -> StorageClass | None: ...

    def csi_node(self, name: str) -> CSINode | None: ...

    async def bind_volume(
        self, pv: PersistentVolume, claim: Claim
    ) -> tuple[PersistentVolume | None, Status]:
        """Set the volume's claimRef to the claim (and pv.kubernetes.io/bound-by-controller
        when it was not pre-bound), conditional on the volume's resourceVersion: the
        written volume, or None and why not (a 409 when the volume changed meanwhile)."""
        ...

    async def select_node(self, claim: Claim, node: str) -> tuple[Claim | None, Status]:
        """Annotate the claim with volume.kubernetes.io/selected-node, conditional on its
        resourceVersion: the written claim, or None and why not."""
        ...

    async def changed(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until the next claim or volume event (True) or `timeout` seconds (False).
        The waiter is registered before the first suspension, so a caller that checks its
        condition and then calls this misses no event in between."""
        ...


class NoVolumes:
    """A cluster without storage: the simulator, and the daemon when no profile uses a
    volume plugin (then nothing is watched)."""

    def claim(self, namespace: str, name: str) -> Claim | None:
        return None

    def volume(self, name: str) -> PersistentVolume | None:
        return None

    def volumes_of_class(self, storage_class: str) -> Iterable[PersistentVolume]:
        return ()

    def storage_class(self, name: str) -> StorageClass | None:
        return None

    def csi_node(self, name: str) -> CSINode | None:
        return None

    async def bind_volume(
        self, pv: PersistentVolume, claim: Claim
    ) -> tuple[PersistentVolume | None, Status]:
        return None, Status(Code.ERROR, ("no storage in this cluster",))

    async def select_node(self, claim: Claim, node: str) -> tuple[Claim | None, Status]:
        return None, Status(Code.ERROR, ("no storage in this cluster",))

    async def changed(self, timeout: float) -> bool:  # noqa: ASYNC109
        await asyncio.sleep(timeout)
        return False


NO_VOLUMES = NoVolumes()


class FrozenVolumes:
    """The storage objects copied at one instant, for a reader on another thread
    (`explain`'s search, which must never read the daemon's live indexes while the watches
    change them): plain dicts of its own (the objects are frozen and shared); it never
    changes and refuses every write."""

    def __init__(
        self,
        claims: Mapping[tuple[str, str], Claim],
        volumes: Mapping[str, PersistentVolume],
        by_class: Mapping[str, Mapping[str, PersistentVolume]],
        classes: Mapping[str, StorageClass],
        csi_nodes: Mapping[str, CSINode],
    ) -> None:
        self.claims = dict(claims)
        self.volumes = dict(volumes)
        self.by_class = {k: tuple(v.values()) for k, v in by_class.items()}
        self.classes = dict(classes)
        self.csi_nodes = dict(csi_nodes)

    def claim(self, namespace: str, name: str) -> Claim | None:
        return self.claims.get((namespace, name))

    def volume(self, name: str) -> PersistentVolume | None:
        return self.volumes.get(name)

    def volumes_of_class(self, storage_class: str) -> Iterable[PersistentVolume]:
        return self.by_class.get(storage_class, ())

    def storage_class(self, name: str) -> StorageClass | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self.csi_nodes.get(name)

    async def bind_volume(
        self, pv: PersistentVolume, claim: Claim
    ) -> tuple[PersistentVolume | None, Status]:
        return None, Status(Code.ERROR, ("a frozen copy of the storage view never writes",))

    async def select_node(self, claim: Claim, node: str) -> tuple[Claim | None, Status]:
        return None, Status(Code.ERROR, ("a frozen copy of the storage view never writes",))

    async def changed(self, timeout: float) -> bool:  # noqa: ASYNC109
        return False  # it never changes
