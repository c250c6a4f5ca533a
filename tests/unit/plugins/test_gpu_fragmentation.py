"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from gpusched.config import API_VERSION, KIND, builtin_profiles, config_from_dict
from gpusched.core.schedule_one import Result
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.packing import cutting_stock
from gpusched.plugins import default_registry
from gpusched.plugins.gpu_fragmentation.args import GPUFragmentationArgs
from gpusched.plugins.gpu_fragmentation.learner import ShapeLearner
from gpusched.plugins.gpu_fragmentation.prices import CardPrices, LossCache, price_loss
from gpusched.sim.engine import Simulation

GIB = 2**30


def req(cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodRequest:
    return PodRequest(cpu_milli=cpu, memory_bytes=GIB, gpu_milli=milli, gpu_cards=cards)


def pod(name: str, cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=req(cpu, milli, cards),
        scheduler_name="ai-scheduler",
    )


def node(name: str, cards: int = 2) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GIB,
        pods=110,
        cards=tuple(Card(i, "T4", 15360) for i in range(cards)),
    )


def sim(args: dict[str, Any], *nodes: NodeModel) -> Simulation:
    reg = default_registry()
    profile = builtin_profiles()["ai-scheduler"]
    profile["pluginConfig"] = [{"name": "GPUFragmentation", "args": args}]
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}
    return Simulation(nodes, config_from_dict(doc, reg).profiles[0], reg, seed=1)


def test_learner_counts_a_pod_once_and_keeps_popular_shapes() -> None:
    lr = ShapeLearner(half_life_pods=0, popularity=0.9, max_classes=8)
    for i in range(9):
        assert lr.observe(f"a{i}", req(milli=500))
    assert lr.observe("b", req(cards=1))
    assert not lr.observe("b", req(cards=1))  # a retry is not a new observation
    target = lr.target()
    assert [(c.gpu_milli, c.gpu_count) for c in target] == [(500, 1)]
    assert target[0].weight == pytest.approx(0.9)


def test_learner_can_leave_cpu_only_shapes_out() -> None:
    for keep in (True, False):
        lr = ShapeLearner(half_life_pods=0, popularity=1.0, max_classes=8, cpu_classes=keep)
        for i in range(3):
            lr.observe(f"c{i}", req(cpu=4000))
        lr.observe("g", req(milli=250))
        milli = sorted(c.gpu_milli for c in lr.target())
        assert milli == ([0, 250] if keep else [250])


def test_learner_decay_follows_a_shift() -> None:
    lr = ShapeLearner(half_life_pods=10, popularity=1.0, max_classes=8)
    for i in range(100):
        lr.observe(f"old{i}", req(milli=300))
    for i in range(100):
        lr.observe(f"new{i}", req(milli=700))
    weights = {c.gpu_milli: c.weight for c in lr.target()}
    assert weights[700] > 0.99


@pytest.mark.parametrize(
    "bad",
    [
        {"pack_weight": -1.0},
        {"card_fit_weight": 51.0},
        {"sos_weight": -0.5},
        {"cpu_balance_weight": 60.0},
        {"refresh_pods": 0},
        {"price_weight": 101.0},
        {"price_refresh_pods": 0},
    ],
)
def test_args_validate(bad: dict[str, Any]) -> None:
    assert GPUFragmentationArgs(**bad).validate()


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
    s = sim(args, node("a"), node("b"), node("c", cards=4))
    shapes = [(2000, 600, 0), (1000, 400, 0), (4000, 0, 1), (500, 0, 0), (1000, 250, 0)]
    placed = 0
    for i in range(40):
        cpu, milli, cards = shapes[i % len(shapes)]
        d = s.submit(pod(f"p{i}", cpu, milli, cards))
        placed += d.result is Result.SCHEDULED
        snap = s.snapshot
        assert (snap.card_free_milli >= 0).all()
        assert (snap.node_cpu_free >= 0).all()
    assert placed > 0


