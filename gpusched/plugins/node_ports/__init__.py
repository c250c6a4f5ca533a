"""NodePorts: a pod's host ports must be free on its node."""

from gpusched.plugins.node_ports.plugin import NodePorts

__all__ = ["NodePorts"]
