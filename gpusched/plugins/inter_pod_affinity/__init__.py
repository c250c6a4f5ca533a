"""InterPodAffinity: required and preferred pod affinity and anti-affinity."""

from gpusched.plugins.inter_pod_affinity.args import InterPodAffinityArgs
from gpusched.plugins.inter_pod_affinity.plugin import InterPodAffinity

__all__ = ["InterPodAffinity", "InterPodAffinityArgs"]
