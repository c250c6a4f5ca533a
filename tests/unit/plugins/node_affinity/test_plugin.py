"""NodeAffinity: nodeSelector, required/preferred terms, matchFields, errors, caching."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import (
    Code,
    CycleState,
    FilterPlugin,
    NormalizeScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from gpusched.model.pod import PodInfo
from gpusched.plugins.node_affinity import NodeAffinity, NodeAffinityArgs
from tests.builders import all_rows, node, passing, pod, reasons_by_node, rows_of, snapshot
from tests.fakes import FakeHandle

REASON = "node(s) didn't match Pod's node affinity/selector"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def cluster() -> Snapshot:
    return snapshot(
        node(
            "a100-1",
            labels={"gpu": "a100", "zone": "z1", "gen": "8", "kubernetes.io/hostname": "a100-1"},
        ),
        node(
            "a100-2",
            labels={"gpu": "a100", "zone": "z2", "gen": "x8", "kubernetes.io/hostname": "a100-2"},
        ),
        node(
            "v100-1",
            labels={"gpu": "v100", "zone": "z1", "gen": "7", "kubernetes.io/hostname": "v100-1"},
        ),
        node("cpu-1", labels={"zone": "z2", "kubernetes.io/hostname": "cpu-1"}),
    )


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def run_filter(p: PodInfo, snap: Snapshot | None = None) -> list[str]:
    snap = snap or cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    state = CycleState()
    res_pf, st = plugin.pre_filter(state, p)
    assert st.is_success(), st
    mask = all_rows(snap)
    if res_pf is not None and res_pf.rows is not None:
        narrowed = np.zeros_like(mask)
        narrowed[res_pf.rows] = True
        mask &= narrowed
    res = plugin.filter(state, p, mask)
    assert res.unresolvable
    assert set(reasons_by_node(snap, mask, res).values()) <= {REASON}
    return passing(snap, res)


def test_implements_its_points() -> None:
    plugin = NodeAffinity(None, FakeHandle(snapshot()))
    for proto in (PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, NormalizeScorePlugin):
        assert isinstance(plugin, proto)


def test_pod_without_selector_or_affinity_skips_filter() -> None:
    plugin = NodeAffinity(None, FakeHandle(cluster()))
    only_preferred = {
        "nodeAffinity": {
            PREFERRED: [{"weight": 1, "preference": {"matchExpressions": [expr("gpu", "Exists")]}}]
        }
    }
    for p in (pod(), pod(affinity=only_preferred), pod(affinity={"podAffinity": {}})):
        res, st = plugin.pre_filter(CycleState(), p)
        assert res is None
        assert st.code is Code.SKIP


def test_node_selector_needs_every_key_with_that_value() -> None:
    assert run_filter(pod(node_selector={"gpu": "a100"})) == ["a100-1", "a100-2"]
    assert run_filter(pod(node_selector={"gpu": "a100", "zone": "z1"})) == ["a100-1"]
    assert run_filter(pod(node_selector={"gpu": ""})) == []  # present-with-empty != absent
    assert run_filter(pod(node_selector={"missing": "x"})) == []


@pytest.mark.parametrize(
    ("e", "expected"),
    [
        (expr("gpu", "In", "a100", "h100"), ["a100-1", "a100-2"]),
        (expr("gpu", "NotIn", "a100"), ["cpu-1", "v100-1"]),  # absent label matches NotIn
        (expr("gpu", "Exists"), ["a100-1", "a100-2", "v100-1"]),
        (expr("gpu", "DoesNotExist"), ["cpu-1"]),
        (expr("gen", "Gt", "7"), ["a100-1"]),  # "x8" is not an integer: no match
        (expr("gen", "Lt", "8"), ["v100-1"]),
        (expr("gen", "Gt", "06"), ["a100-1", "v100-1"]),  # base 10, leading zero fine
    ],
)
def test_operators(e: dict[str, Any], expected: list[str]) -> None:
    assert run_filter(pod(affinity=required({"matchExpressions": [e]}))) == expected


def test_expressions_anded_terms_ored() -> None:
    anded = required({"matchExpressions": [expr("gpu", "In", "a100"), expr("zone", "In", "z2")]})
    assert run_filter(pod(affinity=anded)) == ["a100-2"]
    ored = required(
        {"matchExpressions": [expr("gpu", "In", "v100")]},
        {"matchExpressions": [expr("zone", "In", "z2")]},
    )
    assert run_filter(pod(affinity=ored)) == ["a100-2", "cpu-1", "v100-1"]


def test_node_selector_and_affinity_both_apply() -> None:
    p = pod(
        node_selector={"zone": "z1"},
        affinity=required({"matchExpressions": [expr("gpu", "Exists")]}),
    )
    assert run_filter(p) == ["a100-1", "v100-1"]


def test_empty_terms_match_nothing() -> None:
    assert run_filter(pod(affinity=required({}))) == []
    assert run_filter(pod(affinity=required({"matchExpressions": []}))) == []
    assert run_filter(pod(affinity=required())) == []
    # An empty term next to a real one does not block the real one.
    assert run_filter(
        pod(affinity=required({}, {"matchExpressions": [expr("gpu", "In", "v100")]}))
    ) == ["v100-1"]


def test_match_fields_in_narrows_at_pre_filter() -> None:
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    p = pod(
        affinity=required(
            {"matchFields": [expr("metadata.name", "In", "a100-2")]},
            {"matchFields": [expr("metadata.name", "In", "cpu-1")]},
        )
    )
    res, st = plugin.pre_filter(CycleState(), p)
    assert st.is_success()
    assert res is not None
    assert res.rows is not None
    assert sorted(snap.names_of(res.rows)) == ["a100-2", "cpu-1"]
    assert run_filter(p) == ["a100-2", "cpu-1"]


def test_match_fields_with_expressions_and_not_in() -> None:
    both = required(
        {
            "matchFields": [expr("metadata.name", "In", "a100-1")],
            "matchExpressions": [expr("zone", "In", "z2")],
        }
    )
    assert run_filter(pod(affinity=both)) == []
    not_in = required(
        {
            "matchFields": [expr("metadata.name", "NotIn", "a100-1")],
            "matchExpressions": [expr("gpu", "Exists")],
        }
    )
    assert run_filter(pod(affinity=not_in)) == ["a100-2", "v100-1"]
    # A term without name pins means no narrowing; the OR still holds per row.
    mixed = required(
        {"matchFields": [expr("metadata.name", "In", "cpu-1")]},
        {"matchExpressions": [expr("gpu", "In", "v100")]},
    )
    assert run_filter(pod(affinity=mixed)) == ["cpu-1", "v100-1"]


def test_conflicting_name_pins_are_unresolvable() -> None:
    p = pod(
        affinity=required(
            {
                "matchFields": [
                    expr("metadata.name", "In", "a100-1"),
                    expr("metadata.name", "In", "a100-2"),
                ]
            }
        )
    )
    res, st = NodeAffinity(None, FakeHandle(cluster())).pre_filter(CycleState(), p)
    assert res is None
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ("pod affinity terms conflict",)


@pytest.mark.parametrize(
    ("e", "needle"),
    [
        (
            expr("gpu", "Foo", "a"),
            'nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Foo"',
        ),
        (
            expr("gen", "Gt", "abc"),
            'matchExpressions[0].values[0]: Invalid value: "abc":'
            " for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (expr("gen", "Lt", "1", "2"), "exactly one value is required"),
        (expr("gen", "Gt", "1.5"), 'Invalid value: "1.5"'),
        (expr("gpu", "In"), "values set can't be empty"),
        # A label value must start with an alphanumeric, so no signed Gt/Lt bounds.
        (expr("gen", "Gt", "-1"), 'values[0]: Invalid value: "-1": a valid label value'),
        (expr("gpu", "Exists", "a"), "values set must be empty"),
        (expr("bad key!", "Exists"), 'matchExpressions[0].key: Invalid value: "bad key!"'),
    ],
)
def test_malformed_affinity_is_unresolvable_at_pre_filter(e: dict[str, Any], needle: str) -> None:
    p = pod(affinity=required({"matchExpressions": [expr("zone", "Exists"), e][1:]}))
    res, st = NodeAffinity(None, FakeHandle(cluster())).pre_filter(CycleState(), p)
    assert res is None
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.plugin == "NodeAffinity"
    assert any(needle in r for r in st.reasons), st.reasons
    assert all(
        r.startswith(f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0]")
        for r in st.reasons
    )


def test_malformed_match_fields_and_preferred_terms_are_reported() -> None:
    plugin = NodeAffinity(None, FakeHandle(cluster()))
    bad_field = pod(affinity=required({"matchFields": [expr("metadata.labels", "In", "x")]}))
    _, st = plugin.pre_filter(CycleState(), bad_field)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert 'matchFields[0].key: Unsupported value: "metadata.labels"' in st.reasons[0]
    bad_pref = pod(
        affinity={
            "nodeAffinity": {
                PREFERRED: [
                    {"weight": 1, "preference": {"matchExpressions": [expr("g", "Gt", "x")]}}
                ]
            }
        }
    )
    _, st = plugin.pre_filter(CycleState(), bad_pref)
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons[0].startswith(
        f"spec.affinity.nodeAffinity.{PREFERRED}[0].preference.matchExpressions[0].values[0]"
    )


def test_filter_without_pre_filter_state() -> None:
    snap = cluster()
    res = NodeAffinity(None, FakeHandle(snap)).filter(
        CycleState(), pod(node_selector={"gpu": "v100"}), all_rows(snap)
    )
    assert passing(snap, res) == ["v100-1"]


def test_label_changes_and_new_nodes_are_seen_by_a_cached_selector() -> None:
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    p = pod(affinity=required({"matchExpressions": [expr("gpu", "In", "h100")]}))

    def names() -> list[str]:
        state = CycleState()
        plugin.pre_filter(state, p)
        return passing(snap, plugin.filter(state, p, all_rows(snap)))

    assert names() == []
    snap.upsert_node(node("cpu-1", labels={"gpu": "h100"}))  # relabelled in place
    snap.upsert_node(node("h100-9", labels={"gpu": "h100", "zone": "z9"}))  # new node
    for i in range(8):  # growth past the snapshot's initial capacity
        snap.upsert_node(node(f"extra-{i}", labels={"gpu": "a100", "i": str(i)}))
    assert names() == ["cpu-1", "h100-9"]
    snap.upsert_node(node("cpu-1", labels={}))
    assert names() == ["h100-9"]
    snap.remove_node("h100-9")
    assert names() == []


def test_a_new_snapshot_object_resets_the_tables() -> None:
    handle = FakeHandle(cluster())
    plugin = NodeAffinity(None, handle)
    p = pod(node_selector={"gpu": "v100"})
    plugin.filter(CycleState(), p, all_rows(handle.snapshot))
    handle.snapshot = snapshot(
        node("other", labels={"gpu": "v100"}), node("x", labels={"gpu": "a100"})
    )
    res = plugin.filter(CycleState(), p, all_rows(handle.snapshot))
    assert passing(handle.snapshot, res) == ["other"]


# -- Score -------------------------------------------------------------------------------------


def preferred(*terms: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {PREFERRED: [{"weight": w, "preference": t} for w, t in terms]}}


def score(p: PodInfo, *names: str) -> tuple[list[float], list[float], Code]:
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    state = CycleState()
    rows = rows_of(snap, *names)
    st = plugin.pre_score(state, p, rows)
    raw = plugin.score(state, p, rows)
    norm = raw.copy()
    plugin.normalize(state, p, norm)
    return raw.tolist(), norm.tolist(), st.code


def test_preferred_weights_sum_and_normalise_to_100() -> None:
    p = pod(
        affinity=preferred(
            (2, {"matchExpressions": [expr("gpu", "In", "a100")]}),
            (3, {"matchExpressions": [expr("zone", "In", "z1")]}),
            (5, {"matchFields": [expr("metadata.name", "In", "cpu-1")]}),
        )
    )
    raw, norm, code = score(p, "a100-1", "a100-2", "v100-1", "cpu-1")
    assert code is Code.SUCCESS
    assert raw == [5, 2, 3, 5]
    assert norm == [100, 40, 60, 100]


def test_zero_weight_and_empty_preferences_are_ignored() -> None:
    p = pod(affinity=preferred((0, {"matchExpressions": [expr("gpu", "Exists")]}), (4, {})))
    raw, norm, code = score(p, "a100-1", "cpu-1")
    assert code is Code.SKIP  # nothing left to score
    assert raw == [0, 0]
    assert norm == [0, 0]


def test_no_match_normalises_to_zero() -> None:
    p = pod(affinity=preferred((7, {"matchExpressions": [expr("gpu", "In", "h100")]})))
    raw, norm, code = score(p, "a100-1", "cpu-1")
    assert code is Code.SUCCESS
    assert (raw, norm) == ([0, 0], [0, 0])


def test_pre_score_skips_without_preferred_terms() -> None:
    _, _, code = score(pod(node_selector={"gpu": "a100"}), "a100-1")
    assert code is Code.SKIP


# -- Args: addedAffinity -----------------------------------------------------------------------


def test_added_affinity_is_enforced_first_with_its_own_reason() -> None:
    snap = cluster()
    args = NodeAffinityArgs(
        added_affinity={
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expr("gpu", "Exists")]}]}
        }
    )
    plugin = NodeAffinity(args, FakeHandle(snap))
    state = CycleState()
    p = pod(node_selector={"zone": "z1"})
    _, st = plugin.pre_filter(state, p)
    assert st.is_success()
    mask = all_rows(snap)
    res = plugin.filter(state, p, mask)
    assert passing(snap, res) == ["a100-1", "v100-1"]
    assert reasons_by_node(snap, mask, res) == {
        "cpu-1": "node(s) didn't match scheduler-enforced node affinity",
        "a100-2": REASON,
    }
    # With added affinity, even a pod without selectors runs Filter.
    _, st = plugin.pre_filter(CycleState(), pod())
    assert st.is_success()


def test_added_preferred_terms_add_to_the_score() -> None:
    snap = cluster()
    args = NodeAffinityArgs(
        added_affinity={
            PREFERRED: [
                {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "z2")]}}
            ]
        }
    )
    plugin = NodeAffinity(args, FakeHandle(snap))
    state = CycleState()
    rows = rows_of(snap, "a100-1", "a100-2")
    assert plugin.pre_score(state, pod(), rows).is_success()
    assert plugin.score(state, pod(), rows).tolist() == [0, 10]


def test_added_affinity_validation_names_the_field() -> None:
    assert NodeAffinityArgs().validate() == []
    bad = NodeAffinityArgs(
        added_affinity={
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "Gt", "x")]}]}
        }
    )
    problems = bad.validate()
    assert problems == [
        (
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values[0]",
            "Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
        )
    ]
    with pytest.raises(ValueError, match="addedAffinity"):
        NodeAffinity(bad, FakeHandle(cluster()))


def test_many_unique_labelsets_stay_fast() -> None:
    # Every node has its own hostname label: ~one label set per node.
    snap = Snapshot(max_cards=8, capacity=64)
    for i in range(3000):
        snap.upsert_node(
            node(f"n{i}", labels={"kubernetes.io/hostname": f"n{i}", "rack": str(i % 10)})
        )
    plugin = NodeAffinity(None, FakeHandle(snap))
    mask = all_rows(snap)
    for k in range(50):  # 50 distinct selectors
        p = pod(
            affinity=required(
                {
                    "matchExpressions": [
                        expr("rack", "In", str(k % 10)),
                        expr("kubernetes.io/hostname", "NotIn", f"n{k}"),
                    ]
                }
            )
        )
        state = CycleState()
        plugin.pre_filter(state, p)
        res = plugin.filter(state, p, mask)
        assert int(res.feasible.sum()) == 299


def test_label_churn_nobody_selects_on_recomputes_nothing() -> None:
    # GPU Feature Discovery rewrites nvidia.com/gfd.timestamp every minute.
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    p = pod(affinity=required({"matchExpressions": [expr("gpu", "In", "a100")]}))
    assert run_with(plugin, snap, p) == ["a100-1", "a100-2"]
    index, sets, gen = plugin._index, len(snap.labelsets), snap.generation
    assert index is not None
    size = len(index)
    for stamp in range(10_000):
        snap.upsert_node(
            node("a100-1", labels={"gpu": "a100", "nvidia.com/gfd.timestamp": str(stamp)})
        )
    assert run_with(plugin, snap, p) == ["a100-1", "a100-2"]
    assert plugin._index is index and len(index) == size
    assert (len(snap.labelsets), snap.generation) == (sets, gen)
    snap.upsert_node(node("a100-1", labels={"gpu": "v100"}))  # a selected key: seen
    assert run_with(plugin, snap, p) == ["a100-2"]


def test_a_never_seen_key_changed_before_the_pod_arrived_is_seen() -> None:
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    assert run_with(plugin, snap, pod(node_selector={"gpu": "v100"})) == ["v100-1"]
    # Nobody selects on "pool" yet, so this changes no label set...
    snap.upsert_node(node("cpu-1", labels={"zone": "z2", "pool": "gold"}))
    # ...and the first pod that does still finds the node, by Filter and by Score.
    assert run_with(plugin, snap, pod(node_selector={"pool": "gold"})) == ["cpu-1"]
    q = pod(affinity=preferred((5, {"matchExpressions": [expr("team", "Exists")]})))
    snap.upsert_node(node("v100-1", labels={"gpu": "v100", "team": "x"}))
    state = CycleState()
    rows = rows_of(snap, "v100-1", "cpu-1")
    plugin.pre_score(state, q, rows)
    assert plugin.score(state, q, rows).tolist() == [5.0, 0.0]


def test_added_affinity_keys_are_watched() -> None:
    snap = snapshot(node("a", labels={"pool": "gold"}), node("b"))
    added = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expr("pool", "In", "gold")]}]}}
    plugin = NodeAffinity(NodeAffinityArgs(added_affinity=added), FakeHandle(snap))
    assert run_with(plugin, snap, pod(node_selector={"gpu": "x"})) == []
    assert run_with(plugin, snap, pod()) == ["a"]


def run_with(plugin: NodeAffinity, snap: Snapshot, p: PodInfo) -> list[str]:
    state = CycleState()
    _, st = plugin.pre_filter(state, p)
    if st.code is Code.SKIP:
        return passing(snap, plugin.filter(state, p, all_rows(snap)))
    assert st.is_success(), st
    return passing(snap, plugin.filter(state, p, all_rows(snap)))


def test_verdicts_survive_label_sets_being_freed_and_renumbered() -> None:
    # Autoscaled nodes come and go, each with its own hostname: their label sets are freed
    # with them and, once freed ids pile up, the live ones are renumbered.
    snap = cluster()
    plugin = NodeAffinity(None, FakeHandle(snap))
    p = pod(node_selector={"pool": "gold"})
    assert run_with(plugin, snap, pod(node_selector={"kubernetes.io/hostname": "x"})) == []
    epoch = snap.labelsets.epoch
    for i in range(300):
        name = f"tmp-{i}"
        labels = {"kubernetes.io/hostname": name, "pool": "gold" if i % 2 else "silver"}
        snap.upsert_node(node(name, labels=labels))
        assert run_with(plugin, snap, p) == ([name] if i % 2 else []), i
        snap.remove_node(name)
    assert snap.labelsets.epoch > epoch and len(snap.labelsets) < 100
