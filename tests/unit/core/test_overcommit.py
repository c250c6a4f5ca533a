"""The device-plugin over-commit detector's pure logic: the cards in use on a node, and the
tracker that reports only changes of a node's excess."""

from __future__ import annotations

import dataclasses

from gpusched.core.overcommit import MAX_NAMED, GpuUse, OvercommitTracker, node_gpu_use
from gpusched.framework.interfaces import Allocation
from gpusched.model import keys
from gpusched.model.pod import PodInfo, PodRequest
from tests.builders import cache_with

OURS = "ai-scheduler"


def _ours(pod: PodInfo) -> bool:
    return pod.scheduler_name == OURS


def shared(name: str, card: int, node: str = "a", milli: int = 166) -> PodInfo:
    """A bound gpusched shared pod on `card` (as the Binding wrote its assignment)."""
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=100, gpu_milli=milli),
        scheduler_name=OURS,
        node_name=node,
        annotations={keys.GPU_IDS: str(card)},
        gpu_ids=(card,),
        phase="Running",
    )


def whole(
    name: str, gpus: int, scheduler: str = "default-scheduler", node: str = "a", ids: str = ""
) -> PodInfo:
    """A bound pod asking `gpus` nvidia.com/gpu (`ids`: the cards gpusched assigned)."""
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=100, gpu_cards=gpus),
        scheduler_name=scheduler,
        node_name=node,
        annotations={keys.GPU_IDS: ids} if ids else {},
        gpu_ids=tuple(int(c) for c in ids.split(",")) if ids else (),
        phase="Running",
    )


def test_six_shared_pods_on_card_0_and_a_default_scheduler_pod_of_8_gpus() -> None:
    """The reported scenario: one card shared by six pods is invisible to the device
    plugin, which hands all eight cards to the other scheduler's pod."""
    pods = [(shared(f"s{i}", 0), (0,)) for i in range(6)]
    pods.append((whole("big", 8), ()))
    use = node_gpu_use("a", 8, pods, _ours)
    assert (use.theirs, use.whole, use.shared_cards, use.shared_pods) == (8, 0, 1, 6)
    assert (use.used, use.excess) == (9, 1)
    message = use.describe()
    assert message.startswith("9 GPUs in use for 8 allocatable nvidia.com/gpu, 1 over")
    assert "ns/big (default-scheduler, 8)" in message
    assert "1 card(s) shared by 6 gpusched pod(s)" in message
    assert "taint only gpusched pods tolerate" in message


def test_whole_cards_of_ours_count_and_shared_cards_count_once_each() -> None:
    pods = [
        (shared("s0", 0), (0,)),
        (shared("s1", 0), (0,)),
        (shared("s2", 3), (3,)),
        (whole("w", 2, OURS, ids="1,2"), (1, 2)),
        (whole("theirs", 4), ()),
    ]
    use = node_gpu_use("a", 8, pods, _ours)
    assert (use.theirs, use.whole, use.shared_cards, use.shared_pods) == (4, 2, 2, 3)
    assert (use.used, use.excess) == (8, 0)  # exactly full is not over-committed


def test_another_schedulers_shared_annotation_holds_no_device_plugin_card() -> None:
    """kube-scheduler counts nvidia.com/gpu only: a default-scheduler pod carrying the
    share annotation gets no card from the device plugin, so it adds nothing."""
    theirs_shared = dataclasses.replace(shared("t", 0), scheduler_name="default-scheduler")
    use = node_gpu_use("a", 1, [(theirs_shared, (0,)), (shared("s", 0), (0,))], _ours)
    assert (use.theirs, use.shared_cards, use.used, use.excess) == (0, 1, 1, 0)
    assert use.their_pods == ()


def test_the_message_names_a_few_pods_of_other_schedulers_largest_first() -> None:
    pods = [(whole(f"t{i}", 1 + i % 3), ()) for i in range(MAX_NAMED + 2)]
    pods.append((shared("s", 0), (0,)))
    use = node_gpu_use("a", 2, pods, _ours)
    assert [p.gpus for p in use.their_pods] == sorted(
        (p.gpus for p in use.their_pods), reverse=True
    )
    message = use.describe()
    named = [p.key for p in use.their_pods[:MAX_NAMED]]
    assert all(k in message for k in named)
    assert not any(p.key in message for p in use.their_pods[MAX_NAMED:])
    assert "and 2 more" in message


