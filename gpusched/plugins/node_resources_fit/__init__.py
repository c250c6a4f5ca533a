"""NodeResourcesFit: cpu/memory/pod-count fit and allocation scoring."""

from gpusched.plugins.node_resources_fit.args import (
    NodeResourcesFitArgs,
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
)
from gpusched.plugins.node_resources_fit.plugin import NodeResourcesFit

__all__ = [
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
    "RequestedToCapacityRatioParam",
    "ResourceSpec",
    "ScoringStrategy",
    "UtilizationShapePoint",
]
