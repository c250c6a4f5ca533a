"""The fleet bound (models, node CPU and memory): hand-made traces where the shared-pod
bound sees nothing, its invariant against that bound, and real FGD runs above it."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import Trace, run_seed
from gpusched.sim.fgd_workload import FgdWorkload, WorkloadPod, build_workload, pod_resource
from gpusched.sim.fleet_bound import (
    InfeasibleError,
    card_prices,
    fleet_bound,
    max_allocation,
    node_groups,
    pod_class,
    surely_placed,
    window,
)
from gpusched.sim.openb import TraceNode, TracePod
from gpusched.sim.packing_bound import arrivals, gap_closed, lp_bound, seed_bound, trace_bound
from tests.builders import tiny_trace

REG = default_registry()


def _fgd_unallocated(trace: Trace, seed: int) -> float:
    return 100.0 - float(run_seed(trace, "FGD", seed, REG).curve()[100])


def _has_sample(arrived: np.ndarray, capacity: int, at: int) -> bool:
    try:
        window(arrived, capacity, at)
    except ValueError:
        return False
    return True


def test_model_constraint_raises_the_bound_from_zero() -> None:
    # Two A cards and one B card; every pod wants B: one card can ever be allocated.
    nodes = (
        TraceNode("a-0", 16000, 65536, 1, "A"),
        TraceNode("a-1", 16000, 65536, 1, "A"),
        TraceNode("b-0", 16000, 65536, 1, "B"),
    )
    pods = tuple(TracePod(f"p-{i}", 1000, 1024, 1, 1000, "B") for i in range(3))
    trace = Trace("models", nodes, pods)
    b = trace_bound(trace, 42)
    assert b.lp_pct == 0.0 and b.drop_pct == 0.0  # no shared pods: nothing to see
    assert b.models_cpu_pct == pytest.approx(200 / 3, abs=1e-3)
    assert b.any_pct == pytest.approx(200 / 3, abs=1e-3)
    assert _fgd_unallocated(trace, 42) >= b.models_cpu_pct - 0.01


def test_node_cpu_raises_the_bound_from_zero() -> None:
    # Two-card nodes with 8 cores; each GPU pod asks 5 cores: one card per node at most.
    nodes = tuple(TraceNode(f"n-{i}", 8000, 65536, 2, "A") for i in range(2))
    pods = tuple(TracePod(f"p-{i}", 5000, 1024, 1, 1000) for i in range(4))
    trace = Trace("cpu", nodes, pods)
    b = trace_bound(trace, 42)
    assert b.lp_pct == 0.0
    assert b.models_cpu_pct == pytest.approx(50.0, abs=1e-3)
    assert _fgd_unallocated(trace, 42) >= b.models_cpu_pct - 0.01


def test_cpu_only_pods_that_arrive_early_must_be_placed() -> None:
    """Two 4-core CPU-only pods arrive first on an empty 16-core, 2-card node: nothing can
    block them (12.001 cores used), so they hold 8 cores and only 8 / 7 of the two 7-core
    GPU pods fit. Order-free, a run could drop a CPU-only pod (GPU pods first): 0."""
    nodes = (TraceNode("n-0", 16000, 65536, 2, "A"),)
    src = (
        TracePod("c-0", 4000, 1024, 0, 0),
        TracePod("c-1", 4000, 1024, 0, 0),
        TracePod("g-0", 7000, 1024, 1, 1000),
        TracePod("g-1", 7000, 1024, 1, 1000),
    )
    pods = tuple(WorkloadPod(p.name, p, pod_resource(p)) for p in src)
    groups = node_groups(nodes)
    cls = [pod_class(p) for p in pods]
    assert surely_placed(groups, cls) == [1, 1, 0, 0]
    assert max_allocation(groups, Counter(cls), card_prices([])) == pytest.approx(2000, abs=1)
    b = fleet_bound(pods, nodes)
    assert b.unallocated_pct == pytest.approx(100 - 100 * 8 / 14, abs=1e-3)
    trace = Trace("cpu-only", nodes, src)
    wl = FgdWorkload(42, 1.3, 2000, "none", pods, ("n-0",))
    assert seed_bound(arrivals(trace.pods, trace.nodes, 42), 42).lp_pct == 0.0
    run = run_seed(trace, "FGD", 42, REG, workload=wl)
    assert 100.0 - float(run.curve()[100]) >= b.unallocated_pct - 0.01


def test_shared_placed_is_never_below_the_shared_pod_lp() -> None:
    """With every shared pod placed, the fleet bound at a sample's pods is at least the
    cutting-stock waste of those shared pods (its cuts include those duals)."""
    trace = tiny_trace()
    nodes = [n for n in trace.nodes if n.gpu > 0]
    groups = node_groups(nodes)
    capacity = sum(g.count * g.cards for g in groups) * 1000
    for seed in (42, 43, 44):
        wl = build_workload(trace.pods, nodes, seed, 1.3)
        cls = [pod_class(p) for p in wl.pods]
        arrived = [p.resource.total_milli_gpu for p in wl.pods]
        at = next(a for a in range(100, 0, -1) if _has_sample(np.cumsum(arrived), capacity, a))
        f = int(window(np.cumsum(arrived), capacity, at)[0])
        upto = cls[: f + 1]
        shared = Counter(k.milli for k in upto if k.shared)
        sizes = sorted(shared)
        waste = lp_bound(sizes, [shared[s] for s in sizes]).waste_milli
        alloc = max_allocation(
            groups,
            Counter(upto),
            card_prices([k.milli for k in upto if k.shared]),
            frozenset(shared),
        )
        assert capacity - alloc >= waste - 1.0
        free = max_allocation(
            groups, Counter(upto), card_prices([k.milli for k in upto if k.shared])
        )
        assert free >= alloc - 1.0  # the assumption only removes runs


@pytest.mark.parametrize("seed", [42, 43])
def test_fgd_runs_stay_above_the_bound_on_the_tiny_trace(seed: int) -> None:
    """The tiny trace's pods are large: no sample sits at 100 %, so compare at every
    arrived % where both the run's curve and the bound have samples."""
    trace = tiny_trace()
    nodes = [n for n in trace.nodes if n.gpu > 0]
    wl = build_workload(trace.pods, nodes, seed, 1.3)
    curve = run_seed(trace, "FGD", seed, REG).curve()
    checked = 0
    for at in range(60, 131):
        if math.isnan(curve[at]):
            continue
        free = fleet_bound(wl.pods, nodes, at).unallocated_pct
        assert 100.0 - curve[at] >= free - 0.01
        try:
            placed = fleet_bound(wl.pods, nodes, at, "shared").unallocated_pct
            but_largest = fleet_bound(wl.pods, nodes, at, "shared-but-largest").unallocated_pct
        except InfeasibleError:
            continue  # the shared pods cannot all be placed: the assumption is false here
        # Each assumption removes runs, so the bound can only rise.
        assert placed >= but_largest - 1e-6 >= free - 2e-6
        checked += 1
    assert checked > 0


def test_gap_closed() -> None:
    assert gap_closed(5.0, 4.0, 3.0) == pytest.approx(0.5)
    assert gap_closed(5.0, 3.0, 3.0) == pytest.approx(1.0)
    assert gap_closed(5.0, 6.0, 3.0) == pytest.approx(-0.5)
    assert math.isnan(gap_closed(3.0, 2.0, 3.0))  # FGD at the bound: no gap
    assert math.isnan(gap_closed(5.0, math.nan, 3.0))
