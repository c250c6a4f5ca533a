"""ScheduleOne (core/schedule_one.py): every way an attempt can end, with the real cache,
queue and framework runner and in-memory plugins."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpusched.config.profile import PluginRef, Point, Profile
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.core.queue import ClusterEvent, QueuedPodInfo, SchedulingQueue
from gpusched.core.runtime.framework import Framework
from gpusched.core.schedule_one import Decision, Observer, Outcome, Result, ScheduleOne
from gpusched.framework import (
    ALLOCATION,
    Allocation,
    CycleState,
    Diagnosis,
    FilterResult,
    Mask,
    Rows,
    Scores,
    Status,
)
from gpusched.framework.registry import Registry
from gpusched.framework.snapshot import NO_CARD
from gpusched.framework.status import ClusterWriteError, Code
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, pod_from_k8s
from tests.builders import ai_sim, fuzz_settings, gpu_node, make_pod, node, raw_pods
from tests.fake_plugins import Binder, Sort
from tests.fakes import FakeCluster

# PostFilter runs only when no node fits: its own test below.
POINTS = ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit")


class Probe:
    """One plugin at every point: records calls, and raises, rejects or waits on demand."""

    name: ClassVar[str] = "Probe"
    raise_at: ClassVar[str] = ""
    reject_at: ClassVar[str] = ""
    wait: ClassVar[bool] = False
    cards: ClassVar[bool] = True

    def __init__(self, args: Any, handle: Any) -> None:
        self.calls: list[str] = []

    def _at(self, point: str) -> None:
        self.calls.append(point)
        if self.raise_at == point:
            raise RuntimeError(f"{point} bug")

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[None, Status]:
        self._at("PreFilter")
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        self._at("Filter")
        if self.reject_at == "Filter":
            return FilterResult(np.zeros_like(candidates), ("probe says no",))
        return FilterResult(candidates)

    def post_filter(
        self, state: CycleState, pod: PodInfo, diag: Diagnosis
    ) -> tuple[str | None, Status]:
        self._at("PostFilter")
        return None, Status(Code.UNSCHEDULABLE, ("no victims",))

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        self._at("PreScore")
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        self._at("Score")
        return rows.astype(np.float64)  # the last row wins

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self._at("Reserve")
        if self.reject_at == "Reserve":
            return Status(Code.UNSCHEDULABLE, ("no cards",))
        if self.cards:
            state.write(ALLOCATION, Allocation(node, 1, (0,), (1000,), (81920,)))
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        self.calls.append("Unreserve")

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        self._at("Permit")
        if self.reject_at == "Permit":
            return Status(Code.UNSCHEDULABLE, ("gang incomplete",)), 0.0
        if self.wait:
            return Status(Code.WAIT), 30.0
        return Status(), 0.0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self._at("PreBind")
        return Status()


class Observed(Observer):
    """The Observer port: what the daemon would log and report."""

    def __init__(self) -> None:
        self.ended: list[tuple[str, Outcome, str]] = []
        self.errors: list[Exception] = []

    def finished(
        self,
        info: QueuedPodInfo,
        decision: Decision,
        outcome: Outcome,
        message: str | None,
        bind_us: Mapping[str, float] | None,
    ) -> None:
        self.ended.append(
            (info.pod.name, outcome, decision.message if message is None else message)
        )

    def raised(self, info: QueuedPodInfo, exc: Exception) -> None:
        self.errors.append(exc)


class Rig:
    def __init__(self, **probe: Any) -> None:
        for key, value in probe.items():
            setattr(Probe, key, value)
        registry = Registry()
        for cls in (Sort, Binder, Probe):
            registry.register(cls)
        points = {
            Point.QUEUE_SORT: ("Sort",),
            Point.PRE_FILTER: ("Probe",),
            Point.FILTER: ("Probe",),
            Point.POST_FILTER: ("Probe",),
            Point.PRE_SCORE: ("Probe",),
            Point.RESERVE: ("Probe",),
            Point.PERMIT: ("Probe",),
            Point.PRE_BIND: ("Probe",),
            Point.BIND: ("Binder",),
        }
        plugins = {p: tuple(PluginRef(n) for n in names) for p, names in points.items()}
        plugins[Point.SCORE] = (PluginRef("Probe", 1.0),)
        snap = Snapshot(8, capacity=8)
        self.cache = ClusterCache(snap)
        for i in range(2):
            self.cache.upsert_node(gpu_node(f"n{i}"))
        self.t = 100.0
        self.cluster = FakeCluster()
        handle = SchedulerHandle(self.cache, self.cluster, lambda: self.t)
        self.fw = Framework(Profile("test", plugins), registry, handle)
        self.probe: Probe = self.fw.plugins["Probe"]
        self.queue = SchedulingQueue(self.fw.less, lambda: self.t)
        self.observed = Observed()
        self.s1 = ScheduleOne(
            {"test": self.fw}, self.cache, self.queue, clock=lambda: self.t, observer=self.observed
        )

    def pod(self, name: str = "p") -> QueuedPodInfo:
        pod = dataclasses.replace(make_pod(name, gpu_cards=1), scheduler_name="test")
        self.queue.add(pod)
        info = self.queue.pop_nowait()
        assert info is not None
        return info


@pytest.fixture(autouse=True)
def _reset_probe() -> None:
    Probe.raise_at = Probe.reject_at = ""
    Probe.wait = False
    Probe.cards = True


async def test_scheduled_then_bound() -> None:
    rig = Rig()
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.SCHEDULED and d.node == "n1"
    assert rig.cache.is_assumed("uid-p")
    assert await rig.s1.bind(info, d) is Outcome.BOUND
    assert rig.cluster.binds == [("ns/p", "n1")]
    assert rig.queue.where("uid-p") == ""  # done: not queued, not in flight
    assert rig.observed.ended == [("p", Outcome.BOUND, "bound to n1 (cards 0)")]
    assert rig.s1.bound == 1


async def test_an_assumed_pod_is_not_attempted_twice() -> None:
    rig = Rig()
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    # A second attempt for the same pod while the first placement is assumed (its binding
    # in flight or not yet confirmed by the watch) would hand out a second set of cards.
    again = QueuedPodInfo(info.pod, added=rig.t)
    assert rig.s1.attempt(again) is None
    assert rig.s1.attempts == 1


async def test_waiting_at_permit_then_allowed() -> None:
    rig = Rig(wait=True)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.WAITING
    binding = asyncio.ensure_future(rig.s1.bind(info, d))
    await asyncio.sleep(0)  # the binding cycle parks on the waiting pod
    assert not binding.done() and rig.cluster.binds == []
    wp = rig.fw.waiting.get("uid-p")
    assert wp is not None
    wp.allow("Probe")
    assert await binding is Outcome.BOUND
    assert rig.cluster.binds == [("ns/p", "n1")]
    assert rig.fw.waiting.get("uid-p") is None


async def test_waiting_at_permit_then_rejected_unwinds_and_parks_the_pod() -> None:
    rig = Rig(wait=True)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.WAITING
    binding = asyncio.ensure_future(rig.s1.bind(info, d))
    await asyncio.sleep(0)
    wp = rig.fw.waiting.get("uid-p")
    assert wp is not None
    wp.reject("Probe", "gang member deleted")
    assert await binding is Outcome.UNSCHEDULABLE
    assert rig.cluster.binds == []
    assert rig.cache.get("uid-p") is None
    assert rig.probe.calls[-1] == "Unreserve"
    # Parked as unschedulable, and not moved back by the capacity its own unwind freed.
    assert rig.queue.where("uid-p") == "unschedulable"
    assert rig.queue.unschedulable.get("uid-p").rejected_by == {"Probe"}  # type: ignore[union-attr]


async def test_a_failed_bind_unwinds_and_backs_off() -> None:
    rig = Rig()
    rig.cluster.answer = Status(Code.ERROR, ("HTTP 500",))
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert rig.cache.get("uid-p") is None
    assert rig.probe.calls[-1] == "Unreserve"
    assert rig.queue.where("uid-p") == "backoff"
    assert rig.observed.ended[-1][2] == "binding rejected: HTTP 500"


async def test_a_failed_bind_frees_capacity_for_unschedulable_pods() -> None:
    rig = Rig()
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    other = rig.pod("q")
    rig.queue.requeue(other, unschedulable=True, rejected_by={"Probe"})
    assert rig.queue.where("uid-q") == "unschedulable"
    rig.cluster.answer = Status(Code.ERROR, ("HTTP 500",))
    await rig.s1.bind(info, d)
    assert rig.queue.where("uid-q") in ("active", "backoff")


async def test_a_pod_deleted_mid_bind_is_dropped() -> None:
    rig = Rig()
    rig.cluster.answer = Status(
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gone",), "", _GoneError("pod gone (404)")
    )
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.DROPPED
    assert rig.cache.get("uid-p") is None
    assert rig.queue.where("uid-p") == ""
    assert d.result is Result.ERROR


async def test_a_pod_deleted_while_in_flight_is_not_requeued() -> None:
    rig = Rig()
    rig.cluster.answer = Status(Code.ERROR, ("HTTP 500",))
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    rig.queue.delete("uid-p")  # the watch's DELETED while the Binding is in flight
    assert await rig.s1.bind(info, d) is Outcome.DROPPED
    assert rig.queue.where("uid-p") == "" and rig.cache.get("uid-p") is None


class _GoneError(ClusterWriteError):
    final = True


@pytest.mark.parametrize("point", POINTS)
def test_a_plugin_raising_at_any_point_costs_one_attempt(point: str) -> None:
    rig = Rig(raise_at=point)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.ERROR
    assert d.status.code is Code.ERROR and f"Probe {point} raised" in d.status.message()
    assert rig.cache.get("uid-p") is None
    assert rig.queue.where("uid-p") == "backoff"
    # Reserve ran (and so must be undone) only if the failure came at or after it.
    assert ("Unreserve" in rig.probe.calls) == (point in ("Reserve", "Permit"))
    assert rig.observed.ended[-1][1] is Outcome.ERROR


def test_post_filter_raising_is_an_error_too() -> None:
    rig = Rig(raise_at="PostFilter", reject_at="Filter")
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.ERROR
    assert "Probe PostFilter raised" in d.status.message()
    assert rig.queue.where("uid-p") == "backoff"


async def test_a_plugin_raising_in_the_binding_cycle_unwinds() -> None:
    rig = Rig(raise_at="PreBind")
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert "Probe PreBind raised" in rig.observed.ended[-1][2]
    assert rig.cache.get("uid-p") is None and rig.queue.where("uid-p") == "backoff"


def test_filter_rejections_name_the_plugins_for_the_requeue_hint() -> None:
    rig = Rig(reject_at="Filter")
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.UNSCHEDULABLE
    assert d.rejected_by == {"Probe"}
    assert rig.queue.where("uid-p") == "unschedulable"
    assert "0/2 nodes are available: 2 probe says no." in rig.observed.ended[-1][2]
    # A node event may help a pod a Filter rejected.
    assert rig.queue.move_all(ClusterEvent.NODE_ADD) == 1


@pytest.mark.parametrize("point", ["Reserve", "Permit"])
def test_rejected_at_reserve_or_permit_is_unschedulable_and_undone(point: str) -> None:
    rig = Rig(reject_at=point)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.UNSCHEDULABLE
    assert d.rejected_by == {"Probe"}
    assert rig.cache.get("uid-p") is None and "Unreserve" in rig.probe.calls
    assert rig.queue.where("uid-p") == "unschedulable"


def test_a_gpu_pod_without_chosen_cards_is_an_error_never_a_cardless_assume() -> None:
    rig = Rig(cards=False)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.ERROR
    assert "no Reserve plugin chose its cards" in d.status.message()
    assert rig.cache.get("uid-p") is None and "Unreserve" in rig.probe.calls


def test_an_attempt_that_raises_outside_plugins_costs_one_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = Rig()

    def boom(*args: Any) -> Status:
        raise RuntimeError("runtime bug")

    monkeypatch.setattr(rig.fw, "run_permit", boom)
    info = rig.pod()
    assert rig.s1.attempt(info) is None
    assert rig.cache.get("uid-p") is None  # the assumed pod was dropped again
    assert rig.queue.where("uid-p") == "backoff"
    assert [repr(e) for e in rig.observed.errors] == ["RuntimeError('runtime bug')"]


async def test_cancelled_binding_undoes_the_placement() -> None:
    rig = Rig(wait=True)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    binding = asyncio.ensure_future(rig.s1.bind(info, d))
    await asyncio.sleep(0)
    binding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await binding
    assert rig.cache.get("uid-p") is None and "Unreserve" in rig.probe.calls


async def test_a_pod_deleted_while_waiting_is_still_unreserved() -> None:
    """The watch's DELETED removes the assumed pod from the cache first; its Reserve
    plugins must still hear Unreserve (a gang's or a quota's reservation would leak)."""
    rig = Rig(wait=True)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.result is Result.WAITING
    binding = asyncio.ensure_future(rig.s1.bind(info, d))
    await asyncio.sleep(0)
    # What core/events.py does on the watch's DELETED.
    rig.cache.remove_pod("uid-p")
    rig.queue.delete("uid-p")
    wp = rig.fw.waiting.get("uid-p")
    assert wp is not None
    wp.reject("", "pod ns/p was deleted")
    assert await binding is Outcome.DROPPED
    assert rig.probe.calls[-1] == "Unreserve"
    assert rig.queue.where("uid-p") == ""


async def test_a_binding_the_watch_already_confirmed_is_not_undone() -> None:
    """Bind reported a failure (a timeout) but the watch shows the pod bound: the API is
    the truth, its cards stay charged and no Unreserve runs."""
    rig = Rig()
    rig.cluster.answer = Status(Code.ERROR, ("timeout",))
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    confirmed = dataclasses.replace(info.pod, node_name="n1", gpu_ids=(0,))
    rig.cache.add_or_update_pod(confirmed)
    await rig.s1.bind(info, d)
    assert "Unreserve" not in rig.probe.calls
    entry = rig.cache.get("uid-p")
    assert entry is not None and not entry.assumed


@pytest.mark.parametrize(("point", "says"), [("Reserve", "no cards"), ("Permit", "gang")])
def test_a_rejection_after_filter_is_reported_in_the_plugins_words(point: str, says: str) -> None:
    """Nodes passed Filter, so "0/N nodes are available" would be false: the message is
    what the rejecting plugin said."""
    rig = Rig(reject_at=point)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and d.feasible == 2
    assert says in d.message and "nodes are available" not in d.message
    assert says in rig.observed.ended[-1][2]


async def test_a_bind_plugin_raising_unwinds_and_backs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = Rig()

    async def boom(pod: PodInfo, node: str) -> Status:
        raise ConnectionError("bind bug")

    monkeypatch.setattr(rig.cluster, "bind", boom)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert "Binder Bind raised ConnectionError('bind bug')" in rig.observed.ended[-1][2]
    assert rig.cache.get("uid-p") is None and rig.probe.calls[-1] == "Unreserve"
    assert rig.queue.where("uid-p") == "backoff"


async def test_a_post_bind_plugin_raising_leaves_the_pod_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostBind is informational: the pod is bound, its bookkeeping done before it runs."""
    rig = Rig()

    class Raises:
        name = "Raises"

        async def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
            raise RuntimeError("post-bind bug")

    monkeypatch.setattr(rig.fw, "post_bind", [Raises()])
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BOUND
    assert rig.cache.is_assumed("uid-p") and rig.queue.where("uid-p") == ""
    assert rig.observed.ended[-1][1] is Outcome.BOUND


