"""The ingestion: readings matched to cards, stale data cleared (never cold), card health
latched with hysteresis, node states reported once per change."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpusched.config.settings import Telemetry
from gpusched.core.cache.snapshot import Snapshot
from gpusched.model.node import Card, NodeModel
from gpusched.model.telemetry import XID_UNKNOWN, CardReading
from gpusched.telemetry.ingest import NodeState, TelemetryIngest


def _node(name: str, cards: int = 4, uuids: bool = False) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=2**38,
        pods=110,
        cards=tuple(
            Card(i, "A100", 81920, uuid=f"GPU-{name}-{i}" if uuids else "") for i in range(cards)
        ),
    )


@pytest.fixture
def snap() -> Snapshot:
    s = Snapshot(8)
    s.upsert_node(_node("gpu-a.example.org", uuids=True))
    s.upsert_node(_node("gpu-b"))
    s.upsert_node(_node("cpu-c", cards=0))
    return s


SETTINGS = Telemetry(stale_after_seconds=60.0)


def _r(host: str, gpu: int, at: float, temp: float = 60.0, **kw: object) -> CardReading:
    return CardReading(host=host, gpu=gpu, uuid=str(kw.pop("uuid", "")), at=at, gpu_temp=temp, **kw)  # type: ignore[arg-type]


def test_host_and_index_match_and_hottest_card_is_the_node_temperature(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    report = ingest.apply([_r("gpu-b", 0, 100.0, 61.0), _r("gpu-b", 3, 100.0, 79.5)], now=101.0)
    row = snap.row_of("gpu-b")
    assert report.matched == 2
    assert snap.card_temp[row, 3] == pytest.approx(79.5)
    assert math.isnan(snap.card_temp[row, 1])
    assert snap.node_temp[row] == pytest.approx(79.5)
    assert snap.node_sampled_at[row] == 100.0


def test_uuid_wins_over_a_misleading_host_label(snap: Snapshot) -> None:
    """dcgm-exporter without NODE_NAME labels the host with its pod's name: the UUID from
    the node's inventory still places the reading."""
    ingest = TelemetryIngest(snap, SETTINGS)
    report = ingest.apply(
        [_r("dcgm-exporter-x7k2p", 0, 10.0, 70.0, uuid="GPU-gpu-a.example.org-2")], now=10.0
    )
    assert report.matched == 1
    assert snap.card_temp[snap.row_of("gpu-a.example.org"), 2] == pytest.approx(70.0)


