"""The scheduling queue: activeQ (QueueSort heap), backoffQ, unschedulable pods."""

from gpusched.core.queue.backoff import backoff_duration
from gpusched.core.queue.info import QueuedPodInfo
from gpusched.core.queue.queue import ClusterEvent, SchedulingQueue, may_help

__all__ = ["ClusterEvent", "QueuedPodInfo", "SchedulingQueue", "backoff_duration", "may_help"]
