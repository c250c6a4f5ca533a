"""The framework runner: profile validation, normalisation and weights, Permit."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import pytest

from gpusched.config.profile import ConfigError, PluginRef, Point, Profile
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.runtime import tie_break
from gpusched.core.runtime.framework import Framework, pre_enqueue_of
from gpusched.core.runtime.tie_break import node_rank
from gpusched.framework import Code, CycleState, Rows, Scores, Status
from gpusched.framework.registry import Registry
from gpusched.model.pod import PodInfo
from tests.builders import gpu_node, make_pod
from tests.fake_plugins import Binder, EvenRows, Gate, OutOfRange, ReverseRowScore, RowScore, Sort
from tests.fakes import FakeHandle


def registry() -> Registry:
    r = Registry()
    for cls in (Sort, Binder, EvenRows, RowScore, ReverseRowScore, OutOfRange, Gate):
        r.register(cls)
    return r


def profile(**points: tuple[PluginRef, ...]) -> Profile:
    plugins = {Point.QUEUE_SORT: (PluginRef("Sort"),), Point.BIND: (PluginRef("Binder"),)}
    for key, refs in points.items():
        plugins[Point(key)] = refs
    return Profile("test", plugins)


def handle(nodes: int = 6) -> FakeHandle:
    snap = Snapshot(8, capacity=8)
    for i in range(nodes):
        snap.upsert_node(gpu_node(f"n{i}"))
    return FakeHandle(snap)


def test_valid_profile_builds() -> None:
    fw = Framework(profile(), registry(), handle())
    assert fw.queue_sort.name == "Sort"


def test_two_queue_sorts_refused() -> None:
    p = Profile(
        "test",
        {
            Point.QUEUE_SORT: (PluginRef("Sort"), PluginRef("Sort")),
            Point.BIND: (PluginRef("Binder"),),
        },
    )
    with pytest.raises(ConfigError, match=r"plugins\.queueSort: exactly one QueueSort plugin"):
        Framework(p, registry(), handle())


def test_no_bind_refused() -> None:
    p = Profile("test", {Point.QUEUE_SORT: (PluginRef("Sort"),)})
    with pytest.raises(ConfigError, match="at least one Bind plugin"):
        Framework(p, registry(), handle())


@pytest.mark.parametrize("weight", [None, 0.0, -1.0])
def test_score_plugin_needs_positive_weight(weight: float | None) -> None:
    p = profile(score=(PluginRef("RowScore", weight),))
    with pytest.raises(ConfigError, match=r"score\.enabled\[RowScore\]\.weight"):
        Framework(p, registry(), handle())


def test_plugin_at_a_point_it_does_not_implement() -> None:
    with pytest.raises(ConfigError, match="plugin EvenRows does not implement score"):
        Framework(profile(score=(PluginRef("EvenRows", 1.0),)), registry(), handle())


def test_unknown_plugin_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown plugin 'Nope' \(known: Binder, EvenRows"):
        Framework(profile(filter=(PluginRef("Nope"),)), registry(), handle())


def test_filter_reasons_counted_and_message_like_kube_scheduler() -> None:
    h = handle(6)
    fw = Framework(profile(filter=(PluginRef("EvenRows"),)), registry(), h)
    pod = make_pod()
    mask, diag, st = fw.run_filter(CycleState(), pod, fw.candidates(None))
    assert st.is_success()
    assert list(np.flatnonzero(mask)) == [0, 2, 4]
    assert diag.reasons == {"odd row": 3}
    assert diag.message() == "0/6 nodes are available: 3 odd row."


def test_normalisation_and_weights() -> None:
    h = handle(5)
    p = profile(score=(PluginRef("RowScore", 2.0), PluginRef("ReverseRowScore", 1.0)))
    fw = Framework(p, registry(), h)
    rows = np.arange(5, dtype=np.intp)
    res, st = fw.run_score(CycleState(), make_pod(), rows, keep=True)
    assert st.is_success() and res is not None
    norm = res.by_plugin["RowScore"].normalized
    assert norm.max() == 100.0 and norm.min() == 0.0
    np.testing.assert_allclose(res.by_plugin["RowScore"].raw, rows * 50.0)
    np.testing.assert_allclose(res.total, 2.0 * rows * 25.0 + (100.0 - rows))
    assert fw.select(res) == 4


def test_score_out_of_range_is_an_error_naming_the_plugin() -> None:
    fw = Framework(profile(score=(PluginRef("OutOfRange", 1.0),)), registry(), handle())
    res, st = fw.run_score(CycleState(), make_pod(), np.arange(3, dtype=np.intp))
    assert res is None
    assert st.code is Code.ERROR and st.plugin == "OutOfRange"
    assert "outside [0, 100]" in st.message()


def test_the_nominated_row_wins_when_it_is_feasible() -> None:
    """kube's evaluateNominatedNode: a preemptor goes where it was nominated when that node
    passes Filter, whatever the scores; a nominated row that did not pass is ignored."""
    h = handle(5)
    fw = Framework(profile(score=(PluginRef("RowScore", 1.0),)), registry(), h)
    res, _ = fw.run_score(CycleState(), make_pod(), np.array([0, 2, 4], dtype=np.intp))
    assert res is not None
    assert fw.select(res) == 4
    assert fw.select(res, nominated=0) == 0
    assert fw.select(res, nominated=3) == 4  # not feasible: the scores decide


def test_ties_are_broken_among_the_best_only() -> None:
    fw = Framework(
        profile(score=(PluginRef("ReverseRowScore", 1.0),)), registry(), handle(6), seed=3
    )
    h = fw.handle
    res, _ = fw.run_score(CycleState(), make_pod(), np.arange(6, dtype=np.intp))
    assert res is not None
    res.total[:] = [1, 5, 5, 2, 5, 0]
    picks = {fw.select(res) for _ in range(20)}
    # Deterministic: always the same one of the best rows, the first in the seeded order.
    names = h.snapshot.names
    assert picks == {min((1, 2, 4), key=lambda r: node_rank(3, names[r]))}
    assert h.snapshot.size == 6


def test_the_seed_reorders_ties_and_every_best_row_can_win() -> None:
    """The tie-break is a fixed order per seed, not a preference for low rows or names."""
    h = handle(6)
    wins = set()
    for seed in range(40):
        fw = Framework(profile(score=(PluginRef("RowScore", 1.0),)), registry(), h, seed=seed)
        res, _ = fw.run_score(CycleState(), make_pod(), np.arange(6, dtype=np.intp))
        assert res is not None
        res.total[:] = [1, 5, 5, 2, 5, 0]
        wins.add(fw.select(res))
    assert wins == {1, 2, 4}


def test_tie_ranks_follow_nodes_not_rows() -> None:
    """A node keeps its rank when the snapshot's rows change under it (a node removed and
    another added reuses the row), so the daemon and the simulator agree whatever the
    order nodes were added in."""
    h = handle(3)
    fw = Framework(profile(score=(PluginRef("RowScore", 1.0),)), registry(), h, seed=7)
    order = fw.tie_break
    ties = np.arange(3, dtype=np.intp)
    first = h.snapshot.names[order(ties)]
    h.snapshot.remove_node(first)
    h.snapshot.upsert_node(gpu_node("zz-new"))
    names = h.snapshot.names
    expected = min(
        ("zz-new", *(n for n in names[:3] if n != "zz-new")), key=lambda n: node_rank(7, n)
    )
    assert names[order(ties)] == expected


def test_label_churn_does_not_recompute_tie_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU Feature Discovery rewrites a timestamp label on every node every minute; hashing
    every node name again on each would cost milliseconds per label update at 10,000
    nodes. Only a node added or removed changes which node is on which row."""
    h = handle(3)
    fw = Framework(profile(score=(PluginRef("RowScore", 1.0),)), registry(), h, seed=7)
    calls = 0

    def counted(seed: int, name: str) -> int:
        nonlocal calls
        calls += 1
        return node_rank(seed, name)

    monkeypatch.setattr(tie_break, "node_rank", counted)
    ties = np.arange(3, dtype=np.intp)
    picked = fw.tie_break(ties)
    assert calls == 3
    relabelled = replace(gpu_node("n1"), labels={"nvidia.com/gfd.timestamp": "1700000060"})
    h.snapshot.upsert_node(relabelled)
    assert fw.tie_break(ties) == picked and calls == 3
    h.snapshot.upsert_node(gpu_node("n3"))
    fw.tie_break(ties)
    assert calls == 7  # a new node: every row's rank again


