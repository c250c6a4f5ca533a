"""activeQ: the pods ready to be scheduled, a heap ordered by the profile's QueueSort.

The QueueSort plugin speaks `less(a, b)`, not a key, so heap entries compare through it;
an insertion counter breaks ties so equal pods leave in arrival order. Removal is lazy (an
entry is marked dead and skipped at pop) because a pod deleted or updated in the middle of
the heap is common and re-heapifying per event would cost O(n).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from gpusched.core.queue.info import QueuedPodInfo
from gpusched.model.pod import PodInfo

Less = Callable[[PodInfo, PodInfo], bool]


class _Entry:
    __slots__ = ("alive", "info", "less", "seq")

    def __init__(self, info: QueuedPodInfo, seq: int, less: Less) -> None:
        self.info = info
        self.seq = seq
        self.less = less
        self.alive = True

    def __lt__(self, other: _Entry) -> bool:
        if self.less(self.info.pod, other.info.pod):
            return True
        if self.less(other.info.pod, self.info.pod):
            return False
        return self.seq < other.seq


class ActiveQueue:
    def __init__(self, less: Less) -> None:
        self._less = less
        self._heap: list[_Entry] = []
        self._by_uid: dict[str, _Entry] = {}
        self._seq = itertools.count()

    def push(self, info: QueuedPodInfo) -> None:
        old = self._by_uid.get(info.uid)
        if old is not None:
            old.alive = False
        entry = _Entry(info, next(self._seq), self._less)
        self._by_uid[info.uid] = entry
        heapq.heappush(self._heap, entry)

    def pop(self) -> QueuedPodInfo | None:
        while self._heap:
            entry = heapq.heappop(self._heap)
            if entry.alive:
                del self._by_uid[entry.info.uid]
                return entry.info
        return None

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
        # Dead entries only cost memory; rebuild once they dominate the heap.
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._by_uid):
            self._heap = [e for e in self._heap if e.alive]
            heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: str) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return (e.info for e in self._by_uid.values())
