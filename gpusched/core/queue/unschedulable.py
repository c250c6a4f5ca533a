"""The unschedulable pods: they wait for a cluster event that may help them, or for the
periodic flush (podMaxInUnschedulablePodsDurationSeconds) that retries them anyway.

They are also grouped by the plugins that rejected them (`rejected_by`, set before a pod is
parked and never changed while it is), so a cluster event asks its requeue hint once per
group, not once per pod: with a backlog of 20,000 pods a node update that helps none of
them costs a handful of set lookups.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpusched.core.queue.info import PodMap, QueuedPodInfo


class UnschedulablePods(PodMap):
    def __init__(self) -> None:
        super().__init__()
        self._groups: dict[frozenset[str], dict[str, QueuedPodInfo]] = {}

    def add(self, info: QueuedPodInfo) -> None:
        self.remove(info.uid)
        self._by_uid[info.uid] = info
        group = self._groups.get(info.rejected_by)
        if group is None:
            group = self._groups[info.rejected_by] = {}
        group[info.uid] = info

    def remove(self, uid: str) -> QueuedPodInfo | None:
        info = self._by_uid.pop(uid, None)
        if info is not None:
            group = self._groups[info.rejected_by]
            del group[uid]
            if not group:
                del self._groups[info.rejected_by]
        return info

    def groups(self) -> list[frozenset[str]]:
        """The distinct `rejected_by` sets of the parked pods (a copy)."""
        return list(self._groups)

    def group(self, rejected_by: frozenset[str]) -> Iterator[QueuedPodInfo]:
        """The pods parked with exactly these rejecting plugins (a copy: callers move them)."""
        return iter(list(self._groups.get(rejected_by, {}).values()))

    def oldest(self) -> QueuedPodInfo | None:
        """The pod parked longest: the first in insertion order, since pods are parked at
        the clock's current time and the clock never goes back."""
        return next(iter(self._by_uid.values()), None)

    def parked_until(self, duration: float, now: float) -> list[QueuedPodInfo]:
        """Pods parked for at least `duration` by `now`, computed as next_wakeup computes
        the instant (timestamp + duration), so a clock stopped there finds them."""
        return [i for i in self._by_uid.values() if i.timestamp + duration <= now]