def test_permit_wait_then_allow() -> None:
    h = handle()
    fw = Framework(profile(permit=(PluginRef("Gate"),)), registry(), h)
    pod = make_pod()
    st = fw.run_permit(CycleState(), pod, "n0")
    assert st.code is Code.WAIT

    async def go() -> Code:
        wp = fw.waiting.get(pod.uid)
        assert wp is not None
        waiter = asyncio.ensure_future(fw.wait_on_permit(pod))
        # FIFO callbacks: the waiter's first step (parking on its future) runs before this.
        asyncio.get_running_loop().call_soon(wp.allow, "Gate")
        status = await waiter
        assert wp.done
        return status.code

    assert asyncio.run(go()) is Code.SUCCESS
    assert fw.waiting.get(pod.uid) is None


def test_permit_timeout_rejects() -> None:
    h = handle()
    fw = Framework(profile(permit=(PluginRef("Gate"),)), registry(), h)
    pod = make_pod()
    fw.run_permit(CycleState(), pod, "n0")
    wp = fw.waiting.get(pod.uid)
    assert wp is not None
    wp.deadline = 0.0  # the gate's 5 s already passed on the handle's clock
    st = asyncio.run(fw.wait_on_permit(pod))
    assert st.code is Code.UNSCHEDULABLE
    assert "timeout" in st.message() and st.plugin == "Gate"


