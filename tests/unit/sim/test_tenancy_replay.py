"""The tenancy replay on a small trace whose evictions and lost work are known by hand."""

from __future__ import annotations

import itertools

import pytest

from gpusched.plugins import default_registry
from gpusched.sim.replay_workload import ReplayConfig, build_workload, rack_layout
from gpusched.sim.tenancy_replay import (
    INFERENCE,
    TRAINING,
    TenancyConfig,
    TenancyRun,
    replay_tenancy,
    tenant_workload,
)
from gpusched.sim.tenants import burst_tenants, concentration
from tests.builders import trace_nodes, trace_pod

# One 8-card node. A training gang of two 4-card workers runs from t=0 (checkpointing
# every 600 s, for 10,000 s); at t=1000 an inference pod asks for half a card: only
# preemption makes room, and the gang's last checkpoint was at t=600, so each worker loses
# 400 s x 4 cards.
PODS = [
    trace_pod("worker-0", 0, 10_000, gpus=4),
    trace_pod("worker-1", 0, 10_000, gpus=4),
    trace_pod("infer", 1000, 1100, gpus=1, milli=500),
    # A CPU pod after them, so the trace does not end with the workers still running.
    trace_pod("cpu", 19_000, 20_000, gpus=0),
]
LOST_GPU_H = 2 * 4 * 400 / 3600


def run(policy: str) -> TenancyRun:
    cfg = ReplayConfig(gangs=True)
    wl = build_workload(PODS, cfg)
    layout = rack_layout(trace_nodes(1, 8), 1, cfg)
    tcfg = TenancyConfig(tenants=1, checkpoint_intervals=(600,))
    twl = tenant_workload(wl, 8000, tcfg, seed=1)
    assert [p.klass for p in twl.pods] == [TRAINING, TRAINING, INFERENCE, INFERENCE]
    assert twl.quotas[0].min[0] == 8000
    return replay_tenancy(twl, layout, policy, default_registry(), seed=1, cfg=cfg)


def test_least_lost_work_evicts_the_gang_whole() -> None:
    r = run("ai-scheduler")
    assert r.errors == 0
    assert r.evictions == 2  # the whole gang, by the scheduler
    assert r.lost_evicted_gpu_h == pytest.approx(LOST_GPU_H, rel=1e-6)
    assert r.lost_killed_gpu_h == 0.0
    assert r.jobs_restarted == 1
    # Placed on the room preemption made, at its retry after the 1 s backoff.
    assert r.waits[INFERENCE][1] <= 1.0
    # Re-created, the gang waits for the inference pod to leave, then runs to the end.
    assert r.never_started == 0 and r.restarts == {TRAINING: 2}


def test_kube_default_evicts_one_worker_and_the_job_dies_with_it() -> None:
    r = run("kube-default")
    assert r.errors == 0
    assert r.evictions == 1  # the fewest victims; gang-blind
    assert r.lost_evicted_gpu_h == pytest.approx(LOST_GPU_H / 2, rel=1e-6)
    # The other worker is lost with its job: its work since the checkpoint is counted too.
    assert r.lost_killed_gpu_h == pytest.approx(LOST_GPU_H / 2, rel=1e-6)
    assert r.lost_gpu_h == pytest.approx(LOST_GPU_H, rel=1e-6)
    assert r.never_started == 0 and r.restarts == {TRAINING: 2}


def test_tenants_come_in_seeded_bursts() -> None:
    a = burst_tenants(500, 4, seed=7, mean_burst=10)
    assert a == burst_tenants(500, 4, seed=7, mean_burst=10)
    assert a != burst_tenants(500, 4, seed=8, mean_burst=10)
    runs = sum(1 for x, y in itertools.pairwise(a) if x != y) + 1
    assert 20 <= runs <= 80  # about 500 / 10 bursts (a burst may repeat its predecessor)
    assert set(a) <= {f"tenant-{k}" for k in range(4)}


def test_concentration_is_the_gpu_weighted_share_of_each_nodes_top_tenant() -> None:
    held = [("a", "n1", 3000), ("b", "n1", 1000), ("a", "n2", 2000), ("b", "n2", 2000)]
    assert concentration(held) == pytest.approx((3000 + 2000) / 8000)
    assert concentration([]) != concentration([])  # NaN: no GPU placed
