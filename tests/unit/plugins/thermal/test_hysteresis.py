"""Thermal on live telemetry: the red-line latch with hysteresis, stale data neutral (and a
stale latch kept but not enforced), the reasons, the decision record's note; the hottest
card is the node's temperature."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.config.settings import Telemetry
from gpusched.core.schedule_one import Result
from gpusched.framework import CycleState
from gpusched.framework.interfaces import NODE_NOTES
from gpusched.model.telemetry import CardReading
from gpusched.observability.logging import decision_record
from gpusched.plugins.thermal import Thermal
from gpusched.plugins.thermal.args import ThermalArgs
from gpusched.sim.engine import Simulation
from gpusched.telemetry.ingest import TelemetryIngest
from tests.builders import ai_pod, ai_sim, gpu_node

STALE_AFTER = 60.0
RED = "node(s) at or above the thermal red line (82 °C)"
COOLING = "node(s) cooling after reaching the thermal red line (below 77 °C required)"


class Feed:
    """Telemetry through the real ingestion, on a clock the test moves."""

    def __init__(self, s: Simulation) -> None:
        self.ingest = TelemetryIngest(s.snapshot, Telemetry(stale_after_seconds=STALE_AFTER))
        self.framework = s.fw
        self.now = 1000.0

    def _apply(self, readings: list[CardReading]) -> None:
        self.ingest.apply(readings, now=self.now)
        # What the runtime does after each ingestion pass (the daemon's refresh, the
        # simulator's scrape): plugins that keep state over telemetry see every sample.
        self.framework.telemetry_updated()

    def temps(self, node: str, *cards: float, step: float = 15.0) -> None:
        """One scrape: `node`'s cards read `cards` (°C); other nodes age."""
        self.now += step
        self._apply([CardReading(node, i, "", self.now, gpu_temp=t) for i, t in enumerate(cards)])

    def age(self, seconds: float) -> None:
        self.now += seconds
        self._apply([])


def _sim() -> tuple[Simulation, Thermal, Feed]:
    s = ai_sim(gpu_node("a", cards=8), gpu_node("b", cards=8))
    return s, Thermal(ThermalArgs(), s.handle), Feed(s)


def _passes(s: Simulation, plugin: Thermal, node: str, cards: int = 1) -> bool:
    res = plugin.filter(CycleState(), ai_pod("p", gpu_cards=cards), s.snapshot.node_valid.copy())
    return bool(res.feasible[s.snapshot.row_of(node)])


def _reason(s: Simulation, plugin: Thermal, node: str) -> str:
    res = plugin.filter(CycleState(), ai_pod("p", gpu_cards=1), s.snapshot.node_valid.copy())
    row = s.snapshot.row_of(node)
    assert not res.feasible[row] and res.codes is not None
    return res.reasons[res.codes[row]]


def test_latched_at_the_red_line_until_below_the_margin() -> None:
    s, plugin, feed = _sim()
    # The hottest card is the node's temperature: one 83 °C card among cool ones.
    feed.temps("a", 50.0, 83.0, 40.0)
    assert not _passes(s, plugin, "a")
    assert _reason(s, plugin, "a") == RED
    # A tiny share projects no warmer than the node is: only the latch can hold it.
    tiny = ai_pod("tiny", gpu_milli=1)
    cand = s.snapshot.node_valid.copy()
    row = s.snapshot.row_of("a")
    feed.temps("a", 50.0, 79.0, 40.0)
    res = plugin.filter(CycleState(), tiny, cand)
    assert not res.feasible[row]
    assert res.codes is not None and res.reasons[res.codes[row]] == COOLING
    feed.temps("a", 50.0, 81.0, 40.0)  # back up, still below the line: still latched
    assert not plugin.filter(CycleState(), tiny, cand).feasible[row]
    feed.temps("a", 50.0, 77.0, 40.0)  # the release is strictly below 77 °C
    assert not plugin.filter(CycleState(), tiny, cand).feasible[row]
    feed.temps("a", 50.0, 76.0, 40.0)
    assert plugin.filter(CycleState(), tiny, cand).feasible[row]
    assert not plugin.latched[row]
    # Released, the projection judges it again: one card of eight warms it 5 °C (81 °C).
    assert _passes(s, plugin, "a", cards=1)
    assert not _passes(s, plugin, "a", cards=2)


def test_every_sample_counts_even_while_no_pod_is_scheduled() -> None:
    """83 °C comes and goes between two attempts: the profile's Thermal saw it through
    the runtime's telemetry_updated, so the next pod finds the node latched."""
    s, _, feed = _sim()
    feed.temps("b", 60.0)
    feed.temps("a", 83.0)
    feed.temps("a", 79.0)
    d = s.submit(ai_pod("tiny", gpu_milli=1))
    assert d.node == "b"
    feed.temps("b", 90.0)
    d = s.submit(ai_pod("tiny2", gpu_milli=1))
    assert d.result is Result.UNSCHEDULABLE
    assert d.message == f"0/2 nodes are available: 1 {RED}, 1 {COOLING}."


def test_without_the_latch_a_node_flaps() -> None:
    """The same readings with no margin: 83, 79 lets the tiny pod back in at once."""
    s, _, feed = _sim()
    plugin = Thermal(ThermalArgs(hysteresis_celsius=0.0), s.handle)
    row = s.snapshot.row_of("a")
    cand = s.snapshot.node_valid.copy()
    tiny = ai_pod("tiny", gpu_milli=1)
    feed.temps("a", 83.0)
    assert not plugin.filter(CycleState(), tiny, cand).feasible[row]
    feed.temps("a", 79.0)
    assert plugin.filter(CycleState(), tiny, cand).feasible[row]


