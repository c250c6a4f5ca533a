"""SchedulingQueue: activeQ + backoffQ + unschedulable pods, keyed by pod uid.

Mirrors kube-scheduler's backend/queue/scheduling_queue.go, simplified:

* a pod is in at most one place: activeQ, backoffQ, unschedulable, or in flight (popped and
  not yet finished); the watch may deliver it again at any time, which only updates it;
* `pop` hands out the activeQ head and counts the attempt;
* a failed attempt comes back through `requeue`: errors go to backoffQ, unschedulable pods
  to the unschedulable set unless the cluster changed while they were in flight (then a
  retry may succeed, so backoffQ, as kube's moveRequestCycle does);
* `move_all` on a cluster event moves unschedulable pods whose rejection the event may
  resolve (the requeue hint; for a node update, hints.py: only pods rejected by a plugin
  that reads what changed) to activeQ, or to backoffQ while their backoff runs; the
  unschedulable pods are grouped by the plugins that rejected them, so an event costs one
  hint per group plus the pods it moves, not a pass over the backlog;
* `flush` moves finished backoffs to activeQ, and retries pods left unschedulable longer
  than podMaxInUnschedulablePodsDurationSeconds even without an event;
* every way into activeQ runs the PreEnqueue plugins first (`pre_enqueue`, the pod's
  profile's); a pod one of them refuses (spec.schedulingGates) waits in the gated set,
  untouched by events and flushes, until an update of the pod passes them (kube's
  moveToActiveQ and its gated pods).

Pure logic on an injected clock: the daemon drives `flush` from a timer, the unit tests
from a fake clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from gpusched.core.queue.active import ActiveQueue, Less
from gpusched.core.queue.backoff import BackoffQueue, backoff_duration
from gpusched.core.queue.hints import (
    POD_EVENTS,
    ClusterEvent,
    NodeChange,
    may_help,
    namespace_scoped,
    tenant_scoped,
)
from gpusched.core.queue.info import QueuedPodInfo
from gpusched.core.queue.unschedulable import UnschedulablePods
from gpusched.framework.interfaces import TenantFairSort
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
INFLIGHT = "inflight"
GATED = "gated"

PreEnqueue = Callable[[PodInfo], Status]
"""The PreEnqueue plugins of a pod's profile, run as one (Framework.run_pre_enqueue)."""

# How often the leftover unschedulable pods are checked (kube-scheduler: every 30 s).
LEFTOVER_CHECK_SECONDS = 30.0


