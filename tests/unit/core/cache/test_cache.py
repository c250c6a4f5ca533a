"""Cache and snapshot: assumed pods, confirmation, forgetting, recovery from gpu-ids."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import Allocation
from gpusched.model import keys
from gpusched.model.node import MAX_CARD_MEMORY_MIB, Card
from gpusched.model.pod import HostPort, PodInfo, parse_gpu_ids
from tests.builders import cache_with, gpu_node, make_pod


def recorder(c: ClusterCache) -> list[tuple[str, str]]:
    """(pod uid, message) of every pod warning the cache reports, in order."""
    seen: list[tuple[str, str]] = []

    def record(pod: PodInfo, message: str) -> None:
        seen.append((pod.uid, message))

    c.pod_warning = record
    return seen


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


def test_a_bound_pods_job_label_change_moves_it_to_the_new_job() -> None:
    # The old job kept the row forever: its count was never given back.
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    pod = replace(make_pod("p", gpu_cards=1), job_id="j1", node_name="a", gpu_ids=(0,))
    c.add_or_update_pod(pod)
    c.add_or_update_pod(replace(pod, job_id="j2"))
    assert c.job_rows("ns/j1").size == 0 and c.job_rows("ns/j2").tolist() == [row]
    c.remove_pod(pod.uid)
    assert c.job_rows("ns/j2").size == 0


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
    taken as 3. Anything but ASCII digits is invalid: the pod is inserted whole, its card
    charged as a whole card (it could hold all of it), with a warning."""
    c = cache_with("a")
    warned = recorder(c)
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
    assert c.snapshot.card_free_milli[row, 2] == 0
    assert c.snapshot.node_cpu_free[row] == 62_000
    assert [uid for uid, _ in warned] == [pod.uid]
    assert "gpu-milli-assigned=" in warned[0][1]


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


# -- annotations as evidence: invalid or changed assignments are charged conservatively ---


def bound(
    name: str, ids: str | None = None, milli: str | None = None, node: str = "a", **req: Any
) -> PodInfo:
    """A running pod on `node` whose assignment annotations are `ids` / `milli` (absent when
    None), parsed as pod_from_k8s parses them."""
    ann: dict[str, str] = {}
    if ids is not None:
        ann[keys.GPU_IDS] = ids
    if milli is not None:
        ann[keys.GPU_MILLI_ASSIGNED] = milli
    try:
        parsed = parse_gpu_ids(ids) if ids is not None else ()
    except ValueError:
        parsed = ()
    pod = make_pod(name, **req)
    return replace(pod, node_name=node, annotations=ann, gpu_ids=parsed, phase="Running")


def free_milli(c: ClusterCache, node: str = "a") -> list[int]:
    return [int(v) for v in c.snapshot.card_free_milli[c.snapshot.row_of(node)]]


def test_a_valid_assignment_is_charged_as_written_without_a_warning() -> None:
    c = cache_with("a")
    warned = recorder(c)
    c.add_or_update_pod(bound("s", "2", "300", gpu_milli=250))  # more than asked: taken
    c.add_or_update_pod(bound("w", "0,1", gpu_cards=2))
    c.add_or_update_pod(bound("o", gpu_cards=1))  # another scheduler's: inferred
    assert free_milli(c) == [0, 0, 700, 0, 1000, 1000, 1000, 1000]
    assert warned == []


@pytest.mark.parametrize(
    ("milli", "why"),
    [
        ("0", "gpu-milli-assigned='0' is outside 250-1000"),  # made the pod free
        ("100", "gpu-milli-assigned='100' is outside 250-1000"),  # below its request
        ("1001", "is outside 250-1000"),
    ],
)
def test_a_shared_pods_milli_below_its_request_is_charged_a_whole_card(
    milli: str, why: str
) -> None:
    c = cache_with("a")
    warned = recorder(c)
    pod = bound("s", "2", milli, gpu_milli=250, cpu_milli=1000)
    c.add_or_update_pod(pod)
    assert free_milli(c)[2] == 0
    assert len(warned) == 1 and why in warned[0][1]
    assert "pod ns/s on a" in warned[0][1] and "whole card(s) 2" in warned[0][1]
    c.remove_pod(pod.uid)
    assert free_milli(c) == [1000] * 8
    assert c.snapshot.node_cpu_free[c.snapshot.row_of("a")] == 64_000


def test_a_milli_that_the_memory_share_exceeds_is_below_the_request() -> None:
    # 40 GiB of an 80 GiB card is a 500-milli share whatever gpu-milli says.
    c = cache_with("a")
    warned = recorder(c)
    c.add_or_update_pod(bound("s", "1", "250", gpu_milli=250, gpu_mem_mib=40960))
    assert free_milli(c)[1] == 0 and "outside 500-1000" in warned[0][1]


