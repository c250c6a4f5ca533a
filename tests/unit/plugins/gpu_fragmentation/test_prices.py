"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from gpusched.core.schedule_one import Result
from gpusched.plugins.gpu_fragmentation.prices import CardPrices, LossCache, price_loss
from gpusched.sim.engine import Simulation
from tests.builders import frag_sim, t4_node, t4_pod

GIB = 2**30


def _shared_gaps(s: Simulation) -> list[int]:
    snap = s.snapshot
    free = snap.card_free_milli[snap.node_valid]
    return [int(g) for g in free.ravel() if 0 < g < 1000]


def test_prices_pair_shapes_as_an_optimal_packing_does() -> None:
    """470s and 320s: best fit would put a 320 beside a lone 470 (leaving 210 that neither
    fits); the card prices keep 470s in pairs (60 left) and 320s in threes (40 left)."""
    gaps = {}
    for weight in (90, 0):
        s = frag_sim({"priceWeight": weight}, *(t4_node(f"n{i}", cards=4) for i in range(4)))
        for i in range(12):
            d = s.submit(t4_pod(f"p{i}", milli=470 if i % 2 == 0 else 320))
            assert d.result is Result.SCHEDULED
        gaps[weight] = sorted(_shared_gaps(s))
    # Six 470s in three pairs (60 left each), a 320 threesome (40 left), and no 470 beside
    # a 320 (210 left). Without the prices, FGD alone spreads this early workload.
    assert gaps[90].count(60) == 3 and 40 in gaps[90] and 210 not in gaps[90]
    assert 60 not in gaps[0]


def test_prices_learn_only_from_pods_seen() -> None:
    s = frag_sim({}, t4_node("a"))
    plugin = s.fw.plugins["GPUFragmentation"]
    assert not plugin.prices.ready
    s.submit(t4_pod("p0", milli=470))
    assert list(plugin.prices.sizes) == [470]
    assert plugin.prices.price_of(470) == pytest.approx(0.5)


def test_card_prices_value_gaps_by_what_the_mix_can_fill() -> None:
    prices = CardPrices()
    prices.update({500: 3.0}, cpu_per_card=4000.0)
    assert prices.ready and prices.cpu_per_card == 4000.0
    assert prices.price_of(500) == pytest.approx(0.5)
    assert prices.value[100] == pytest.approx(1.0) and prices.value[49] == 0.0
    # A size the mix never had is charged the value of the space it takes: a 320 takes
    # a whole 500-slot of a fresh card.
    assert prices.price_of(320) == pytest.approx(prices.value[32]) == 0.0
    prices.update({})
    assert not prices.ready


def test_solving_prices_prints_nothing() -> None:
    """The daemon's stdout is its JSON decision log: the LP solver must not write to it
    (highspy's public class prints a banner once per process, hence a fresh process)."""
    code = (
        "from gpusched.plugins.gpu_fragmentation.prices import CardPrices\n"
        "p = CardPrices(); p.update({470: 2.0, 320: 1.0}); assert p.ready\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout == "" and out.stderr == ""


def test_a_failing_price_solve_keeps_the_old_prices(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = frag_sim({}, t4_node("a", cards=4))
    plugin = s.fw.plugins["GPUFragmentation"]
    assert s.submit(t4_pod("p0", milli=470)).result is Result.SCHEDULED
    before = plugin.prices.value.copy()

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("cutting-stock LP not solved: HiGHS model status kInfeasible")

    monkeypatch.setattr(plugin.prices, "update", broken)
    # Pod 2 is due a re-solve (1, 2, 4, ... pods): it still schedules, on the old prices.
    assert s.submit(t4_pod("p1", milli=320)).result is Result.SCHEDULED
    assert (plugin.prices.value == before).all()
    assert "card prices not re-solved" in caplog.text


def test_loss_cache_equals_a_fresh_computation_under_churn() -> None:
    """After binds, deletions and a re-solve, the cached per-row losses equal the kernel
    run afresh over every row, and most lookups are partial."""

    s = frag_sim({}, *(t4_node(f"n{i}", cards=4) for i in range(6)))
    plugin = s.fw.plugins["GPUFragmentation"]
    live: list[str] = []
    shapes = [(470, 2000), (320, 1000), (810, 4000), (160, 500)]
    for i in range(60):
        milli, cpu = shapes[i % len(shapes)]
        p = t4_pod(f"p{i}", cpu=cpu, milli=milli)
        if s.submit(p).result is Result.SCHEDULED:
            live.append(p.uid)
        if i % 7 == 6:
            s.delete(live.pop(0))
        snap = s.snapshot
        for m, c in shapes:
            loss, card = plugin.losses.losses(
                snap, plugin.prices, milli=m, cpu=c, models=(), use_cpu=True
            )
            rows = np.flatnonzero(snap.node_valid).astype(np.intp)
            fresh_loss = np.empty(len(rows))
            fresh_card = np.empty(len(rows), np.int16)
            prices = plugin.prices
            price_loss(
                rows, snap.card_free_milli, snap.node_card_count, snap.card_model,
                snap.card_healthy, snap.allowed_models(()), snap.node_cpu_free, prices.value,
                10, m, prices.price_of(m), c, prices.cpu_per_card, fresh_loss, fresh_card,
            )  # fmt: skip
            assert np.array_equal(loss[rows], fresh_loss)
            assert np.array_equal(card[rows], fresh_card)
    assert plugin.losses.partial > plugin.losses.full
    assert isinstance(plugin.losses, LossCache)