class SchedulingQueue:
    def __init__(
        self,
        less: Less,
        clock: Callable[[], float],
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        pre_enqueue: PreEnqueue | None = None,
        on_gated: Callable[[PodInfo, Status], None] | None = None,
        fair: TenantFairSort | None = None,
    ) -> None:
        """`pre_enqueue`: None when no profile has a PreEnqueue plugin (nothing is gated).
        `on_gated(pod, status)`: told once each time a pod enters the gated set.
        `fair`: the QueueSort plugin when it orders tenants fairly (active.py)."""
        self.clock = clock
        self.pre_enqueue = pre_enqueue
        self.on_gated = on_gated
        self.gated: dict[str, QueuedPodInfo] = {}
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self.active = ActiveQueue(less, fair)
        self.backoff = BackoffQueue()
        self.unschedulable = UnschedulablePods()
        self.inflight: dict[str, QueuedPodInfo] = {}
        # A namespace's tenant (the daemon sets its tenancy port's): pods ElasticQuota
        # refused move on a pod event of their own tenant only.
        self.tenant_of: Callable[[str], str] = _same
        self._closed = False
        self._wakeup: asyncio.Event | None = None
        # When the next leftover check is due. One stored instant, compared the same way by
        # flush and next_wakeup: recomputing "last + interval" in one and "now - last" in the
        # other disagrees by a rounding error, and a virtual clock stopped at next_wakeup
        # would then never see the check run.
        self._next_leftover = clock() + self._leftover_interval

    # -- the watch's side -------------------------------------------------------------------

    def add(self, pod: PodInfo) -> None:
        """An unbound pod of ours, new or updated."""
        uid = pod.uid
        now = self.clock()
        if (info := self.inflight.get(uid)) is not None:
            # The attempt finishes with the old one; a requeue takes this, and does not park
            # it as unschedulable (kube's in-flight events include the pod's own update).
            if info.pod != pod:
                info.updated_in_flight = True
            info.pod = pod
            return
        if (info := self.active.get(uid)) is not None:
            info.pod = pod
            self.active.push(info)  # re-sort: priority may have changed
            return
        if (info := self.backoff.get(uid)) is not None:
            info.pod = pod
            return
        if (info := self.gated.get(uid)) is not None:
            info.pod = pod
            if self._admitted(pod):
                # The last gate went: straight to activeQ, as kube does for a gated pod.
                del self.gated[uid]
                self._to_active(info, now)
            return
        if (info := self.unschedulable.get(uid)) is not None:
            if info.pod == pod:
                return  # a status-only change (our own condition patch) changes nothing
            self.unschedulable.remove(uid)
            info.pod = pod
            # The pod itself changed (e.g. a fixed annotation): retry, honouring backoff.
            self._requeue_moved(info, now)
            return
        info = QueuedPodInfo(pod, added=now, timestamp=now)
        self._to_active(info, now)

    def delete(self, uid: str) -> None:
        """The pod is gone, or bound by someone: never schedule it again."""
        if (info := self.inflight.get(uid)) is not None:
            info.deleted = True
            return
        self.active.remove(uid)
        self.backoff.remove(uid)
        self.unschedulable.remove(uid)
        self.gated.pop(uid, None)

    def move_all(
        self,
        event: ClusterEvent,
        *,
        exclude: str = "",
        exclude_gang: str = "",
        change: NodeChange = NodeChange.ANY,
        namespace: str | None = None,
    ) -> int:
        """Move unschedulable pods the event may help; returns how many moved. `exclude`: a
        pod the event is about (its own placement was just undone) that must stay put;
        `exclude_gang`: so must every member of that gang (the gang was rejected as a whole:
        the cards its own members free must not send it straight back, nor count as an event
        its members in flight missed).
        `change`: what a NODE_UPDATE changed; an update that changed nothing a plugin reads
        is no event at all. `namespace`: the namespace of a pod event's pod; pods whose
        rejection only their own namespace's pods can lift (PodTopologySpread) move only
        for pods of theirs."""
        if event is ClusterEvent.NODE_UPDATE and not change:
            return 0
        # Pods in flight missed it: their attempt's verdict may be stale (see requeue).
        for info in self.inflight.values():
            if not exclude_gang or _gang(info) != exclude_gang:
                info.missed.add((event, change))
        now = self.clock()
        moved = 0
        scoped_event = namespace is not None and event in POD_EVENTS
        for rejected_by in self.unschedulable.groups():
            if not may_help(rejected_by, event, change):
                continue
            scoped = scoped_event and namespace_scoped(rejected_by, event)
            tenant = (
                self.tenant_of(namespace)
                if scoped_event and namespace is not None and tenant_scoped(rejected_by, event)
                else None
            )
            for info in self.unschedulable.group(rejected_by):
                if info.uid == exclude or (scoped and info.pod.namespace != namespace):
                    continue
                if tenant is not None and self.tenant_of(info.pod.namespace) != tenant:
                    continue
                if exclude_gang and _gang(info) == exclude_gang:
                    continue
                self.unschedulable.remove(info.uid)
                self._requeue_moved(info, now)
                moved += 1
        return moved

    def move(self, uids: Iterable[str], event: ClusterEvent) -> int:
        """`move_all` for an event that concerns these pods only (a claim they use was
        created or its status changed: kube's isSchedulableAfterClaimChange answers Queue
        for the claim's users alone): those unschedulable and helped by it move, honouring
        backoff; those in flight note it. Returns how many moved."""
        now = self.clock()
        moved = 0
        for uid in uids:
            if (flying := self.inflight.get(uid)) is not None:
                flying.missed.add((event, NodeChange.ANY))
                continue
            info = self.unschedulable.get(uid)
            if info is None or not may_help(info.rejected_by, event):
                continue
            self.unschedulable.remove(uid)
            self._requeue_moved(info, now)
            moved += 1
        return moved

    def activate(self, uids: Iterable[str]) -> int:
        """Move these pods from the unschedulable set or backoffQ to activeQ now, ignoring
        their backoff (kube-scheduler's Activate, fed by a plugin's PodsToActivate: a gang
        whose first member started placing pulls its siblings in). Returns how many moved;
        pods elsewhere (in flight, gated, active, unknown) are left alone."""
        now = self.clock()
        moved = 0
        for uid in uids:
            info = self.unschedulable.get(uid)
            if info is not None:
                self.unschedulable.remove(uid)
            elif (info := self.backoff.get(uid)) is not None:
                self.backoff.remove(uid)
            else:
                continue
            self._to_active(info, now)
            moved += 1
        return moved

    def recheck_gated(self, uids: Iterable[str]) -> int:
        """Run PreEnqueue again for these gated pods: something other than the pod itself
        changed what a PreEnqueue plugin decides (a gang's member arrived, its PodGroup
        appeared). Returns how many entered activeQ."""
        if self.pre_enqueue is None:
            return 0
        now = self.clock()
        moved = 0
        for uid in uids:
            info = self.gated.get(uid)
            if info is not None and self._admitted(info.pod):
                del self.gated[uid]
                self._to_active(info, now)
                moved += 1
        return moved

    # -- the scheduling loop's side ---------------------------------------------------------

    def pop_nowait(self) -> QueuedPodInfo | None:
        info = self.active.pop()
        if info is None:
            return None
        info.attempts += 1
        info.where = INFLIGHT
        info.missed = set()
        info.updated_in_flight = False
        self.inflight[info.uid] = info
        return info

    async def pop(self) -> QueuedPodInfo | None:
        """The next pod to schedule; waits while activeQ is empty; None once closed."""
        while not self._closed:
            info = self.pop_nowait()
            if info is not None:
                return info
            if self._wakeup is None:
                self._wakeup = asyncio.Event()
            self._wakeup.clear()
            await self._wakeup.wait()
        return None

    def done(self, uid: str) -> None:
        """The attempt ended for good (bound, or the pod is gone)."""
        self.inflight.pop(uid, None)

    def requeue(
        self, info: QueuedPodInfo, *, unschedulable: bool, rejected_by: Iterable[str] = ()
    ) -> str:
        """Return a failed in-flight pod; says where it went ("" if it was dropped)."""
        self.inflight.pop(info.uid, None)
        if info.deleted:
            return ""
        now = self.clock()
        info.timestamp = now
        info.rejected_by = frozenset(rejected_by)
        info.backoff_until = now + backoff_duration(
            info.attempts, self.initial_backoff, self.max_backoff
        )
        # Stale if an event during the attempt may have helped it (kube's in-flight events
        # checked with the requeue hints), or the pod itself changed.
        stale = info.updated_in_flight or any(
            may_help(info.rejected_by, event, change) for event, change in info.missed
        )
        info.missed = set()
        info.updated_in_flight = False
        if unschedulable and not stale:
            info.where = UNSCHEDULABLE
            self.unschedulable.add(info)
            return UNSCHEDULABLE
        info.where = BACKOFF
        self.backoff.push(info)
        return BACKOFF

    def flush(self) -> int:
        """Finished backoffs to activeQ; pods unschedulable for too long retried."""
        now = self.clock()
        moved = 0
        for info in self.backoff.pop_expired(now):
            self._to_active(info, now)
            moved += 1
        if now >= self._next_leftover:
            self._next_leftover = now + self._leftover_interval
            for info in self.unschedulable.parked_until(self.max_unschedulable, now):
                self.unschedulable.remove(info.uid)
                self._requeue_moved(info, now)
                moved += 1
        return moved

    @property
    def _leftover_interval(self) -> float:
        return min(LEFTOVER_CHECK_SECONDS, self.max_unschedulable)

    def next_wakeup(self) -> float | None:
        """When `flush` next has something to do (None: nothing pending): a backoff ends, or
        a pod has been unschedulable for max_unschedulable at a leftover check. The
        simulator stops its virtual clock there, where the daemon's ticker would act."""
        times = []
        if (backoff := self.backoff.next_expiry()) is not None:
            times.append(backoff)
        if (oldest := self.unschedulable.oldest()) is not None:
            times.append(max(oldest.timestamp + self.max_unschedulable, self._next_leftover))
        return min(times) if times else None

    def close(self) -> None:
        self._closed = True
        if self._wakeup is not None:
            self._wakeup.set()

    # -- views ------------------------------------------------------------------------------

    def where(self, uid: str) -> str:
        if uid in self.inflight:
            return INFLIGHT
        if uid in self.active:
            return ACTIVE
        if uid in self.backoff:
            return BACKOFF
        if uid in self.unschedulable:
            return UNSCHEDULABLE
        if uid in self.gated:
            return GATED
        return ""

    def pending(self) -> dict[str, int]:
        """Pods per sub-queue, kube-scheduler's scheduler_pending_pods{queue} labels."""
        return {
            ACTIVE: len(self.active),
            BACKOFF: len(self.backoff),
            UNSCHEDULABLE: len(self.unschedulable),
            INFLIGHT: len(self.inflight),
            GATED: len(self.gated),
        }

    def __len__(self) -> int:
        return (
            len(self.active)
            + len(self.backoff)
            + len(self.unschedulable)
            + len(self.inflight)
            + len(self.gated)
        )

    # -- internals --------------------------------------------------------------------------

    def _requeue_moved(self, info: QueuedPodInfo, now: float) -> None:
        if info.backoff_until > now:
            info.where = BACKOFF
            info.timestamp = now
            self.backoff.push(info)
        else:
            self._to_active(info, now)

    def _admitted(self, pod: PodInfo) -> bool:
        return self.pre_enqueue is None or self.pre_enqueue(pod).is_success()

    def _to_active(self, info: QueuedPodInfo, now: float) -> None:
        if self.pre_enqueue is not None:
            st = self.pre_enqueue(info.pod)
            if not st.is_success():
                info.where = GATED
                info.timestamp = now
                self.gated[info.uid] = info
                if self.on_gated is not None:
                    self.on_gated(info.pod, st)
                return
        info.where = ACTIVE
        info.timestamp = now
        self.active.push(info)
        if self._wakeup is not None:
            self._wakeup.set()


def _gang(info: QueuedPodInfo) -> str | None:
    gang = info.pod.gang
    return gang.name if gang is not None else None


def _same(namespace: str) -> str:
    """The default tenant_of: every namespace its own tenant."""
    return namespace