def test_resolved_message_names_the_numbers() -> None:
    use = GpuUse("a", 8, 2, 1, 1, 3)
    assert use.describe_resolved() == (
        "GPU over-commit resolved: 4 GPUs in use for 8 allocatable nvidia.com/gpu (2 by pods"
        " of other schedulers, 1 by gpusched's whole-GPU pods, 1 card(s) shared by gpusched"
        " pods)"
    )


def _tracker() -> tuple[OvercommitTracker, dict[str, int]]:
    return OvercommitTracker(_ours), {"a": 8, "b": 8}


def test_tracker_reports_entering_changing_and_resolving_once_each() -> None:
    cache = cache_with("a", "b")
    tracker, cards = _tracker()
    cards_of = lambda n: cards.get(n, -1)  # noqa: E731 - a one-line port
    for i in range(6):
        cache.add_or_update_pod(shared(f"s{i}", 0))
        tracker.mark("a")
    assert tracker.evaluate(cache, cards_of) == []  # one card in use: fine
    cache.add_or_update_pod(whole("big", 8))
    tracker.mark("a")
    tracker.mark("b")  # nothing there: no change
    (entered,) = tracker.evaluate(cache, cards_of)
    assert entered.node == "a" and entered.before is None and not entered.resolved
    assert entered.now is not None and entered.now.excess == 1
    assert tracker.over["a"].excess == 1
    # Nothing marked: nothing recomputed, nothing reported.
    assert tracker.evaluate(cache, cards_of) == []
    # Another pod on the same card: the excess stays 1, no new report (debounced).
    cache.add_or_update_pod(shared("s6", 0, milli=4))
    tracker.mark("a")
    assert tracker.evaluate(cache, cards_of) == []
    # A shared pod on a second card: the excess grows to 2, one report.
    cache.add_or_update_pod(shared("s7", 1))
    tracker.mark("a")
    (grew,) = tracker.evaluate(cache, cards_of)
    assert grew.before is not None and grew.before.excess == 1
    assert grew.now is not None and grew.now.excess == 2
    # The other scheduler's pod goes: resolved, with what is in use now.
    cache.remove_pod("uid-big")
    tracker.mark("a")
    (resolved,) = tracker.evaluate(cache, cards_of)
    assert resolved.resolved and resolved.now is not None and resolved.now.used == 2
    assert tracker.over == {}
    assert tracker.evaluate(cache, cards_of) == []


def test_tracker_skips_nodes_without_device_plugin_gpus_and_assumed_pods() -> None:
    cache = cache_with("a")
    tracker = OvercommitTracker(_ours)
    cache.add_or_update_pod(whole("big", 8))
    # Assumed (placed by us, binding in flight): not counted until the watch shows it bound.
    pending = dataclasses.replace(shared("s", 0), node_name="", annotations={}, gpu_ids=())
    cache.assume(pending, Allocation("a", cache.snapshot.row_of("a"), (0,), (166,), (0,)))
    tracker.mark("a")
    assert tracker.evaluate(cache, lambda n: 8) == []
    cache.add_or_update_pod(shared("s", 0))  # the watch confirms it bound
    tracker.mark("a")
    (entered,) = tracker.evaluate(cache, lambda n: 8)
    assert entered.now is not None and entered.now.excess == 1
    # The node stops advertising nvidia.com/gpu (-1): nothing to over-commit any more.
    tracker.mark("a")
    (gone,) = tracker.evaluate(cache, lambda n: -1)
    assert gone.resolved and gone.now is None


def test_forgetting_a_node_resolves_it_only_if_it_was_over_committed() -> None:
    cache = cache_with("a")
    tracker = OvercommitTracker(_ours)
    assert tracker.forget("a") is None
    cache.add_or_update_pod(whole("big", 8))
    cache.add_or_update_pod(shared("s", 0))
    tracker.mark("a")
    assert len(tracker.evaluate(cache, lambda n: 8)) == 1
    tracker.mark("a")
    change = tracker.forget("a")
    assert change is not None and change.resolved and change.now is None
    assert tracker.over == {}
    assert tracker.evaluate(cache, lambda n: 8) == []  # its mark went with it