# -- a Binding of unknown outcome, a bound pod the watch is late for, a fenced binding --------


class _UnknownError(ClusterWriteError):
    uncertain = True


def _unknown() -> Status:
    why = "bind ns/p: TimeoutError; it may have been applied"
    return Status(Code.ERROR, (why,), "", _UnknownError(why))


class Reads:
    """read_pod: answers from `answers` in turn (an exception is raised), recording calls."""

    def __init__(self, rig: Rig, *answers: PodInfo | Exception | None) -> None:
        self.rig = rig
        self.answers = list(answers)
        self.calls = 0
        self.called = asyncio.Event()

    async def __call__(self, pod: PodInfo) -> PodInfo | None:
        self.calls += 1
        self.called.set()
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.rig.t += 15.0  # each read comes later on the scheduler's clock
        if isinstance(answer, Exception):
            raise answer
        return answer


def _unknown_rig(*answers: PodInfo | Exception | None) -> tuple[Rig, Reads]:
    rig = Rig()
    rig.cluster.answer = _unknown()
    reads = Reads(rig, *answers)
    rig.s1.read_pod = reads
    rig.s1.settle_backoff = (0.0, 0.0)
    return rig, reads


async def test_a_bound_pod_stays_assumed_however_late_the_watch_is() -> None:
    rig = Rig()
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None and await rig.s1.bind(info, d) is Outcome.BOUND
    row = rig.cache.snapshot.row_of(d.node)
    rig.t += 3600.0  # an hour with a silent watch: the pod runs on its card meanwhile
    # The reflector's stale, unbound copy of the pod comes through the queue again: it is
    # not placed a second time, and its card stays charged.
    rig.queue.add(info.pod)
    again = rig.queue.pop_nowait()
    assert again is not None and rig.s1.attempt(again) is None
    assert rig.cache.is_assumed("uid-p")
    assert rig.cache.snapshot.card_free_milli[row, 0] == 0
    assert rig.cluster.binds == [("ns/p", d.node)]


