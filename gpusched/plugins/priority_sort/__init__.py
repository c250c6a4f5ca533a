"""PrioritySort: the default QueueSort plugin."""

from gpusched.plugins.priority_sort.plugin import PrioritySort

__all__ = ["PrioritySort"]
