"""NVLinkTopology: whole-card pods prefer nodes where their cards fit one NVLink island."""

from gpusched.plugins.nvlink_topology.plugin import NVLinkTopology

__all__ = ["NVLinkTopology"]
