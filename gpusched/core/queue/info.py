"""QueuedPodInfo: a pod plus what the queue knows about its attempts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from gpusched.core.queue.hints import ClusterEvent, NodeChange
from gpusched.model.pod import PodInfo


@dataclass(slots=True)
class QueuedPodInfo:
    pod: PodInfo
    added: float  # first time the queue saw the pod (for the attempt-duration metric)
    timestamp: float = 0.0  # when it last entered a sub-queue
    attempts: int = 0
    # Plugins that rejected the pod in its last attempt: the requeue hint checks them.
    rejected_by: frozenset[str] = frozenset()
    # The pod was deleted while in flight: its attempt's result is dropped, not requeued.
    deleted: bool = False
    # Cluster events (and what a node update changed) since the pod was popped: if one may
    # help the plugins that rejected it, an unschedulable result may be stale.
    missed: set[tuple[ClusterEvent, NodeChange]] = field(default_factory=set)
    # The watch delivered a different version of the pod while it was in flight: the
    # attempt judged the old one, so an unschedulable result may be stale.
    updated_in_flight: bool = False
    backoff_until: float = 0.0
    where: str = field(default="")  # "active" | "backoff" | "unschedulable" | "inflight"

    @property
    def uid(self) -> str:
        return self.pod.uid


class PodMap:
    """Queued pods by uid: the bookkeeping backoffQ and the unschedulable pods share."""

    def __init__(self) -> None:
        self._by_uid: dict[str, QueuedPodInfo] = {}

    def remove(self, uid: str) -> QueuedPodInfo | None:
        return self._by_uid.pop(uid, None)

    def get(self, uid: str) -> QueuedPodInfo | None:
        return self._by_uid.get(uid)

    def __len__(self) -> int:
        return len(self._by_uid)

    def __contains__(self, uid: str) -> bool:
        return uid in self._by_uid

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        # A copy: callers move pods to other sub-queues while iterating.
        return iter(list(self._by_uid.values()))
