"""The Dynamic Resource Allocation port the DynamicResources plugin reads and writes through
(Handle.dra), modelled on the storage port (framework/volumes.py).

Reads are synchronous (the scheduling cycle never awaits): DeviceClasses by name, the
ResourceSlices (all, grouped by pool for the allocator, or those a node can use), a claim by
namespace/name, every allocated claim, and `version`, a number that changes with every
change to any of them, so the plugin can cache what it derives (the devices in use) until
it moves.

What counts as allocated (the rule that prevents double-booking) is kube-scheduler's:

* the claims whose status.allocation the watch shows (allocated by anyone);
* our in-flight allocations: `assume(claim)` records a claim with the allocation the
  plugin decided on in Reserve (kube's inFlightAllocations); it holds until the binding
  cycle's write ends (`allocate`) or the plugin gives it up (`forget`, `unreserve`). A
  watch event does not drop it, even a newer one: the write may still succeed (kube
  retries a conflict on a fresh copy), and until then no other pod may take its devices;
* what we wrote and the watch has not shown yet (kube's assume cache after the API call):
  the written claim stands in for the watched one until the watch shows a resourceVersion
  at least as new.

Writes are coroutines of the binding cycle and mirror kube-scheduler 1.36's PreBind
(`bindClaim` in dynamicresources.go): the finalizer resource.kubernetes.io/delete-protection
first, in a metadata write, then one status write of the allocation with the pod added to
status.reservedFor, each conditional on the claim's resourceVersion; on a conflict the claim
is read again and the write retried (at most RETRIES tries, client-go's retry.DefaultRetry)
unless it was deleted or allocated by someone else meanwhile, which fails. `unreserve` is
kube's Unreserve: our in-flight allocation is given up and the pod's entry removed from
status.reservedFor. `deallocate` is kube's PostFilter: an allocation no one else uses is
cleared so the pod can be tried elsewhere. Writes return a Status, never raise.

`NoDra` is a cluster without DRA (nothing watched, every claim "not found"); `MemoryDra`
keeps everything in memory with the same semantics and applies writes at once (the
simulator, unit tests); `FrozenDra` is a view copied at one instant for a reader on another
thread (`explain`), read-only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Protocol

from gpusched.framework.status import ClusterWriteError, Code, Status
from gpusched.model.dra import (
    FINALIZER,
    AllocationResult,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    pod_consumer,
)
from gpusched.model.pod import PodInfo

# client-go's retry.DefaultRetry: five tries.
RETRIES = 5
PoolKey = tuple[str, str]  # (driver, pool)
# The kinds a DraChange reports (the API's resource names).
CLAIMS = "resourceclaims"
SLICES = "resourceslices"
CLASSES = "deviceclasses"


@dataclasses.dataclass(frozen=True, slots=True)
class DraChange:
    """A DRA object added or updated (or an allocated claim deleted), as the watches report
    it for requeueing (kube-scheduler's ResourceClaim, ResourceSlice and DeviceClass
    Add/Update events and isSchedulableAfterClaimChange's inputs)."""

    kind: str  # "resourceclaims" | "resourceslices" | "deviceclasses"
    namespace: str  # a claim's; "" for the cluster-scoped kinds
    name: str
    node: str = ""  # a slice's spec.nodeName
    created: bool = False  # a claim seen for the first time
    # A claim's status.allocation went away (or the allocated claim was deleted): its
    # devices are free for anyone.
    deallocated: bool = False
    deleted: bool = False
    # A claim's allocation or reservedFor changed (what the pods using it wait for).
    status_changed: bool = False


class DraWriteError(ClusterWriteError):
    """A refused claim write; not final (the pod is retried with backoff). `status` is the
    HTTP status when the API answered (409: the claim changed, or was allocated elsewhere)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def write_failure(reason: str, status: int = 0) -> Status:
    return Status(Code.ERROR, (reason,), "", DraWriteError(reason, status))


def conflict(claim: ResourceClaim) -> str:
    """kube-apiserver's 409 wording (apierrors.NewConflict)."""
    return (
        f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{claim.name}": the'
        " object has been modified; please apply your changes to the latest version and try"
        " again"
    )


def refusal(current: ResourceClaim | None, claim: ResourceClaim, *, allocating: bool) -> str:
    """Why the claim as it is now cannot take our write ("" if it can): bindClaim's checks
    on the fresh copy it reads after a conflict."""
    key = f"{claim.namespace}/{claim.name}"
    if current is None or current.uid != claim.uid:
        return f"claim {key} got deleted in the meantime"
    if current.deleting:
        return f"claim {key} got deleted in the meantime"
    if allocating and current.allocation is not None:
        return f"claim {key} got allocated elsewhere in the meantime"
    if not allocating and current.allocation is None:
        return f"claim {key} got deallocated elsewhere in the meantime"
    return ""


def rv_at_least(a: str, b: str) -> bool:
    """resourceVersion a is at least as new as b (etcd revisions; the assume cache compares
    them as integers). An unparsable version is only as new as itself."""
    try:
        return int(a) >= int(b)
    except ValueError:
        return a == b


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamped(allocation: AllocationResult, now: Callable[[], str] = now_rfc3339) -> AllocationResult:
    """The allocation with allocationTimestamp set, as bindClaim sets it when
    DRADeviceBindingConditions and DRAResourceClaimDeviceStatus are on (both default on in
    1.36)."""
    if allocation.allocation_timestamp:
        return allocation
    return dataclasses.replace(allocation, allocation_timestamp=now())


class DraPort(Protocol):
    @property
    def version(self) -> int:
        """Changes with every change to a class, slice or claim (watched, assumed or
        written): what the plugin derived at one version holds until it changes."""
        ...

    def device_class(self, name: str) -> DeviceClass | None: ...

    def slices(self) -> tuple[ResourceSlice, ...]:
        """Every ResourceSlice (of every pool generation: the allocator keeps the newest)."""
        ...

    def pools(self) -> Mapping[PoolKey, tuple[ResourceSlice, ...]]:
        """The slices grouped by (driver, pool)."""
        ...

    def slices_for_node(self, node: str) -> tuple[ResourceSlice, ...]:
        """The slices whose devices `node` may reach: those of spec.nodeName `node`, and
        every slice not bound to one node (nodeSelector, allNodes, perDeviceNodeSelection),
        which the allocator matches against the node itself."""
        ...

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        """The claim as the scheduler must see it: our in-flight allocation, else what we
        wrote and the watch has not shown yet, else the watched object."""
        ...

    def allocated_claims(self) -> tuple[ResourceClaim, ...]:
        """Every claim with an allocation, by anyone, including our in-flight ones."""
        ...

    def allocating(self, uid: str) -> bool:
        """An allocation of ours for the claim is in flight: Reserve decided it and the
        binding cycle has not ended (kube's ClaimHasPendingAllocation). Another pod using
        the claim waits for it."""
        ...

    def assume(self, claim: ResourceClaim) -> None:
        """Count `claim` (with the allocation we decided on) as allocated until `allocate`
        ends or `forget`."""
        ...

    def forget(self, uid: str) -> None:
        """Give up what we assumed or wrote for the claim: the watched object counts again."""
        ...

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        """Write the allocation and reserve the claim for the pod (the finalizer first):
        the written claim, or None and why not. The in-flight allocation ends either way."""
        ...

    async def reserve_for(
        self, claim: ResourceClaim, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        """Add the pod to an allocated claim's status.reservedFor (a shared claim, or one
        allocated earlier): the written claim, or None and why not."""
        ...

    async def unreserve(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        """Give up our in-flight allocation of the claim and remove the pod from its
        status.reservedFor (a no-op where it is not there)."""
        ...

    async def deallocate(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        """Clear the allocation of a claim no one but the pod has reserved (kube's
        PostFilter), conditional on its resourceVersion."""
        ...

    async def settled(self, uids: Collection[str], timeout: float) -> bool:  # noqa: ASYNC109
        """Wait (at most `timeout` s) until the watch shows our writes of these claims."""
        ...


class DraView:
    """The state both the daemon's and the in-memory port keep: the watched objects,
    indexes, in-flight and written-but-unseen claims, the version. The watch (or the
    simulator) feeds it through put_*/remove_*."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self._slices: dict[str, ResourceSlice] = {}  # uid -> slice
        self._by_node: dict[str, dict[str, ResourceSlice]] = {}  # nodeName -> uid -> slice
        self._unbound: dict[str, ResourceSlice] = {}  # uid -> slice of no single node
        self.watched: dict[tuple[str, str], ResourceClaim] = {}  # (ns, name) -> claim
        self.inflight: dict[str, ResourceClaim] = {}  # uid -> claim with our allocation
        self.written: dict[str, ResourceClaim] = {}  # uid -> claim we wrote, not yet seen
        self._version = 0
        # Set (and dropped) at the next change: what `settled` waits on.
        self._waiter: asyncio.Event | None = None
        # Moves only when a slice does: what is derived from the slices (the allocator's
        # slice index and its selector caches) outlives the claims' churn.
        self._slices_version = 0
        # What the reads derived, and at which version (of the slices, for slices/pools).
        self._slices_at: tuple[int, tuple[ResourceSlice, ...]] = (-1, ())
        self._pools_at: tuple[int, Mapping[PoolKey, tuple[ResourceSlice, ...]]] = (-1, {})
        self._allocated_at: tuple[int, tuple[ResourceClaim, ...]] = (-1, ())

    # -- changes ----------------------------------------------------------------------------

    def _changed(self) -> None:
        self._version += 1
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    async def settled(self, uids: Collection[str], timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until the watch shows every claim we wrote among `uids` (at least at the
        version we wrote), at most `timeout` seconds: True when it does. Until then an
        earlier write by someone else may not have reached us yet."""
        if not any(u in self.written for u in uids):
            return True  # the simulator's writes are seen at once: no loop needed
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(u in self.written for u in uids):
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._waiter is None:
                self._waiter = asyncio.Event()
            try:
                await asyncio.wait_for(self._waiter.wait(), left)
            except TimeoutError:
                return False
        return True

    @property
    def version(self) -> int:
        return self._version

    def put_class(self, dc: DeviceClass) -> None:
        self.classes[dc.name] = dc
        self._changed()

    def remove_class(self, dc: DeviceClass) -> None:
        old = self.classes.get(dc.name)
        if old is not None and (not dc.uid or old.uid == dc.uid):
            del self.classes[dc.name]
            self._changed()

    def put_slice(self, rs: ResourceSlice) -> None:
        self._drop_slice(rs.uid)
        self._slices[rs.uid] = rs
        if rs.node_name:
            self._by_node.setdefault(rs.node_name, {})[rs.uid] = rs
        else:
            self._unbound[rs.uid] = rs
        self._slices_version += 1
        self._changed()

    def remove_slice(self, rs: ResourceSlice) -> None:
        if self._drop_slice(rs.uid):
            self._changed()

    def _drop_slice(self, uid: str) -> bool:
        old = self._slices.pop(uid, None)
        if old is None:
            return False
        node = self._by_node.get(old.node_name)
        if node is not None:
            node.pop(uid, None)
            if not node:
                del self._by_node[old.node_name]
        self._unbound.pop(uid, None)
        self._slices_version += 1
        return True

    def put_claim(self, claim: ResourceClaim) -> None:
        self.watched[(claim.namespace, claim.name)] = claim
        seen = self.written.get(claim.uid)
        if seen is not None and rv_at_least(claim.resource_version, seen.resource_version):
            # The watch caught up with our write (or went past it): it is the truth again.
            del self.written[claim.uid]
        self._changed()

    def remove_claim(self, claim: ResourceClaim) -> None:
        key = (claim.namespace, claim.name)
        old = self.watched.get(key)
        if old is None or (claim.uid and old.uid != claim.uid):
            return  # a stale deletion of a claim already replaced
        del self.watched[key]
        self.written.pop(old.uid, None)
        # An in-flight allocation stays until its binding cycle ends (its write fails).
        self._changed()

    # -- reads ------------------------------------------------------------------------------

    def device_class(self, name: str) -> DeviceClass | None:
        return self.classes.get(name)

    def slices(self) -> tuple[ResourceSlice, ...]:
        if self._slices_at[0] != self._slices_version:
            self._slices_at = (self._slices_version, tuple(self._slices.values()))
        return self._slices_at[1]

    def pools(self) -> Mapping[PoolKey, tuple[ResourceSlice, ...]]:
        if self._pools_at[0] != self._slices_version:
            grouped: dict[PoolKey, list[ResourceSlice]] = {}
            for rs in self._slices.values():
                grouped.setdefault((rs.driver, rs.pool), []).append(rs)
            self._pools_at = (self._slices_version, {k: tuple(v) for k, v in grouped.items()})
        return self._pools_at[1]

    def slices_for_node(self, node: str) -> tuple[ResourceSlice, ...]:
        local = self._by_node.get(node)
        if not local:
            return tuple(self._unbound.values())
        return (*local.values(), *self._unbound.values())

    def _effective(self, claim: ResourceClaim) -> ResourceClaim:
        return self.inflight.get(claim.uid) or self.written.get(claim.uid) or claim

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        watched = self.watched.get((namespace, name))
        if watched is not None:
            return self._effective(watched)
        # Not watched (yet, or deleted): what we hold for it, by name.
        for held in itertools.chain(self.inflight.values(), self.written.values()):
            if held.namespace == namespace and held.name == name:
                return held
        return None

    def allocated_claims(self) -> tuple[ResourceClaim, ...]:
        if self._allocated_at[0] != self._version:
            out: dict[str, ResourceClaim] = {}
            for claim in self.watched.values():
                current = self._effective(claim)
                if current.allocation is not None:
                    out[current.uid] = current
            for held in itertools.chain(self.inflight.values(), self.written.values()):
                # Ours, of a claim the watch no longer (or not yet) has.
                if held.uid not in out and held.allocation is not None:
                    out[held.uid] = held
            self._allocated_at = (self._version, tuple(out.values()))
        return self._allocated_at[1]

    # -- in-flight --------------------------------------------------------------------------

    def allocating(self, uid: str) -> bool:
        return uid in self.inflight

    def assume(self, claim: ResourceClaim) -> None:
        self.inflight[claim.uid] = claim
        self._changed()

    def forget(self, uid: str) -> None:
        if self.inflight.pop(uid, None) is not None or self.written.pop(uid, None) is not None:
            self._changed()

    def _end_inflight(self, uid: str) -> None:
        if self.inflight.pop(uid, None) is not None:
            self._changed()

    def _wrote(self, claim: ResourceClaim) -> None:
        """After a successful write: the written claim stands until the watch shows it."""
        self.inflight.pop(claim.uid, None)
        watched = self.watched.get((claim.namespace, claim.name))
        if watched is None or not rv_at_least(watched.resource_version, claim.resource_version):
            self.written[claim.uid] = claim
        self._changed()

    def reserved_for(self, claim: ResourceClaim, pod: PodInfo) -> bool:
        return any(c.uid == pod.uid for c in claim.reserved_for)

    # -- a copy for another thread ----------------------------------------------------------

    def frozen(self) -> FrozenDra:
        """This view as it is now, copied for a reader on another thread (`explain`'s
        search). Call it where the view is fed (the event loop), between two changes. The
        reads above loop over the live dicts and cache what they derive under the version
        they read after the loop: run from another thread, a change during the loop would
        be cached under the new version (a claim missing from the scheduler's next
        allocated_claims: a device allocated twice). The copy has dicts of its own (the
        objects are frozen and shared) and caches of its own."""
        return FrozenDra(self)


class FrozenDra(DraView):
    """A DraView copied at one instant (DraView.frozen): nothing feeds it, so it never
    changes, and it refuses every write."""

    def __init__(self, source: DraView) -> None:
        super().__init__()
        self.classes = dict(source.classes)
        self._slices = dict(source._slices)
        self._by_node = {node: dict(slices) for node, slices in source._by_node.items()}
        self._unbound = dict(source._unbound)
        self.watched = dict(source.watched)
        self.inflight = dict(source.inflight)
        self.written = dict(source.written)
        self._version = source._version
        self._slices_version = source._slices_version

    def assume(self, claim: ResourceClaim) -> None:
        raise RuntimeError("a frozen copy of the DRA view is read-only")

    def forget(self, uid: str) -> None:
        raise RuntimeError("a frozen copy of the DRA view is read-only")

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        return None, write_failure("a frozen copy of the DRA view never writes")

    async def reserve_for(
        self, claim: ResourceClaim, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        return None, write_failure("a frozen copy of the DRA view never writes")

    async def unreserve(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        return write_failure("a frozen copy of the DRA view never writes")

    async def deallocate(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        return write_failure("a frozen copy of the DRA view never writes")


class NoDra:
    """A cluster without DRA: the simulator by default, and the daemon when no profile uses
    DynamicResources (then nothing is watched)."""

    version = 0

    def device_class(self, name: str) -> DeviceClass | None:
        return None

    def slices(self) -> tuple[ResourceSlice, ...]:
        return ()

    def pools(self) -> Mapping[PoolKey, tuple[ResourceSlice, ...]]:
        return {}

    def slices_for_node(self, node: str) -> tuple[ResourceSlice, ...]:
        return ()

    def claim(self, namespace: str, name: str) -> ResourceClaim | None:
        return None

    def allocated_claims(self) -> tuple[ResourceClaim, ...]:
        return ()

    def allocating(self, uid: str) -> bool:
        return False

    def assume(self, claim: ResourceClaim) -> None:
        return None

    def forget(self, uid: str) -> None:
        return None

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        return None, write_failure("no Dynamic Resource Allocation in this cluster")

    async def reserve_for(
        self, claim: ResourceClaim, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        return None, write_failure("no Dynamic Resource Allocation in this cluster")

    async def unreserve(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        return Status()

    async def settled(self, uids: Collection[str], timeout: float) -> bool:  # noqa: ASYNC109
        return True

    async def deallocate(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        return write_failure("no Dynamic Resource Allocation in this cluster")


NO_DRA = NoDra()


class MemoryDra(DraView):
    """DRA in memory: the simulator's and the unit tests' cluster. Objects are put in as
    the watch would put them; a write checks what a conditional write to the API server
    would (and what bindClaim checks after a conflict), then applies at once with a new
    resourceVersion, as if the watch had shown it."""

    def __init__(self, now: Callable[[], str] = now_rfc3339) -> None:
        super().__init__()
        self.now = now  # allocationTimestamp (the simulator passes its virtual time)
        self._rv = itertools.count(1_000_000)
        self.writes: list[tuple[str, str]] = []  # (verb, claim key), for tests

    def _next_rv(self) -> str:
        return str(next(self._rv))

    def _current(self, claim: ResourceClaim) -> ResourceClaim | None:
        return self.watched.get((claim.namespace, claim.name))

    def _store(self, claim: ResourceClaim, verb: str) -> ResourceClaim:
        written = dataclasses.replace(claim, resource_version=self._next_rv())
        self.writes.append((verb, written.key))
        self.put_claim(written)
        return written

    async def allocate(
        self, claim: ResourceClaim, allocation: AllocationResult, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        try:
            # bindClaim re-reads the claim after a conflict and retries on that copy, so a
            # change meanwhile fails only if it was deleted or allocated elsewhere.
            current = self._current(claim)
            why = refusal(current, claim, allocating=True)
            if why or current is None:
                return None, write_failure(why, 409)
            if FINALIZER not in current.finalizers:
                current = self._store(
                    dataclasses.replace(current, finalizers=(*current.finalizers, FINALIZER)),
                    "finalizer",
                )
            reserved = current.reserved_for
            if not self.reserved_for(current, pod):
                reserved = (*reserved, pod_consumer(pod.name, pod.uid))
            written = self._store(
                dataclasses.replace(
                    current, allocation=stamped(allocation, self.now), reserved_for=reserved
                ),
                "allocate",
            )
            return written, Status()
        finally:
            self._end_inflight(claim.uid)

    async def reserve_for(
        self, claim: ResourceClaim, pod: PodInfo
    ) -> tuple[ResourceClaim | None, Status]:
        current = self._current(claim)
        why = refusal(current, claim, allocating=False)
        if why or current is None:
            return None, write_failure(why, 409)
        if self.reserved_for(current, pod):
            return current, Status()
        written = self._store(
            dataclasses.replace(
                current, reserved_for=(*current.reserved_for, pod_consumer(pod.name, pod.uid))
            ),
            "reserve",
        )
        return written, Status()

    async def unreserve(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        self._end_inflight(claim.uid)
        current = self._current(claim)
        if current is None or current.uid != claim.uid:
            return Status()
        if current.allocation is not None and self.reserved_for(current, pod):
            rest = tuple(c for c in current.reserved_for if c.uid != pod.uid)
            self._store(dataclasses.replace(current, reserved_for=rest), "unreserve")
        return Status()

    async def deallocate(self, claim: ResourceClaim, pod: PodInfo) -> Status:
        current = self._current(claim)
        if current is None or current.uid != claim.uid:
            return write_failure(f"claim {claim.key} got deleted in the meantime", 404)
        if current.resource_version != claim.resource_version:
            return write_failure(conflict(claim), 409)
        others = [c for c in current.reserved_for if c.uid != pod.uid]
        if others:
            return write_failure(f"claim {claim.key} is in use by {others[0].name}", 409)
        self._store(dataclasses.replace(current, allocation=None, reserved_for=()), "deallocate")
        return Status()

    def pod_gone(self, uid: str) -> None:
        """A pod was deleted or finished: what kube-controller-manager's resourceclaim
        controller then does (syncClaim): the pod leaves every reservedFor, and a claim no
        longer reserved by anyone that carries our finalizer is deallocated and loses it."""
        for current in list(self.watched.values()):
            if not any(c.uid == uid for c in current.reserved_for):
                continue
            rest = tuple(c for c in current.reserved_for if c.uid != uid)
            if rest or FINALIZER not in current.finalizers:
                self._store(dataclasses.replace(current, reserved_for=rest), "unreserve")
                continue
            self._store(
                dataclasses.replace(
                    current,
                    reserved_for=(),
                    allocation=None,
                    finalizers=tuple(f for f in current.finalizers if f != FINALIZER),
                ),
                "deallocate",
            )
