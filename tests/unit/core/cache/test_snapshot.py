"""The snapshot's numpy columns: rows kept while it grows; label and taint sets bounded."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from gpusched.core.cache import snapshot as snapshot_module
from gpusched.framework.snapshot import MAX_ALLOWED_CACHE, MAX_OTHER_RESOURCES
from gpusched.model.node import Card, NodeModel, Taint
from tests.builders import cache_with, node, snapshot


def test_snapshot_grows_and_keeps_rows() -> None:
    c = cache_with(*[f"n{i}" for i in range(70)])
    snap = c.snapshot
    assert snap.size == 70 and snap.capacity >= 70
    assert snap.names[snap.row_of("n69")] == "n69"
    assert int(snap.card_free_milli[snap.row_of("n0")].sum()) == 8000


# -- label and taint sets: reference-counted, only the watched keys ------------------------

GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"


def gfd_node(name: str, stamp: int, **labels: str) -> NodeModel:
    return node(
        name,
        labels={"kubernetes.io/hostname": name, GFD_TIMESTAMP: str(stamp), **labels},
        cards=2,
    )


def test_a_label_nothing_selects_on_interns_nothing_and_bumps_nothing() -> None:
    snap = snapshot(gfd_node("a", 0), gfd_node("b", 0))
    snap.watch_labels(["kubernetes.io/hostname", "zone"])
    sets, space, gen = snap.labelsets.live, len(snap.labelsets), snap.generation
    assert sets == 2  # one per hostname
    for stamp in range(1, 10_001):  # GPU Feature Discovery, every minute for a week
        snap.upsert_node(gfd_node("a", stamp))
    assert (snap.labelsets.live, len(snap.labelsets), snap.generation) == (sets, space, gen)
    # A watched key is still seen: a new label set and a new generation.
    snap.upsert_node(gfd_node("a", 0, zone="z1"))
    assert snap.generation == gen + 1
    assert snap.labels_of(int(snap.node_labelset[snap.row_of("a")]))["zone"] == "z1"


def test_unwatched_labels_share_one_label_set() -> None:
    snap = snapshot(*(gfd_node(f"n{i}", i) for i in range(10)))
    assert snap.labelsets.live == 1  # nothing watched: every node's label set is empty
    snap.watch_labels(["kubernetes.io/hostname"])  # a node carries it: re-derived once
    assert snap.labelsets.live == 10 and snap.relabels == 1
    assert snap.labels_of(int(snap.node_labelset[snap.row_of("n3")])) == {
        "kubernetes.io/hostname": "n3"
    }
    snap.watch_labels(["kubernetes.io/hostname", "nobody-has-this"])
    assert snap.relabels == 1  # nothing to re-derive: a watched key, and one no node has


def test_a_key_watched_after_its_label_changed_sees_the_new_value() -> None:
    snap = snapshot(gfd_node("a", 0), gfd_node("b", 0))
    snap.upsert_node(gfd_node("a", 1, pool="gold"))  # unwatched: the label set is unchanged
    gen = snap.generation
    snap.watch_labels(["pool"])
    assert snap.generation > gen
    pools = {n: snap.labels_of(int(snap.node_labelset[snap.row_of(n)])) for n in ("a", "b")}
    assert pools == {"a": {"pool": "gold"}, "b": {}}


def test_freed_label_sets_are_compacted_and_ids_stay_valid() -> None:
    snap = snapshot(gfd_node("keep", 0, zone="z0"))
    snap.watch_labels([GFD_TIMESTAMP, "zone"])  # someone selects on the timestamp itself
    epochs = set()
    for stamp in range(1, 5_001):
        snap.upsert_node(gfd_node("churn", stamp))
        epochs.add(snap.labelsets.epoch)
        assert len(snap.labelsets) <= 2 * snap.labelsets.live + 65
    assert snap.labelsets.live == 2 and len(epochs) > 1
    for name, stamp in (("keep", "0"), ("churn", "5000")):
        labels = snap.labels_of(int(snap.node_labelset[snap.row_of(name)]))
        assert labels[GFD_TIMESTAMP] == stamp
    snap.remove_node("churn")
    assert snap.labelsets.live == 1 and snap.node_labelset[snap.row_of("keep")] >= 0


def test_taint_sets_are_freed_with_the_last_node_using_them() -> None:
    snap = snapshot(node("a", taints=[("k", "v", "NoSchedule")]))
    for i in range(2_000):  # the autoscaler's deletion-candidate taint carries a timestamp
        snap.upsert_node(node("b", taints=[("DeletionCandidate", str(i), "PreferNoSchedule")]))
    assert snap.taintsets.live == 2 and len(snap.taintsets) <= 2 * 2 + 65
    assert snap.taints_of(int(snap.node_taintset[snap.row_of("a")])) == (
        Taint("k", "v", "NoSchedule"),
    )
    snap.remove_node("a")
    snap.upsert_node(node("b"))
    assert snap.taintsets.live == 0 and snap.node_taintset[snap.row_of("b")] == -1


def test_the_allowed_models_cache_is_bounded() -> None:
    snap = snapshot(gfd_node("a", 0))
    for i in range(MAX_ALLOWED_CACHE * 4):  # any gpu-model string a pod sets
        assert not snap.allowed_models((f"model-{i}",)).any()
    assert len(snap._allowed_cache) == MAX_ALLOWED_CACHE
    assert snap.allowed_models(("A100",)).tolist() == [True]


# -- a node the columns cannot hold: refused whole, before anything is written ------------


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"cpu_milli": 10**30}, "cpu=1000000000000000000000000000000 is out of range"),
        ({"memory_bytes": -1}, "memory=-1 is out of range"),
        ({"pods": 2**40}, "pods=1099511627776 is out of range"),
        (
            {"cards": (Card(0, "A100", 1), Card(0, "A100", 1))},
            "card index 0 is out of range or repeated",
        ),
        ({"cards": (Card(8, "A100", 1),)}, "card index 8 is out of range"),
        ({"cards": (Card(0, "A100", 2**31),)}, "card 0 memoryMiB=2147483648 is out of range"),
        ({"cards": (Card(0, "A100", 1, nvlink_island=200),)}, "nvlinkIsland=200 is out of range"),
    ],
)
def test_a_node_out_of_the_columns_range_is_refused_without_a_half_written_row(
    change: dict[str, Any], said: str
) -> None:
    """cpu 1e30 raised OverflowError from the int64 column after the name was filed under a
    row: the snapshot then held a row with another node's columns."""
    snap = snapshot(node("a", cards=2))
    before = (snap.size, snap.version, snap.membership)
    with pytest.raises(ValueError, match=said):
        snap.upsert_node(dataclasses.replace(node("b"), **change))
    assert snap.row_of("b") < 0 and (snap.size, snap.version, snap.membership) == before
    row = snap.row_of("a")
    with pytest.raises(ValueError, match=said):
        snap.upsert_node(dataclasses.replace(node("a", cards=2), **change))
    assert snap.nodes[row] == node("a", cards=2) and int(snap.node_card_count[row]) == 2
    assert snap.node_cpu_alloc[row] == 4_000 and snap.version == before[1]


