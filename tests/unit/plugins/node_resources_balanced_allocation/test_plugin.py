"""NodeResourcesBalancedAllocation: kube-scheduler's balanced_allocation_test table, the
vectorised scorer against a per-row transcription of upstream's, and the plugin in a
profile."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusched.config import API_VERSION, KIND, config_from_dict
from gpusched.core.schedule_one import Result
from gpusched.framework import CycleState, PreScorePlugin, ScorePlugin
from gpusched.framework.status import Code
from gpusched.model.pod import PodRequest
from gpusched.plugins import default_registry
from gpusched.plugins.node_resources_balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
    ResourceSpec,
)
from gpusched.plugins.node_resources_balanced_allocation.plugin import STATE
from gpusched.sim.engine import Simulation
from tests.builders import gpu_node, node, pod, rows_of, snapshot
from tests.fakes import FakeHandle

# Upstream's pod specs (two containers each, summed).
CPU_ONLY = PodRequest(cpu_milli=3000)  # 1000m + 2000m, memory "0"
CPU_AND_MEMORY = PodRequest(cpu_milli=3000, memory_bytes=5000)  # 1000m/2000 + 2000m/3000
GPU = "nvidia.com/gpu"


def args(*names: str) -> NodeResourcesBalancedAllocationArgs:
    return NodeResourcesBalancedAllocationArgs(tuple(ResourceSpec(n) for n in names))


def place(snap: Any, node_name: str, req: PodRequest, cards: tuple[int, ...] = ()) -> None:
    """A pod already bound on `node_name` with `req` (whole `cards`)."""
    snap.apply(
        snap.row_of(node_name),
        req.cpu_milli,
        req.memory_bytes,
        cards,
        (1000,) * len(cards),
        (0,) * len(cards),
        other=req.other,
    )


def scores(
    snap: Any,
    req: PodRequest,
    *names: str,
    a: NodeResourcesBalancedAllocationArgs | None = None,
    pre_score: bool = True,
) -> list[float]:
    plugin = NodeResourcesBalancedAllocation(a, FakeHandle(snap))
    p = pod(request=req)
    rows = rows_of(snap, *names)
    state = CycleState()
    if pre_score:
        assert plugin.pre_score(state, p, rows).is_success()
        assert state.get(STATE) is not None
    out = plugin.score(state, p, rows)
    assert out.dtype == np.float64
    return [float(x) for x in out]


def test_implements_its_points_with_kube_defaults() -> None:
    plugin = NodeResourcesBalancedAllocation(None, FakeHandle(snapshot()))
    assert isinstance(plugin, PreScorePlugin)
    assert isinstance(plugin, ScorePlugin)
    assert plugin.resources == ("cpu", "memory")
    assert "NodeResourcesBalancedAllocation" in default_registry()


# -- balanced_allocation_test.go, case by case -----------------------------------------------


def test_best_effort_pod_is_skipped_in_pre_score() -> None:
    snap = snapshot(node("node1", cpu=4000, mem=10000), node("node2", cpu=4000, mem=10000))
    plugin = NodeResourcesBalancedAllocation(None, FakeHandle(snap))
    state = CycleState()
    st = plugin.pre_score(state, pod(), rows_of(snap, "node1", "node2"))
    assert st.code is Code.SKIP
    # Asking only for what the args do not list is best effort too.
    assert plugin.pre_score(state, pod(request=PodRequest(gpu_cards=1)), rows_of(snap)).is_skip()
    # Score without PreScore does not score it either (upstream returns 0).
    assert plugin.score(CycleState(), pod(), rows_of(snap, "node1")).tolist() == [0.0]


def test_nothing_scheduled_differently_sized_nodes() -> None:
    # node1: cpu 3000/4000, memory 5000/10000 -> std 0.125 -> 87; node2: 50 %, 50 % -> 100.
    snap = snapshot(node("node1", cpu=4000, mem=10000), node("node2", cpu=6000, mem=10000))
    assert scores(snap, CPU_AND_MEMORY, "node1", "node2") == [87, 100]


def test_pods_scheduled_with_resources() -> None:
    # node1: cpu 6000/10000, memory 5000/20000 -> 82; node2: 6000/10000, 10000/20000 -> 95.
    snap = snapshot(node("node1", cpu=10000, mem=20000), node("node2", cpu=10000, mem=20000))
    place(snap, "node1", CPU_ONLY)
    place(snap, "node2", CPU_AND_MEMORY)
    assert scores(snap, CPU_AND_MEMORY, "node1", "node2") == [82, 95]
    # ... and the same when PreScore was not run.
    assert scores(snap, CPU_AND_MEMORY, "node1", "node2", pre_score=False) == [82, 95]


def test_pods_scheduled_with_resources_differently_sized_nodes() -> None:
    # node2: cpu 6000/10000, memory 10000/50000 -> std 0.2 -> 80.
    snap = snapshot(node("node1", cpu=10000, mem=20000), node("node2", cpu=10000, mem=50000))
    place(snap, "node1", CPU_ONLY)
    place(snap, "node2", CPU_AND_MEMORY)
    assert scores(snap, CPU_AND_MEMORY, "node1", "node2") == [82, 80]


def test_requested_resources_at_node_capacity() -> None:
    # node1: cpu 6000/6000, memory 0 -> std 0.5 -> 50; node2: 1, 0.5 -> 75.
    snap = snapshot(node("node1", cpu=6000, mem=10000), node("node2", cpu=6000, mem=10000))
    place(snap, "node1", CPU_ONLY)
    place(snap, "node2", CPU_AND_MEMORY)
    assert scores(snap, CPU_ONLY, "node1", "node2") == [50, 75]


def test_over_committed_fraction_is_capped_at_one() -> None:
    snap = snapshot(node("n", cpu=1000, mem=10000))
    place(snap, "n", PodRequest(cpu_milli=5000))
    # cpu 6000/1000 counts as 1, memory 5000/10000: std 0.25 -> 75.
    assert scores(snap, CPU_AND_MEMORY, "n") == [75]


def test_scalar_resource_included() -> None:
    # Three fractions: node1 cpu 3000/3500, memory 5000/40000, GPU (3 + 1)/8 -> 70;
    # node2 the same cpu and memory, GPU 1/8 -> 65.
    snap = snapshot(
        node("node1", cpu=3500, mem=40000, cards=8), node("node2", cpu=3500, mem=40000, cards=8)
    )
    place(snap, "node1", CPU_AND_MEMORY, cards=(0, 1, 2))
    place(snap, "node2", CPU_AND_MEMORY)
    got = scores(snap, PodRequest(gpu_cards=1), "node1", "node2", a=args("cpu", "memory", GPU))
    assert got == [70, 65]


def test_node_without_the_scalar_resource_skips_it() -> None:
    # The pod requests no GPU: the resource is left out on both nodes, cpu 3000/3500 and
    # memory 5000/40000 -> std 0.366 -> 63 each.
    snap = snapshot(node("node1", cpu=3500, mem=40000, cards=8), node("node2", cpu=3500, mem=40000))
    got = scores(snap, CPU_AND_MEMORY, "node1", "node2", a=args("cpu", "memory", GPU))
    assert got == [63, 63]


def test_extended_resource_from_the_other_columns() -> None:
    # The upstream DRA case with a device-plugin resource: node1 offers 8 rdma/hca,
    # cpu 3000/3500, memory 0/40000, rdma 1/8 -> std 0.378 -> 62; node2 has none:
    # cpu 3000/3500, memory 5000/40000 -> 63.
    snap = snapshot(
        node("node1", cpu=3500, mem=40000, other={"rdma/hca": 8}),
        node("node2", cpu=3500, mem=40000),
    )
    place(snap, "node1", CPU_ONLY)
    place(snap, "node2", CPU_AND_MEMORY)
    req = PodRequest(other=(("rdma/hca", 1),))
    assert scores(snap, req, "node1", "node2", a=args("cpu", "memory", "rdma/hca")) == [62, 63]


def test_ephemeral_storage_is_scored_without_a_request() -> None:
    # Not a scalar resource: scored even when the pod does not ask for it (upstream's
    # calculateResourceAllocatableRequest), unlike rdma/hca above.
    snap = snapshot(node("n", cpu=4000, mem=10000, other={"ephemeral-storage": 1000}))
    place(snap, "n", PodRequest(other=(("ephemeral-storage", 500),)))
    # cpu 1000/4000 = 0.25, storage 500/1000 = 0.5 -> std 0.125 -> 87.
    got = scores(snap, PodRequest(cpu_milli=1000), "n", a=args("cpu", "ephemeral-storage"))
    assert got == [87]


def test_gpu_cards_count_as_requested_when_not_intact() -> None:
    # A shared pod's card is not intact: it counts as requested, as NodeResourcesFit says.
    snap = snapshot(node("n", cpu=4000, mem=10000, cards=4))
    snap.apply(snap.row_of("n"), 0, 0, (0,), (250,), (0,))
    # cpu 1000/4000 = 0.25, gpu (1 + 1)/4 = 0.5 -> 87.
    got = scores(snap, PodRequest(cpu_milli=1000, gpu_cards=1), "n", a=args("cpu", GPU))
    assert got == [87]


# -- in a profile -------------------------------------------------------------------------------


def _sim(weight: float) -> Simulation:
    reg = default_registry()
    profile = {
        "schedulerName": "balanced",
        "plugins": {
            "preScore": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NodeResourcesBalancedAllocation"}],
            },
            "score": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "NodeResourcesBalancedAllocation", "weight": weight}],
            },
        },
        "pluginConfig": [
            {
                "name": "NodeResourcesBalancedAllocation",
                "args": {"resources": [{"name": "cpu"}, {"name": "memory", "weight": 1}]},
            }
        ],
    }
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}
    p = config_from_dict(doc, reg).profiles[0]
    # cpu-heavy has used its cpu but no memory; a memory-heavy pod balances it best.
    nodes = [
        node("cpu-heavy", cpu=4000, mem=4000),
        node("empty", cpu=4000, mem=4000),
    ]
    return Simulation(nodes, p, reg, seed=1)


def test_in_a_profile_places_where_use_stays_balanced() -> None:
    sim = _sim(1)
    first = sim.submit(pod("cpu", request=PodRequest(cpu_milli=2000, memory_bytes=100)))
    # Both empty: cpu 0.5, memory 0.025 on either node -> a tie, settled by the tie-break.
    assert first.result is Result.SCHEDULED
    d = sim.submit(
        pod("mem", request=PodRequest(cpu_milli=100, memory_bytes=2000)), keep_scores=True
    )
    assert d.result is Result.SCHEDULED
    # On the cpu node: cpu 2100/4000, memory 2100/4000 -> 100; on the other node
    # 100/4000 and 2000/4000 -> 76.
    assert d.node == first.node
    assert d.scores is not None
    by_row = dict(
        zip(
            d.scores.rows.tolist(),
            d.scores.by_plugin["NodeResourcesBalancedAllocation"].raw.tolist(),
            strict=True,
        )
    )
    assert sorted(by_row.values()) == [76.0, 100.0]
    # A best-effort pod skips the plugin: every node totals 0.
    be = sim.submit(pod("be"), keep_scores=True)
    assert be.result is Result.SCHEDULED
    assert be.scores is not None
    assert "NodeResourcesBalancedAllocation" not in be.scores.by_plugin
    assert sim.errors == 0


def test_gpu_node_scores_in_range() -> None:
    snap = snapshot(gpu_node("g", cards=8))
    got = scores(
        snap,
        PodRequest(cpu_milli=8000, memory_bytes=1 << 30, gpu_cards=2),
        "g",
        a=args("cpu", "memory", GPU),
    )
    assert 0 <= got[0] <= 100
