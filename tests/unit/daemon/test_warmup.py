"""The kernels' warm-up before serving."""

from __future__ import annotations

import importlib
import pkgutil

import numba
import pytest
from numba.core.registry import CPUDispatcher as Dispatcher

from gpusched import kernels
from gpusched.config import default_config
from gpusched.daemon.warmup import warm_kernels, warm_workload
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import generate_fleet, generate_gang_workload


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


def _compiled() -> dict[str, int]:
    """Every numba kernel's compiled signatures so far, by qualified name."""
    out: dict[str, int] = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"{kernels.__name__}.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Dispatcher) and obj.__module__ == module.__name__:
                out[f"{module.__name__}.{name}"] = len(obj.signatures)
    return out


# numba ships no stubs: its config attributes are unknown to mypy.
JIT_DISABLED = bool(numba.config.DISABLE_JIT)  # type: ignore[attr-defined]


@pytest.mark.skipif(
    JIT_DISABLED, reason="nothing compiles under NUMBA_DISABLE_JIT: nothing to warm"
)
def test_after_the_warm_up_a_gang_workload_compiles_no_kernel() -> None:
    """A kernel first compiled in a live cycle blocks the loop for seconds on a cold machine
    (gang_fit: ~10 s on 2 cores, and the leader's Lease renewals wait behind it)."""
    registry = default_registry()
    config = default_config(registry)
    warm_kernels(config, registry)
    before = _compiled()
    fleet = generate_fleet(seed=3, racks=2, nodes_per_rack=4, racks_per_spine=2)
    sim = Simulation(fleet.nodes, config.profiles[0], registry)
    pods = generate_gang_workload(fleet, seed=3, load=1.2)
    for pod in pods:
        sim.arrive(pod)
    assert any(p.gang is not None for p in pods)
    assert _compiled() == before
