"""The decision record describes what the choice was made from, not what the snapshot holds
when the record is written: the daemon writes it after binding (or after a gang's wait at
Permit), and meanwhile a reading may arrive, a card may go sick, or the node may be replaced
by another in the same row. Each test schedules a pod, changes the snapshot, then writes the
record, and checks it against what Score and Reserve saw."""

from __future__ import annotations

import math
from typing import Any

from gpusched.core.runtime.tie_break import node_rank
from gpusched.core.schedule_one import Decision
from gpusched.model.node import Card, NodeModel
from gpusched.model.telemetry import CardReading
from gpusched.observability.explain_record import scheduled_message
from gpusched.observability.logging import decision_record
from gpusched.sim.engine import Simulation
from tests.builders import GiB, ai_pod, ai_sim, gpu_node, read_temps


def _record(s: Simulation, d: Decision) -> dict[str, Any]:
    return decision_record(d, names=s.snapshot.names, profile="ai-scheduler", attempt=1, result="")


def _later(s: Simulation) -> None:
    """Ten seconds on: a new reading is newer than the last (an equal time is ignored)."""
    s.clock.advance_to(s.clock() + 10.0)


def _power(s: Simulation, draw: float, limit: float, *nodes: str, temp: float = 50.0) -> None:
    """One ingestion pass (a scrape: nodes left out read nothing): every card of `nodes`
    draws `draw` W of `limit` and reads `temp` °C, sampled ten seconds on."""
    _later(s)
    now = s.clock()
    readings = [
        CardReading(node, c, "", now, gpu_temp=temp, power_w=draw, power_limit_w=limit)
        for node in nodes
        for c in range(int(s.snapshot.node_card_count[s.snapshot.row_of(node)]))
    ]
    s.ingest.apply(readings, now)
    s.fw.telemetry_updated()


def _replace(s: Simulation, old: str, new: str) -> None:
    """`old` leaves and `new` takes its row: 8 H100s whose NVLink islands nobody published
    (GPU Feature Discovery labels only), no readings yet."""
    row = s.snapshot.row_of(old)
    s.events.node_deleted(old)
    cards = tuple(Card(i, "H100", 81920) for i in range(8))
    s.events.node_changed(NodeModel(new, 64_000, 512 * GiB, 110, cards=cards))
    assert s.snapshot.row_of(new) == row  # the row is reused: the case under test


def test_the_card_reason_quotes_the_temperatures_choose_cards_saw() -> None:
    s = ai_sim(gpu_node("n0"), temps={"n0": 60.0})
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    _later(s)
    read_temps(s, {"n0": 79.0})  # a newer reading, after the choice
    reason = _record(s, d)["cards_reason"]
    assert reason.endswith("the coolest eligible cards there (hottest 60 °C)"), reason


def test_no_reading_at_reserve_stays_no_reading_in_the_card_reason() -> None:
    s = ai_sim(gpu_node("n0"))
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    read_temps(s, {"n0": 70.0})  # the first reading arrives after the choice
    reason = _record(s, d)["cards_reason"]
    assert "°C" not in reason and "coolest" not in reason, reason
    assert reason.startswith("NVLink island 0 (cards 0-3)"), reason


def test_the_records_fields_survive_the_node_being_replaced_in_its_row() -> None:
    s = ai_sim(gpu_node("n0"), gpu_node("n1"))
    _power(s, 100.0, 400.0, "n0", "n1", temp=60.0)
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    chosen = d.node
    before = _record(s, d)
    assert before["tie"]["tied"] == 2  # identical nodes: the tie-break decided
    _replace(s, chosen, "m")
    # Another attempt meanwhile (the gang waits, the loop goes on): the plugins look at the
    # new row (NVLinkTopology: layout unknown there now) before the first record is written.
    assert s.submit(ai_pod("b", gpu_cards=2)).node
    after = _record(s, d)
    # The chosen node by its own name, its rank from its own name, every explaining field
    # as written before the row changed hands (islands 0-3/4-7 of A100s, 60 °C, 100 W).
    assert after["node"] == chosen
    assert after["top"][0]["node"] == chosen
    assert after["tie"] == before["tie"]
    assert after["tie"]["rank"] == f"{node_rank(1, chosen):016x}"
    assert after["cards_reason"] == before["cards_reason"]
    assert after["cards_reason"].startswith("NVLink island 0 (cards 0-3)")
    assert after["chosen_scores"] == before["chosen_scores"]
    assert isinstance(after["chosen_scores"]["NVLinkTopology"], float)  # not "no data"
    assert after["notes"] == before["notes"]
    assert after["notes"]["Thermal"]["tempC"] == 60.0
    assert after["notes"]["PowerHeadroom"] == {
        "telemetry": "fresh",
        "limitW": 3200.0,
        "headroom": 0.75,
    }
    event = scheduled_message(f"ns/{d.pod.name}", chosen, after)
    assert event == scheduled_message(f"ns/{d.pod.name}", chosen, before)


def test_power_no_data_is_what_score_had() -> None:
    s = ai_sim(gpu_node("n0"))
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    _power(s, 100.0, 400.0, "n0")  # readings only after the choice: Score stood in with 50
    rec = _record(s, d)
    assert rec["chosen_scores"]["PowerHeadroom"] == "no data"
    assert rec["notes"]["PowerHeadroom"] == {"telemetry": "none"}


def test_power_measured_at_score_stays_a_number_when_the_readings_go() -> None:
    s = ai_sim(gpu_node("n0"))
    _power(s, 300.0, 400.0, "n0")  # 25 % headroom: 100 points (ample from 20 %)
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    _power(s, math.nan, math.nan, "n0")  # the exporter stops publishing power
    rec = _record(s, d)
    assert rec["chosen_scores"]["PowerHeadroom"] == 100.0
    assert rec["notes"]["PowerHeadroom"] == {
        "telemetry": "fresh",
        "limitW": 3200.0,
        "headroom": 0.25,
    }


def test_thermal_note_and_no_data_are_the_attempts() -> None:
    s = ai_sim(gpu_node("n0"), temps={"n0": 68.0})
    d = s.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    _later(s)
    read_temps(s, {"n0": 81.0})
    rec = _record(s, d)
    # 68 °C + 40 x 2/8 = 78 °C projected, from the reading the attempt judged.
    assert rec["notes"]["Thermal"] == {
        "telemetry": "fresh",
        "tempC": 68.0,
        "projectedC": 78.0,
        "latched": False,
    }
    assert rec["chosen_scores"]["Thermal"] == round(100 * 4 / 7, 3)
    cold = ai_sim(gpu_node("n0"))
    d = cold.submit(ai_pod("a", gpu_cards=2), keep_scores=True)
    read_temps(cold, {"n0": 70.0})  # first reading after the choice: still no data
    rec = _record(cold, d)
    assert rec["chosen_scores"]["Thermal"] == "no data"
    assert rec["notes"]["Thermal"]["telemetry"] == "none"
    assert rec["notes"]["Thermal"]["tempC"] is None
