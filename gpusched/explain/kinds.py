"""Which kind of constraint each plugin enforces: the words `explain` names a binding
constraint with. A plugin not listed is named by itself."""

from __future__ import annotations

from gpusched.framework.status import INVALID_POD

RESOURCES = "resources"
FRAGMENTATION = "fragmentation"
THERMAL = "thermal"
TOPOLOGY = "topology"
AFFINITY = "affinity"
QUOTA = "quota"
GANG = "gang"
TAINTS = "taints"

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
    "DynamicResources": "claims",
    "GangScheduling": GANG,
    "ElasticQuota": QUOTA,
    "SchedulingGates": "gates",
    # Room held on a node for a preemptor nominated to it.
    "Preemption": "nominated",
    INVALID_POD: "invalid pod",
}


def kind_of(plugin: str, reason: str = "") -> str:
    """The constraint kind of a plugin's rejection (GPUFit's NVLink reasons: topology)."""
    if plugin == "GPUFit" and "NVLink" in reason:
        return TOPOLOGY
    return KIND_OF.get(plugin, plugin or "unknown")