async def test_an_unknown_outcome_that_landed_counts_as_bound() -> None:
    rig = Rig()
    bound_copy = dataclasses.replace(make_pod("p", gpu_cards=1), node_name="n1")
    rig, reads = _unknown_rig(OSError("API unreachable"), bound_copy)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BOUND
    # Held through a failed read; never unreserved nor forgotten; the watch confirms later.
    assert reads.calls == 2
    assert rig.cache.is_assumed("uid-p") and "Unreserve" not in rig.probe.calls
    assert rig.queue.where("uid-p") == ""
    assert "the pod shows it landed" in rig.observed.ended[-1][2]


async def test_an_unknown_outcome_is_unbound_only_after_the_request_timeout() -> None:
    unbound = make_pod("p", gpu_cards=1)
    rig, reads = _unknown_rig(unbound)
    rig.s1.settle_after = 60.0
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    # Unbound at 15, 30 and 45 s proves nothing (the Binding may still be applied); at
    # 60 s it can no longer land: only then is the card freed and the pod retried.
    assert reads.calls == 4
    assert rig.cache.get("uid-p") is None and rig.probe.calls[-1] == "Unreserve"
    assert rig.queue.where("uid-p") == "backoff"


@pytest.mark.parametrize(
    ("answer", "word"),
    [
        (None, "gone"),
        (dataclasses.replace(make_pod("p", gpu_cards=1), uid="re-created"), "gone"),
        (dataclasses.replace(make_pod("p", gpu_cards=1), node_name="n0"), "bound elsewhere"),
    ],
)
async def test_an_unknown_outcome_settled_gone_or_elsewhere_is_dropped(
    answer: PodInfo | None, word: str
) -> None:
    rig, _ = _unknown_rig(answer)
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.DROPPED
    assert rig.cache.get("uid-p") is None and rig.probe.calls[-1] == "Unreserve"
    assert rig.queue.where("uid-p") == ""
    assert rig.observed.ended[-1][2].endswith(f"the pod is {word}")


