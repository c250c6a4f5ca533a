"""Compile the numba kernels before this instance seeks the leader Lease.

Everything in the daemon shares one event loop, the elector's renewals included, and a
scheduling cycle is synchronous. The first cycles of a fresh process compile the kernels
(about 7 s of CPU with a cold cache, as on a new pod's empty NUMBA_CACHE_DIR), and a loop
blocked that long could miss the renew deadline right after winning the Lease. So a
standby schedules a small generated workload on a throwaway in-memory cluster, in a worker
thread (the loop keeps serving the watches meanwhile), before it asks for the Lease.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpusched.config import SchedulerConfig
from gpusched.framework.registry import Registry
from gpusched.model import keys
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import Fleet, generate_fleet, generate_workload

WARM_PODS = 64  # whole-card, shared and CPU-only pods: every kernel the cycles call
WARM_GANG = 2  # members of one gang: GangScheduling's capacity kernel (gang_fit) runs


def warm_gang(template: PodInfo) -> list[PodInfo]:
    """One annotation gang of WARM_GANG one-card pods: its PreFilter runs gang_fit, which
    compiled in the first gang's cycle otherwise (about 10 s of a blocked loop on a cold
    2-core machine: long enough to lose the Lease)."""
    gang = Gang("warm/gang", WARM_GANG, GangAPI.ANNOTATIONS)
    return [
        dataclasses.replace(
            template,
            request=PodRequest(cpu_milli=100, gpu_cards=1),
            uid=f"warm-gang-{i}",
            name=f"warm-gang-{i}",
            gang=gang,
        )
        for i in range(WARM_GANG)
    ]


def warm_workload() -> tuple[Fleet, list[PodInfo]]:
    """The throwaway fleet and the pods the warm-up schedules on it (`warm_gang`'s pods
    arrive after these)."""
    fleet = generate_fleet(seed=1, racks=4, nodes_per_rack=2, racks_per_spine=2)
    pods = generate_workload(fleet, seed=1)[:WARM_PODS]
    # Two pods with pod anti-affinity and a preferred affinity over racks: the second meets
    # the first's terms, so InterPodAffinity's kernels run in Filter and Score. First, while
    # the cluster has room, so both reach Score.
    term: dict[str, Any] = {
        "labelSelector": {"matchLabels": {"app": "warm-affinity"}},
        "topologyKey": keys.RACK_LABEL,
    }
    affinity = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        },
    }
    warm_affinity = [
        dataclasses.replace(
            pods[0],
            request=PodRequest(cpu_milli=100),
            uid=f"warm-affinity-{i}",
            name=f"warm-affinity-{i}",
            labels={"app": "warm-affinity"},
            affinity=affinity,
        )
        for i in range(2)
    ]
    # A hard and a soft rack spread: PodTopologySpread's kernels (Filter and Score).
    spread = [
        dataclasses.replace(
            pods[0],
            request=PodRequest(cpu_milli=100),
            uid=f"warm-spread-{action}",
            name=f"warm-spread-{action}",
            labels={"app": "warm-spread"},
            topology_spread_constraints=(
                {
                    "maxSkew": 1,
                    "topologyKey": keys.RACK_LABEL,
                    "whenUnsatisfiable": action,
                    "labelSelector": {"matchLabels": {"app": "warm-spread"}},
                },
            ),
        )
        for action in ("DoNotSchedule", "ScheduleAnyway")
    ]
    return fleet, warm_affinity + spread + pods


def warm_kernels(config: SchedulerConfig, registry: Registry) -> int:
    """Schedule a generated workload with every profile; returns the pods placed. Touches
    nothing but its own in-memory cluster."""
    fleet, pods = warm_workload()
    placed = 0
    for profile in config.profiles:
        sim = Simulation(fleet.nodes, profile, registry, max_cards=config.max_cards_per_node)
        for pod in pods:
            placed += sim.submit(pod).node is not None
        for pod in warm_gang(pods[0]):
            decision = sim.arrive(pod)
            placed += decision is not None and decision.node is not None
    return placed