def test_short_host_name_matches_a_fqdn_node_and_unknown_hosts_are_counted(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    report = ingest.apply(
        [_r("gpu-a", 1, 5.0), _r("nowhere", 0, 5.0), _r("gpu-b", 7, 5.0), _r("cpu-c", 0, 5.0)],
        now=5.0,
    )
    assert report.matched == 1
    assert report.unmatched == 3  # unknown host, card 7 of a 4-card node, a CPU node
    assert report.unmatched_hosts == {"nowhere", "gpu-b", "cpu-c"}


def test_stale_readings_are_cleared_never_cold_and_the_state_is_reported_once(
    snap: Snapshot,
) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    row = snap.row_of("gpu-b")
    first = ingest.apply([_r("gpu-b", 0, 100.0, 81.0)], now=100.0)
    assert {(c.node, c.after) for c in first.changes} == {
        ("gpu-a.example.org", NodeState.MISSING),
        ("gpu-b", NodeState.FRESH),
    }
    again = ingest.apply([], now=150.0)
    assert again.changes == []  # still fresh (50 s old), nothing new to say
    assert snap.node_temp[row] == pytest.approx(81.0)
    stale = ingest.apply([], now=161.0)
    assert [(c.node, c.before, c.after) for c in stale.changes] == [
        ("gpu-b", NodeState.FRESH, NodeState.STALE)
    ]
    assert math.isnan(snap.node_temp[row]) and math.isnan(snap.card_temp[row, 0])
    assert stale.states[NodeState.STALE] == 1 and stale.states[NodeState.MISSING] == 1
    back = ingest.apply([_r("gpu-b", 0, 170.0, 40.0)], now=171.0)
    assert [(c.before, c.after) for c in back.changes] == [(NodeState.STALE, NodeState.FRESH)]


def test_an_old_sample_does_not_overwrite_a_newer_one(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply([_r("gpu-b", 0, 100.0, 50.0)], now=100.0)
    report = ingest.apply([_r("gpu-b", 0, 90.0, 85.0)], now=101.0)
    assert report.old == 1
    assert snap.card_temp[snap.row_of("gpu-b"), 0] == pytest.approx(50.0)


def test_a_reading_already_stale_when_it_arrives_is_not_fresh(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply([_r("gpu-b", 0, 10.0, 50.0)], now=100.0)
    assert math.isnan(snap.node_temp[snap.row_of("gpu-b")])


def test_hardware_xid_takes_the_card_out_until_a_newer_reading_clears_it(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    row = snap.row_of("gpu-b")
    version = snap.row_version[row]
    report = ingest.apply([_r("gpu-b", 1, 10.0, xid=79)], now=10.0)
    assert not snap.card_healthy[row, 1] and snap.card_healthy[row, 0]
    assert snap.row_version[row] > version  # per-row card caches recompute
    assert [(h.card, h.healthy, h.reason) for h in report.health] == [(1, False, "XID 79")]
    # Stale telemetry does not give a sick card back.
    ingest.apply([], now=500.0)
    assert not snap.card_healthy[row, 1]
    # An application fault is not a hardware fault: a new value clears it.
    cleared = ingest.apply([_r("gpu-b", 1, 501.0, xid=13)], now=501.0)
    assert snap.card_healthy[row, 1]
    assert [h.healthy for h in cleared.health] == [True]


def test_application_xids_do_not_make_a_card_sick(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    report = ingest.apply([_r("gpu-b", 0, 1.0, xid=x) for x in (13, 31, 43, 45)], now=1.0)
    assert report.health == [] and snap.card_healthy[snap.row_of("gpu-b")].sum() == 4


def test_memory_temperature_has_hysteresis(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, Telemetry(memory_temp_limit_celsius=95.0))
    row = snap.row_of("gpu-b")
    seq = [(96.0, False), (93.0, False), (90.5, False), (89.9, True), (94.0, True), (95.0, False)]
    for t, (mem, healthy) in enumerate(seq, start=1):
        ingest.apply([_r("gpu-b", 2, float(t), memory_temp=mem)], now=float(t))
        assert bool(snap.card_healthy[row, 2]) is healthy, (mem, healthy)


def test_an_inventory_unhealthy_card_stays_out_when_telemetry_clears(snap: Snapshot) -> None:
    node = _node("gpu-b")
    cards = list(node.cards)
    cards[0] = Card(0, "A100", 81920, healthy=False)
    snap.upsert_node(NodeModel("gpu-b", 64_000, 2**38, 110, cards=tuple(cards)))
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply([_r("gpu-b", 0, 1.0, xid=48)], now=1.0)
    report = ingest.apply([_r("gpu-b", 0, 2.0, xid=0)], now=2.0)
    assert not snap.card_healthy[snap.row_of("gpu-b"), 0]
    assert report.health == []  # whether it may be given out did not change


def test_a_sick_card_stays_sick_through_an_inventory_rewrite(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply([_r("gpu-b", 3, 1.0, 70.0, xid=74)], now=1.0)
    snap.upsert_node(_node("gpu-b", uuids=True))  # the agent's inventory arrives
    row = snap.row_of("gpu-b")
    assert not snap.card_healthy[row, 3]
    assert np.isnan(snap.card_temp[row]).all()  # readings of the old layout are dropped


def test_removed_nodes_are_forgotten(snap: Snapshot) -> None:
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply([_r("gpu-b", 0, 1.0, xid=79)], now=1.0)
    snap.remove_node("gpu-b")
    report = ingest.apply([], now=2.0)
    assert all(c.node != "gpu-b" for c in report.changes)
    snap.upsert_node(_node("gpu-b"))
    ingest.apply([], now=3.0)
    assert snap.card_healthy[snap.row_of("gpu-b"), :4].all()


def test_the_power_limit_falls_back_to_the_inventory(snap: Snapshot) -> None:
    cards = tuple(Card(i, "H100", 81920, power_limit_w=700) for i in range(2))
    snap.upsert_node(NodeModel("gpu-h", 64_000, 2**38, 110, cards=cards))
    ingest = TelemetryIngest(snap, SETTINGS)
    ingest.apply(
        [_r("gpu-h", 0, 1.0, power_w=350.0), _r("gpu-h", 1, 1.0, power_limit_w=500.0)], now=1.0
    )
    row = snap.row_of("gpu-h")
    assert list(snap.card_power_limit[row, :2]) == [700.0, 500.0]  # the reading's own wins
    ingest.apply([_r("gpu-b", 0, 1.0, power_w=200.0)], now=1.0)
    assert math.isnan(snap.card_power_limit[snap.row_of("gpu-b"), 0])  # neither knows it


def test_an_xid_not_read_keeps_the_card_as_it_was(snap: Snapshot) -> None:
    """A failed XID query (XID_UNKNOWN) neither clears a sick card nor makes one sick."""
    ingest = TelemetryIngest(snap, SETTINGS)
    row = snap.row_of("gpu-b")
    ingest.apply([_r("gpu-b", 2, 1.0, xid=79)], now=1.0)
    report = ingest.apply([_r("gpu-b", 2, 2.0, xid=XID_UNKNOWN)], now=2.0)
    assert report.health == []
    assert not snap.card_healthy[row, 2]
    cleared = ingest.apply([_r("gpu-b", 2, 3.0, xid=0)], now=3.0)
    assert [h.healthy for h in cleared.health] == [True]
