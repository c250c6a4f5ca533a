"""label_index: each row's topology domain (PodTopologySpread, InterPodAffinity) and the
index's lifetime over one snapshot and epoch."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.plugins.helper.label_index import synced_index
from tests.builders import node, snapshot

ZONE = "topology.kubernetes.io/zone"


def domains(
    index_rows: tuple[NDArray[np.int32], list[str]], snap: Snapshot, names: list[str]
) -> list[str]:
    """Each named node's domain value ("" for none), read through the ids."""
    codes, values = index_rows
    return [values[c] if c >= 0 else "" for c in (int(codes[snap.rows[n]]) for n in names)]


def test_rows_give_each_row_its_value_id_and_minus_one_without_the_key() -> None:
    snap = snapshot(
        node("a", labels={ZONE: "z1"}),
        node("b", labels={ZONE: "z2"}),
        node("c", labels={}),
        node("d", labels={ZONE: "z1"}),
        node("e", labels={ZONE: "z2"}),  # past the builder's capacity of 4: rows to spare
    )
    snap.watch_labels([ZONE])
    index = synced_index(None, snap)
    codes, values = index.rows(ZONE)
    assert len(codes) == len(snap.node_valid)
    assert sorted(values) == ["z1", "z2"]
    assert domains((codes, values), snap, ["a", "b", "c", "d"]) == ["z1", "z2", "", "z1"]
    assert codes[snap.rows["a"]] == codes[snap.rows["d"]]
    # Rows with no node are in no domain.
    empty = [r for r in range(len(snap.node_valid)) if not snap.node_valid[r]]
    assert empty and all(codes[r] == -1 for r in empty)


def test_a_removed_node_leaves_no_domain_and_a_new_one_is_seen() -> None:
    snap = snapshot(node("a", labels={ZONE: "z1"}), node("b", labels={ZONE: "z2"}))
    snap.watch_labels([ZONE])
    index = synced_index(None, snap)
    row_b = snap.rows["b"]
    snap.remove_node("b")
    snap.upsert_node(node("e", labels={ZONE: "z3"}))
    again = synced_index(index, snap)
    codes, values = again.rows(ZONE)
    assert domains((codes, values), snap, ["a", "e"]) == ["z1", "z3"]
    if snap.rows["e"] != row_b:
        assert codes[row_b] == -1


def test_a_new_snapshot_or_epoch_starts_a_new_index() -> None:
    snap = snapshot(node("a", labels={ZONE: "z1"}))
    snap.watch_labels([ZONE])
    index = synced_index(None, snap)
    assert synced_index(index, snap) is index
    other = snapshot(node("a", labels={ZONE: "z1"}))
    assert synced_index(index, other) is not index
    snap.watch_labels(["rack"])
    snap.upsert_node(node("r", labels={"rack": "r1", ZONE: "z2"}))  # a watched key relabels
    fresh = synced_index(index, snap)
    assert fresh.epoch == snap.labelsets.epoch
    assert domains(fresh.rows(ZONE), snap, ["a", "r"]) == ["z1", "z2"]
