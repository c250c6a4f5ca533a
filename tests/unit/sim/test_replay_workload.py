"""The replay's workload model: trace rows and jobs, the rack layout."""

from __future__ import annotations

import dataclasses

from gpusched.sim.openb import TraceNode
from gpusched.sim.replay_workload import ReplayConfig, build_workload, rack_layout
from tests.builders import trace_nodes, trace_pod


def test_odd_rows_and_jobs() -> None:
    pods = [
        trace_pod("w0", 10, 90),
        trace_pod("w1", 11, 90),  # same shape within 1 s: same job
        trace_pod("w2", 20, 90),  # too late: a job of its own
        trace_pod("bad", 30, 30),  # deleted at creation: skipped
        trace_pod("keep", 5, None),  # never deleted: stays
        trace_pod("end", 40, 500, gpus=0),  # Running at the trace's last deletion: stays
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


def test_layout_racks_by_sku_and_fraction() -> None:
    nodes = trace_nodes(20, 8) + [TraceNode(f"p{i}", 32000, 65536, 2, "P100") for i in range(5)]
    nodes.append(TraceNode("cpu", 32000, 65536, 0, ""))
    cfg = ReplayConfig(nodes_per_rack=16, racks_per_spine=2)
    layout = rack_layout(nodes, 1, cfg)
    assert len(layout.nodes) == 25 and layout.racks == 3
    for n in layout.nodes:
        same = {m.cards[0].model for m in layout.nodes if m.rack == n.rack}
        assert len(same) == 1
    assert set(layout.heat.sites) == {n.name for n in layout.nodes}
    small = rack_layout(nodes, 1, dataclasses.replace(cfg, cluster_fraction=0.1))
    assert sorted(n.gpu_count for n in small.nodes) == [2, 8, 8]
