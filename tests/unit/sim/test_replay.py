"""Replay mode (gpusched/sim/replay.py) on small inline traces."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpusched.plugins import default_registry
from gpusched.sim.openb import TraceNode, TracePod
from gpusched.sim.replay import (
    ReplayConfig,
    ReplayRun,
    build_workload,
    offered_load,
    rack_layout,
    replay,
)
from gpusched.sim.thermal import LOAD_RISE_C


def _pod(
    name: str, t0: int, t1: int | None, gpus: int = 1, milli: int = 1000, cpu: int = 1000
) -> TracePod:
    return TracePod(
        name=name,
        cpu_milli=cpu,
        memory_mib=1024,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        pod_phase="Running",
        creation_time=t0,
        deletion_time=t1,
        scheduled_time=t0,
    )


def _nodes(count: int, gpus: int) -> list[TraceNode]:
    return [TraceNode(f"n{i}", 32000, 65536, gpus, "T4") for i in range(count)]


def _run(
    pods: list[TracePod],
    nodes: list[TraceNode],
    cfg: ReplayConfig,
    policy: str = "ai-scheduler",
    seed: int = 3,
) -> ReplayRun:
    wl = build_workload(pods, cfg)
    return replay(
        wl,
        rack_layout(nodes, seed, cfg),
        policy,
        default_registry(),
        seed=seed,
        cfg=cfg,
        keep_starts=True,
        warm_up=False,
    )


def _blocked() -> list[TracePod]:
    # Two 2-card nodes: a and b fill them, c waits until a leaves at t=100.
    return [
        _pod("a", 0, 100, gpus=2, cpu=1000),
        _pod("b", 0, 1000, gpus=2, cpu=2000),
        _pod("c", 50, 500, gpus=2, cpu=3000),
        _pod("z", 200, 300, gpus=0, cpu=100),
    ]


@pytest.mark.parametrize("policy", ["ai-scheduler", "least-allocated", "most-allocated"])
def test_departure_frees_cards_and_a_waiting_pod_starts(policy: str) -> None:
    run = _run(_blocked(), _nodes(2, 2), ReplayConfig(), policy)
    assert run.starts["a"] == 0 and run.starts["b"] == 0
    assert run.starts["c"] == 100  # retried after a's departure
    assert run.started == 4 and run.gave_up == 0
    assert run.whole_jobs == 3 and run.whole_jobs_ok == 3
    assert run.mean_wait_s == pytest.approx(50 / 4)
    assert run.errors == 0


def test_timeout_counts_as_failure() -> None:
    run = _run(_blocked(), _nodes(2, 2), ReplayConfig(timeout_s=30))
    assert math.isnan(run.starts["c"])
    assert run.gave_up == 1
    assert run.whole_jobs_ok == 2 and run.whole_success_pct == pytest.approx(200 / 3)


def test_withdrawn_while_waiting() -> None:
    pods = _blocked()
    pods[2] = _pod("c", 50, 80, gpus=2, cpu=3000)  # deleted before a leaves
    run = _run(pods, _nodes(2, 2), ReplayConfig())
    assert run.withdrawn == 1 and run.gave_up == 0 and math.isnan(run.starts["c"])


def test_odd_rows_and_jobs() -> None:
    pods = [
        _pod("w0", 10, 90),
        _pod("w1", 11, 90),  # same shape within 1 s: same job
        _pod("w2", 20, 90),  # too late: a job of its own
        _pod("bad", 30, 30),  # deleted at creation: skipped
        _pod("keep", 5, None),  # never deleted: stays
        _pod("end", 40, 500, gpus=0),  # Running at the trace's last deletion: stays
    ]
    wl = build_workload(pods, ReplayConfig())
    assert wl.skipped == {"deletion_time not after creation_time": 1}
    assert wl.multi_pod_jobs == 1 and len(wl.jobs) == 4
    assert wl.stays == 2
    job = [p for p in wl.pods if p.job]
    assert [p.source.name for p in job] == ["w0", "w1"]
    assert all(p.info.job_id == job[0].job for p in job)
    assert wl.pods[0].arrival == 0 and wl.pods[0].source.name == "keep"
    compressed = build_workload(pods, ReplayConfig(time_compression=5))
    assert [p.arrival for p in compressed.pods] == [0, 1, 1.2, 3, 7]
    assert [p.lifetime for p in compressed.pods] == [None, 80, 79, 70, None]


def test_figures_on_a_hand_made_case() -> None:
    # Two 1-card nodes in one rack; a 2-pod job fills both from t=0 to 1000; a CPU pod
    # arriving at t=100 closes the window [first departure.. last arrival] = [0, 100].
    pods = [_pod("j0", 0, 1000), _pod("j1", 0, 1000), _pod("cpu", 100, 2000, gpus=0)]
    nodes = _nodes(2, 1)
    cfg = ReplayConfig()
    layout = rack_layout(nodes, 3, cfg)
    run = _run(pods, nodes, cfg)
    idle = layout.idle_temperatures
    hot = [idle["n0"] + LOAD_RISE_C, idle["n1"] + LOAD_RISE_C]
    assert run.multi_jobs == 1 and run.same_rack_pct == 100.0
    assert run.hottest_max_c == pytest.approx(max(hot), abs=1e-3)
    assert run.hottest_p99_c == pytest.approx(max(hot), abs=1e-3)
    spread = 100 * abs(hot[0] - hot[1]) / (sum(hot) / 2)
    assert run.jitter_pct == pytest.approx(spread, rel=1e-4) and run.jitter_jobs == 1
    assert run.gpu_alloc_mean_pct == pytest.approx(100.0)
    assert run.whole_success_pct == 100.0
    wl = build_workload(pods, cfg)
    assert offered_load(wl, 2000) == pytest.approx(1.0)
    # One node a rack: the job's pods sit in two racks.
    split = _run(pods, nodes, ReplayConfig(nodes_per_rack=1))
    assert split.same_rack_pct == 50.0


def test_layout_racks_by_sku_and_fraction() -> None:
    nodes = _nodes(20, 8) + [TraceNode(f"p{i}", 32000, 65536, 2, "P100") for i in range(5)]
    nodes.append(TraceNode("cpu", 32000, 65536, 0, ""))
    cfg = ReplayConfig(nodes_per_rack=16, racks_per_spine=2)
    layout = rack_layout(nodes, 1, cfg)
    assert len(layout.nodes) == 25 and layout.racks == 3
    for n in layout.nodes:
        same = {m.cards[0].model for m in layout.nodes if m.rack == n.rack}
        assert len(same) == 1
    assert set(layout.idle_temperatures) == {n.name for n in layout.nodes}
    small = rack_layout(nodes, 1, dataclasses.replace(cfg, cluster_fraction=0.1))
    assert sorted(n.gpu_count for n in small.nodes) == [2, 8, 8]


def test_a_seed_reproduces_the_result() -> None:
    pods = [
        _pod(f"p{i}", i * 7, i * 7 + 300 + (i * 37) % 200, milli=250 * (1 + i % 4))
        for i in range(40)
    ]
    nodes = _nodes(6, 2)
    a = dataclasses.replace(_run(pods, nodes, ReplayConfig(), seed=5), seconds=0.0)
    b = dataclasses.replace(_run(pods, nodes, ReplayConfig(), seed=5), seconds=0.0)
    assert repr(a) == repr(b)  # NaN-safe equality
    assert a.started > 0
