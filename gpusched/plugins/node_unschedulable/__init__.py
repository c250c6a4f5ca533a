"""NodeUnschedulable: keeps pods off cordoned nodes."""

from gpusched.plugins.node_unschedulable.plugin import NodeUnschedulable

__all__ = ["NodeUnschedulable"]
