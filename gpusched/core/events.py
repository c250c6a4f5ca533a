"""What a change in the cluster does to the cache, the queue and pods waiting at Permit.

The daemon's watches call these handlers; the simulator's in-memory cluster calls the same
ones when it binds or deletes a pod, so both see a bind, a deletion or a node change the
same way (kube-scheduler's eventhandlers.go).

A bound pod whose GPU assignment the cache does not trust (invalid, or changed after
binding: core/cache/cache.py) is charged conservatively and reported through
`on_pod_warning(pod, message)`; the daemon turns that into a Warning Event on the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.gangs import GangIndex
from gpusched.core.queue import ClusterEvent, SchedulingQueue, node_change
from gpusched.core.runtime.waiting import WaitingPods
from gpusched.dra.cards import with_dra_cards
from gpusched.framework.dra import CLAIMS, NO_DRA, SLICES, DraChange, DraPort
from gpusched.model.node import NodeModel
from gpusched.model.pod import GangAPI, PodInfo


class ClusterEvents:
    def __init__(
        self,
        cache: ClusterCache,
        queue: SchedulingQueue,
        waiting: Collection[WaitingPods],
        profiles: Collection[str],
        on_pod_warning: Callable[[PodInfo, str], None] | None = None,
        gangs: GangIndex | None = None,
        dra: DraPort = NO_DRA,
    ) -> None:
        self.cache = cache
        # A node without cards of its own gets them from its ResourceSlices (dra/cards.py).
        self.dra = dra
        # Every pod of every gang of ours, pending or placed (core/gangs.py).
        self.gangs = gangs if gangs is not None else GangIndex()
        if on_pod_warning is not None:
            # Called synchronously, after the pod is charged, each time the cache charges a
            # pod whose assignment it does not trust (its first sight, its node's arrival, a
            # resize, another edit): the receiver deduplicates.
            cache.pod_warning = on_pod_warning
        self.queue = queue
        self.waiting = tuple(waiting)
        self.profiles = frozenset(profiles)
        self.nodes: dict[str, NodeModel] = {}
        # Pending pods of ours by the ResourceClaims they use ((namespace, claim) -> uids),
        # and the reverse: a claim's change wakes its users only (dra_changed).
        self.claim_users: dict[tuple[str, str], set[str]] = {}
        self._claims_of: dict[str, tuple[tuple[str, str], ...]] = {}

    # -- pods -------------------------------------------------------------------------------

    def pod_changed(self, pod: PodInfo) -> None:
        """A pod added or updated (the watch's ADDED/MODIFIED)."""
        uid = pod.uid
        self._index_claims(
            pod, pod.scheduler_name in self.profiles and not pod.node_name and not pod.deleting
        )
        ours = pod.scheduler_name in self.profiles or self.gangs.gang_of(uid) is not None
        if ours and self.gangs.update(pod) and pod.gang is not None and not pod.node_name:
            # A new member: siblings PreEnqueue held back may now be enough.
            self._recheck_gang(pod.gang.name)
        if pod.node_name:
            # Bound, by us or any other scheduler: its usage counts, it is not ours to place.
            self.queue.delete(uid)
            before = self.cache.get(uid)
            # What the pod was before this version (None: new to the cache): an assumed pod
            # seen bound is a pod add, as kube-scheduler's informer reports it.
            old = None if before is None or before.assumed else before.pod
            self.cache.add_or_update_pod(pod)
            if pod.terminal:
                # Finished: the cache dropped it, which frees what a deletion frees (the
                # pod watch's list excludes terminal pods, so no DELETED follows).
                if before is not None and before.alloc is not None:
                    self.queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE, namespace=pod.namespace)
                return
            if old is None:
                # A new bound pod, or ours confirmed: an affinity or a spread may now hold.
                self.queue.move_all(ClusterEvent.ASSIGNED_POD_ADD, namespace=pod.namespace)
            elif old.labels != pod.labels or old.deleting != pod.deleting:
                self.queue.move_all(ClusterEvent.ASSIGNED_POD_UPDATE, namespace=pod.namespace)
            return
        if pod.scheduler_name not in self.profiles:
            return
        if pod.deleting:
            self.queue.delete(uid)
            return
        if self.cache.get(uid) is not None:
            # Assumed: its binding is in flight (this is e.g. a label a user changed) or
            # done and the watch has not shown the binding yet. The queue still learns the
            # new version if the pod is in flight: a failed binding requeues the latest
            # pod, as kube-scheduler's handleSchedulingFailure does.
            if uid in self.queue.inflight:
                self.queue.add(pod)
            return
        self.queue.add(pod)

    def pod_deleted(self, pod: PodInfo) -> None:
        uid = pod.uid
        self._index_claims(pod, False)
        if pod.terminal:
            # A deleted pod that had finished counts for its gang as succeeded or failed
            # (PodGroup status), not as a pod that vanished. (The daemon's watch, which
            # selects unfinished pods, gets a DELETED event carrying the pod as it was
            # when one finishes: the gang report's `scheduled` latch covers that case.)
            self.gangs.update(pod)
        self.gangs.remove(uid)
        entry = self.cache.get(uid)
        self.cache.remove_pod(uid)
        self.queue.delete(uid)
        for waiting in self.waiting:
            wp = waiting.get(uid)
            if wp is not None:
                wp.reject("", f"pod {pod.key} was deleted")
        if entry is not None and entry.alloc is not None:
            self.queue.move_all(ClusterEvent.ASSIGNED_POD_DELETE, namespace=pod.namespace)

    # -- Dynamic Resource Allocation --------------------------------------------------------

    def _index_claims(self, pod: PodInfo, pending: bool) -> None:
        keys = tuple((pod.namespace, c.claim) for c in pod.pod_claims if c.claim) if pending else ()
        old = self._claims_of.pop(pod.uid, ())
        for key in old:
            users = self.claim_users.get(key)
            if users is not None:
                users.discard(pod.uid)
                if not users:
                    del self.claim_users[key]
        if keys:
            self._claims_of[pod.uid] = keys
            for key in keys:
                self.claim_users.setdefault(key, set()).add(pod.uid)

    def dra_changed(self, change: DraChange) -> None:
        """A ResourceClaim, ResourceSlice or DeviceClass added or updated (kube/dra.py), as
        kube-scheduler's DynamicResources requeues: a claim deallocated (or an allocated one
        deleted) frees devices for every pod DynamicResources rejected; a claim created or
        whose allocation or reservedFor changed concerns the pods using it only (PreEnqueue
        waits for a claim to exist, so gated users are checked again); a new or changed
        slice or class may help any pod DynamicResources rejected."""
        if change.kind == CLAIMS:
            if change.deallocated:
                self.queue.move_all(ClusterEvent.RESOURCE_CLAIM_CHANGE)
                return
            users = tuple(self.claim_users.get((change.namespace, change.name), ()))
            if users and (change.created or change.status_changed):
                self.queue.recheck_gated(users)
                self.queue.move(users, ClusterEvent.RESOURCE_CLAIM_CHANGE)
            return
        if change.kind == SLICES and change.node in self.nodes:
            # The node's cards may have come, gone or changed with its slices.
            self.node_changed(self.nodes[change.node])
        event = (
            ClusterEvent.RESOURCE_SLICE_CHANGE
            if change.kind == SLICES
            else ClusterEvent.DEVICE_CLASS_CHANGE
        )
        self.queue.move_all(event)

    # -- gangs ------------------------------------------------------------------------------

    def pod_group_changed(self, api: GangAPI, key: str, *, deleted: bool = False) -> None:
        """A PodGroup object of `api` added, updated or deleted: its pending members are
        judged again (PreEnqueue waits for the object and reads its minMember; a rejection
        may have named its policy)."""
        if deleted:
            self.gangs.forget(key)
        members = [
            p.uid for p in self.gangs.members(key) if p.gang is not None and p.gang.api is api
        ]
        if members:
            self.queue.recheck_gated(members)
            self.queue.activate(members)

    def _recheck_gang(self, key: str) -> None:
        self.queue.recheck_gated([p.uid for p in self.gangs.members(key)])

    # -- nodes ------------------------------------------------------------------------------

    def node_changed(self, node: NodeModel) -> None:
        """A node added or updated. ValueError if the cache cannot use it (too many cards);
        its previous row, if any, is then removed: ignored means unused.

        An update wakes only the unschedulable pods whose rejecting plugins read something
        that changed (core/queue/hints.py), so label churn nothing selects on (GPU Feature
        Discovery's timestamp every minute) wakes nobody."""
        node = with_dra_cards(
            node, self.dra.slices_for_node(node.name), self.cache.snapshot.max_cards
        )
        name = node.name
        old = self.nodes.get(name)
        if old == node:
            return  # a heartbeat: nothing the scheduler reads changed
        try:
            self.cache.upsert_node(node)
        except ValueError:
            if old is not None:
                self.node_deleted(name)
            raise
        self.nodes[name] = node
        if old is None:
            self.queue.move_all(ClusterEvent.NODE_ADD)
            return
        snap = self.cache.snapshot
        labels = old.labels != node.labels and snap.label_key(old.labels) != snap.label_key(
            node.labels
        )
        change = node_change(old, node, labels_changed=labels)
        self.queue.move_all(ClusterEvent.NODE_UPDATE, change=change)

    def node_deleted(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.cache.remove_node(name)
        self.queue.move_all(ClusterEvent.NODE_DELETE)
