"""FragCache: per-row FGD statistics refreshed only for rows whose inputs changed."""

from __future__ import annotations

import dataclasses

from gpusched.model.node import Card
from gpusched.plugins.helper.fgd_target import FragCache, TargetClass
from tests.builders import gpu_node, snapshot


def cache_over(snap: object) -> FragCache:
    cache = FragCache()
    cache.set_target([TargetClass(1000, 500, 1, "A100", 1.0), TargetClass(1000, 1000, 2)])
    return cache


def test_label_churn_recomputes_no_row() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(5)]
    snap = snapshot(*nodes)
    cache = cache_over(snap)
    cache.refresh(snap)
    assert cache.refreshed == 5
    for stamp in range(10_000):  # GPU Feature Discovery's timestamp, every minute
        labels = {"nvidia.com/gfd.timestamp": str(stamp)}
        snap.upsert_node(dataclasses.replace(nodes[2], labels=labels))
    cache.refresh(snap)
    assert cache.refreshed == 5


def test_a_card_model_change_alone_recomputes_its_row() -> None:
    # The inventory path: the cards change, the labels do not.
    node = gpu_node("n0", cards=2)
    snap = snapshot(node, gpu_node("n1", cards=2, model="V100"))  # both models known
    cache = cache_over(snap)
    cache.refresh(snap)
    row = snap.row_of("n0")
    before = float(cache.before[row])
    assert int(cache.cnt[row, 0]) == 2  # two A100 cards with 500 milli free
    v100 = tuple(Card(c.index, "V100", c.memory_mib) for c in node.cards)
    snap.upsert_node(dataclasses.replace(node, cards=v100))
    cache.refresh(snap)
    assert cache.refreshed == 3  # that row only
    assert int(cache.cnt[row, 0]) == 0 and float(cache.before[row]) != before