async def test_the_watch_settles_an_unknown_outcome_without_a_read() -> None:
    rig, reads = _unknown_rig(OSError("API unreachable"))
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    rig.s1.settle_backoff = (0.01, 0.01)
    binding = asyncio.ensure_future(rig.s1.bind(info, d))
    await asyncio.wait_for(reads.called.wait(), 5.0)  # the first read fails: the pod is held
    assert rig.cache.is_assumed("uid-p")
    seen = dataclasses.replace(info.pod, node_name=d.node)
    rig.cache.add_or_update_pod(seen)  # the watch shows the pod bound here
    assert await binding is Outcome.BOUND
    assert not rig.cache.is_assumed("uid-p") and rig.cache.get("uid-p") is not None


async def test_a_definite_refusal_is_forgotten_at_once_without_a_read() -> None:
    rig, reads = _unknown_rig(None)
    rig.cluster.answer = Status(Code.ERROR, ("bind ns/p: forbidden (HTTP 403)",))
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert reads.calls == 0 and rig.cache.get("uid-p") is None


async def test_a_fenced_instance_does_not_bind() -> None:
    rig = Rig()
    reason: list[str | None] = [None]
    rig.s1.fence = lambda: reason[0]
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    reason[0] = "the leader Lease was last renewed 11.0s ago (renewDeadline 10.0s)"
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    # Stopped before PreBind: nothing written, the placement undone, the pod kept.
    assert rig.cluster.binds == [] and "PreBind" not in rig.probe.calls
    assert rig.cache.get("uid-p") is None
    assert rig.queue.where("uid-p") == "backoff"
    assert "not binding: the leader Lease was last renewed" in rig.observed.ended[-1][2]


