"""Built-in plugins, one folder each; `default_registry()` registers them all."""

from __future__ import annotations

from gpusched.framework.registry import Registry
from gpusched.plugins.best_fit_score import BestFitScore
from gpusched.plugins.default_binder import DefaultBinder
from gpusched.plugins.dot_product_score import DotProductScore
from gpusched.plugins.dynamic_resources import DynamicResources
from gpusched.plugins.elastic_quota import ElasticQuota
from gpusched.plugins.fgd_score import FGDScore
from gpusched.plugins.gang_scheduling import GangScheduling
from gpusched.plugins.gpu_clustering_score import GpuClusteringScore
from gpusched.plugins.gpu_fit import GPUFit
from gpusched.plugins.gpu_fragmentation import GPUFragmentation
from gpusched.plugins.gpu_packing_score import GpuPackingScore
from gpusched.plugins.inter_pod_affinity import InterPodAffinity
from gpusched.plugins.network_locality import NetworkLocality
from gpusched.plugins.node_affinity import NodeAffinity
from gpusched.plugins.node_name import NodeName
from gpusched.plugins.node_ports import NodePorts
from gpusched.plugins.node_resources_balanced_allocation import NodeResourcesBalancedAllocation
from gpusched.plugins.node_resources_fit import NodeResourcesFit
from gpusched.plugins.node_unschedulable import NodeUnschedulable
from gpusched.plugins.node_volume_limits import NodeVolumeLimits
from gpusched.plugins.nvlink_topology import NVLinkTopology
from gpusched.plugins.pod_topology_spread import PodTopologySpread
from gpusched.plugins.power_headroom import PowerHeadroom
from gpusched.plugins.preemption import Preemption
from gpusched.plugins.priority_sort import PrioritySort
from gpusched.plugins.random_score import RandomScore
from gpusched.plugins.scheduling_gates import SchedulingGates
from gpusched.plugins.taint_toleration import TaintToleration
from gpusched.plugins.tenant_load import TenantLoad
from gpusched.plugins.thermal import Thermal
from gpusched.plugins.volume_binding import VolumeBinding
from gpusched.plugins.volume_restrictions import VolumeRestrictions
from gpusched.plugins.volume_zone import VolumeZone

BUILTIN = (
    PrioritySort,
    GangScheduling,
    SchedulingGates,
    NodeUnschedulable,
    NodeName,
    NodePorts,
    NodeResourcesFit,
    NodeResourcesBalancedAllocation,
    DynamicResources,
    # Tenants' ElasticQuotas (max, the non-preemptible rule, gangs charged whole).
    ElasticQuota,
    TaintToleration,
    NodeAffinity,
    # kube-scheduler's volume plugins (they skip pods without volumes).
    VolumeRestrictions,
    NodeVolumeLimits,
    VolumeBinding,
    VolumeZone,
    InterPodAffinity,
    PodTopologySpread,
    GPUFit,
    GPUFragmentation,
    Thermal,
    PowerHeadroom,
    NetworkLocality,
    NVLinkTopology,
    TenantLoad,
    DefaultBinder,
    Preemption,
    # The FGD paper's policies (docs/fgd-protocol.md), for the FGD protocol's comparisons.
    FGDScore,
    BestFitScore,
    DotProductScore,
    GpuPackingScore,
    GpuClusteringScore,
    RandomScore,
)


def default_registry() -> Registry:
    registry = Registry()
    for cls in BUILTIN:
        registry.register(cls)
    return registry
