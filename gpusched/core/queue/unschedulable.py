"""The unschedulable pods: they wait for a cluster event that may help them, or for the
periodic flush (podMaxInUnschedulablePodsDurationSeconds) that retries them anyway."""

from __future__ import annotations

from gpusched.core.queue.info import PodMap, QueuedPodInfo


class UnschedulablePods(PodMap):
    def add(self, info: QueuedPodInfo) -> None:
        self._by_uid[info.uid] = info

    def oldest(self) -> QueuedPodInfo | None:
        """The pod parked longest: the first in insertion order, since pods are parked at
        the clock's current time and the clock never goes back."""
        return next(iter(self._by_uid.values()), None)

    def parked_until(self, duration: float, now: float) -> list[QueuedPodInfo]:
        """Pods parked for at least `duration` by `now`, computed as next_wakeup computes
        the instant (timestamp + duration), so a clock stopped there finds them."""
        return [i for i in self._by_uid.values() if i.timestamp + duration <= now]