async def test_the_fence_is_asked_again_right_before_bind() -> None:
    rig = Rig()
    asked: list[str] = []

    def fence() -> str | None:
        asked.append("fence")
        # Fresh before PreBind, stale by the time Bind would be sent.
        return None if len(asked) == 1 else "this instance does not hold the leader Lease"

    rig.s1.fence = fence
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert asked == ["fence", "fence"] and "PreBind" in rig.probe.calls
    assert rig.cluster.binds == []


async def test_a_node_deleted_before_bind_is_not_bound_to() -> None:
    # The API server accepts a Binding to a node that no longer exists; the pod would be
    # bound to nothing. The cycle undoes the placement and backs the pod off instead.
    rig = Rig()
    info = rig.pod()
    d = rig.s1.attempt(info)
    assert d is not None
    rig.cache.remove_node(d.node)
    assert await rig.s1.bind(info, d) is Outcome.BIND_FAILED
    assert rig.cluster.binds == [] and rig.cache.get("uid-p") is None
    assert rig.queue.where("uid-p") == "backoff"
    assert f"node {d.node} no longer exists" in rig.observed.ended[-1][2]


# --- fuzzed pending pods through the ai-scheduler profile --------------------------------


def _fuzz_fleet() -> list[NodeModel]:
    return [
        gpu_node("a", rack="r1"),
        gpu_node("b", cards=2, mem=16384, model="T4", rack="r2"),
        node("c", labels={"pool": "a"}),
        node("d", cards=1, taints=[("gpu", "true", "NoSchedule")]),
    ]


