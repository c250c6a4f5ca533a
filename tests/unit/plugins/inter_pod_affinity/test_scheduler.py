"""InterPodAffinity inside the ai-scheduler profile: kube's FailedScheduling wording, the
requeue of a rejected pod when the pod it waits for is bound or the one repelling it goes,
and a preferred affinity beating the GPU scores."""

from __future__ import annotations

from dataclasses import replace

from gpusched.core.schedule_one import Result
from gpusched.model import keys
from tests.builders import ai_pod, ai_sim, gpu_node
from tests.unit.plugins.inter_pod_affinity.support import affinity, sel, term, weighted

RACK = keys.RACK_LABEL


def test_failed_scheduling_messages_and_wake_up_on_delete() -> None:
    s = ai_sim(gpu_node("a", rack="r1"), gpu_node("b", rack="r1"), gpu_node("c", rack="r2"))
    anti = affinity(anti=[term(sel(app="db"), RACK)])
    first = s.submit(replace(ai_pod("db-0"), labels={"app": "db"}, affinity=anti))
    second = s.submit(replace(ai_pod("db-1"), labels={"app": "db"}, affinity=anti))
    assert first.result is Result.SCHEDULED and second.result is Result.SCHEDULED
    # One replica per rack: r1 (a or b) and r2 (c).
    assert sorted([first.node == "c", second.node == "c"]) == [False, True]
    third = s.submit(replace(ai_pod("db-2"), labels={"app": "db"}, affinity=anti))
    assert third.result is Result.UNSCHEDULABLE
    assert third.message == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )
    assert "InterPodAffinity" in third.rejected_by
    # The replica on r2 goes: the waiting one is moved and placed there.
    gone = first if first.node == "c" else second
    s.delete(gone.pod.uid)
    while s.cache.get("uid-db-2") is None and (t := s.next_wakeup()) is not None:
        s.advance(t)
    entry = s.cache.get("uid-db-2")
    assert entry is not None and entry.node == "c"


def test_unmet_affinity_is_unresolvable_and_wakes_when_its_pod_is_bound() -> None:
    s = ai_sim(gpu_node("a", rack="r1"), gpu_node("b", rack="r2"))
    near = affinity([term(sel(app="cache"), RACK)])
    waiting = s.submit(replace(ai_pod("web"), labels={"app": "web"}, affinity=near))
    assert waiting.result is Result.UNSCHEDULABLE
    assert waiting.message == "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
    cache_pod = s.submit(replace(ai_pod("cache"), labels={"app": "cache"}))
    assert cache_pod.result is Result.SCHEDULED
    while s.cache.get("uid-web") is None and (t := s.next_wakeup()) is not None:
        s.advance(t)
    entry = s.cache.get("uid-web")
    assert entry is not None and entry.node == cache_pod.node


def test_preferred_affinity_outweighs_the_gpu_scores() -> None:
    s = ai_sim(gpu_node("a", rack="r1"), gpu_node("b", rack="r2"), gpu_node("c", rack="r3"))
    anchor = s.submit(replace(ai_pod("anchor", gpu_cards=1), labels={"app": "anchor"}))
    assert anchor.result is Result.SCHEDULED
    # Fragmentation packs a pod without terms onto the anchor's node; a preferred
    # anti-affinity (weight 2 x 100 against 0.40 x 100) moves the pod off it.
    control = s.submit(ai_pod("control", gpu_cards=1))
    assert control.node == anchor.node
    away = affinity(anti_preferred=[weighted(100, term(sel(app="anchor"), RACK))])
    got = s.submit(replace(ai_pod("p", gpu_cards=1), affinity=away))
    assert got.result is Result.SCHEDULED and got.node != anchor.node
