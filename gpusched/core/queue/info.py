"""QueuedPodInfo: a pod plus what the queue knows about its attempts."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusched.model.pod import PodInfo


@dataclass(slots=True)
class QueuedPodInfo:
    pod: PodInfo
    added: float  # first time the queue saw the pod (for the attempt-duration metric)
    timestamp: float = 0.0  # when it last entered a sub-queue
    attempts: int = 0
    # Plugins that rejected the pod in its last attempt: the requeue hint checks them.
    rejected_by: frozenset[str] = frozenset()
    # Set while the pod is in flight when a newer version of it arrives from the watch.
    deleted: bool = False
    # The queue's move counter when the pod was popped: a move since then means the
    # cluster changed during the attempt, so an unschedulable result may be stale.
    popped_move_seq: int = 0
    # The watch delivered a different version of the pod while it was in flight: the
    # attempt judged the old one, so an unschedulable result may be stale.
    updated_in_flight: bool = False
    backoff_until: float = 0.0
    where: str = field(default="")  # "active" | "backoff" | "unschedulable" | "inflight"

    @property
    def uid(self) -> str:
        return self.pod.uid