@pytest.mark.parametrize(
    ("ids", "req", "charged", "why"),
    [
        # Out of range: the named card that exists stays, inference tops up to the request.
        ("1,9", {"gpu_cards": 2}, {1, 0}, "names card(s) 9 but the node has 8 card(s)"),
        ("9", {"gpu_milli": 300}, {0}, "names card(s) 9"),
        # Too few for the request: never cheaper than the request.
        ("3", {"gpu_cards": 2}, {3, 0}, "names 1 card(s) for a pod requesting 2"),
        # Too many: it could hold each of them.
        ("1,2,3", {"gpu_cards": 2}, {1, 2, 3}, "names 3 card(s) for a pod requesting 2"),
        ("4,5", {"gpu_milli": 300}, {4, 5}, "names 2 cards for a pod sharing one card"),
        # Unparsable: the inferred card, whole.
        ("x", {"gpu_milli": 300}, {0}, "gpusched.io/gpu-ids='x' is invalid: 'x' is not a card"),
        ("2,2", {"gpu_cards": 2}, {0, 1}, "a card index appears twice"),
        ("\u00b2", {"gpu_cards": 1}, {0}, "is not a card index"),
        # A CPU-only pod naming cards: a webhook honouring the annotation would give them.
        ("6", {"cpu_milli": 500}, {6}, "a pod without a GPU request carries a GPU assignment"),
    ],
)
def test_an_invalid_gpu_ids_is_charged_as_the_whole_cards_it_could_hold(
    ids: str, req: dict[str, int], charged: set[int], why: str
) -> None:
    c = cache_with("a")
    warned = recorder(c)
    pod = bound("p", ids, **req)
    c.add_or_update_pod(pod)
    assert {i for i, f in enumerate(free_milli(c)) if f == 0} == charged
    assert sum(free_milli(c)) == 8000 - 1000 * len(charged)
    assert len(warned) == 1 and why in warned[0][1], warned
    c.remove_pod(pod.uid)
    assert free_milli(c) == [1000] * 8


def test_milli_assigned_without_ids_or_on_a_whole_card_pod_is_reported() -> None:
    c = cache_with("a")
    warned = recorder(c)
    c.add_or_update_pod(bound("s", None, "300", gpu_milli=300))
    c.add_or_update_pod(bound("w", "4", "0", gpu_cards=1))
    assert free_milli(c) == [0, 1000, 1000, 1000, 0, 1000, 1000, 1000]
    assert "gpu-milli-assigned='300' without gpusched.io/gpu-ids" in warned[0][1]
    assert "gpu-milli-assigned='0' on a whole-card pod" in warned[1][1]


def test_whole_cards_changed_after_binding_stay_charged_with_the_new_ones() -> None:
    """The kubelet gave the pod cards 0 and 1 at bind time; editing gpu-ids to 2,3 must not
    free 0 and 1 (another pod would be placed on cards in use), nor 2 and 3 (a restart could
    read the edit). Changing it back does not restore trust."""
    c = cache_with("a")
    warned = recorder(c)
    pod = bound("w", "0,1", gpu_cards=2, cpu_milli=1000)
    c.add_or_update_pod(pod)
    assert warned == []
    c.add_or_update_pod(bound("w", "2,3", gpu_cards=2, cpu_milli=1000))
    assert free_milli(c) == [0, 0, 0, 0, 1000, 1000, 1000, 1000]
    assert (
        "changed after binding (gpusched.io/gpu-ids='0,1' -> gpusched.io/gpu-ids='2,3')"
        in (warned[0][1])
    )
    c.add_or_update_pod(bound("w", "0,1", gpu_cards=2, cpu_milli=1000))
    assert free_milli(c) == [0, 0, 0, 0, 1000, 1000, 1000, 1000]
    c.remove_pod(pod.uid)
    assert free_milli(c) == [1000] * 8
    assert c.snapshot.node_cpu_free[c.snapshot.row_of("a")] == 64_000


def test_a_shared_pod_whose_assignment_changes_is_charged_whole_on_old_and_new_cards() -> None:
    c = cache_with("a")
    warned = recorder(c)
    row = c.snapshot.row_of("a")
    pod = make_pod("s", gpu_milli=300)
    # Assumed by the scheduler on card 3; the watch shows the pod claiming card 5.
    c.assume(pod, Allocation("a", row, (3,), (300,), (24576,)))
    c.add_or_update_pod(bound("s", "5", "300", gpu_milli=300))
    assert free_milli(c) == [1000, 1000, 1000, 0, 1000, 0, 1000, 1000]
    assert "gpusched.io/gpu-ids='3', gpusched.io/gpu-milli-assigned='300' -> " in warned[0][1]
    c.remove_pod(pod.uid)
    assert free_milli(c) == [1000] * 8


