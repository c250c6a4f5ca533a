"""NodeResourcesFit: fit reasons, kube-scheduler's scoring formulas and args."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from gpusched.core.schedule_one import Result
from gpusched.framework import (
    CycleState,
    Diagnosis,
    FilterPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from gpusched.framework.status import Code
from gpusched.model.pod import PodRequest, pod_from_k8s
from gpusched.plugins.node_resources_fit import (
    NodeResourcesFit,
    NodeResourcesFitArgs,
)
from gpusched.plugins.node_resources_fit.plugin import STATE
from tests.builders import (
    MiB,
    ai_pod,
    ai_sim,
    all_rows,
    fit_strategy,
    gpu_node,
    node,
    passing,
    pod,
    reasons_by_node,
    rows_of,
    snapshot,
)
from tests.fakes import FakeHandle


def fit(snap: Any, args: NodeResourcesFitArgs | None = None) -> NodeResourcesFit:
    return NodeResourcesFit(args, FakeHandle(snap))


def test_implements_its_points() -> None:
    plugin = fit(snapshot())
    for proto in (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin):
        assert isinstance(plugin, proto)
    assert NodeResourcesFit.Args is NodeResourcesFitArgs


def test_filter_reasons_in_kube_order() -> None:
    snap = snapshot(
        node("fits", cpu=2000, mem=2 * MiB * 1024),
        node("full-pods", pods=0),
        node("small-cpu", cpu=500),
        node("small-mem", mem=MiB),
        node("small-both", cpu=500, mem=MiB),
    )
    p = pod(request=PodRequest(cpu_milli=1000, memory_bytes=512 * MiB))
    plugin = fit(snap)
    state = CycleState()
    res_pf, st = plugin.pre_filter(state, p)
    assert res_pf is None
    assert st.is_success()
    mask = all_rows(snap)
    res = plugin.filter(state, p, mask)
    assert passing(snap, res) == ["fits"]
    # Every reason that holds is kept, in fitsRequest's order (pods, cpu, memory).
    assert reasons_by_node(snap, mask, res) == {
        "full-pods": "Too many pods",
        "small-cpu": "Insufficient cpu",
        "small-mem": "Insufficient memory",
        "small-both": "Insufficient cpu, Insufficient memory",
    }
    # The pods check is not unresolvable; nor is cpu or memory the node has allocatable but
    # in use. These nodes' allocatable is below the request: nothing preempted frees it.
    assert isinstance(res.unresolvable, np.ndarray)
    unresolvable = {snap.names[r] for r in np.flatnonzero(res.unresolvable)}
    assert unresolvable == {"small-cpu", "small-mem", "small-both"}
    # The FailedScheduling message counts a node under each of its reasons, as kube does:
    # "0/5 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 Too many pods."
    diagnosis = Diagnosis(snap.size)
    diagnosis.record(mask, res, plugin.name)
    assert diagnosis.message() == (
        "0/5 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 Too many pods."
    )


def test_cpu_in_use_is_resolvable_and_beyond_allocatable_is_not() -> None:
    snap = snapshot(node("busy", cpu=2000), node("small", cpu=500))
    snap.apply(snap.row_of("busy"), 1500, 0, (), (), ())  # 500m free of 2000m
    p = pod(request=PodRequest(cpu_milli=1000))
    res = fit(snap).filter(CycleState(), p, all_rows(snap))
    assert passing(snap, res) == []
    assert isinstance(res.unresolvable, np.ndarray)
    assert [snap.names[r] for r in np.flatnonzero(res.unresolvable)] == ["small"]


def test_exact_fit_passes_and_one_more_fails() -> None:
    snap = snapshot(node("n", cpu=1000, mem=1000))
    plugin = fit(snap)
    ok = pod(request=PodRequest(cpu_milli=1000, memory_bytes=1000))
    over = pod(request=PodRequest(cpu_milli=1001, memory_bytes=1000))
    assert passing(snap, plugin.filter(CycleState(), ok, all_rows(snap))) == ["n"]
    assert passing(snap, plugin.filter(CycleState(), over, all_rows(snap))) == []


def test_zero_request_fits_an_overcommitted_node_but_not_a_full_one() -> None:
    snap = snapshot(node("busy", cpu=1000, pods=2), node("full", pods=1))
    snap.apply(snap.row_of("busy"), 1500, 0, (), (), ())  # over-committed on cpu
    snap.apply(snap.row_of("full"), 0, 0, (), (), ())  # its one pod slot is used
    res = fit(snap).filter(CycleState(), pod(), all_rows(snap))
    assert passing(snap, res) == ["busy"]


def test_requests_come_from_the_pod_spec_init_containers_and_limits() -> None:
    # Init containers run alone: the pod needs max(sum(containers), max(init)); a missing
    # request defaults to the limit.
    spec = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}},
                {"resources": {"limits": {"cpu": "250m"}}},
            ],
            "initContainers": [{"resources": {"limits": {"cpu": "2", "memory": "50Mi"}}}],
        },
    }
    p = pod_from_k8s(spec)
    state = CycleState()
    plugin = fit(snapshot(node("small", cpu=1999), node("big", cpu=2000)))
    plugin.pre_filter(state, p)
    req = state.read(STATE)
    assert (req.cpu_milli, req.memory_bytes) == (2000, 100 * MiB)
    assert passing(
        plugin.handle.snapshot, plugin.filter(state, p, all_rows(plugin.handle.snapshot))
    ) == ["big"]


def scores(args: NodeResourcesFitArgs | None, snap: Any, p: Any, *names: str) -> list[float]:
    plugin = fit(snap, args)
    state = CycleState()
    plugin.pre_filter(state, p)
    rows = rows_of(snap, *names)
    assert plugin.pre_score(state, p, rows).is_success()
    out = plugin.score(state, p, rows)
    assert out.dtype == np.float64
    assert ((out >= 0) & (out <= 100)).all()
    return [float(x) for x in out]


def two_nodes() -> Any:
    # kube-scheduler's least/most_allocated_test "differently sized nodes".
    return snapshot(node("n1", cpu=4000, mem=10000), node("n2", cpu=6000, mem=10000))


def test_least_allocated_matches_kube() -> None:
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    # n1: cpu (4000-3000)*100/4000 = 25, mem 50 -> 37 (integer); n2: 50, 50 -> 50.
    assert scores(None, two_nodes(), p, "n1", "n2") == [37, 50]


def test_most_allocated_matches_kube() -> None:
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    assert scores(fit_strategy("MostAllocated"), two_nodes(), p, "n1", "n2") == [62, 50]


def test_other_resources_score_as_kube() -> None:
    # calculateResourceAllocatableRequest: ephemeral-storage is scored whatever the pod asks;
    # an extended resource or hugepages only when requested; one no node offers never.
    snap = snapshot(
        node("a", cpu=4000, other={"ephemeral-storage": 1000, "rdma/hca": 4}),
        node("b", cpu=4000, other={"ephemeral-storage": 4000, "rdma/hca": 8}),
    )
    snap.apply(snap.row_of("a"), 0, 0, (), (), (), other=(("ephemeral-storage", 500),))
    args = fit_strategy(
        "MostAllocated", ("ephemeral-storage", 1), ("rdma/hca", 1), ("example.com/fpga", 1)
    )
    assert args.validate() == []
    plain = pod(request=PodRequest(cpu_milli=1000))
    # a: 500/1000 -> 50; b: 0/4000 -> 0 (rdma not asked for, fpga offered nowhere).
    assert scores(args, snap, plain, "a", "b") == [50, 0]
    rdma = pod(request=PodRequest(cpu_milli=1000, other=(("rdma/hca", 2),)))
    # a: (50 + 2*100/4 = 50) / 2 = 50; b: (0 + 2*100/8 = 25) / 2 = 12.
    assert scores(args, snap, rdma, "a", "b") == [50, 12]


def test_existing_usage_counts() -> None:
    snap = two_nodes()
    snap.apply(snap.row_of("n2"), 3000, 0, (), (), ())
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    # n2 cpu now (6000-6000)*100/6000 = 0 -> (0+50)/2 = 25.
    assert scores(None, snap, p, "n1", "n2") == [37, 25]


def test_best_effort_pod_uses_non_zero_defaults() -> None:
    # 100m cpu, 200 MiB memory. Memory 200 MiB > 10000 bytes of allocatable:
    # LeastAllocated scores it 0, MostAllocated clamps to 100.
    snap = snapshot(node("n", cpu=4000, mem=10000))
    assert scores(None, snap, pod(), "n") == [(97 + 0) // 2]
    assert scores(fit_strategy("MostAllocated"), snap, pod(), "n") == [(2 + 100) // 2]


def test_weights_and_single_resource() -> None:
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    # n1: (25*3 + 50*1) / 4 = 31
    assert scores(
        fit_strategy("LeastAllocated", ("cpu", 3), ("memory", 1)), two_nodes(), p, "n1"
    ) == [31]
    assert scores(fit_strategy("LeastAllocated", ("memory", 1)), two_nodes(), p, "n1") == [50]


def test_requested_to_capacity_ratio_increasing_shape() -> None:
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    args = fit_strategy("RequestedToCapacityRatio", shape=((0, 0), (100, 10)))
    # utilisation 75 and 50 -> scores 75 and 50 -> round(125/2) = 63; n2 50, 50 -> 50.
    assert scores(args, two_nodes(), p, "n1", "n2") == [63, 50]


def test_requested_to_capacity_ratio_truncates_like_go() -> None:
    # Shape falls from 100 to 0 between 0 and 30 % utilisation. At 10 %:
    # 100 + (0-100)*(10-0)/(30-0) = 100 + trunc(-33.3) = 67 (floor division would give 66).
    snap = snapshot(node("n", cpu=1000, mem=10000))
    p = pod(request=PodRequest(cpu_milli=100, memory_bytes=1000))
    args = fit_strategy("RequestedToCapacityRatio", ("cpu", 1), shape=((0, 10), (30, 0)))
    assert scores(args, snap, p, "n") == [67]


def test_requested_to_capacity_ratio_drops_zero_scoring_resources() -> None:
    # cpu at 100 % scores 0 on a rising shape and is left out: the node scores memory only.
    snap = snapshot(node("n", cpu=1000, mem=10000))
    p = pod(request=PodRequest(cpu_milli=1000, memory_bytes=5000))
    args = fit_strategy("RequestedToCapacityRatio", shape=((0, 10), (100, 0)))
    assert scores(args, snap, p, "n") == [50]


def test_gpu_cards_as_an_extended_resource() -> None:
    snap = snapshot(
        node("fresh", cards=8),
        node("broken-into", cards=8),
        node("cpu-only"),
    )
    row = snap.row_of("broken-into")
    snap.apply(row, 0, 0, (0, 1), (1000, 1000), (81920, 81920))  # two whole cards
    snap.apply(row, 0, 0, (2,), (250,), (0,))  # a share of a third: not intact either
    args = fit_strategy("MostAllocated", ("nvidia.com/gpu", 1))
    two_cards = pod(request=PodRequest(gpu_cards=2))
    # requested = not-intact cards + the pod's cards: (0+2)*100/8 = 25, (3+2)*100/8 = 62;
    # a node without cards is not scored on the resource -> 0.
    assert scores(args, snap, two_cards, "fresh", "broken-into", "cpu-only") == [25, 62, 0]
    # A pod asking for no nvidia.com/gpu does not score it at all.
    assert scores(args, snap, pod(request=PodRequest(gpu_milli=500)), "fresh", "broken-into") == [
        0,
        0,
    ]


def test_gpu_weight_mixes_with_cpu() -> None:
    snap = snapshot(node("n", cpu=4000, mem=10000, cards=4))
    args = fit_strategy("MostAllocated", ("cpu", 1), ("nvidia.com/gpu", 3))
    p = pod(request=PodRequest(cpu_milli=1000, gpu_cards=2))
    # cpu 25, gpu 50 -> (25 + 150) / 4 = 43
    assert scores(args, snap, p, "n") == [43]


def test_score_without_pre_filter_state() -> None:
    snap = two_nodes()
    p = pod(request=PodRequest(cpu_milli=3000, memory_bytes=5000))
    assert fit(snap).score(CycleState(), p, rows_of(snap, "n1")).tolist() == [37]


# -- other resources: extended, ephemeral-storage, hugepages ---------------------------------


def _other_pod(other: dict[str, int]) -> Any:
    return pod(request=PodRequest(cpu_milli=100, other=tuple(sorted(other.items()))))


def test_filter_checks_each_other_resource_with_kube_reasons() -> None:
    snap = snapshot(
        node(
            "fits", other={"rdma/hca": 2, "ephemeral-storage": 10 * MiB, "hugepages-2Mi": 4 * MiB}
        ),
        node("no-rdma", other={"ephemeral-storage": 10 * MiB, "hugepages-2Mi": 4 * MiB}),
        node(
            "small-disk", other={"rdma/hca": 2, "ephemeral-storage": MiB, "hugepages-2Mi": 4 * MiB}
        ),
        node("no-pages", other={"rdma/hca": 2, "ephemeral-storage": 10 * MiB}),
        node(
            "used-rdma",
            other={"rdma/hca": 2, "ephemeral-storage": 10 * MiB, "hugepages-2Mi": 4 * MiB},
        ),
    )
    snap.apply(snap.row_of("used-rdma"), 0, 0, (), (), (), other=(("rdma/hca", 1),))
    p = _other_pod({"rdma/hca": 2, "ephemeral-storage": 2 * MiB, "hugepages-2Mi": 2 * MiB})
    plugin = fit(snap)
    state = CycleState()
    _, st = plugin.pre_filter(state, p)
    assert st.is_success()
    cand = all_rows(snap)
    res = plugin.filter(state, p, cand)
    assert passing(snap, res) == ["fits"]
    assert reasons_by_node(snap, cand, res) == {
        "no-rdma": "Insufficient rdma/hca",
        # ephemeral-storage is checked first, as kube-scheduler does
        "small-disk": "Insufficient ephemeral-storage",
        "no-pages": "Insufficient hugepages-2Mi",
        "used-rdma": "Insufficient rdma/hca",
    }
    # Preemption cannot give a node what it does not have; it can free used-rdma's.
    assert isinstance(res.unresolvable, np.ndarray)
    unresolvable = sorted(snap.names_of(np.flatnonzero(res.unresolvable)))
    assert unresolvable == ["no-pages", "no-rdma", "small-disk"]


def test_a_resource_no_node_offers_is_unschedulable_and_unresolvable() -> None:
    snap = snapshot(node("a", other={"rdma/hca": 1}), node("b"))
    plugin = fit(snap)
    for p, missing in (
        (_other_pod({"example.com/fpga": 1}), "example.com/fpga"),
        (_other_pod({"rdma/hca": 2}), "rdma/hca"),  # offered, but never this many
    ):
        _, st = plugin.pre_filter(CycleState(), p)
        assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert st.reasons == (f"2 Insufficient {missing}",)
    _, st = plugin.pre_filter(CycleState(), _other_pod({"rdma/hca": 1}))
    assert st.is_success()


def test_ignored_resources_and_groups_skip_extended_resources_only() -> None:
    snap = snapshot(node("a"))
    args = NodeResourcesFitArgs(
        ignored_resources=("rdma/hca",), ignored_resource_groups=("example.com",)
    )
    plugin = fit(snap, args)
    p = _other_pod({"rdma/hca": 1, "example.com/fpga": 3})
    state = CycleState()
    _, st = plugin.pre_filter(state, p)
    assert st.is_success()
    assert passing(snap, plugin.filter(state, p, all_rows(snap))) == ["a"]
    # A native resource is never ignored, whatever the group says.
    native = fit(snap, NodeResourcesFitArgs(ignored_resources=("ephemeral-storage",)))
    _, st = native.pre_filter(CycleState(), _other_pod({"ephemeral-storage": 1}))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert NodeResourcesFitArgs(ignored_resource_groups=("a/b",)).validate()[0][0] == (
        "ignoredResourceGroups[0]"
    )


def test_other_resources_through_the_scheduler_read_as_kube_scheduler_says_them() -> None:
    s = ai_sim(
        replace(gpu_node("a"), other=(("rdma/hca", 1),)),
        replace(gpu_node("b"), other=(("rdma/hca", 1),)),
    )
    rdma = (("rdma/hca", 1),)
    placed = [s.submit(ai_pod(f"r{i}", other=rdma)) for i in range(2)]
    assert [d.result for d in placed] == [Result.SCHEDULED] * 2
    assert sorted(d.node for d in placed) == ["a", "b"]
    full = s.submit(ai_pod("r2", other=rdma))
    assert full.result is Result.UNSCHEDULABLE
    assert full.message == "0/2 nodes are available: 2 Insufficient rdma/hca."
    nowhere = s.submit(ai_pod("fpga", other=(("example.com/fpga", 1),)))
    assert nowhere.result is Result.UNSCHEDULABLE
    assert nowhere.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert nowhere.message == "0/2 nodes are available: 2 Insufficient example.com/fpga."
