"""Cache and snapshot edge cases found in review: node removal, card shrink, inference."""

from __future__ import annotations

from dataclasses import replace

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import Allocation
from tests.unit.core.fakes import gpu_node, make_pod


def test_assumed_pod_forgotten_after_its_node_was_removed() -> None:
    # An assumed pod has no spec.nodeName; forgetting it after its node left the cache must
    # still drop it from the node's pod set, or the node's return crashes on a stale uid.
    c = ClusterCache(Snapshot(8, capacity=2))
    row = c.upsert_node(gpu_node("a"))
    pod = make_pod("p", gpu_cards=1)
    c.assume(pod, Allocation("a", row, (0,), (1000,), (81920,)), deadline=10.0)
    c.remove_node("a")
    assert c.forget(pod.uid) is not None
    row = c.upsert_node(gpu_node("a"))  # raised KeyError
    assert int(c.snapshot.card_free_milli[row].sum()) == 8000
    assert list(c.pods_on_node("a")) == []


def test_shared_pod_of_another_scheduler_on_a_node_without_cards() -> None:
    # A pod bound by another scheduler with a gpu-milli annotation, on a node whose cards
    # the cache does not know: accounted without cards, not a crash.
    c = ClusterCache(Snapshot(8, capacity=2))
    c.upsert_node(gpu_node("cpu", cards=0))
    pod = replace(make_pod("p", gpu_milli=300), node_name="cpu", phase="Running")
    c.add_or_update_pod(pod)  # raised ValueError: min() arg is an empty sequence
    entry = c.get(pod.uid)
    assert entry is not None and entry.alloc is not None and entry.alloc.cards == ()


def test_card_count_shrinks_then_grows_while_a_pod_holds_a_removed_card() -> None:
    c = ClusterCache(Snapshot(8, capacity=2))
    row = c.upsert_node(gpu_node("a", cards=4))
    pod = replace(
        make_pod("p", gpu_milli=500),
        node_name="a",
        gpu_ids=(3,),
        phase="Running",
        annotations={"gpusched.io/gpu-ids": "3"},
    )
    c.add_or_update_pod(pod)
    snap = c.snapshot
    assert snap.card_free_milli[row, 3] == 500
    c.upsert_node(gpu_node("a", cards=2))  # card 3 disappears (e.g. Xid, device plugin)
    c.upsert_node(gpu_node("a", cards=4))  # and comes back while the pod still runs
    assert snap.card_free_milli[row, 3] == 500  # the pod still holds half of it
    c.remove_pod(pod.uid)
    # Every card is whole again: never more than a full card free.
    assert list(snap.card_free_milli[row, :4]) == [1000] * 4
    assert snap.gpu_milli_free() == snap.gpu_milli_capacity() == 4000


def test_card_count_shrinks_then_pod_leaves() -> None:
    c = ClusterCache(Snapshot(8, capacity=2))
    row = c.upsert_node(gpu_node("a", cards=4))
    pod = replace(make_pod("p", gpu_cards=1), node_name="a", gpu_ids=(3,), phase="Running")
    c.add_or_update_pod(pod)
    c.upsert_node(gpu_node("a", cards=2))
    c.remove_pod(pod.uid)
    snap = c.snapshot
    # No free share is left behind on a slot that has no card.
    assert snap.gpu_milli_free() == snap.gpu_milli_capacity() == 2000
    c.upsert_node(gpu_node("a", cards=4))
    assert list(snap.card_free_milli[row, :4]) == [1000] * 4


def test_allowed_models_sees_the_first_model_to_appear() -> None:
    snap = Snapshot(8, capacity=2)
    assert not snap.allowed_models(("A100",)).any()  # no GPU node known yet
    snap.upsert_node(gpu_node("a", model="A100"))
    assert snap.allowed_models(("A100",)).tolist() == [True]
