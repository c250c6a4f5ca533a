"""Readings -> snapshot columns: which card a reading belongs to, what is fresh, which cards
are sick. One code path for the daemon's Prometheus reader and the simulator's sampled heat
model, so the plugins see telemetry the same way in both.

- **Matching.** By UUID first, through the cards the node's `gpusched.io/gpu-inventory`
  lists (a host label can be relabelled, or name the exporter's pod); else the host label
  names the node (exactly, or by its first DNS label when that is unambiguous) and the `gpu`
  label the card slot. Readings that match no card are counted, not guessed.
- **Freshness.** A reading counts while its sample is at most `staleAfterSeconds` old; older
  values are cleared to NaN, so stale data scores neutral and never reads as cold. Each
  GPU node is `fresh` (some card fresh), `stale` (readings seen, none fresh) or `missing`
  (none ever); every change of that state is reported once (the daemon logs it and counts
  the states in a metric).
- **Health.** A card reporting a hardware XID (`unhealthyXids`) is sick until a newer
  reading reports another value (one whose XID was not read, XID_UNKNOWN, keeps it); a
  card whose memory reaches `memoryTempLimitCelsius` is sick until it is
  `memoryTempMarginCelsius` below. Sick cards are not given out (the snapshot's
  `card_healthy`). A sick card stays sick while its telemetry is stale: only a fresh
  reading clears it (a GPU that fell off the bus reports nothing at all).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from gpusched.config.settings import Telemetry
from gpusched.core.cache.snapshot import Snapshot
from gpusched.model.telemetry import XID_UNKNOWN, CardReading

# Hosts named in readings that match no node, kept for the report (bounded: the host label
# is whatever the exporter was told).
MAX_UNMATCHED_HOSTS = 16


class NodeState(Enum):
    FRESH = "fresh"
    STALE = "stale"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class StateChange:
    node: str
    before: NodeState | None  # None: the node was not tracked before (new GPU node)
    after: NodeState


@dataclass(frozen=True, slots=True)
class HealthChange:
    node: str
    card: int
    uuid: str
    healthy: bool
    reason: str  # why sick ("XID 79", "memory 97 °C >= 95 °C"), or what cleared it


@dataclass(slots=True)
class IngestReport:
    matched: int = 0  # readings written to a card
    unmatched: int = 0  # readings naming no known node/card
    old: int = 0  # readings not newer than what the card already had
    unmatched_hosts: set[str] = field(default_factory=set)
    states: dict[NodeState, int] = field(default_factory=dict)  # GPU nodes per state
    changes: list[StateChange] = field(default_factory=list)
    health: list[HealthChange] = field(default_factory=list)


@dataclass(slots=True)
class _Sickness:
    xid: int = 0  # the hardware XID that made the card sick (0: none)
    memory: bool = False  # memory at its temperature limit (until below limit - margin)

    @property
    def sick(self) -> bool:
        return self.xid != 0 or self.memory

    def reason(self, reading: CardReading, limit: float) -> str:
        parts = []
        if self.xid:
            parts.append(f"XID {self.xid}")
        if self.memory:
            parts.append(f"memory {reading.memory_temp:.0f} °C >= {limit:g} °C")
        return ", ".join(parts)


class TelemetryIngest:
    """Applies batches of readings to the snapshot (`apply`), at the caller's clock."""

    def __init__(self, snapshot: Snapshot, settings: Telemetry) -> None:
        self.snapshot = snapshot
        self.settings = settings
        self._xids = frozenset(settings.unhealthy_xids)
        # uuid -> (node, slot), rebuilt when cards or membership change.
        self._by_uuid: dict[str, tuple[str, int]] = {}
        self._short: dict[str, str | None] = {}  # first DNS label -> node (None: ambiguous)
        self._stamp = (-1, -1)
        self._sick: dict[tuple[str, int], _Sickness] = {}
        self._states: dict[str, NodeState] = {}

    def _index(self) -> None:
        snap = self.snapshot
        stamp = (snap.card_layout, snap.membership)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._by_uuid.clear()
        self._short.clear()
        for name, row in snap.rows.items():
            node = snap.nodes[row]
            if node is None:
                continue
            for card in node.cards:
                if card.uuid:
                    self._by_uuid[card.uuid] = (name, card.index)
            short = name.split(".", 1)[0]
            self._short[short] = None if short in self._short else name
        live = set(snap.rows)
        for key in [k for k in self._sick if k[0] not in live]:
            del self._sick[key]

    def _locate(self, reading: CardReading) -> tuple[int, int]:
        """(row, card slot) of the reading's card, or (-1, -1)."""
        snap = self.snapshot
        hit = self._by_uuid.get(reading.uuid) if reading.uuid else None
        if hit is not None:
            return snap.row_of(hit[0]), hit[1]
        row = snap.row_of(reading.host) if reading.host else -1
        if row < 0 and reading.host:
            name = self._short.get(reading.host.split(".", 1)[0])
            row = snap.row_of(name) if name else -1
        card = reading.gpu
        if row < 0 or not 0 <= card < int(snap.node_card_count[row]):
            return -1, -1
        return row, card

    def apply(self, readings: Iterable[CardReading], now: float) -> IngestReport:
        """Write the readings newer than what each card has, clear what went stale by `now`,
        update card health and node states."""
        snap = self.snapshot
        self._index()
        report = IngestReport()
        for reading in readings:
            row, card = self._locate(reading)
            if row < 0:
                report.unmatched += 1
                if reading.host and len(report.unmatched_hosts) < MAX_UNMATCHED_HOSTS:
                    report.unmatched_hosts.add(reading.host)
                continue
            last = snap.card_sampled_at[row, card]
            if not math.isnan(last) and reading.at <= last:
                report.old += 1
                continue
            report.matched += 1
            snap.set_card_reading(
                row,
                card,
                (
                    reading.gpu_temp,
                    reading.memory_temp,
                    reading.power_w,
                    self._power_limit(row, card, reading),
                    reading.util_pct,
                    reading.fb_used_mib,
                    reading.fb_free_mib,
                ),
                reading.at,
            )
            if now - reading.at <= self.settings.stale_after_seconds:
                self._judge(row, card, reading, report)
        snap.expire_readings(now - self.settings.stale_after_seconds)
        self._track_states(report)
        return report

    def _power_limit(self, row: int, card: int, reading: CardReading) -> float:
        """The reading's enforced power limit, else the one `gpusched agent` read from NVML
        into the node's inventory (dcgm-exporter does not export the limit by default)."""
        if not math.isnan(reading.power_limit_w):
            return reading.power_limit_w
        node = self.snapshot.nodes[row]
        listed = (
            node.cards[card].power_limit_w if node is not None and card < len(node.cards) else 0
        )
        return float(listed) if listed > 0 else math.nan

    def _judge(self, row: int, card: int, reading: CardReading, report: IngestReport) -> None:
        """Update the card's sickness from a fresh reading."""
        s = self.settings
        name = self.snapshot.names[row]
        key = (name, card)
        sickness = self._sick.get(key) or _Sickness()
        was = sickness.sick
        if reading.xid in self._xids:
            sickness.xid = reading.xid
        elif reading.xid == XID_UNKNOWN:
            pass  # not read this time (a failed query): the latched XID stands
        elif sickness.xid:
            sickness.xid = 0  # a newer reading reports another XID: cleared (GPU reset)
        mem = reading.memory_temp
        if not math.isnan(mem):
            if mem >= s.memory_temp_limit_celsius:
                sickness.memory = True
            elif mem < s.memory_temp_limit_celsius - s.memory_temp_margin_celsius:
                sickness.memory = False
        if sickness.sick:
            self._sick[key] = sickness
        else:
            self._sick.pop(key, None)
        if was == sickness.sick:
            return  # still sick (maybe for another reason) or still well: nothing to report
        if not self.snapshot.set_card_sick(row, card, sickness.sick):
            return  # out of service anyway (the node's inventory says so): no news
        node = self.snapshot.nodes[row]
        uuid = node.cards[card].uuid if node is not None and card < len(node.cards) else ""
        if sickness.sick:
            reason = sickness.reason(reading, s.memory_temp_limit_celsius)
        else:
            reason = f"cleared: last XID {reading.xid}"
            if not math.isnan(mem):
                reason += f", memory {mem:.0f} °C"
        report.health.append(
            HealthChange(name, card, uuid or reading.uuid, not sickness.sick, reason)
        )

    def _track_states(self, report: IngestReport) -> None:
        snap = self.snapshot
        gpu_rows = np.flatnonzero(snap.node_valid & (snap.node_card_count > 0))
        fresh = ~np.isnan(snap.node_sampled_at[gpu_rows])
        seen = np.isnan(snap.card_sampled_at[gpu_rows]).sum(axis=1) < snap.max_cards
        states: dict[str, NodeState] = {}
        counts = dict.fromkeys(NodeState, 0)
        for row, f, s in zip(gpu_rows.tolist(), fresh.tolist(), seen.tolist(), strict=True):
            state = NodeState.FRESH if f else NodeState.STALE if s else NodeState.MISSING
            name = snap.names[row]
            states[name] = state
            counts[state] += 1
            before = self._states.get(name)
            if before is not state:
                report.changes.append(StateChange(name, before, state))
        self._states = states
        report.states = counts
