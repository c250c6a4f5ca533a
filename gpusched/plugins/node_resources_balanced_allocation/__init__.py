"""NodeResourcesBalancedAllocation: prefer nodes whose resources stay evenly used."""

from gpusched.plugins.node_resources_balanced_allocation.args import (
    NodeResourcesBalancedAllocationArgs,
    ResourceSpec,
)
from gpusched.plugins.node_resources_balanced_allocation.plugin import (
    NodeResourcesBalancedAllocation,
    balanced_scores,
)

__all__ = [
    "NodeResourcesBalancedAllocation",
    "NodeResourcesBalancedAllocationArgs",
    "ResourceSpec",
    "balanced_scores",
]