def test_card_fit_prefers_the_tightest_card_cluster_wide() -> None:
    s = sim({"cardFitWeight": 20}, node("a"), node("b"))
    first = s.submit(pod("s1", milli=600))
    second = s.submit(pod("s2", milli=400))
    assert second.node == first.node
    row = s.snapshot.row_of(first.node)
    assert 0 in [int(x) for x in s.snapshot.card_free_milli[row, :2]]


def _shared_gaps(s: Simulation) -> list[int]:
    snap = s.snapshot
    free = snap.card_free_milli[snap.node_valid]
    return [int(g) for g in free.ravel() if 0 < g < 1000]


def test_prices_pair_shapes_as_an_optimal_packing_does() -> None:
    """470s and 320s: best fit would put a 320 beside a lone 470 (leaving 210 that neither
    fits); the card prices keep 470s in pairs (60 left) and 320s in threes (40 left)."""
    gaps = {}
    for weight in (90, 0):
        s = sim({"priceWeight": weight}, *(node(f"n{i}", cards=4) for i in range(4)))
        for i in range(12):
            d = s.submit(pod(f"p{i}", milli=470 if i % 2 == 0 else 320))
            assert d.result is Result.SCHEDULED
        gaps[weight] = sorted(_shared_gaps(s))
    # Six 470s in three pairs (60 left each), a 320 threesome (40 left), and no 470 beside
    # a 320 (210 left). Without the prices, FGD alone spreads this early workload.
    assert gaps[90].count(60) == 3 and 40 in gaps[90] and 210 not in gaps[90]
    assert 60 not in gaps[0]


def test_prices_learn_only_from_pods_seen() -> None:
    s = sim({}, node("a"))
    plugin = s.fw.plugins["GPUFragmentation"]
    assert not plugin.prices.ready
    s.submit(pod("p0", milli=470))
    assert list(plugin.prices.sizes) == [470]
    assert plugin.prices.price_of(470) == pytest.approx(0.5)


def test_cutting_stock_on_known_mixes() -> None:
    # Three 400s: two per card, so 1.5 cards in the LP, each 400 priced 1/2.
    lp = cutting_stock(np.array([40]), np.array([2]), np.array([3.0]), 100)
    assert lp.bins == pytest.approx(1.5) and lp.lower_bound == pytest.approx(1.5)
    assert lp.prices[0] == pytest.approx(0.5)
    # 810 beside 160: one card per 810, the 160s ride along for free.
    lp = cutting_stock(np.array([16, 81]), np.array([6, 1]), np.array([5.0, 5.0]), 100)
    assert lp.bins == pytest.approx(5.0)
    assert lp.prices[1] == pytest.approx(1.0) and lp.prices[0] == pytest.approx(0.0)


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
    s = sim({}, node("a", cards=4))
    plugin = s.fw.plugins["GPUFragmentation"]
    assert s.submit(pod("p0", milli=470)).result is Result.SCHEDULED
    before = plugin.prices.value.copy()

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("cutting-stock LP not solved: HiGHS model status kInfeasible")

    monkeypatch.setattr(plugin.prices, "update", broken)
    # Pod 2 is due a re-solve (1, 2, 4, ... pods): it still schedules, on the old prices.
    assert s.submit(pod("p1", milli=320)).result is Result.SCHEDULED
    assert (plugin.prices.value == before).all()
    assert "card prices not re-solved" in caplog.text


def test_loss_cache_equals_a_fresh_computation_under_churn() -> None:
    """After binds, deletions and a re-solve, the cached per-row losses equal the kernel
    run afresh over every row, and most lookups are partial."""

    s = sim({}, *(node(f"n{i}", cards=4) for i in range(6)))
    plugin = s.fw.plugins["GPUFragmentation"]
    live: list[str] = []
    shapes = [(470, 2000), (320, 1000), (810, 4000), (160, 500)]
    for i in range(60):
        milli, cpu = shapes[i % len(shapes)]
        p = pod(f"p{i}", cpu=cpu, milli=milli)
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
