"""The daemon's VolumePort (framework/volumes.py): watches of PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes, and the two writes kube-scheduler's volume
binder makes.

* Four reflectors keep the objects (decoded once, model/volume.py) in indexes the plugins
  read synchronously: claims by namespace/name, volumes by name and by class, classes and
  CSINodes by name. Each add or update is reported through `on_change(kind)` (the daemon
  turns it into a requeue event); deletions make no pod schedulable and are not reported.
* `bind_volume` merge-patches the volume's `spec.claimRef` (and
  `pv.kubernetes.io/bound-by-controller`), `select_node` the claim's
  `volume.kubernetes.io/selected-node`, each conditional on the resourceVersion the
  scheduler decided on (a 409 if the object changed meanwhile), as kube-scheduler's Update
  of the whole object is. RBAC: `persistentvolumes` update/patch and
  `persistentvolumeclaims` patch (manifests/rbac/gpusched.yaml).
* `changed` wakes the binding cycles waiting for the PV controller on every claim or
  volume event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from gpusched.framework.status import ClusterWriteError, Code, Status
from gpusched.framework.volumes import FrozenVolumes
from gpusched.kube.client import ApiError, Kube
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.model.volume import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    Claim,
    CSINode,
    PersistentVolume,
    StorageClass,
    claim_from_k8s,
    csi_node_from_k8s,
    storage_class_from_k8s,
    volume_from_k8s,
)

log = logging.getLogger(__name__)

CLAIMS = "persistentvolumeclaims"
VOLUMES = "persistentvolumes"
CLASSES = "storageclasses"
CSI_NODES = "csinodes"
_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class VolumeWriteError(ClusterWriteError):
    """A refused volume write; not final (the pod is retried with backoff)."""


def _failure(what: str, exc: Exception) -> Status:
    if isinstance(exc, ApiError):
        if exc.status == 409:
            # kube's apierrors.NewConflict wording.
            reason = f"Operation cannot be fulfilled on {what}: {exc.message}"
        elif exc.status in (401, 403):
            reason = (
                f"{what}: forbidden (HTTP {exc.status}: {exc.message}); grant the scheduler's"
                " ServiceAccount the verbs in manifests/rbac/"
            )
        else:
            reason = f"{what}: HTTP {exc.status} {exc.reason}: {exc.message}"
    else:
        reason = f"{what}: {type(exc).__name__}: {exc}"
    return Status(Code.ERROR, (reason,), "", VolumeWriteError(reason))


class KubeVolumes:
    def __init__(
        self,
        kube: Kube,
        *,
        on_change: Callable[[str], None] = lambda _kind: None,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout: int = 60,
        read_timeout: float = 90.0,
    ) -> None:
        self.kube = kube
        self.on_change = on_change
        self.claims: dict[tuple[str, str], Claim] = {}
        self.volumes: dict[str, PersistentVolume] = {}
        self.by_class: dict[str, dict[str, PersistentVolume]] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        self._waiters: list[asyncio.Future[None]] = []

        def reflector(path: str, decode: Callable[[Any], Any], handler: Any, name: str) -> Any:
            return Reflector(
                kube,
                path,
                decode,
                handler,
                name=name,
                watch_timeout=watch_timeout,
                read_timeout=read_timeout,
                backoff=backoff(),
            )

        self.claim_watch: Reflector[Claim] = reflector(
            "/api/v1/persistentvolumeclaims", claim_from_k8s, self._on_claim, CLAIMS
        )
        self.volume_watch: Reflector[PersistentVolume] = reflector(
            "/api/v1/persistentvolumes", volume_from_k8s, self._on_volume, VOLUMES
        )
        self.class_watch: Reflector[StorageClass] = reflector(
            "/apis/storage.k8s.io/v1/storageclasses",
            storage_class_from_k8s,
            self._on_class,
            CLASSES,
        )
        self.csi_watch: Reflector[CSINode] = reflector(
            "/apis/storage.k8s.io/v1/csinodes", csi_node_from_k8s, self._on_csi_node, CSI_NODES
        )

    @property
    def reflectors(self) -> tuple[Reflector[Any], ...]:
        return (self.claim_watch, self.volume_watch, self.class_watch, self.csi_watch)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))

    # -- watch handlers ---------------------------------------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _on_claim(self, kind: EventType, claim: Claim) -> None:
        key = (claim.namespace, claim.name)
        if kind is EventType.DELETED:
            if (old := self.claims.get(key)) is not None and old.uid == claim.uid:
                del self.claims[key]
        else:
            self.claims[key] = claim
            self.on_change(CLAIMS)
        self._wake()

    def _on_volume(self, kind: EventType, pv: PersistentVolume) -> None:
        old = self.volumes.get(pv.name)
        if old is not None and (kind is not EventType.DELETED or old.uid == pv.uid):
            self.by_class.get(old.storage_class, {}).pop(pv.name, None)
            if not self.by_class.get(old.storage_class, True):
                del self.by_class[old.storage_class]
            del self.volumes[pv.name]
        if kind is not EventType.DELETED:
            self.volumes[pv.name] = pv
            self.by_class.setdefault(pv.storage_class, {})[pv.name] = pv
            self.on_change(VOLUMES)
        self._wake()

    def _on_class(self, kind: EventType, sc: StorageClass) -> None:
        if kind is EventType.DELETED:
            self.classes.pop(sc.name, None)
            return
        self.classes[sc.name] = sc
        self.on_change(CLASSES)

    def _on_csi_node(self, kind: EventType, csi: CSINode) -> None:
        if kind is EventType.DELETED:
            self.csi_nodes.pop(csi.name, None)
            return
        self.csi_nodes[csi.name] = csi
        self.on_change(CSI_NODES)

    # -- VolumePort reads -------------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> Claim | None:
        return self.claims.get((namespace, name))

    def volume(self, name: str) -> PersistentVolume | None:
        return self.volumes.get(name)

    def volumes_of_class(self, storage_class: str) -> Iterable[PersistentVolume]:
        return tuple(self.by_class.get(storage_class, {}).values())

    def storage_class(self, name: str) -> StorageClass | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self.csi_nodes.get(name)

    def frozen(self) -> FrozenVolumes:
        """These indexes as they are now, for a reader on another thread (`explain`): call
        it on the event loop, where the watches change them."""
        return FrozenVolumes(self.claims, self.volumes, self.by_class, self.classes, self.csi_nodes)

    # -- VolumePort writes ------------------------------------------------------------------

    async def bind_volume(
        self, pv: PersistentVolume, claim: Claim
    ) -> tuple[PersistentVolume | None, Status]:
        what = f'persistentvolumes "{pv.name}"'
        ref = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "resourceVersion": claim.resource_version,
        }
        meta: dict[str, Any] = {"resourceVersion": pv.resource_version}
        if ANN_BOUND_BY_CONTROLLER in pv.annotations:
            meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: pv.annotations[ANN_BOUND_BY_CONTROLLER]}
        try:
            raw = await self.kube.merge_patch(
                f"/api/v1/persistentvolumes/{pv.name}",
                {"metadata": meta, "spec": {"claimRef": ref}},
            )
        except (ApiError, *_NET_ERRORS) as exc:
            return None, _failure(what, exc)
        log.info("bound volume %s to claim %s", pv.name, claim.key)
        return volume_from_k8s(raw), Status()

    async def select_node(self, claim: Claim, node: str) -> tuple[Claim | None, Status]:
        what = f'persistentvolumeclaims "{claim.name}"'
        patch = {
            "metadata": {
                "resourceVersion": claim.resource_version,
                "annotations": {ANN_SELECTED_NODE: node},
            }
        }
        try:
            raw = await self.kube.merge_patch(
                f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}", patch
            )
        except (ApiError, *_NET_ERRORS) as exc:
            return None, _failure(what, exc)
        return claim_from_k8s(raw), Status()

    async def changed(self, timeout: float) -> bool:  # noqa: ASYNC109
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            waiter.cancel()
        return True
