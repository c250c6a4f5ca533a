"""PodTopologySpread: topologySpreadConstraints (hard and soft) and the cluster defaults."""

from gpusched.plugins.pod_topology_spread.args import DefaultConstraint, PodTopologySpreadArgs
from gpusched.plugins.pod_topology_spread.plugin import PodTopologySpread

__all__ = ["DefaultConstraint", "PodTopologySpread", "PodTopologySpreadArgs"]
