"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.core.schedule_one import Result
from tests.builders import frag_sim, t4_node, t4_pod

GIB = 2**30


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"cardFitWeight": 5},
        {"sosWeight": 5},
        {"cpuBalanceWeight": 5},
        {"cpuClasses": False},
        {"quantize": False},
        {"priceWeight": 0},
        {"priceCpu": False},
        {"priceRefreshPods": 1},
    ],
)
def test_variants_schedule_without_overcommitting(args: dict[str, Any]) -> None:
    s = frag_sim(args, t4_node("a"), t4_node("b"), t4_node("c", cards=4))
    shapes = [(2000, 600, 0), (1000, 400, 0), (4000, 0, 1), (500, 0, 0), (1000, 250, 0)]
    placed = 0
    for i in range(40):
        cpu, milli, cards = shapes[i % len(shapes)]
        d = s.submit(t4_pod(f"p{i}", cpu, milli, cards))
        placed += d.result is Result.SCHEDULED
        snap = s.snapshot
        assert (snap.card_free_milli >= 0).all()
        assert (snap.node_cpu_free >= 0).all()
    assert placed > 0


def test_card_fit_prefers_the_tightest_card_cluster_wide() -> None:
    s = frag_sim({"cardFitWeight": 20}, t4_node("a"), t4_node("b"))
    first = s.submit(t4_pod("s1", milli=600))
    second = s.submit(t4_pod("s2", milli=400))
    assert second.node == first.node
    row = s.snapshot.row_of(first.node)
    assert 0 in [int(x) for x in s.snapshot.card_free_milli[row, :2]]
