"""The unschedulable pods: they wait for a cluster event that may help them, or for the
periodic flush (podMaxInUnschedulablePodsDurationSeconds) that retries them anyway."""

from __future__ import annotations

from collections.abc import Iterator

from gpusched.core.queue.info import QueuedPodInfo


class UnschedulablePods:
    def __init__(self) -> None:
        self._by_uid: dict[str, QueuedPodInfo] = {}

    def add(self, info: QueuedPodInfo) -> None:
        self._by_uid[info.uid] = info

    def remove(self, uid: str) -> QueuedPodInfo | None:
        return self._by_uid.pop(uid, None)

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._by_uid.get(uid)

    def older_than(self, cutoff: float) -> list[QueuedPodInfo]:
        return [i for i in self._by_uid.values() if i.timestamp <= cutoff]

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: str) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return iter(list(self._by_uid.values()))
