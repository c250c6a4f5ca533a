"""The ReplicaSet variant of the FGD workload (gpusched/sim/fgd_owners.py)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest

from gpusched.config import config_from_dict
from gpusched.plugins import default_registry
from gpusched.sim.fgd_owners import Owner, max_replicas_per_node, replicaset_owners
from gpusched.sim.fgd_protocol import run_seed
from gpusched.sim.fgd_workload import build_workload
from gpusched.sim.trace_cluster import HOSTNAME_LABEL, node_model, workload_pods
from tests.builders import TINY_NODES, config_doc, tiny_trace

TRACE = tiny_trace()
REG = default_registry()
WL = build_workload(TRACE.pods, TRACE.nodes, 42)


def test_owners_are_seeded_and_group_one_shape_in_bounded_sets() -> None:
    owners = replicaset_owners(WL.pods, 42, min_size=2, max_size=5)
    assert owners == replicaset_owners(WL.pods, 42, min_size=2, max_size=5)
    assert owners != replicaset_owners(WL.pods, 43, min_size=2, max_size=5)
    shapes: dict[str, set[object]] = defaultdict(set)
    for pod, owner in zip(WL.pods, owners, strict=True):
        shapes[owner.uid].add((pod.resource, pod.source.memory_mib))
    assert all(len(s) == 1 for s in shapes.values())
    sizes = Counter(o.uid for o in owners)
    assert max(sizes.values()) <= 5
    # Only the last set of each shape may be cut short by the end of the sequence.
    short = [uid for uid, n in sizes.items() if n < 2]
    assert len(short) <= len({s for v in shapes.values() for s in v})
    # A set's replicas arrive consecutively among the pods of their shape.
    last_of_shape: dict[object, str] = {}
    closed: set[str] = set()
    for pod, owner in zip(WL.pods, owners, strict=True):
        key = (pod.resource, pod.source.memory_mib)
        prev = last_of_shape.get(key)
        if prev is not None and prev != owner.uid:
            closed.add(prev)
        assert owner.uid not in closed
        last_of_shape[key] = owner.uid


def test_owner_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="min_size <= max_size"):
        replicaset_owners(WL.pods, 42, min_size=4, max_size=3)
    with pytest.raises(ValueError, match="min_size <= max_size"):
        replicaset_owners(WL.pods, 42, min_size=0, max_size=3)


def test_owned_pods_look_like_a_replicasets_pods() -> None:
    owners = replicaset_owners(WL.pods, 42)
    pods = workload_pods(WL.pods, "ai-scheduler", owners)
    for pod, owner in zip(pods, owners, strict=True):
        assert pod.controller == ("ReplicaSet", owner.uid)
        assert pod.namespace == owner.namespace
        assert pod.labels["app"] == owner.name
    plain = workload_pods(WL.pods, "ai-scheduler")
    assert all(p.controller == ("", "") and p.namespace == "openb" for p in plain)
    with pytest.raises(ValueError, match="owners for"):
        workload_pods(WL.pods, "ai-scheduler", owners[:-1])


def test_trace_nodes_carry_the_hostname_label() -> None:
    assert node_model(TINY_NODES[0]).labels[HOSTNAME_LABEL] == "n-0"
    assert node_model(TINY_NODES[0], name="x").labels[HOSTNAME_LABEL] == "x"


def test_max_replicas_per_node() -> None:
    a, b, c = Owner("a", "ua"), Owner("b", "ub"), Owner("c", "uc")
    owners = [a, a, a, b, b, c]
    # a: 2 on n1, 1 on n2 -> 2; b: one placed, one dropped -> not counted; c: alone.
    assert max_replicas_per_node(owners, ["n1", "n1", "n2", "n1", "", "n3"]) == 2.0
    assert math.isnan(max_replicas_per_node([a], ["n1"]))


def test_pod_topology_spread_spreads_replicasets_in_the_protocol() -> None:
    """With owners, PodTopologySpread's default constraints act: a heavy weight spreads
    the replicas at least as well as none, and strictly better on this trace."""

    def profile(name: str, score: dict[str, object]) -> dict[str, object]:
        return {"schedulerName": name, "plugins": {"score": score}}

    doc = config_doc(
        profile("heavy", {"enabled": [{"name": "PodTopologySpread", "weight": 100}]}),
        profile("off", {"disabled": [{"name": "PodTopologySpread"}]}),
    )
    profiles = {p.scheduler_name: p for p in config_from_dict(doc, REG).profiles}
    runs = {
        name: run_seed(TRACE, name, 42, REG, profile=p, owners="replicasets")
        for name, p in profiles.items()
    }
    assert all(r.errors == 0 for r in runs.values())
    assert runs["heavy"].max_per_node < runs["off"].max_per_node
    # Without owners the plugin has nothing to score: both profiles place alike.
    plain = {n: run_seed(TRACE, n, 42, REG, profile=p) for n, p in profiles.items()}
    assert math.isnan(plain["heavy"].max_per_node)
    assert list(plain["heavy"].used) == list(plain["off"].used)


def test_unknown_owners_is_refused() -> None:
    with pytest.raises(ValueError, match="owners must be one of"):
        run_seed(TRACE, "ai-scheduler", 42, REG, owners="jobs")
