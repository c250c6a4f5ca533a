"""activeQ: the pods ready to be scheduled, ordered by the profile's QueueSort.

The QueueSort plugin speaks `less(a, b)`, not a key, so heap entries compare through it;
an insertion counter breaks ties so equal pods leave in arrival order. Removal is lazy (an
entry is marked dead and skipped at pop) because a pod deleted or updated in the middle of
the heap is common and re-heapifying per event would cost O(n).

**Fair across tenants** (when the QueueSort plugin is a `TenantFairSort`): one heap per
tenant, each ordered by `less`. A tenant's share changes every time one of its pods is
placed or leaves, so it cannot be part of a heap key; it is read at pop time instead. A pop
looks at the tenants' heads only: the highest priority first (a tenant's share never puts
a low-priority pod before a high-priority one), then the lowest current share, then
`less`. Cost per pop: O(tenants with queued pods) plus one heap pop. Once a gang member
popped, its siblings at the head of its tenant's heap pop next, before any other tenant
is considered: placing the first member raises its tenant's share, and letting another
tenant in between would split the gang's attempts.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from gpusched.core.queue.info import QueuedPodInfo
from gpusched.framework.interfaces import TenantFairSort
from gpusched.model.pod import PodInfo

Less = Callable[[PodInfo, PodInfo], bool]


class _Entry:
    __slots__ = ("alive", "info", "less", "seq", "tenant")

    def __init__(self, info: QueuedPodInfo, seq: int, less: Less, tenant: str) -> None:
        self.info = info
        self.seq = seq
        self.less = less
        self.tenant = tenant
        self.alive = True

    def __lt__(self, other: _Entry) -> bool:
        if self.less(self.info.pod, other.info.pod):
            return True
        if self.less(other.info.pod, self.info.pod):
            return False
        return self.seq < other.seq


class ActiveQueue:
    def __init__(self, less: Less, fair: TenantFairSort | None = None) -> None:
        self._less = less
        self._fair = fair
        # tenant -> its heap; one heap under "" without fairness. Empty heaps are dropped,
        # so a pop visits only tenants with something queued.
        self._heaps: dict[str, list[_Entry]] = {}
        self._entries = 0  # live + dead entries over all heaps (compaction)
        self._by_uid: dict[str, _Entry] = {}
        self._seq = itertools.count()
        # (tenant, gang name) of the last pop when it was a gang member: its siblings first.
        self._gang: tuple[str, str] | None = None

    def push(self, info: QueuedPodInfo) -> None:
        old = self._by_uid.get(info.uid)
        if old is not None:
            old.alive = False
        tenant = self._fair.tenant_of(info.pod) if self._fair is not None else ""
        entry = _Entry(info, next(self._seq), self._less, tenant)
        self._by_uid[info.uid] = entry
        heapq.heappush(self._heaps.setdefault(tenant, []), entry)
        self._entries += 1

    def pop(self) -> QueuedPodInfo | None:
        if self._fair is None:
            return self._take("") if self._head("") is not None else None
        if self._gang is not None:
            tenant, gang = self._gang
            head = self._head(tenant)
            sibling = head.info.pod.gang if head is not None else None
            if sibling is not None and sibling.name == gang:
                return self._take(tenant)
        heads = [(t, e) for t in list(self._heaps) if (e := self._head(t)) is not None]
        if not heads:
            return None
        if len(heads) > 1:
            top = max(e.info.pod.priority for _, e in heads)
            heads = [(t, e) for t, e in heads if e.info.pod.priority == top]
        if len(heads) > 1:
            shares = self._fair.shares([t for t, _ in heads])
            best_t, best_e = heads[0]
            for t, e in heads[1:]:
                s, b = shares[t], shares[best_t]
                if s < b or (s == b and e < best_e):
                    best_t, best_e = t, e
            return self._take(best_t)
        return self._take(heads[0][0])

    def _head(self, tenant: str) -> _Entry | None:
        """The tenant's first live entry, dropping dead ones above it (and the heap when it
        empties)."""
        heap = self._heaps.get(tenant)
        if heap is None:
            return None
        while heap and not heap[0].alive:
            heapq.heappop(heap)
            self._entries -= 1
        if not heap:
            del self._heaps[tenant]
            return None
        return heap[0]

    def _take(self, tenant: str) -> QueuedPodInfo:
        heap = self._heaps[tenant]
        entry = heapq.heappop(heap)
        self._entries -= 1
        if not heap:
            del self._heaps[tenant]
        del self._by_uid[entry.info.uid]
        gang = entry.info.pod.gang
        self._gang = (tenant, gang.name) if gang is not None else None
        return entry.info

    def remove(self, uid: str) -> QueuedPodInfo | None:
        entry = self._by_uid.pop(uid, None)
        if entry is None:
            return None
        entry.alive = False
        self._compact()
        return entry.info

    def get(self, uid: str) -> QueuedPodInfo | None:
        entry = self._by_uid.get(uid)
        return entry.info if entry is not None else None

    def _compact(self) -> None:
        # Dead entries only cost memory; rebuild once they dominate the heaps.
        if self._entries > 64 and self._entries > 2 * len(self._by_uid):
            heaps: dict[str, list[_Entry]] = {}
            for e in self._by_uid.values():
                heaps.setdefault(e.tenant, []).append(e)
            for heap in heaps.values():
                heapq.heapify(heap)
            self._heaps = heaps
            self._entries = len(self._by_uid)

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: str) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return (e.info for e in self._by_uid.values())
