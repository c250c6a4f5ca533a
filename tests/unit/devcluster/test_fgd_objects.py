"""The live-parity benchmark's KWOK nodes are the simulator's nodes, field by field.

`bench/fgd_cluster.py` compares the daemon on the local control plane with `gpusched
simulate --protocol fgd`; a node that parses differently (pods cap, card memory, racks,
NVLink islands) would be a difference of the setup, not of the scheduler. This checks
every node of the openb GPU node list through the same readers both sides use: the
simulator's (`sim.openb.load_nodes` -> `trace_cluster.cluster_nodes`) and the daemon's
(`devcluster.read_openb_csv` -> `trace_node_object` -> `model.node.node_from_k8s`).
"""

from __future__ import annotations

from gpusched.devcluster import node_object, read_openb_csv
from gpusched.devcluster.fgd_objects import (
    fleet_differences,
    node_differences,
    trace_node_object,
    trace_pod_object,
)
from gpusched.devcluster.nodes import NodeSpec
from gpusched.model import node_from_k8s, pod_from_k8s
from gpusched.sim.fgd_protocol import load_trace
from gpusched.sim.fgd_workload import build_workload
from gpusched.sim.openb import DEFAULT_NODE_FILE, TraceNode, load_nodes
from gpusched.sim.trace_cluster import cluster_nodes, node_model, workload_pods
from tests.traces import require_openb


def test_every_openb_gpu_node_parses_as_the_simulators_node() -> None:
    directory = require_openb(DEFAULT_NODE_FILE)
    trace = [n for n in load_nodes(directory) if n.gpu > 0]
    specs = read_openb_csv(directory / DEFAULT_NODE_FILE)

    sim = cluster_nodes(trace)
    live = [node_from_k8s(trace_node_object(s)) for s in specs if s.gpus > 0]

    assert len(sim) == len(live) == 1213
    assert fleet_differences(sim, live) == []


def test_a_node_of_each_model_matches_without_the_trace() -> None:
    # Runs where the trace is absent (CI without ../shared): one node per model the
    # simulator knows, plus one it does not (default card memory).
    for model in ("V100M16", "V100M32", "P100", "T4", "A10", "G2", "G3", "A100M80"):
        for gpus in (1, 2, 4, 8):
            spec = NodeSpec(f"n-{model}-{gpus}", gpus, model, 64_000, 262_144, "rack-000", "s")
            sim = node_model(TraceNode(spec.name, 64_000, 262_144, gpus, model))
            assert node_differences(sim, node_from_k8s(trace_node_object(spec))) == []


def test_the_plain_devcluster_node_differs_where_the_module_says() -> None:
    # Why trace_node_object exists: the devcluster's own openb node is not the simulator's
    # (pods 110, no model label, its racks, its A10 memory, NVLink island 0).
    spec = NodeSpec("a10-node", 8, "A10", 64_000, 262_144, "rack-000", "spine-00", 8)
    sim = node_model(TraceNode(spec.name, 64_000, 262_144, 8, "A10"))
    diffs = node_differences(sim, node_from_k8s(node_object(spec)))
    fields = {d.split(": ", 1)[1].split(" sim=")[0] for d in diffs}
    assert {"pods", "rack", "spine", "card 0 memory_mib", "card 0 nvlink_island"} <= fields
    assert f"label {'alibabacloud.com/gpu-card-model'}" in fields


def test_every_arrival_of_a_seed_parses_as_the_simulators_pod() -> None:
    directory = require_openb("openb_pod_list_default.csv")
    trace = load_trace(directory, "openb_pod_list_default.csv")
    wl = build_workload(trace.pods, trace.nodes, 42, 1.3)

    pods = workload_pods(wl.pods)
    parsed = [pod_from_k8s(trace_pod_object(p, f"p{i:05d}", i)) for i, p in enumerate(pods)]

    assert len(pods) == 10866
    assert [p.request for p in parsed] == [p.request for p in pods]
    assert all(not p.errors and p.scheduler_name == "ai-scheduler" for p in parsed)
