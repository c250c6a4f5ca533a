"""The daemon's DraPort (framework/dra.py): watches of DeviceClasses, ResourceSlices and
ResourceClaims of resource.k8s.io/v1, and the claim writes kube-scheduler's DynamicResources
plugin makes.

* Three reflectors feed the shared view (framework/dra.py DraView: indexes, in-flight and
  written-but-unseen claims, the version). The API is optional: a cluster that does not
  serve resource.k8s.io/v1 answers 404, the reflectors stop with one log line and the port
  holds nothing (kube/watch.py `optional`).
* Every add or update (and the deletion of an allocated claim, which frees its devices) is
  reported through `on_change(DraChange)`; the daemon hands it to
  ClusterEvents.dra_changed, which wakes the pods that may now fit (core/events.py).
* Writes mirror kube-scheduler 1.36's bindClaim: the finalizer
  resource.kubernetes.io/delete-protection in a metadata write, then allocation and
  reservedFor in one status write, each a merge patch conditional on the resourceVersion
  (equivalent to its Update/UpdateStatus of the object it read); on a 409 the claim is read
  again and the write retried on that copy unless it was deleted or allocated elsewhere
  (retry.RetryOnConflict with retry.DefaultRetry). Unreserve is kube's strategic-merge
  patch deleting the pod's reservedFor entry with a uid precondition; deallocate is
  PostFilter's status write clearing allocation, reservedFor and devices.

RBAC (manifests/rbac/gpusched.yaml, system:kube-scheduler's 1.36 DRA rules): deviceclasses
and resourceslices get/list/watch; resourceclaims and resourceclaims/status get/list/watch/
update/patch; resourceclaims/binding update/patch (DRAResourceClaimGranularStatusAuthorization,
beta and on in 1.36: writing status.allocation or status.reservedFor needs it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from gpusched.framework.dra import (
    CLAIMS,
    CLASSES,
    RETRIES,
    SLICES,
    DraChange,
    DraView,
    conflict,
    refusal,
    stamped,
    write_failure,
)
from gpusched.framework.status import Status
from gpusched.kube.client import JSON, ApiError, Kube
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.model.dra import (
    FINALIZER,
    AllocationResult,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    allocation_to_k8s,
    consumer_to_k8s,
    device_class_from_k8s,
    pod_consumer,
    resource_claim_from_k8s,
    resource_slice_from_k8s,
)
from gpusched.model.pod import PodInfo

log = logging.getLogger(__name__)

API = "/apis/resource.k8s.io/v1"
_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
# client-go's retry.DefaultRetry waits about 10 ms between tries.
RETRY_PAUSE = 0.01


def claim_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"{API}/namespaces/{namespace}/{CLAIMS}/{name}"
    return f"{path}/{subresource}" if subresource else path


def _failure(what: str, exc: Exception) -> Status:
    if isinstance(exc, ApiError):
        if exc.status == 409:
            reason = f"Operation cannot be fulfilled on {what}: {exc.message}"
        elif exc.status in (401, 403):
            reason = (
                f"{what}: forbidden (HTTP {exc.status}: {exc.message}); grant the scheduler's"
                " ServiceAccount the verbs in manifests/rbac/"
            )
        else:
            reason = f"{what}: HTTP {exc.status} {exc.reason}: {exc.message}"
        return write_failure(reason, exc.status)
    return write_failure(f"{what}: {type(exc).__name__}: {exc}")


async def _forever(reflector: Reflector[Any]) -> None:
    """Run a reflector; if the API is not served it returns, and this waits until
    cancelled, so a missing optional API is never taken for a dead watch."""
    await reflector.run()
    await asyncio.get_running_loop().create_future()


class KubeDra(DraView):
    def __init__(
        self,
        kube: Kube,
        *,
        on_change: Callable[[DraChange], None] = lambda _change: None,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout: int = 60,
        read_timeout: float = 90.0,
    ) -> None:
        super().__init__()
        self.kube = kube
        self.on_change = on_change

        def reflector(kind: str, decode: Callable[[JSON], Any], handler: Any) -> Any:
            return Reflector(
                kube,
                f"{API}/{kind}",
                decode,
                handler,
                name=kind,
                watch_timeout=watch_timeout,
                read_timeout=read_timeout,
                backoff=backoff(),
                optional=True,
            )

        self.class_watch: Reflector[DeviceClass] = reflector(
            CLASSES, device_class_from_k8s, self._on_class
        )
        self.slice_watch: Reflector[ResourceSlice] = reflector(
            SLICES, resource_slice_from_k8s, self._on_slice
        )
        self.claim_watch: Reflector[ResourceClaim] = reflector(
            CLAIMS, resource_claim_from_k8s, self._on_claim
        )

    @property
    def reflectors(self) -> tuple[Reflector[Any], ...]:
        return (self.class_watch, self.slice_watch, self.claim_watch)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))

    async def run(self) -> None:
        """The three watches until cancelled (an unserved API's watches idle)."""
        await asyncio.gather(*(_forever(r) for r in self.reflectors))

    # -- watch handlers ---------------------------------------------------------------------

    def _on_class(self, kind: EventType, dc: DeviceClass) -> None:
        if dc.errors:
            log.warning("DeviceClass %s is malformed: %s", dc.name, "; ".join(dc.errors))
        if kind is EventType.DELETED:
            self.remove_class(dc)
            return
        self.put_class(dc)
        self.on_change(DraChange(CLASSES, "", dc.name))

    def _on_slice(self, kind: EventType, rs: ResourceSlice) -> None:
        if kind is EventType.DELETED:
            self.remove_slice(rs)
            return
        if rs.errors:
            log.warning("ResourceSlice %s is malformed: %s", rs.name, "; ".join(rs.errors))
        self.put_slice(rs)
        self.on_change(DraChange(SLICES, "", rs.name, node=rs.node_name))

    def _on_claim(self, kind: EventType, claim: ResourceClaim) -> None:
        old = self.watched.get((claim.namespace, claim.name))
        was_allocated = old is not None and old.uid == claim.uid and old.allocation is not None
        if kind is EventType.DELETED:
            self.remove_claim(claim)
            if was_allocated:
                self.on_change(
                    DraChange(CLAIMS, claim.namespace, claim.name, deallocated=True, deleted=True)
                )
            return
        self.put_claim(claim)
        self.on_change(
            DraChange(
                CLAIMS,
                claim.namespace,
                claim.name,
                created=old is None or old.uid != claim.uid,
                deallocated=was_allocated and claim.allocation is None,
                status_changed=old is None
                or old.allocation != claim.allocation
                or old.reserved_for != claim.reserved_for,
            )
        )

    # -- writes -----------------------------------------------------------------------------

    async def _fresh(self, claim: ResourceClaim) -> ResourceClaim | None:
        """The claim as the API server has it now (None if it is gone)."""
        try:
            raw = await self.kube.get(claim_path(claim.namespace, claim.name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return resource_claim_from_k8s(raw)

    async def _patch_status(self, claim: ResourceClaim, status: JSON) -> ResourceClaim:
        raw = await self.kube.merge_patch(
            claim_path(claim.namespace, claim.name, "status"),
            {"metadata": {"resourceVersion": claim.resource_version}, "status": status},
        )
        return resource_claim_from_k8s(raw)

    async def _bind(
        self, claim: ResourceClaim, allocation: AllocationResult | None, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        """bindClaim: (allocate and) reserve for the pod, retrying conflicts on a fresh copy."""
        what = f'resourceclaims.resource.k8s.io "{claim.name}"'
        current: ResourceClaim | None = claim
        for attempt in range(RETRIES):
            if attempt:
                await asyncio.sleep(RETRY_PAUSE)
                try:
                    current = await self._fresh(claim)
                except (ApiError, *_NET_ERRORS) as exc:
                    return None, _failure(what, exc)
            why = refusal(current, claim, allocating=allocation is not None)
            if why or current is None:
                return None, write_failure(why, 409)
            try:
                if allocation is not None and FINALIZER not in current.finalizers:
                    # "The finalizer needs to be added in a normal update."
                    raw = await self.kube.merge_patch(
                        claim_path(claim.namespace, claim.name),
                        {
                            "metadata": {
                                "resourceVersion": current.resource_version,
                                "finalizers": [*current.finalizers, FINALIZER],
                            }
                        },
                    )
                    current = resource_claim_from_k8s(raw)
                reserved = [consumer_to_k8s(c) for c in current.reserved_for]
                if not any(c.uid == pod.uid for c in current.reserved_for):
                    reserved.append(consumer_to_k8s(pod_consumer(pod.name, pod.uid)))
                status: JSON = {"reservedFor": reserved}
                if allocation is not None:
                    status["allocation"] = allocation_to_k8s(stamped(allocation))
                written = await self._patch_status(current, status)
            except ApiError as exc:
                if exc.status == 409 and attempt + 1 < RETRIES:
                    log.debug("claim %s changed meanwhile; retrying on a fresh copy", claim.key)
                    continue
                return None, _failure(what, exc)
            except _NET_ERRORS as exc:
                return None, _failure(what, exc)
            self._wrote(written)
            return written, Status()
        return None, write_failure(conflict(claim), 409)  # pragma: no cover - loop returns

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        try:
            written, status = await self._bind(claim, allocation, pod)
        finally:
            # The in-flight allocation ends with the write, either way (bindClaim's defer).
            self._end_inflight(claim.uid)
        if written is not None:
            log.info("allocated claim %s for pod %s", claim.key, pod.key)
        return written, status

    async def reserve_for(
        self, claim: ResourceClaim, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        current = self.claim(claim.namespace, claim.name) or claim
        if current.uid == claim.uid and self.reserved_for(current, pod):
            return current, Status()
        return await self._bind(claim, None, pod)

    async def unreserve(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        self._end_inflight(claim.uid)
        current = self.claim(claim.namespace, claim.name)
        if current is None or current.uid != claim.uid:
            current = claim
        if current.allocation is None or not self.reserved_for(current, pod):
            return Status()
        # A strategic-merge patch removes the one entry without needing the latest claim.
        patch = {
            "metadata": {"uid": claim.uid},
            "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]},
        }
        what = f'resourceclaims.resource.k8s.io "{claim.name}"'
        try:
            raw = await self.kube.request(
                "PATCH",
                claim_path(claim.namespace, claim.name, "status"),
                body=patch,
                content_type="application/strategic-merge-patch+json",
            )
        except (ApiError, *_NET_ERRORS) as exc:
            # "We will get here again when pod scheduling is retried."
            log.warning("unreserve %s for pod %s failed: %s", claim.key, pod.key, exc)
            return _failure(what, exc)
        self._wrote(resource_claim_from_k8s(raw))
        return Status()

    async def deallocate(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        others = [c for c in claim.reserved_for if c.uid != pod.uid]
        if others:
            return write_failure(f"claim {claim.key} is in use by {others[0].name}", 409)
        what = f'resourceclaims.resource.k8s.io "{claim.name}"'
        try:
            written = await self._patch_status(
                claim, {"allocation": None, "reservedFor": None, "devices": None}
            )
        except (ApiError, *_NET_ERRORS) as exc:
            return _failure(what, exc)
        self._wrote(written)
        log.info("deallocated claim %s (pod %s did not fit)", claim.key, pod.key)
        return Status()