@pytest.mark.parametrize(
    ("ids", "milli"),
    [("2", "1000"), ("2", None), (None, None), ("2", "250")],
)
def test_a_shared_assignment_edited_or_removed_after_binding_is_a_whole_card(
    ids: str | None, milli: str | None
) -> None:
    c = cache_with("a")
    warned = recorder(c)
    c.add_or_update_pod(bound("s", "2", "500", gpu_milli=500))
    assert free_milli(c)[2] == 500
    c.add_or_update_pod(bound("s", ids, milli, gpu_milli=500))
    assert free_milli(c)[2] == 0 and sum(free_milli(c)) == 7000
    assert len(warned) == 1 and "changed after binding" in warned[0][1]


def test_the_assumed_assignment_confirmed_unchanged_is_trusted() -> None:
    c = cache_with("a")
    warned = recorder(c)
    row = c.snapshot.row_of("a")
    pod = make_pod("s", gpu_milli=300)
    c.assume(pod, Allocation("a", row, (3,), (300,), (24576,)))
    c.add_or_update_pod(bound("s", "3", "300", gpu_milli=300))
    assert not c.is_assumed(pod.uid)
    assert free_milli(c)[3] == 700 and warned == []


def test_a_resize_of_a_conservatively_charged_pod_keeps_its_cards() -> None:
    c = cache_with("a")
    recorder(c)
    c.add_or_update_pod(bound("s", "x", gpu_milli=300, cpu_milli=1000))
    assert free_milli(c)[0] == 0
    c.add_or_update_pod(bound("s", "6", "100", gpu_milli=200, cpu_milli=1000))  # fills card 0
    c.add_or_update_pod(bound("s", "x", gpu_milli=300, cpu_milli=3000))
    row = c.snapshot.row_of("a")
    assert c.snapshot.node_cpu_free[row] == 61_000
    assert free_milli(c) == [0, 1000, 1000, 1000, 1000, 1000, 0, 1000]
    c.remove_pod("uid-s")
    assert free_milli(c) == [1000] * 8 and c.snapshot.node_cpu_free[row] == 64_000


def test_an_inferred_pod_keeps_its_card_across_a_resize() -> None:
    c = cache_with("a")
    c.add_or_update_pod(bound("o", gpu_milli=600, cpu_milli=1000))
    assert free_milli(c)[0] == 400
    c.add_or_update_pod(bound("x", "1", "300", gpu_milli=300))  # card 1 is now the best fit
    c.add_or_update_pod(bound("o", gpu_milli=600, cpu_milli=2000))
    assert free_milli(c)[:2] == [400, 700]


def test_an_invalid_pod_before_its_node_is_charged_when_the_node_arrives() -> None:
    c = cache_with()
    warned = recorder(c)
    c.add_or_update_pod(bound("s", "2", "0", node="late", gpu_milli=300))
    assert warned == []  # nothing charged yet: the node's cards are unknown
    c.upsert_node(gpu_node("late"))
    assert free_milli(c, "late")[2] == 0
    assert len(warned) == 1 and "pod ns/s on late" in warned[0][1]


_ANNOTATION_TEXT = st.one_of(
    st.none(),
    st.sampled_from(["0", "1", "7", "8", "0,1", "1,0", "2,2", "x", "", "250", "1000", "\u00b2"]),
    st.text(max_size=6),
)


@given(
    versions=st.lists(
        st.tuples(
            _ANNOTATION_TEXT,
            _ANNOTATION_TEXT,
            st.sampled_from([{}, {"gpu_cards": 1}, {"gpu_cards": 3}, {"gpu_milli": 400}]),
            st.integers(0, 4000),
        ),
        min_size=1,
        max_size=5,
    ),
)
@settings(max_examples=150, deadline=None)
def test_any_assignment_history_is_never_cheaper_than_the_request_and_frees_exactly(
    versions: list[tuple[str | None, str | None, dict[str, int], int]],
) -> None:
    c = cache_with("a")
    row = c.snapshot.row_of("a")
    for ids, milli, gpu, cpu in versions:
        pod = bound("p", ids, milli, cpu_milli=cpu, **gpu)
        c.add_or_update_pod(pod)  # never raises
        entry = c.get(pod.uid)
        assert entry is not None and entry.alloc is not None
        assert sum(entry.alloc.milli) >= pod.request.gpu_milli_total
        assert c.snapshot.node_cpu_free[row] == 64_000 - cpu
    c.remove_pod("uid-p")
    assert free_milli(c) == [1000] * 8
    assert int(c.snapshot.card_free_mem[row].sum()) == 8 * 81920
    assert c.snapshot.node_cpu_free[row] == 64_000


