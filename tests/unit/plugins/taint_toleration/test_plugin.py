"""TaintToleration: kube-scheduler's toleration semantics, reasons and normalisation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpusched.framework import CycleState, FilterPlugin, NormalizeScorePlugin, ScorePlugin
from gpusched.plugins.taint_toleration import TaintToleration
from gpusched.plugins.taint_toleration.plugin import REASON
from tests.builders import all_rows, node, passing, pod, reasons_by_node, rows_of, snapshot
from tests.fakes import FakeHandle

GPU_TAINT = ("dedicated", "gpu", "NoSchedule")


def filter_names(
    taints: list[tuple[str, str, str]], tolerations: list[dict[str, Any]]
) -> list[str]:
    snap = snapshot(node("plain"), node("tainted", taints=taints))
    res = TaintToleration(None, FakeHandle(snap)).filter(
        CycleState(), pod(tolerations=tuple(tolerations)), all_rows(snap)
    )
    return passing(snap, res)


def test_implements_filter_score_normalize() -> None:
    plugin = TaintToleration(None, FakeHandle(snapshot()))
    assert isinstance(plugin, FilterPlugin)
    assert isinstance(plugin, ScorePlugin)
    assert isinstance(plugin, NormalizeScorePlugin)


def test_untolerated_noschedule_rejected_with_kube_reason() -> None:
    snap = snapshot(node("plain"), node("gpu", taints=[GPU_TAINT]))
    mask = all_rows(snap)
    res = TaintToleration(None, FakeHandle(snap)).filter(CycleState(), pod(), mask)
    assert passing(snap, res) == ["plain"]
    assert reasons_by_node(snap, mask, res) == {"gpu": REASON}
    assert res.unresolvable


def test_noexecute_also_filters_prefer_noschedule_does_not() -> None:
    assert filter_names([("k", "v", "NoExecute")], []) == ["plain"]
    assert filter_names([("k", "v", "PreferNoSchedule")], []) == ["plain", "tainted"]


def test_a_taint_with_an_empty_value_is_reported_like_any_other() -> None:
    snap = snapshot(
        node("cp", taints=[("node-role.kubernetes.io/control-plane", "", "NoSchedule")])
    )
    mask = all_rows(snap)
    res = TaintToleration(None, FakeHandle(snap)).filter(CycleState(), pod(), mask)
    assert reasons_by_node(snap, mask, res) == {"cp": REASON}


@pytest.mark.parametrize(
    ("toleration", "passes"),
    [
        ({"operator": "Exists"}, True),  # empty key + Exists: everything
        ({"operator": "Exists", "effect": "NoExecute"}, False),  # ...but only that effect
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),  # no operator = Equal
        ({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "cpu"}, False),
        ({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "dedicated", "operator": "Lt", "value": "9"}, False),  # alpha, gate off
        ({"key": "", "operator": "Equal", "value": "gpu"}, True),  # empty key, Equal compares value
    ],
)
def test_toleration_matching(toleration: dict[str, Any], passes: bool) -> None:
    got = filter_names([GPU_TAINT], [toleration])
    assert got == (["plain", "tainted"] if passes else ["plain"])


def test_every_blocking_taint_must_be_tolerated() -> None:
    taints = [("a", "1", "NoSchedule"), ("b", "2", "NoExecute"), ("c", "3", "PreferNoSchedule")]
    snap = snapshot(node("n", taints=taints))
    mask = all_rows(snap)
    plugin = TaintToleration(None, FakeHandle(snap))
    only_a = pod(tolerations=({"key": "a", "operator": "Exists"},))
    res = plugin.filter(CycleState(), only_a, mask)
    assert reasons_by_node(snap, mask, res) == {"n": REASON}
    both = pod(tolerations=({"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}))
    assert passing(snap, plugin.filter(CycleState(), both, mask)) == ["n"]


def test_distinct_taints_share_kubes_one_reason() -> None:
    snap = snapshot(
        node("a1", taints=[("a", "x", "NoSchedule")]),
        node("a2", taints=[("a", "x", "NoSchedule")]),
        node("b", taints=[("b", "y", "NoSchedule")]),
        node("free"),
    )
    mask = all_rows(snap)
    res = TaintToleration(None, FakeHandle(snap)).filter(CycleState(), pod(), mask)
    assert res.codes is not None
    assert reasons_by_node(snap, mask, res) == {
        "a1": REASON,
        "a2": REASON,
        "b": REASON,
    }


def test_untainted_cluster_does_no_python_work() -> None:
    snap = snapshot(node("a"), node("b"))
    plugin = TaintToleration(None, FakeHandle(snap))
    res = plugin.filter(CycleState(), pod(tolerations=({"operator": "Exists"},)), all_rows(snap))
    assert passing(snap, res) == ["a", "b"]
    assert plugin._filter == {}  # no toleration table was built


def test_cache_follows_nodes_and_taints_that_change() -> None:
    snap = snapshot(node("a", taints=[GPU_TAINT]))
    plugin = TaintToleration(None, FakeHandle(snap))
    p = pod()
    assert passing(snap, plugin.filter(CycleState(), p, all_rows(snap))) == []
    # The taint goes away, a new node with a new taint set arrives: same pod signature.
    snap.upsert_node(node("a"))
    snap.upsert_node(node("b", taints=[("new", "t", "NoExecute")]))
    mask = all_rows(snap)
    res = plugin.filter(CycleState(), p, mask)
    assert passing(snap, res) == ["a"]
    assert reasons_by_node(snap, mask, res) == {"b": REASON}


def test_a_new_snapshot_object_resets_the_cache() -> None:
    handle = FakeHandle(snapshot(node("a", taints=[GPU_TAINT])))
    plugin = TaintToleration(None, handle)
    plugin.filter(CycleState(), pod(), all_rows(handle.snapshot))
    # Same taint-set id 0 means a different taint in the new snapshot.
    handle.snapshot = snapshot(node("a", taints=[("x", "y", "NoSchedule")]))
    mask = all_rows(handle.snapshot)
    res = plugin.filter(CycleState(), pod(), mask)
    assert reasons_by_node(handle.snapshot, mask, res) == {"a": REASON}


# -- Score -------------------------------------------------------------------------------------


def score(tolerations: tuple[dict[str, Any], ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    prefer = "PreferNoSchedule"
    snap = snapshot(
        node("none"),
        node("one", taints=[("a", "1", prefer)]),
        node("two", taints=[("a", "1", prefer), ("b", "2", prefer), ("c", "3", "NoSchedule")]),
    )
    plugin = TaintToleration(None, FakeHandle(snap))
    state = CycleState()
    p = pod(tolerations=tolerations)
    rows = rows_of(snap, "none", "one", "two")
    assert plugin.pre_score(state, p, rows).is_success()
    raw = plugin.score(state, p, rows)
    norm = raw.copy()
    plugin.normalize(state, p, norm)
    return raw, norm


def test_score_counts_intolerable_prefer_noschedule_and_reverses() -> None:
    raw, norm = score()
    assert raw.tolist() == [0, 1, 2]  # the NoSchedule taint does not count
    assert norm.tolist() == [100, 50, 0]


def test_score_only_counts_tolerations_for_prefer_noschedule() -> None:
    # A NoSchedule toleration does not tolerate a PreferNoSchedule taint.
    raw, _ = score(({"key": "a", "operator": "Exists", "effect": "NoSchedule"},))
    assert raw.tolist() == [0, 1, 2]
    raw, _ = score(({"key": "a", "operator": "Exists"},))
    assert raw.tolist() == [0, 0, 1]
    raw, norm = score(({"operator": "Exists", "effect": "PreferNoSchedule"},))
    assert raw.tolist() == [0, 0, 0]
    assert norm.tolist() == [100, 100, 100]  # all zero, reversed: everyone gets the max


def test_normalize_floors_like_kube() -> None:
    plugin = TaintToleration(None, FakeHandle(snapshot()))
    scores = np.array([0.0, 1.0, 3.0])
    plugin.normalize(CycleState(), pod(), scores)
    assert scores.tolist() == [100, 67, 0]  # 100 - 100*1//3 = 100 - 33


def test_score_without_pre_score_state() -> None:
    snap = snapshot(node("one", taints=[("a", "1", "PreferNoSchedule")]))
    plugin = TaintToleration(None, FakeHandle(snap))
    assert plugin.score(CycleState(), pod(), rows_of(snap, "one")).tolist() == [1]


def test_verdicts_survive_taint_sets_being_freed_and_renumbered() -> None:
    # A taint whose value churns (the autoscaler's deletion-candidate timestamp) frees its
    # old taint sets; once freed ids pile up they are renumbered, and cached verdicts by id
    # must not be read under the new numbering.
    snap = snapshot(node("plain"), node("gpu", taints=[GPU_TAINT]), node("churn"))
    plugin = TaintToleration(None, FakeHandle(snap))
    tolerate_churn = pod(tolerations=({"key": "churn", "operator": "Exists"},))
    epoch = snap.taintsets.epoch
    for i in range(300):
        key = "churn" if i % 2 else "hard"  # tolerated, then not, in turn
        snap.upsert_node(node("churn", taints=[(key, str(i), "NoSchedule")]))
        res = plugin.filter(CycleState(), tolerate_churn, all_rows(snap))
        assert passing(snap, res) == (["churn", "plain"] if i % 2 else ["plain"]), i
    assert snap.taintsets.epoch > epoch
    res = plugin.filter(CycleState(), pod(), all_rows(snap))
    assert passing(snap, res) == ["plain"]