def test_permit_virtual_clock_timeout() -> None:
    h = handle()
    fw = Framework(profile(permit=(PluginRef("Gate"),)), registry(), h)
    pod = make_pod()
    fw.run_permit(CycleState(), pod, "n0")
    wp = fw.waiting.get(pod.uid)
    assert wp is not None
    assert not wp.check_timeout(4.9)
    assert wp.check_timeout(5.0)
    result = wp.result()
    assert result is not None and result.code is Code.UNSCHEDULABLE


def test_permit_reject() -> None:
    h = handle()
    fw = Framework(profile(permit=(PluginRef("Gate"),)), registry(), h)
    pod = make_pod()
    fw.run_permit(CycleState(), pod, "n0")
    wp = fw.waiting.get(pod.uid)
    assert wp is not None
    wp.reject("Gate", "gang ns/g timed out")
    st = asyncio.run(fw.wait_on_permit(pod))
    assert st.code is Code.UNSCHEDULABLE and st.message() == "gang ns/g timed out"


def test_malformed_pod_is_unresolvable_with_its_reasons() -> None:

    fw = Framework(profile(), registry(), handle())
    pod = replace(make_pod(), errors=("annotation gpusched.io/gpu-milli='x' is not an integer",))
    _, st = fw.run_pre_filter(CycleState(), pod)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "gpu-milli='x'" in st.message()


class NaNScore:
    name: ClassVar[str] = "NaNScore"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.full(len(rows), 50.0)
        out[0] = np.nan
        return out


def test_nan_score_is_an_error_not_a_crash_at_select() -> None:
    reg = registry()
    reg.register(NaNScore)
    fw = Framework(profile(score=(PluginRef("NaNScore", 1.0),)), reg, handle())
    res, st = fw.run_score(CycleState(), make_pod(), np.arange(3, dtype=np.intp))
    # A NaN passed the [0, 100] check, and select() then found no best row (empty ties).
    assert res is None
    assert st.code is Code.ERROR and st.plugin == "NaNScore"


class _Raises:
    """Reserve, Permit and PostBind that raise: a plugin bug."""

    name = "Raises"

    def __init__(self, args: object, handle: object) -> None:
        self.unreserved = 0

    def reserve(self, state: CycleState, pod: object, node: str) -> Status:
        raise RuntimeError("reserve bug")

    def unreserve(self, state: CycleState, pod: object, node: str) -> None:
        self.unreserved += 1
        raise RuntimeError("unreserve bug")

    def permit(self, state: CycleState, pod: object, node: str) -> tuple[Status, float]:
        raise RuntimeError("permit bug")

    async def post_bind(self, state: CycleState, pod: object, node: str) -> None:
        raise RuntimeError("post-bind bug")


def test_plugin_exceptions_after_filtering_become_error_statuses() -> None:

    reg = Registry()
    for cls in (Sort, Binder, _Raises):
        reg.register(cls)
    profile = Profile(
        "p",
        {
            Point.QUEUE_SORT: (PluginRef("Sort"),),
            Point.BIND: (PluginRef("Binder"),),
            Point.RESERVE: (PluginRef("Raises"),),
            Point.PERMIT: (PluginRef("Raises"),),
            Point.POST_BIND: (PluginRef("Raises"),),
        },
    )
    fw = Framework(profile, reg, handle(3))
    pod = make_pod()
    st = fw.run_reserve(CycleState(), pod, "n0")
    assert st.code is Code.ERROR and "Reserve raised" in st.message() and st.plugin == "Raises"
    assert fw.plugins["Raises"].unreserved == 1  # undone even though Unreserve raises too
    st = fw.run_permit(CycleState(), pod, "n0")
    assert st.code is Code.ERROR and "Permit raised" in st.message()
    asyncio.run(fw.run_post_bind(CycleState(), pod, "n0"))  # logged, not raised


