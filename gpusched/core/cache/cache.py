"""The scheduler's cache: nodes, bound pods and assumed pods, kept in the snapshot columns.

A pod's life in the cache (kube-scheduler's backend/cache/interface.go, simplified):

    +------------------------------------------------+
    |                                Add (watch)     |
    |  Assume          Add (watch)                   v
  Initial ------> Assumed ------------> Added <--> Updated
    |               |   \\                             |
    |               |    \\ Forget                     | Remove
    |               v     -------> Initial            v
    +---------------------------------------------> Deleted

Card accounting for bound pods comes from their gpusched.io/gpu-ids annotation, so a
restarted scheduler recovers the exact per-card state from the API. Pods bound by another
scheduler (no annotation) are placed on cards by the same best-fit rule we use, which is
what a device plugin handing out free cards does in effect; such pods are counted as
`inferred`.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework.interfaces import Allocation, Rows
from gpusched.model import keys
from gpusched.model.node import FULL_CARD_MILLI, NodeModel
from gpusched.model.pod import PodInfo
from gpusched.model.share import share_on_card

_MILLI = re.compile(r"[0-9]{1,4}")  # gpu-milli-assigned: 0-9999, clamped to a card later


@dataclass(slots=True)
class PodEntry:
    pod: PodInfo
    alloc: Allocation | None  # None while its node is unknown to the cache
    # Placed by this scheduler, not yet confirmed by the watch. Never expires: its binding
    # is in flight, of unknown outcome, or done (the cards are in use on the node).
    assumed: bool = False
    inferred: bool = False
    # The node the pod is filed under in `_by_node`: kept apart from `alloc`, which is None
    # while the node is unknown, and from `pod.node_name`, which an assumed pod lacks.
    node: str = ""


@dataclass(slots=True)
class CacheStats:
    over_allocated: int = 0
    inferred: int = 0
    # The latest problems only: a long-running daemon must not grow this without bound.
    warnings: deque[str] = field(default_factory=lambda: deque(maxlen=100))


class ClusterCache:
    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.snapshot = snapshot or Snapshot()
        self.pods: dict[str, PodEntry] = {}
        self._by_node: dict[str, set[str]] = {}
        self._jobs: dict[str, Counter[int]] = {}
        self.stats = CacheStats()

    # -- nodes -----------------------------------------------------------------------------

    def upsert_node(self, node: NodeModel) -> int:
        known = node.name in self.snapshot.rows
        row = self.snapshot.upsert_node(node)
        if not known:
            # Pods the watch delivered before their node: account them now.
            for uid in list(self._by_node.get(node.name, ())):
                entry = self.pods[uid]
                if entry.alloc is None:
                    self._apply(entry, row)
        return row

    def remove_node(self, name: str) -> None:
        row = self.snapshot.row_of(name)
        if row < 0:
            return
        for uid in self._by_node.get(name, ()):
            entry = self.pods[uid]
            if entry.alloc is not None:
                self._job_add(entry.pod, entry.alloc.row, -1)
                entry.alloc = None
        self.snapshot.remove_node(name)

    # -- pods ------------------------------------------------------------------------------

    def assume(self, pod: PodInfo, alloc: Allocation) -> None:
        if pod.uid in self.pods:
            raise ValueError(f"pod {pod.key} is already in the cache")
        entry = PodEntry(pod, None, assumed=True, node=alloc.node)
        self.pods[pod.uid] = entry
        self._by_node.setdefault(alloc.node, set()).add(pod.uid)
        self._take(entry, alloc)

    def forget(self, uid: str) -> PodEntry | None:
        """Drop an assumed pod (its binding failed); a confirmed pod is not touched."""
        entry = self.pods.get(uid)
        if entry is None or not entry.assumed:
            return None
        self._drop(uid)
        return entry

    def add_or_update_pod(self, pod: PodInfo) -> None:
        """A bound pod seen by the watch (also confirms an assumed one)."""
        if not pod.node_name or pod.terminal:
            self.remove_pod(pod.uid)
            return
        entry = self.pods.get(pod.uid)
        if entry is not None:
            same_place = entry.alloc is not None and entry.alloc.node == pod.node_name
            same_cards = entry.alloc is not None and (
                not pod.gpu_ids or tuple(pod.gpu_ids) == entry.alloc.cards
            )
            # An in-place resize (on by default since 1.33) changes the request of a running
            # pod: what is charged must follow, or its deletion later returns the new amount
            # while the old one was taken (the node drifts). Re-charge it then, same cards.
            same_request = entry.pod.request == pod.request
            if same_place and same_cards and same_request:
                entry.pod = pod
                entry.assumed = False
                return
            self._drop(pod.uid)
        entry = PodEntry(pod, None, node=pod.node_name)
        row = self.snapshot.row_of(pod.node_name)
        # All or nothing: the allocation is worked out before anything is inserted, so a
        # failure leaves no entry whose usage is never counted.
        found = self._allocation_of(pod, row) if row >= 0 else None
        self.pods[pod.uid] = entry
        self._by_node.setdefault(pod.node_name, set()).add(pod.uid)
        if found is not None:
            self._charge(entry, *found)

    def remove_pod(self, uid: str) -> None:
        if uid in self.pods:
            self._drop(uid)

    def get(self, uid: str) -> PodEntry | None:
        return self.pods.get(uid)

    def is_assumed(self, uid: str) -> bool:
        e = self.pods.get(uid)
        return e is not None and e.assumed

    # -- views for plugins -----------------------------------------------------------------

    def pods_on_node(self, node: str) -> Iterator[PodInfo]:
        for uid in self._by_node.get(node, ()):
            yield self.pods[uid].pod

    def job_rows(self, job_key: str) -> Rows:
        rows = self._jobs.get(job_key)
        if not rows:
            return np.empty(0, np.intp)
        return np.fromiter((r for r, n in rows.items() if n > 0), np.intp)

    def allocations(self) -> Iterable[PodEntry]:
        return self.pods.values()

    # -- internals -------------------------------------------------------------------------

    def _apply(self, entry: PodEntry, row: int) -> None:
        self._charge(entry, *self._allocation_of(entry.pod, row))

    def _charge(self, entry: PodEntry, alloc: Allocation, inferred: bool) -> None:
        entry.inferred = inferred
        if inferred:
            self.stats.inferred += 1
        self._take(entry, alloc)

    def _take(self, entry: PodEntry, alloc: Allocation) -> None:
        snap = self.snapshot
        req = entry.pod.request
        snap.apply(
            alloc.row, req.cpu_milli, req.memory_bytes, alloc.cards, alloc.milli, alloc.mem_mib
        )
        if alloc.cards and (snap.card_free_milli[alloc.row, list(alloc.cards)] < 0).any():
            # The API is the truth: keep the pod, but say the node is over-committed.
            self.stats.over_allocated += 1
            self.stats.warnings.append(
                f"pod {entry.pod.key} on {alloc.node} cards {list(alloc.cards)}"
                " over-allocates a card"
            )
        entry.alloc = alloc
        self._job_add(entry.pod, alloc.row, 1)

    def _drop(self, uid: str) -> None:
        entry = self.pods.pop(uid)
        node = entry.node
        members = self._by_node.get(node)
        if members is not None:
            members.discard(uid)
            if not members:
                del self._by_node[node]
        if entry.alloc is not None:
            a = entry.alloc
            req = entry.pod.request
            self.snapshot.apply(
                a.row, req.cpu_milli, req.memory_bytes, a.cards, a.milli, a.mem_mib, -1
            )
            self._job_add(entry.pod, a.row, -1)

    def _job_add(self, pod: PodInfo, row: int, delta: int) -> None:
        key = pod.job_key
        if not key:
            return
        counts = self._jobs.setdefault(key, Counter())
        counts[row] += delta
        if counts[row] <= 0:
            del counts[row]
            if not counts:
                del self._jobs[key]

    def _allocation_of(self, pod: PodInfo, row: int) -> tuple[Allocation, bool]:
        """The cards a bound pod holds: from its annotation, else inferred by best fit."""
        snap = self.snapshot
        req = pod.request
        node = snap.names[row]
        n_cards = int(snap.node_card_count[row])
        if req.gpu_cards == 0 and req.gpu_milli == 0 and req.gpu_mem_mib == 0:
            return Allocation(node, row), False
        ids = [i for i in pod.gpu_ids if i < n_cards]
        inferred = False
        want = req.gpu_cards or 1
        if len(ids) != want:
            inferred = True
            free = snap.card_free_milli[row, :n_cards]
            if req.gpu_cards:
                # Intact cards first, then the freest, lowest index on ties.
                order = sorted(range(n_cards), key=lambda c: (-int(free[c]), c))
                ids = order[: req.gpu_cards]
            else:
                need = max(1, req.gpu_milli)
                fitting = [c for c in range(n_cards) if free[c] >= need]
                pool = fitting or list(range(n_cards))
                # No card on the node (unknown to the cache): the pod holds none here.
                ids = (
                    [min(pool, key=lambda c: (int(free[c]) - need if c in fitting else 10**6, c))]
                    if pool
                    else []
                )
        milli: list[int] = []
        mem: list[int] = []
        for c in ids:
            m, mm = share_on_card(req, int(snap.card_total_mem[row, c]))
            if req.gpu_cards == 0:
                assigned = pod.annotations.get(keys.GPU_MILLI_ASSIGNED)
                # ASCII digits only: isdigit() also takes '²', which int() refuses (the
                # pod would be half-inserted, never charged).
                if assigned is not None and _MILLI.fullmatch(str(assigned)):
                    m = int(assigned)
            milli.append(max(0, min(m, FULL_CARD_MILLI)))
            mem.append(max(0, mm))
        return Allocation(node, row, tuple(ids), tuple(milli), tuple(mem)), inferred
