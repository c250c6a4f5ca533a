"""Cache and snapshot: assumed pods, confirmation, forgetting, recovery from gpu-ids."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import Allocation
from gpusched.model import keys
from gpusched.model.node import MAX_CARD_MEMORY_MIB, Card
from tests.builders import cache_with, gpu_node, make_pod


def test_assume_confirm_forget() -> None:
    c = cache_with("a")
    snap = c.snapshot
    row = snap.row_of("a")
    pod = make_pod("p", cpu_milli=1000, memory_bytes=2**30, gpu_cards=2)
    c.assume(pod, Allocation("a", row, (0, 1), (1000, 1000), (81920, 81920)))
    assert list(snap.card_free_milli[row, :3]) == [0, 0, 1000]
    assert snap.node_cpu_free[row] == 63_000
    assert c.is_assumed(pod.uid)
    # The watch confirms it with the same cards.
    c.add_or_update_pod(replace(pod, node_name="a", gpu_ids=(0, 1), phase="Running"))
    assert not c.is_assumed(pod.uid)
    assert c.forget(pod.uid) is None  # confirmed pods are not forgotten
    assert list(snap.card_free_milli[row, :3]) == [0, 0, 1000]
    c.remove_pod(pod.uid)
    assert int(snap.card_free_milli[row].sum()) == 8000
    assert snap.node_cpu_free[row] == 64_000 and snap.node_pods_free[row] == 110


def test_an_assumed_pod_is_only_forgotten_never_expired() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    pod = make_pod("p", gpu_milli=300)
    c.assume(pod, Allocation("a", row, (3,), (300,), (24576,)))
    # No deadline: a bound pod the watch is late to confirm keeps its card.
    assert not hasattr(c, "expire")
    assert c.snapshot.card_free_milli[row, 3] == 700
    assert c.forget(pod.uid) is not None
    assert c.snapshot.card_free_milli[row, 3] == 1000


def test_restart_recovers_cards_from_annotation() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    whole = replace(make_pod("w", gpu_cards=2), node_name="a", gpu_ids=(5, 7))
    shared = replace(make_pod("s", gpu_milli=250), node_name="a", gpu_ids=(2,))
    c.add_or_update_pod(whole)
    c.add_or_update_pod(shared)
    free = c.snapshot.card_free_milli[row]
    assert list(free) == [1000, 1000, 750, 1000, 1000, 0, 1000, 0]
    # memory follows the share: 250 milli of an 80 GiB card is 20480 MiB
    assert c.snapshot.card_free_mem[row, 2] == 81920 - 20480
    assert c.stats.inferred == 0


def test_pod_without_ids_is_inferred_best_fit() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    c.add_or_update_pod(replace(make_pod("s1", gpu_milli=600), node_name="a", gpu_ids=(4,)))
    c.add_or_update_pod(replace(make_pod("s2", gpu_milli=300), node_name="a"))
    assert c.snapshot.card_free_milli[row, 4] == 100  # filled the partial card
    c.add_or_update_pod(replace(make_pod("w", gpu_cards=3), node_name="a"))
    assert list(c.snapshot.card_free_milli[row]) == [0, 0, 0, 1000, 100, 1000, 1000, 1000]
    assert c.stats.inferred == 2


def test_pods_before_their_node_are_counted_when_it_arrives() -> None:
    c = cache_with()
    c.add_or_update_pod(
        replace(make_pod("w", gpu_cards=1, cpu_milli=500), node_name="late", gpu_ids=(0,))
    )
    row = c.upsert_node(gpu_node("late"))
    assert c.snapshot.card_free_milli[row, 0] == 0
    assert c.snapshot.node_cpu_free[row] == 63_500


def test_node_update_keeps_usage_and_removal_frees_row() -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    c.add_or_update_pod(
        replace(make_pod("w", gpu_cards=1, cpu_milli=500), node_name="a", gpu_ids=(0,))
    )
    bigger = replace(
        gpu_node("a"),
        cpu_milli=128_000,
        cards=tuple(replace(card, healthy=card.index != 7) for card in gpu_node("a").cards),
    )
    assert c.upsert_node(bigger) == row
    assert c.snapshot.node_cpu_free[row] == 127_500
    assert c.snapshot.card_free_milli[row, 0] == 0
    assert not c.snapshot.card_healthy[row, 7]
    c.remove_node("a")
    assert not c.snapshot.node_valid[row]
    assert c.snapshot.size == 0


def test_over_allocation_is_reported_not_hidden() -> None:
    c = cache_with("a")
    c.add_or_update_pod(replace(make_pod("x", gpu_cards=1), node_name="a", gpu_ids=(0,)))
    c.add_or_update_pod(replace(make_pod("y", gpu_cards=1), node_name="a", gpu_ids=(0,)))
    assert c.stats.over_allocated == 1
    assert "over-allocates" in c.stats.warnings[0]


def test_job_rows_follow_pods() -> None:
    c = cache_with("a", "b")
    ra, rb = c.snapshot.row_of("a"), c.snapshot.row_of("b")
    p1 = replace(make_pod("j1", gpu_cards=1), job_id="job", node_name="a", gpu_ids=(0,))
    p2 = replace(make_pod("j2", gpu_cards=1), job_id="job", node_name="b", gpu_ids=(0,))
    c.add_or_update_pod(p1)
    c.add_or_update_pod(p2)
    assert sorted(c.job_rows("ns/job").tolist()) == sorted([ra, rb])
    # Another namespace's job of the same name is another job.
    other = replace(p1, uid="uid-o", namespace="other", node_name="b")
    c.add_or_update_pod(other)
    assert sorted(c.job_rows("ns/job").tolist()) == sorted([ra, rb])
    assert c.job_rows("other/job").tolist() == [rb]
    c.remove_pod(p1.uid)
    assert c.job_rows("ns/job").tolist() == [rb]
    assert c.job_rows("job").size == 0 and c.job_rows("ns/none").size == 0


def test_allowed_models_cache_tracks_new_models() -> None:
    snap = Snapshot(8, capacity=4)
    snap.upsert_node(gpu_node("a", model="A100"))
    assert snap.allowed_models(("H100",)).tolist() == [False]
    snap.upsert_node(replace(gpu_node("b"), cards=(Card(0, "H100", 81920),)))
    allowed = snap.allowed_models(("H100",))
    assert allowed.tolist() == [False, True]
    assert np.array_equal(snap.allowed_models(()), [True, True])


def test_assumed_pod_forgotten_after_its_node_was_removed() -> None:
    # An assumed pod has no spec.nodeName; forgetting it after its node left the cache must
    # still drop it from the node's pod set, or the node's return crashes on a stale uid.
    c = ClusterCache(Snapshot(8, capacity=2))
    row = c.upsert_node(gpu_node("a"))
    pod = make_pod("p", gpu_cards=1)
    c.assume(pod, Allocation("a", row, (0,), (1000,), (81920,)))
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


@pytest.mark.parametrize("assigned", ["\u00b2", "\u0663", "2_50", "12345", "-1", " 250"])
def test_a_bound_pods_odd_milli_assigned_is_never_trusted_nor_half_inserted(
    assigned: str,
) -> None:
    """A pod owner can write gpu-milli-assigned. '²' passes str.isdigit() and then int()
    raised, leaving an entry whose CPU and GPU were never counted; '٣' (Arabic-Indic 3) was
    taken as 3. Anything but ASCII digits is ignored: the pod is charged its own request."""
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    pod = replace(
        make_pod("s", cpu_milli=2000, gpu_milli=250),
        node_name="a",
        gpu_ids=(2,),
        annotations={keys.GPU_MILLI_ASSIGNED: assigned},
    )
    c.add_or_update_pod(pod)
    entry = c.get(pod.uid)
    assert entry is not None and entry.alloc is not None
    assert c.snapshot.card_free_milli[row, 2] == 750
    assert c.snapshot.node_cpu_free[row] == 62_000


def test_the_largest_card_memory_a_node_may_report_fits_the_columns() -> None:
    """model/node.py caps card memory at 2^31-1 MiB; above, the int32 column raised
    OverflowError mid-insert and left a half-built row."""
    c = ClusterCache(Snapshot(8, capacity=4))
    node = gpu_node("big", cards=2, mem=MAX_CARD_MEMORY_MIB)
    row = c.upsert_node(node)
    assert list(c.snapshot.card_total_mem[row, :2]) == [MAX_CARD_MEMORY_MIB] * 2


def test_an_in_place_resize_is_recharged_and_frees_exactly_what_it_holds() -> None:
    """Resized from 1 to 4 CPUs while running, then deleted: the node must come back to its
    allocatable, not 3 CPUs above it (the old replace-without-recharge drift)."""
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    pod = replace(make_pod("p", cpu_milli=1000, gpu_cards=1), node_name="a", gpu_ids=(3,))
    c.add_or_update_pod(pod)
    assert c.snapshot.node_cpu_free[row] == 63_000
    resized = replace(pod, request=replace(pod.request, cpu_milli=4000))
    c.add_or_update_pod(resized)
    assert c.snapshot.node_cpu_free[row] == 60_000
    assert c.snapshot.card_free_milli[row, 3] == 0  # still the same card, charged once
    assert int(c.snapshot.card_free_milli[row].sum()) == 7000
    c.remove_pod(pod.uid)
    assert c.snapshot.node_cpu_free[row] == 64_000
    assert int(c.snapshot.card_free_milli[row].sum()) == 8000
