"""NodeName: a pod that names its node goes only there."""

from gpusched.plugins.node_name.plugin import NodeName

__all__ = ["NodeName"]
