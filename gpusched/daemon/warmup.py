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

from gpusched.config import SchedulerConfig
from gpusched.framework.registry import Registry
from gpusched.model import keys
from gpusched.model.pod import PodRequest
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import generate_fleet, generate_workload

WARM_PODS = 64  # whole-card, shared and CPU-only pods: every kernel the cycles call


def warm_kernels(config: SchedulerConfig, registry: Registry) -> int:
    """Schedule a generated workload with every profile; returns the pods placed. Touches
    nothing but its own in-memory cluster."""
    fleet = generate_fleet(seed=1, racks=4, nodes_per_rack=2, racks_per_spine=2)
    pods = generate_workload(fleet, seed=1)[:WARM_PODS]
    # A hard and a soft rack spread: PodTopologySpread's kernels (Filter and Score).
    # First, while the cluster has room, so both reach Score.
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
    pods = spread + pods
    placed = 0
    for profile in config.profiles:
        sim = Simulation(fleet.nodes, profile, registry, max_cards=config.max_cards_per_node)
        for pod in pods:
            placed += sim.submit(pod).node is not None
    return placed
