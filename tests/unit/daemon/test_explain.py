"""The explain endpoint's and command's answers that need no cluster: which pods are
refused and how, how a target is read, and the same JSON computed from Facts."""

from __future__ import annotations

from gpusched.daemon.explain import compute, refuse
from gpusched.daemon.explain_cli import split_target
from gpusched.explain.render import human
from gpusched.framework.interfaces import Allocation
from gpusched.model import keys
from tests.unit.explain.support import REGISTRY, facts, node, pod


def test_a_bound_pod_is_refused_naming_its_node_and_cards() -> None:
    bound = pod("done", 2, node_name="gpu-1", cards="3,4")
    status, body = refuse(bound, "team/done", {keys.SCHEDULER_NAME})
    assert status == 409 and body["reason"] == "AlreadyBound"
    assert body["node"] == "gpu-1" and body["cards"] == "3,4"
    assert "bound to node gpu-1 on cards 3,4" in body["error"]


def test_missing_and_foreign_pods_are_refused() -> None:
    assert refuse(None, "team/x", {keys.SCHEDULER_NAME}) == (
        404,
        {"error": "pod team/x not found", "reason": "NotFound"},
    )
    other = pod("x", 1, scheduler_name="default-scheduler")
    status, body = refuse(other, "team/x", {keys.SCHEDULER_NAME})
    assert status == 422 and "'default-scheduler', not this one" in body["error"]
    assert refuse(pod("y", 1), "team/y", {keys.SCHEDULER_NAME}) is None


def test_compute_finds_the_pod_in_the_facts_and_explains_it() -> None:
    want = pod("want", 9)  # more cards than any node has
    status, body = compute(facts([node("a")], [want]), REGISTRY, "team", "want")
    assert status == 200 and body["binding"] == "resources" and body["changes"] == []
    assert "no single change found" in body["notes"][-1]
    text = human(body)
    assert "binding constraint: resources" in text and "Insufficient nvidia.com/gpu" in text
    assert compute(facts([node("a")], [want]), REGISTRY, "team", "nope")[0] == 404


def test_targets() -> None:
    assert split_target("ns/pod", "") == ("ns", "pod")
    assert split_target("pod", "ns") == ("ns", "pod")
    assert split_target("pod", "") == ("default", "pod")
    assert split_target("a/b/c", "") is None
    assert split_target("a/b", "other") is None


def test_a_pod_being_bound_is_refused_naming_its_node() -> None:
    want = pod("want", 2)
    f = facts([node("a")], [want])
    f.assumed = [(want, Allocation("a", 0, (0, 1), (1000, 1000), (0, 0)))]
    status, body = compute(f, REGISTRY, "team", "want")
    assert status == 409 and body["reason"] == "BeingBound"
    assert body["node"] == "a" and body["cards"] == "0,1"