def test_more_gpu_models_than_the_int16_column_holds_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshot_module, "MAX_MODELS", 2)
    snap = snapshot(dataclasses.replace(node("a"), cards=(Card(0, "A100", 1), Card(1, "H100", 1))))
    with pytest.raises(
        ValueError, match="more than 2 distinct GPU models seen; model 'T4' not added"
    ):
        snap.upsert_node(dataclasses.replace(node("b"), cards=(Card(0, "T4", 1),)))
    assert snap.row_of("b") < 0
    snap.upsert_node(dataclasses.replace(node("c"), cards=(Card(0, "H100", 1),)))  # a known one


def test_other_resource_columns_are_bounded_with_a_clear_refusal() -> None:
    snap = snapshot_module.Snapshot(8, capacity=2)
    names = {f"example.com/r{i}": 1 for i in range(MAX_OTHER_RESOURCES)}
    snap.upsert_node(node("a", other=names))
    assert len(snap.other_index) == MAX_OTHER_RESOURCES
    with pytest.raises(ValueError, match=f"more than {MAX_OTHER_RESOURCES} distinct extended"):
        snap.upsert_node(node("b", other={"example.com/one-more": 1}))
    assert snap.row_of("b") < 0
    # Growing the rows keeps the columns.
    for i in range(4):
        snap.upsert_node(node(f"n{i}", other={"example.com/r0": i}))
    assert snap.node_other_alloc[snap.row_of("n3"), snap.other_column("example.com/r0")] == 3
    assert snap.node_other_alloc[snap.row_of("a"), snap.other_column("example.com/r5")] == 1


def test_clique_column_interns_values_and_follows_the_node() -> None:
    a = dataclasses.replace(node("a"), clique="u.1")
    b = dataclasses.replace(node("b"), clique="u.1")
    c = node("c")
    snap = snapshot(a, b, c)
    ra, rb, rc = (snap.row_of(n) for n in "abc")
    assert snap.node_clique[ra] == snap.node_clique[rb] >= 0
    assert snap.node_clique[rc] == -1
    snap.upsert_node(dataclasses.replace(b, clique="u.2"))
    assert snap.node_clique[rb] >= 0 and snap.node_clique[rb] != snap.node_clique[ra]
    snap.remove_node("a")
    assert snap.node_clique[ra] == -1


# -- counts the filters read instead of a column ---------------------------------------------


def test_cordoned_and_dra_counts_follow_updates_and_removals() -> None:
    snap = snapshot(node("a", cards=2), node("b", cards=2))
    assert snap.cordoned == 0 and snap.dra_nodes == 0
    cordoned = dataclasses.replace(node("a", cards=2), unschedulable=True)
    snap.upsert_node(cordoned)
    snap.upsert_node(cordoned)  # an update that changes nothing counts nothing
    assert snap.cordoned == 1
    snap.upsert_node(dataclasses.replace(node("b", cards=2), gpu_source="dra"))
    assert snap.dra_nodes == 1
    snap.upsert_node(node("a", cards=2))  # uncordoned
    assert snap.cordoned == 0
    snap.upsert_node(cordoned)
    snap.remove_node("a")
    snap.remove_node("b")
    assert snap.cordoned == 0 and snap.dra_nodes == 0
    # A new node on a freed row starts from a clean flag.
    snap.upsert_node(node("c", cards=2))
    assert snap.cordoned == 0 and not snap.node_unschedulable[snap.row_of("c")]


def test_changed_rows_agree_with_row_versions_around_the_touch_ring() -> None:
    snap = snapshot(*[node(f"n{i}", cards=1) for i in range(40)])
    rng = np.random.default_rng(7)
    marks = [0, snap.version]
    for step in range(20_000):  # around the touch ring many times
        snap.touch(int(rng.integers(40)))
        if step % 997 == 0:
            marks.append(snap.version)
        since = marks[int(rng.integers(len(marks)))] if step % 50 == 0 else snap.version - 3
        if step % 50 == 0 or step % 7 == 0:
            want = np.flatnonzero(snap.row_version > since)
            np.testing.assert_array_equal(snap.changed_rows(since), want)
    assert len(snap.changed_rows(snap.version)) == 0