def test_a_raising_warning_receiver_leaves_the_pod_charged() -> None:
    c = cache_with("a")

    def boom(pod: PodInfo, message: str) -> None:
        raise RuntimeError(message)

    c.pod_warning = boom
    pod = bound("s", "2", "0", gpu_milli=300, cpu_milli=1000)
    with pytest.raises(RuntimeError, match="outside 300-1000"):
        c.add_or_update_pod(pod)
    entry = c.get(pod.uid)
    assert entry is not None and entry.alloc is not None and free_milli(c)[2] == 0
    c.remove_pod(pod.uid)
    assert free_milli(c) == [1000] * 8
    assert c.snapshot.node_cpu_free[c.snapshot.row_of("a")] == 64_000


def test_host_ports_in_use_follow_bound_and_assumed_pods_per_node() -> None:
    c = cache_with("n1", "n2")
    web = (HostPort("0.0.0.0", "TCP", 80),)
    dns = (HostPort("10.0.0.1", "UDP", 53),)
    c.add_or_update_pod(replace(make_pod("a"), node_name="n1", host_ports=web))
    c.add_or_update_pod(replace(make_pod("b"), node_name="n1", host_ports=web + dns))
    c.assume(replace(make_pod("c"), host_ports=dns), Allocation("n2", c.snapshot.row_of("n2")))
    c.add_or_update_pod(replace(make_pod("none"), node_name="n2"))  # no ports: no entry
    assert c.used_host_ports() == {
        "n1": {("TCP", 80): {"0.0.0.0": 2}, ("UDP", 53): {"10.0.0.1": 1}},
        "n2": {("UDP", 53): {"10.0.0.1": 1}},
    }
    c.remove_pod("uid-b")
    c.forget("uid-c")
    assert c.used_host_ports() == {"n1": {("TCP", 80): {"0.0.0.0": 1}}}
    c.remove_pod("uid-a")
    assert c.used_host_ports() == {}


# -- other resources (extended, ephemeral-storage, hugepages) ----------------------------


def _rdma_cache() -> tuple[ClusterCache, int, int]:
    c = ClusterCache(Snapshot(8, capacity=2))
    c.upsert_node(replace(gpu_node("a"), other=(("ephemeral-storage", 100), ("rdma/hca", 4))))
    snap = c.snapshot
    return c, snap.row_of("a"), snap.other_column("rdma/hca")


def test_other_resources_are_charged_on_assume_and_freed_exactly_on_forget_and_delete() -> None:
    c, row, col = _rdma_cache()
    snap = c.snapshot
    eph = snap.other_column("ephemeral-storage")
    p = make_pod("p", cpu_milli=1000, other=(("ephemeral-storage", 30), ("rdma/hca", 3)))
    c.assume(p, Allocation("a", row))
    assert snap.node_other_free[row, col] == 1
    assert snap.node_other_free[row, eph] == 70
    assert snap.node_other_alloc[row, col] == 4
    c.forget(p.uid)
    assert snap.node_other_free[row, col] == 4
    assert snap.node_other_free[row, eph] == 100
    bound_pod = replace(p, node_name="a")
    c.add_or_update_pod(bound_pod)
    assert snap.node_other_free[row, col] == 1
    c.remove_pod(p.uid)
    assert snap.node_other_free[row].tolist() == snap.node_other_alloc[row].tolist()


def test_other_resources_follow_a_resize_and_a_node_update() -> None:
    c, row, col = _rdma_cache()
    snap = c.snapshot
    p = replace(make_pod("p", other=(("rdma/hca", 1),)), node_name="a")
    c.add_or_update_pod(p)
    c.add_or_update_pod(replace(p, request=replace(p.request, other=(("rdma/hca", 2),))))
    assert snap.node_other_free[row, col] == 2
    # The node's allocatable shrinks to 1: the pod still uses 2, so free is -1.
    c.upsert_node(replace(gpu_node("a"), other=(("rdma/hca", 1),)))
    assert snap.node_other_alloc[row, col] == 1
    assert snap.node_other_free[row, col] == -1
    c.remove_pod(p.uid)
    assert snap.node_other_free[row, col] == 1


def test_a_pod_charges_a_resource_its_node_does_not_offer_and_gives_it_back() -> None:
    """kube-scheduler's Requested counts it too: a node that starts offering it later sees
    what the pod already holds."""
    c, row, _ = _rdma_cache()
    snap = c.snapshot
    p = replace(make_pod("p", other=(("example.com/fpga", 2),)), node_name="a")
    c.add_or_update_pod(p)
    col = snap.other_column("example.com/fpga")
    assert col >= 0 and snap.node_other_free[row, col] == -2
    c.upsert_node(replace(gpu_node("a"), other=(("example.com/fpga", 3),)))
    assert snap.node_other_free[row, col] == 1
    c.remove_pod(p.uid)
    assert snap.node_other_free[row, col] == 3