@given(
    raws=st.integers(1, 6).flatmap(lambda n: st.tuples(*(raw_pods(f"u{i}") for i in range(n)))),
)
@fuzz_settings(60)
def test_any_pending_pod_is_placed_within_the_cards_or_told_why_and_frees_exactly(
    raws: tuple[dict[str, Any], ...],
) -> None:
    fleet = _fuzz_fleet()
    sim = ai_sim(*fleet)
    snap = sim.snapshot
    present = snap.card_model != NO_CARD
    for raw in raws:
        p = pod_from_k8s(raw)
        if p.gang is not None and not p.errors:
            # A gang member waits at PreEnqueue for its PodGroup (none exists here).
            assert sim.events is not None
            sim.events.pod_changed(dataclasses.replace(p, scheduler_name=sim.name))
            sim.run()
            assert sim.queue.where(p.uid) == "gated"
            continue
        decision = sim.submit(p)  # never raises
        assert decision.result is not Result.ERROR, decision.message
        if p.errors:
            assert decision.result is Result.UNSCHEDULABLE
            assert all(e in decision.message for e in p.errors)
        assert (snap.card_free_milli[present] >= 0).all() and (
            snap.card_free_mem[present] >= 0
        ).all()
        assert (snap.node_cpu_free[snap.node_valid] >= 0).all()
    assert sim.errors == 0
    for raw in raws:
        sim.delete(raw["metadata"]["uid"])
    assert not sim.cache.pods
    for n in fleet:
        row = snap.row_of(n.name)
        assert snap.card_free_milli[row][: n.gpu_count].tolist() == [1000] * n.gpu_count
        assert (snap.card_free_mem[row] == snap.card_total_mem[row]).all()
        assert (snap.node_cpu_free[row], snap.node_mem_free[row]) == (n.cpu_milli, n.memory_bytes)
        assert snap.node_pods_free[row] == n.pods
