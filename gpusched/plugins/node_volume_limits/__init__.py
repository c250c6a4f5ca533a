"""NodeVolumeLimits: a node's CSI attach limits (CSINode allocatable counts)."""

from gpusched.plugins.node_volume_limits.plugin import NodeVolumeLimits

__all__ = ["NodeVolumeLimits"]
