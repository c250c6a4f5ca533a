"""The kernels' warm-up before serving."""

from __future__ import annotations

from gpusched.config import default_config
from gpusched.daemon.warmup import warm_kernels, warm_workload
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation


def test_kernel_warm_up_schedules_a_throwaway_workload_with_every_profile() -> None:
    registry = default_registry()
    config = default_config(registry)
    assert warm_kernels(config, registry) > 0


def test_warm_up_places_the_pod_affinity_pods_on_distinct_racks() -> None:
    """The two pods with rack anti-affinity are placed, so InterPodAffinity's kernels ran in
    Filter and Score, and on different racks."""
    registry = default_registry()
    fleet, pods = warm_workload()
    sim = Simulation(fleet.nodes, default_config(registry).profiles[0], registry)
    racks = {n.name: n.rack for n in fleet.nodes}
    placed = [sim.submit(p).node for p in pods[:2]]
    assert all(placed)
    assert racks[placed[0]] != racks[placed[1]]
