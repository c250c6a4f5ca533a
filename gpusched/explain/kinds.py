"""Which kind of constraint each plugin enforces: the words `explain` names a binding
constraint with. A plugin not listed is named by itself."""

from __future__ import annotations

from gpusched.framework.status import INVALID_POD
from gpusched.plugins.gpu_fit.plugin import (
    DRA_ONLY,
    INSUFFICIENT_SHARE,
    INSUFFICIENT_WHOLE,
    NO_GPU,
    NO_HEALTHY,
    NO_MODEL,
    NOT_DRA,
)

RESOURCES = "resources"
FRAGMENTATION = "fragmentation"
THERMAL = "thermal"
TOPOLOGY = "topology"
AFFINITY = "affinity"
QUOTA = "quota"
GANG = "gang"
TAINTS = "taints"
GPU_MODEL = "gpu model"  # GPUFit: no card of the models the pod allows
NO_GPU_KIND = "no gpu"  # GPUFit: no card, or none healthy
CLAIMS = "claims"

KIND_OF: dict[str, str] = {
    "GPUFit": RESOURCES,
    "NodeResourcesFit": RESOURCES,
    "Thermal": THERMAL,
    "NodeAffinity": AFFINITY,
    "InterPodAffinity": AFFINITY,
    "PodTopologySpread": "spread",
    "TaintToleration": TAINTS,
    "NodeUnschedulable": "cordoned",
    "NodeName": "nodeName",
    "NodePorts": "ports",
    "VolumeRestrictions": "volumes",
    "NodeVolumeLimits": "volumes",
    "VolumeBinding": "volumes",
    "VolumeZone": "volumes",
    "DynamicResources": CLAIMS,
    "GangScheduling": GANG,
    "ElasticQuota": QUOTA,
    "SchedulingGates": "gates",
    # Room held on a node for a preemptor nominated to it.
    "Preemption": "nominated",
    INVALID_POD: "invalid pod",
}


def kind_of(plugin: str, reason: str = "") -> str:
    """The constraint kind of a plugin's rejection. GPUFit's by reason: only too few free
    cards (or too little free share) is `resources`, what pods leaving can fix; NVLink
    reasons are topology; a node without a card of the allowed models, or without a
    healthy one, or whose cards are DRA's (or not), is not a matter of room."""
    if plugin == "GPUFit":
        if reason in (INSUFFICIENT_WHOLE, INSUFFICIENT_SHARE) or not reason:
            return RESOURCES
        if "NVLink" in reason:
            return TOPOLOGY
        if reason.startswith(NO_MODEL):
            return GPU_MODEL
        if reason in (NO_GPU, NO_HEALTHY):
            return NO_GPU_KIND
        if reason in (NOT_DRA, DRA_ONLY):
            return CLAIMS
    return KIND_OF.get(plugin, plugin or "unknown")
