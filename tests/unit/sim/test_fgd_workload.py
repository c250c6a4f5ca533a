"""FGD workload construction. Expected orders were printed by a Go program that replays the
simulator's calls (core.go Simulate, SortClusterPods, tuneUpPods/tuneDownPods) with Go's own
math/rand on the same six pods."""

from __future__ import annotations

import pytest

from gpusched.sim.fgd_workload import (
    PodResource,
    TargetPod,
    build_workload,
    cluster_milli_gpu,
    pod_resource,
    seeded_node_names,
    typical_pods,
)
from gpusched.sim.gorand import GoRand
from gpusched.sim.openb import TraceNode, TracePod

PODS = [
    TracePod("p-c", 1000, 1, 1, 500),
    TracePod("p-a", 1000, 1, 1, 1000),
    TracePod("p-e", 1000, 1, 0, 0),
    TracePod("p-b", 1000, 1, 2, 1000),
    TracePod("p-d", 1000, 1, 1, 250),
    TracePod("p-f", 1000, 1, 8, 1000),
]  # 11,750 milli-GPUs requested


def _nodes(gpus: int) -> list[TraceNode]:
    return [TraceNode(f"n-{i}", 64000, 1, 1, "T4") for i in range(gpus)]


def test_tune_up_seed42_matches_go() -> None:
    wl = build_workload(PODS, _nodes(12), seed=42)  # target 1.3 * 12000 = 15600
    assert wl.tuning == "up"
    assert [p.name for p in wl.pods] == [
        "p-b", "p-c", "p-e", "p-f", "p-d", "p-a",
        "p-d-tuned-0", "p-c-tuned-1", "p-c-tuned-2", "p-b-tuned-3",
    ]  # fmt: skip
    assert wl.pods[-1].source.name == "p-b"
    assert wl.pods[-1].is_clone
    assert not wl.pods[0].is_clone
    assert wl.requested_milli_gpu == 11750 + 250 + 500 + 500 + 2000


def test_tune_up_seed51_matches_go() -> None:
    wl = build_workload(PODS, _nodes(12), seed=51)
    assert [p.name for p in wl.pods] == [
        "p-a", "p-f", "p-d", "p-c", "p-b", "p-e",
        "p-d-tuned-0", "p-c-tuned-1", "p-b-tuned-2", "p-d-tuned-3", "p-d-tuned-4",
        "p-e-tuned-5",
    ]  # fmt: skip


def test_tune_down_seed42_matches_go() -> None:
    wl = build_workload(PODS, _nodes(5), seed=42)  # target 6500 < 11750
    assert wl.tuning == "down"
    assert [p.name for p in wl.pods] == ["p-b", "p-c", "p-e", "p-d", "p-a"]


def test_input_order_does_not_matter() -> None:
    a = build_workload(PODS, _nodes(12), seed=42)
    b = build_workload(list(reversed(PODS)), _nodes(12), seed=42)
    assert a.pods == b.pods


def test_tune_up_checks_per_gpu_share_not_total() -> None:
    # Only an 8-GPU pod: the check adds 1000 (per-GPU), the accounting adds 8000, so the
    # last clone overshoots the target, as in the simulator.
    pods = [TracePod("big", 1000, 1, 8, 1000)]
    wl = build_workload(pods, _nodes(20), seed=1)  # target 26000
    assert [p.name for p in wl.pods] == ["big", "big-tuned-0", "big-tuned-1", "big-tuned-2"]
    assert wl.requested_milli_gpu == 32000


def test_exact_target_means_no_tuning() -> None:
    pods = [TracePod("a", 1000, 1, 1, 1000), TracePod("b", 1000, 1, 2, 1000)]
    wl = build_workload(pods, _nodes(3), seed=3, ratio=1.0)
    assert wl.tuning == "none"
    assert {p.name for p in wl.pods} == {"a", "b"}