class _Gates:
    name: ClassVar[str] = "Gates"

    def __init__(self, args: object, handle: object) -> None:
        pass

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if pod.name == "boom":
            raise RuntimeError("broken")
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gated",)) if pod.labels else Status()


def test_pre_enqueue_names_the_refusing_plugin_and_turns_a_raise_into_an_error() -> None:
    r = registry()
    r.register(_Gates)
    fw = Framework(profile(preEnqueue=(PluginRef("Gates"),)), r, handle())
    assert fw.run_pre_enqueue(make_pod("a")).is_success()
    st = fw.run_pre_enqueue(replace(make_pod("a"), labels={"x": "y"}))
    assert (st.code, st.plugin, st.message()) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        "Gates",
        "gated",
    )
    assert fw.run_pre_enqueue(make_pod("boom")).code is Code.ERROR
    check = pre_enqueue_of({"test": fw})
    assert check is not None
    assert not check(replace(make_pod("a"), labels={"x": "y"}, scheduler_name="test")).is_success()
    # A pod of no profile passes; no profile with PreEnqueue plugins: no check at all.
    assert check(replace(make_pod("a"), labels={"x": "y"}, scheduler_name="other")).is_success()
    assert pre_enqueue_of({"test": Framework(profile(), registry(), handle())}) is None


class _Heat:
    """A filter that keeps state over telemetry; the second instance's hook raises."""

    name: ClassVar[str] = "Heat"
    seen: ClassVar[list[str]] = []

    def __init__(self, args: object, handle: object) -> None:
        pass

    def filter(self, state: CycleState, pod: PodInfo, candidates: np.ndarray) -> Any:
        raise AssertionError("not called here")

    def telemetry_updated(self) -> None:
        _Heat.seen.append(self.name)


class _BrokenHeat(_Heat):
    name: ClassVar[str] = "BrokenHeat"

    def telemetry_updated(self) -> None:
        raise RuntimeError("boom")


def test_telemetry_updated_reaches_every_telemetry_plugin_and_survives_a_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = registry()
    r.register(_BrokenHeat)
    r.register(_Heat)
    p = profile(filter=(PluginRef("BrokenHeat"), PluginRef("Heat"), PluginRef("EvenRows")))
    fw = Framework(p, r, handle())
    _Heat.seen.clear()
    # On the module's logger itself: a daemon test may have stopped `gpusched` propagating.
    log = logging.getLogger("gpusched.core.runtime.framework")
    log.addHandler(caplog.handler)
    try:
        fw.telemetry_updated()
    finally:
        log.removeHandler(caplog.handler)
    assert _Heat.seen == ["Heat"]
    assert "telemetry update of BrokenHeat raised" in caplog.text


class IntScore:
    """Integer scores in a strided view: the runtime sums them as float64 all the same."""

    name: ClassVar[str] = "IntScore"

    def __init__(self, args: object, handle: object) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.zeros(2 * len(rows), np.int64)
        out[::2] = 10 * rows
        return out[::2]  # type: ignore[return-value]


def test_integer_and_strided_scores_sum_and_the_timings_read_per_plugin() -> None:
    reg = registry()
    reg.register(IntScore)
    p = profile(score=(PluginRef("IntScore", 0.5), PluginRef("RowScore", 1.0)))
    fw = Framework(p, reg, handle())
    keys = fw.timings.keys()
    before = fw.timings.totals()
    rows = np.arange(4, dtype=np.intp)
    res, st = fw.run_score(CycleState(), make_pod(), rows)
    assert st.is_success() and res is not None
    np.testing.assert_allclose(res.total, 0.5 * 10.0 * rows + rows * 50.0 / 1.5)
    after = fw.timings.totals()
    spent = {k: after[i] - before[i] for i, k in enumerate(keys)}
    assert spent[("Score", "IntScore")] > 0 and spent[("Score", "RowScore")] > 0
    assert fw.timings.calls[("Score", "IntScore")] == 1
