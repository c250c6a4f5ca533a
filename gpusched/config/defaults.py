"""The built-in defaults: the `ai-scheduler` plugin set, the comparison profiles, settings.

Every profile a user writes starts from DEFAULT_PLUGINS, exactly as a kube-scheduler profile
starts from the in-tree defaults: `enabled` adds to them, `disabled` removes from them.
The comparison profiles are plain documents run through the same loader, so the simulator
measures exactly what a user would get by pasting them into a configuration file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpusched.config.profile import PluginRef
from gpusched.framework.points import Point
from gpusched.model import keys

API_VERSION = "gpusched.io/v1alpha1"
KIND = "GpuSchedulerConfiguration"
MULTI_POINT = "multiPoint"

DEFAULT_SCHEDULER_NAME = keys.SCHEDULER_NAME  # "ai-scheduler"
LEAST_ALLOCATED = "least-allocated"
MOST_ALLOCATED = "most-allocated"

# Settings defaults (the daemon's knobs). Backoff and the unschedulable flush interval are
# kube-scheduler's defaults; the client limits are its clientConnection defaults.
CLIENT_QPS = 50.0
CLIENT_BURST = 100
POD_INITIAL_BACKOFF_SECONDS = 1.0
POD_MAX_BACKOFF_SECONDS = 10.0
POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION_SECONDS = 300.0
MAX_CARDS_PER_NODE = 8
# Leader election: kube-scheduler's leaderElection defaults (15 s / 10 s / 2 s). The Lease
# lives next to kube-scheduler's own in kube-system, under the component's name.
LEADER_ELECT = True
LEASE_DURATION_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10.0
RETRY_PERIOD_SECONDS = 2.0
LEASE_NAME = "gpusched"
LEASE_NAMESPACE = "kube-system"


def _refs(*names: str) -> tuple[PluginRef, ...]:
    return tuple(PluginRef(n) for n in names)


# The `ai-scheduler` profile. Score weights are the seed article's alpha, beta, gamma:
# fragmentation first, thermal headroom next, network locality last.
# SchedulingGates, NodeName, NodePorts, the volume plugins, PodTopologySpread and
# InterPodAffinity as in kube-scheduler's default profile; DynamicResources allocates DRA
# claims (kube's place: after InterPodAffinity, first at PostFilter), its Reserve after
# GPUFit's (it allocates the devices of the cards GPUFit chose).
DEFAULT_PLUGINS: Mapping[Point, tuple[PluginRef, ...]] = {
    Point.PRE_ENQUEUE: _refs("SchedulingGates", "DynamicResources", "GangScheduling"),
    # PrioritySort's order, with a gang's pods kept together (they pop one after the other).
    Point.QUEUE_SORT: _refs("GangScheduling"),
    # kube-scheduler's order (the first PreFilter to refuse a pod words its message); the
    # volume plugins and InterPodAffinity skip a pod that has nothing for them.
    Point.PRE_FILTER: _refs(
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "GPUFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        # After the pod's own checks (a malformed or unplaceable pod says so first), before
        # the gang's capacity check: a gang over its tenant's quota is refused for that,
        # not planned.
        "ElasticQuota",
        # Last: whether the whole gang fits is asked only of a pod every other plugin let in.
        "GangScheduling",
    ),
    # kube-scheduler's order: a node is counted under the first Filter that rejects it, so
    # the FailedScheduling message depends on it (tests/integration/test_differential.py).
    Point.FILTER: _refs(
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        # GPUFit is gpusched's NodeResourcesFit for cards: it stands where kube-scheduler
        # says "Insufficient nvidia.com/gpu".
        "GPUFit",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "Thermal",
        # Last: the gang's racks are chosen over the nodes that pass the pod's other filters.
        "GangScheduling",
        # Room held for preemptors nominated to a node (kube runs its filters with the
        # nominated pods added): after every other Filter, so a node is counted under the
        # reason that really refuses it first.
        "Preemption",
    ),
    # A member that cannot be placed releases its siblings waiting at Permit.
    # An idle claim allocated for the pod earlier is deallocated before anything else.
    # Preemption last (kube's DefaultPreemption after DynamicResources): the gang's release
    # of its waiting members runs first, and the evictions are chosen on what is left.
    Point.POST_FILTER: _refs("DynamicResources", "GangScheduling", "Preemption"),
    Point.PRE_SCORE: _refs(
        "PodTopologySpread", "InterPodAffinity", "NetworkLocality", "NVLinkTopology"
    ),
    # The seed article weights fragmentation 0.40, thermal 0.35, network 0.25. Measured in
    # the simulator (`gpusched simulate`, seeds 1-3), a 0.35 thermal score steers work off
    # warm-but-safe nodes and costs 0.7-2.6 points of GPU allocation and up to 6 points of
    # 8-card job success; at 0.05 it costs at most 0.1 point, and the red-line Filter (on
    # the projected temperature) keeps every node under 82 °C either way.
    # NodeResourcesBalancedAllocation is left out by the same kind of measurement: at any
    # positive weight (10⁻⁶ to 1) it becomes the tie-breaker between equal GPU scores and
    # costs unallocated GPU on every FGD dev trace: 0.09-0.93 points at 10⁻⁶ and 0.01,
    # 0.76-3.29 at 1 (docs/fgd-results.md).
    Point.SCORE: (
        PluginRef("GPUFragmentation", 0.40),
        PluginRef("Thermal", 0.05),
        # Power headroom (limit minus draw): Thermal's weight, for the same reason (draw
        # follows load, so more weight spreads work like LeastAllocated). Unknown power
        # scores 50 on every node, so without telemetry (the FGD protocol, the replay) it
        # changes no ranking: same numbers (gpusched/plugins/power_headroom/README.md).
        PluginRef("PowerHeadroom", 0.05),
        PluginRef("NetworkLocality", 0.25),
        # kube-scheduler's default weight 2; costs nothing while no pod has pod affinity
        # terms (PreScore skips), so the FGD protocol's numbers are unchanged. The openb
        # traces carry no affinity terms, so no measurement can move it: its score only acts
        # on pods whose preferred terms state the user's wish, and kube's weight stays.
        PluginRef("InterPodAffinity", 2),
        # kube-scheduler's default weight. It scores only pods with soft constraints of their
        # own or in a ReplicaSet/StatefulSet/ReplicationController (PreScore skips the rest),
        # so the FGD protocol, whose pods have neither, is unchanged (measured: the plugin's
        # README). Kept at 2 by measurement with the trace's pods grouped into ReplicaSets
        # (`--owners replicasets`, docs/fgd-results.md): weights 2, 0.4, 0.1 and 0.02 all
        # stay within one std of weight 0 (seeds 42-46, default 3.84 vs 3.87 ± 0.06,
        # gpushare40 5.30 vs 5.28 ± 0.04 unallocated %) and cut the most replicas of a
        # ReplicaSet on one node from 1.98 (default) and 2.05 (gpushare40) to 1.005. Held
        # out (seeds 47-56, five traces) weight 2 vs 0: +0.03 and +0.02 points (within one
        # std) on default and gpushare40, -0.03 to -0.11 on the other three.
        PluginRef("PodTopologySpread", 2),
        # Spreads each tenant's GPUs over nodes beyond its proportion (a node lost hurts
        # many tenants a little). Tuned on the FGD protocol with 8 tenants in seeded bursts
        # (`--tenants 8`, seeds 42-46; docs/tenancy-fair.md): weights 0.01-0.1 all pack
        # within one std of without it (3.84-3.88 vs 3.87 ± 0.06 % unallocated at 100 %
        # arrived); 0.1 lowers the tenant concentration of nodes most (0.40 vs 0.88).
        # With one tenant (the FGD protocol's own pods) it changes nothing.
        PluginRef("TenantLoad", 0.1),
        # Multi-GPU whole-card pods prefer nodes where their cards fit one NVLink island
        # without breaking an intact one. Measured (bench/nvlink_islands.py, 64 nodes of two
        # 4-card islands, seeds 1-5): NVLink-required 4-card pods placed after churn 19.4
        # off, 16.4 at 0.05, 18.2 at 0.1, 28.4 at 0.25, 28.2 at 0.5, 28.4 at 1; 0.25 is the
        # smallest weight on the plateau. PreScore skips every pod when no feasible node
        # has a known island layout, so the FGD protocol (openb: no islands) is unchanged.
        PluginRef("NVLinkTopology", 0.25),
    ),
    # VolumeBinding binds the pod's claims before the pod (kube-scheduler's order).
    # GangScheduling first, so its Unreserve runs when any later Reserve fails.
    # Preemption's Reserve only drops the pod's nomination (it found its node).
    Point.RESERVE: _refs(
        "GangScheduling", "VolumeBinding", "GPUFit", "DynamicResources", "Preemption"
    ),
    Point.PERMIT: _refs("GangScheduling"),
    Point.PRE_BIND: _refs("VolumeBinding", "DynamicResources", "GPUFit"),
    Point.BIND: _refs("DefaultBinder"),
}


def default_plugin_names() -> list[str]:
    seen: dict[str, None] = {}
    for refs in DEFAULT_PLUGINS.values():
        for r in refs:
            seen.setdefault(r.name, None)
    return list(seen)


def _allocated(name: str, strategy: str) -> dict[str, Any]:
    """A kube-scheduler-like baseline: scored only by NodeResourcesFit's
    LeastAllocated/MostAllocated over cpu, memory and whole GPUs with equal weights, as
    kube-scheduler's NodeResourcesFit would with `nvidia.com/gpu` added to its resources.
    The filters are ours except Thermal, which kube-scheduler has no data for; GPUFit stays
    because the simulated cluster must not hand out a card twice (a device plugin would not)."""
    return {
        "schedulerName": name,
        "plugins": {
            "filter": {"disabled": [{"name": "Thermal"}]},
            "preScore": {"disabled": [{"name": "*"}]},
            "score": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NodeResourcesFit", "weight": 1}],
            },
        },
        "pluginConfig": [
            {
                "name": "NodeResourcesFit",
                # kube-scheduler's NodeResourcesFitArgs shape
                # (gpusched/plugins/node_resources_fit/args.py).
                "args": {
                    "scoringStrategy": {
                        "type": strategy,
                        "resources": [
                            {"name": "cpu", "weight": 1},
                            {"name": "memory", "weight": 1},
                            {"name": keys.GPU_RESOURCE, "weight": 1},
                        ],
                    }
                },
            }
        ],
    }


_BUILTIN: dict[str, dict[str, Any]] = {
    # Nothing to say: the defaults above are this profile.
    DEFAULT_SCHEDULER_NAME: {"schedulerName": DEFAULT_SCHEDULER_NAME},
    LEAST_ALLOCATED: _allocated(LEAST_ALLOCATED, "LeastAllocated"),
    MOST_ALLOCATED: _allocated(MOST_ALLOCATED, "MostAllocated"),
}


def builtin_profiles() -> dict[str, dict[str, Any]]:
    """The built-in profiles as raw `profiles[]` items, by schedulerName (fresh copies, so a
    caller may edit one before loading it)."""
    return copy.deepcopy(_BUILTIN)


def builtin_document(*names: str) -> dict[str, Any]:
    """A whole configuration document holding the named built-in profiles (all by default)."""
    table = builtin_profiles()
    chosen = names or tuple(table)
    unknown = [n for n in chosen if n not in table]
    if unknown:
        raise KeyError(f"unknown built-in profile(s) {unknown} (known: {', '.join(table)})")
    return {"apiVersion": API_VERSION, "kind": KIND, "profiles": [table[n] for n in chosen]}