def test_stale_is_neutral_and_a_stale_latch_is_kept_not_enforced() -> None:
    s, plugin, feed = _sim()
    row = s.snapshot.row_of("a")
    cand = s.snapshot.node_valid.copy()
    tiny = ai_pod("tiny", gpu_milli=1)
    feed.temps("a", 85.0)
    assert not plugin.filter(CycleState(), tiny, cand).feasible[row]
    feed.age(STALE_AFTER + 1)  # the exporter went silent: no data
    assert np.isnan(s.snapshot.node_temp[row])
    assert plugin.filter(CycleState(), tiny, cand).feasible[row]
    assert plugin.filter(CycleState(), ai_pod("big", gpu_cards=8), cand).feasible[row]
    assert plugin.score(CycleState(), tiny, np.array([row], np.intp)).tolist() == [50.0]
    assert plugin.latched[row]  # remembered...
    feed.temps("a", 81.0)  # ...so a fresh 81 °C after the gap is still "cooling"
    assert not plugin.filter(CycleState(), tiny, cand).feasible[row]
    feed.temps("a", 70.0)
    assert plugin.filter(CycleState(), tiny, cand).feasible[row]


def test_no_data_passes_and_scores_neutral_next_to_a_node_with_data() -> None:
    s, plugin, feed = _sim()
    feed.temps("a", 60.0)
    rows = np.array([s.snapshot.row_of("a"), s.snapshot.row_of("b")], np.intp)
    assert _passes(s, plugin, "b", cards=8)
    scores = plugin.score(CycleState(), ai_pod("cpu"), rows)
    assert scores.tolist() == [100.0, 50.0]


def test_light_pods_ignore_the_latch() -> None:
    s, plugin, feed = _sim()
    feed.temps("a", 90.0)
    row = s.snapshot.row_of("a")
    cand = s.snapshot.node_valid.copy()
    assert plugin.filter(CycleState(), ai_pod("cpu"), cand).feasible[row]
    light = Thermal(ThermalArgs(heavy_min_gpu_milli=600), s.handle)
    assert light.filter(CycleState(), ai_pod("l", gpu_milli=500), cand).feasible[row]
    assert not light.filter(CycleState(), ai_pod("h", gpu_milli=600), cand).feasible[row]


def test_latch_follows_the_node_not_the_row() -> None:
    s, plugin, feed = _sim()
    feed.temps("a", 84.0)
    plugin.observe()
    row_a = s.snapshot.row_of("a")
    assert plugin.latched[row_a]
    # Enough new nodes to grow the snapshot: rows move to new arrays, the latch follows.
    cache = s.cache
    for i in range(80):
        cache.upsert_node(gpu_node(f"n{i}", cards=2))
    feed.temps("a", 80.0)
    assert plugin.observe()[s.snapshot.row_of("a")]
    assert plugin.observe().sum() == 1
    # A removed node's row reused by a newcomer does not inherit the latch.
    cache.remove_node("a")
    cache.upsert_node(gpu_node("fresh", cards=8))
    assert not plugin.observe().any()


def test_reasons_counted_in_the_failed_scheduling_message() -> None:
    s, _, feed = _sim()
    feed.temps("a", 83.0)
    feed.temps("b", 83.0, step=0.0)
    feed.temps("b", 78.0)
    d = s.submit(ai_pod("p", gpu_cards=1))
    assert d.result is Result.UNSCHEDULABLE
    assert f"1 {RED}" in d.message and f"1 {COOLING}" in d.message


def test_decision_record_names_the_thermal_view_of_the_chosen_node() -> None:
    s, _, feed = _sim()
    feed.temps("a", 60.0, 64.0)
    feed.temps("b", 83.0, step=0.0)
    d = s.submit(ai_pod("p", gpu_cards=2))
    assert d.node == "a"
    rec = decision_record(
        d, names=s.snapshot.names, profile="ai-scheduler", attempt=1, result="bound"
    )
    assert rec["notes"]["Thermal"] == {
        "telemetry": "fresh",
        "tempC": 64.0,
        "projectedC": 74.0,  # 64 + 40 x 2/8
        "latched": False,
    }
    assert rec["notes"]["PowerHeadroom"] == {"telemetry": "none"}


def test_decision_record_without_telemetry_says_none() -> None:
    s, _, _ = _sim()
    d = s.submit(ai_pod("p", gpu_cards=1))
    assert d.state.get(NODE_NOTES) is not None
    rec = decision_record(d, names=s.snapshot.names, profile="x", attempt=1, result="bound")
    assert rec["notes"]["Thermal"] == {
        "telemetry": "none",
        "tempC": None,
        "projectedC": None,
        "latched": False,
    }


@pytest.mark.parametrize("bad", [{"hysteresis_celsius": -1.0}, {"hysteresis_celsius": 31.0}])
def test_hysteresis_arg_is_validated(bad: dict[str, float]) -> None:
    errors = ThermalArgs(**bad).validate()  # type: ignore[arg-type]
    assert [k for k, _ in errors] == ["hysteresisCelsius"]
