"""NodeAffinity: nodeSelector, required and preferred node affinity."""

from gpusched.plugins.node_affinity.args import NodeAffinityArgs
from gpusched.plugins.node_affinity.plugin import NodeAffinity

__all__ = ["NodeAffinity", "NodeAffinityArgs"]