def test_node_names_follow_go_perm_after_the_workload() -> None:
    nodes = [TraceNode(f"n-{i}", 1, 1, 1, "T4") for i in (3, 1, 2, 0)]
    wl = build_workload(PODS, nodes, seed=42)
    # Continue an identical stream by hand: seed, Int, Shuffle, tuning draws, then Perm.
    rng = GoRand(42)
    rng.int_()
    rng.shuffle_list(list(range(len(PODS))))
    rng.intn(6)  # tuning: target 5200 < 11750, one removal brings it to 3750
    assert wl.tuning == "down"
    perm = rng.perm(4)
    assert wl.node_names == tuple(f"{perm[i]:04d}-n-{i}" for i in range(4))
    assert seeded_node_names(nodes, GoRand(9))[0].endswith("-n-0")


def test_shared_rng_continues_after_build() -> None:
    rng = GoRand(0)
    build_workload(PODS, _nodes(12), seed=42, rng=rng)
    again = GoRand(0)
    build_workload(PODS, _nodes(12), seed=42, rng=again)
    assert rng.int63() == again.int63()


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="unique"):
        build_workload([PODS[0], PODS[0]], _nodes(1), seed=1)
    with pytest.raises(ValueError, match="no GPUs"):
        build_workload(PODS, [TraceNode("c", 1, 1, 0, "")], seed=1)
    with pytest.raises(ValueError, match="positive"):
        build_workload(PODS, _nodes(1), seed=1, ratio=0)


def test_pod_resource_follows_pod_csv_to_yaml() -> None:
    assert pod_resource(TracePod("cpu", 2000, 1, 0, 700, "T4")) == PodResource(2000, 0, 0, "")
    assert pod_resource(TracePod("big", 1, 1, 1, 1500)) == PodResource(1, 1000, 1, "")
    assert pod_resource(TracePod("spec", 1, 1, 1, 300, "|V100M16||P100|")) == PodResource(
        1, 300, 1, "V100M16|P100"
    )
    assert pod_resource(TracePod("two", 1, 1, 2, 1000)).total_milli_gpu == 2000
    assert pod_resource(TracePod("share", 1, 1, 1, 999)).is_gpu_share
    assert cluster_milli_gpu(_nodes(3)) == 3000


def _shape(cpu: int, milli: int, num: int, count: int, spec: str = "") -> list[TracePod]:
    return [
        TracePod(f"{cpu}-{milli}-{num}-{spec}-{i}", cpu, 1, num, milli, spec) for i in range(count)
    ]


def test_typical_pods_cut_at_threshold_and_renormalise() -> None:
    pods = (
        _shape(4000, 500, 1, 50)
        + _shape(8000, 1000, 1, 30)
        + _shape(2000, 0, 0, 15)
        + _shape(1000, 1000, 8, 5)
    )
    tp = typical_pods(pods)  # 50+30+15 = 95 reaches 95% of 100: the 8-GPU shape is dropped
    assert [t.resource for t in tp] == [
        PodResource(4000, 500, 1, ""),
        PodResource(8000, 1000, 1, ""),
        PodResource(2000, 0, 0, ""),
    ]
    assert tp[0].percentage == (50 / 100) / (95 / 100)
    assert sum(t.percentage for t in tp) == pytest.approx(1.0)


def test_typical_pods_ties_order_by_larger_shape_first() -> None:
    pods = _shape(1000, 500, 1, 10) + _shape(1000, 500, 1, 10, "T4") + _shape(3000, 0, 0, 10)
    tp = typical_pods(pods, popularity_threshold=100)
    assert [t.resource for t in tp] == [
        PodResource(3000, 0, 0, ""),
        PodResource(1000, 500, 1, "T4"),
        PodResource(1000, 500, 1, ""),
    ]
    assert all(t.percentage == 10 / 30 for t in tp)


def test_typical_pods_options() -> None:
    pods = _shape(4000, 500, 1, 60) + _shape(2000, 0, 0, 40)
    no_cpu = typical_pods(pods, include_cpu_pods=False)
    assert no_cpu == [TargetPod(PodResource(4000, 500, 1, ""), 1.0)]
    # Default step (10 when <= 0) takes every class at once.
    assert len(typical_pods(pods, popularity_threshold=10, increase_step=0)) == 2
    assert len(typical_pods(pods, popularity_threshold=10)) == 1
    weighted = typical_pods(_shape(1, 1000, 2, 1) + _shape(1, 500, 1, 1), 100, gpu_res_weight=1)
    assert [t.percentage for t in weighted] == [3 / 4, 1 / 4]
    assert typical_pods([]) == []
