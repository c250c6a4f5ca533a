"""The scheduling queue: activeQ (QueueSort heap), backoffQ, unschedulable pods."""

from gpusched.core.queue.backoff import backoff_duration
from gpusched.core.queue.hints import ClusterEvent, NodeChange, may_help, node_change
from gpusched.core.queue.info import QueuedPodInfo
from gpusched.core.queue.queue import SchedulingQueue

__all__ = [
    "ClusterEvent",
    "NodeChange",
    "QueuedPodInfo",
    "SchedulingQueue",
    "backoff_duration",
    "may_help",
    "node_change",
]
