"""backoffQ: pods that failed recently, waiting out an exponential backoff.

The backoff doubles per attempt from podInitialBackoffSeconds to podMaxBackoffSeconds, as
kube-scheduler's calculateBackoffDuration does, so a pod that keeps failing costs at most
one attempt per max-backoff instead of a hot loop.
"""

from __future__ import annotations

import heapq
import itertools

from gpusched.core.queue.info import PodMap, QueuedPodInfo


def backoff_duration(attempts: int, initial: float, maximum: float) -> float:
    """initial * 2**(attempts-1), capped at maximum; 0 attempts means no backoff."""
    if attempts <= 0:
        return 0.0
    # Cap the exponent: 2**1000 overflows a float long before the cap would apply.
    return min(maximum, initial * 2.0 ** min(attempts - 1, 60))


class BackoffQueue(PodMap):
    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()

    def push(self, info: QueuedPodInfo) -> None:
        self._by_uid[info.uid] = info
        heapq.heappush(self._heap, (info.backoff_until, next(self._seq), info.uid))

    def pop_expired(self, now: float) -> list[QueuedPodInfo]:
        """Pods whose backoff has passed, earliest first."""
        out: list[QueuedPodInfo] = []
        while self._heap and self._heap[0][0] <= now:
            until, _, uid = heapq.heappop(self._heap)
            info = self._by_uid.get(uid)
            # A stale heap entry: the pod was removed, or pushed again with a new deadline.
            if info is None or info.backoff_until != until:
                continue
            del self._by_uid[uid]
            out.append(info)
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._by_uid):
            self._heap = [e for e in self._heap if self._by_uid.get(e[2]) is not None]
            heapq.heapify(self._heap)
        return out

    def next_expiry(self) -> float | None:
        while self._heap:
            until, _, uid = self._heap[0]
            info = self._by_uid.get(uid)
            if info is not None and info.backoff_until == until:
                return until
            heapq.heappop(self._heap)
        return None
