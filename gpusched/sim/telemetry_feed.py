"""What the daemon would see of the simulator's heat model: readings sampled every scrape
interval, visible after a delay, with sensor noise, applied through the daemon's own
ingestion (gpusched/telemetry/ingest.py) at its refresh ticks on the virtual clock.

- **Scrapes.** At every multiple of `scrape_interval_s` the exporter samples each card: GPU
  and memory temperature (sensor noise, then DCGM's whole degrees), power (relative noise),
  the power limit (TDP) and utilisation. A scrape inside an outage window produces nothing
  (the exporter is down): its cards' last readings age and go stale.
- **Delay.** A scrape is visible `delay_s` after it was taken (Prometheus ingestion, the
  query path); its readings carry the scrape time, so their age is honest.
- **Refresh.** Every `Telemetry.interval_seconds` the daemon's refresh task reads the newest
  visible scrape and applies it (`TelemetryIngest.apply(readings, now)`): staleness, node
  states and card health are the daemon's rules. The simulator runs the last refresh tick
  before each scheduling step; the ticks in between change nothing a plugin reads (the
  ingestion keeps each card's newest reading), except memory-temperature health, judged
  only on the readings the simulator applies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpusched.model.telemetry import CardReading
from gpusched.sim.thermal import HBM_RISE_C, HeatModel
from gpusched.telemetry.ingest import IngestReport, TelemetryIngest


@dataclass(frozen=True, slots=True)
class Sampling:
    scrape_interval_s: float = 15.0
    delay_s: float = 10.0
    temp_noise_c: float = 0.5  # sensor noise (sd) before rounding to whole degrees
    power_noise: float = 0.02  # relative sd of the power reading
    # Windows [start, end) of virtual time in which the exporter takes no scrape.
    outages: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.scrape_interval_s > 0:
            raise ValueError("scrape_interval_s must be > 0")
        if self.delay_s < 0:
            raise ValueError("delay_s must be >= 0")

    def down(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.outages)


@dataclass(frozen=True, slots=True)
class _Scrape:
    at: float
    # Per present card: GPU temperature, memory temperature, power, power limit, utilisation.
    columns: tuple[list[float], list[float], list[float], list[float], list[float]]


class SampledTelemetry:
    """Scrapes the heat model and feeds the ingestion; `advance(t)` before the heat model
    moves to `t`."""

    def __init__(
        self,
        heat: HeatModel,
        ingest: TelemetryIngest,
        sampling: Sampling,
        *,
        refresh_s: float,
        seed: int = 0,
        on_applied: Callable[[], None] | None = None,
    ) -> None:
        """`on_applied`: called after every ingestion pass (the runtime tells the plugins
        that keep state over telemetry, as the daemon does after each refresh)."""
        self.heat = heat
        self.ingest = ingest
        self.sampling = sampling
        self.refresh_s = refresh_s
        self.on_applied = on_applied
        self.rng = np.random.default_rng([seed, 0x5C2A])
        self._pending: list[_Scrape] = []  # taken, not yet superseded nor delivered
        # The present cards, in the heat model's order: (node, card slot).
        self._where = np.nonzero(heat.present)
        self._cards = [
            (heat.names[i], j)
            for i, j in zip(self._where[0].tolist(), self._where[1].tolist(), strict=True)
        ]
        self._last_scrape = -math.inf  # newest scrape taken
        self._last_refresh = -math.inf
        self.last_report: IngestReport | None = None
        self.refreshes = 0  # refresh ticks run
        self.delivered = 0  # readings handed to the ingestion

    def advance(self, t: float) -> None:
        s = self.sampling
        interval = s.scrape_interval_s
        now = self.heat.t
        tick = math.floor(t / self.refresh_s) * self.refresh_s
        # Scrapes in (model time, t]: only those that may still be the newest visible one at
        # this or a later refresh tick are taken (older ones would be superseded unread).
        k = math.ceil(max(now, tick - s.delay_s - interval) / interval)
        if k * interval <= self._last_scrape:
            k = math.floor(self._last_scrape / interval) + 1
        while k * interval <= t:
            at = k * interval
            if not s.down(at):
                self._pending.append(self._scrape(at))
            self._last_scrape = at
            k += 1
        if tick > self._last_refresh:
            self._refresh(tick)

    def _scrape(self, at: float) -> _Scrape:
        """The cards' readings at `at` (the heat model's inputs unchanged since its time),
        kept as arrays: most scrapes are superseded before any refresh reads them."""
        heat = self.heat
        temp, _ = heat.temps_after(at - heat.t)
        s = self.sampling
        shape = temp.shape
        core = np.round(temp + self.rng.normal(0.0, s.temp_noise_c, shape))
        memory = np.round(
            temp + HBM_RISE_C * heat.activity + self.rng.normal(0.0, s.temp_noise_c, shape)
        )
        power = heat.power_w(temp) * (1.0 + self.rng.normal(0.0, s.power_noise, shape))
        util = np.round(100.0 * heat.activity)
        cols = tuple(a[self._where].tolist() for a in (core, memory, power, heat.tdp_w, util))
        return _Scrape(at, cols)

    def _readings(self, scrape: _Scrape) -> list[CardReading]:
        at = scrape.at
        core, memory, power, limit, util = scrape.columns
        return [
            CardReading(
                host,
                card,
                "",
                at,
                gpu_temp=core[k],
                memory_temp=memory[k],
                power_w=power[k],
                power_limit_w=limit[k],
                util_pct=util[k],
            )
            for k, (host, card) in enumerate(self._cards)
        ]

    def _refresh(self, tick: float) -> None:
        """The daemon's refresh at `tick`: the newest scrape visible by then, if any."""
        self._last_refresh = tick
        visible = [p for p in self._pending if p.at + self.sampling.delay_s <= tick]
        readings: list[CardReading] = []
        if visible:
            readings = self._readings(visible[-1])
            self._pending = [p for p in self._pending if p.at > visible[-1].at]
        self.refreshes += 1
        self.delivered += len(readings)
        self.last_report = self.ingest.apply(readings, tick)
        if self.on_applied is not None:
            self.on_applied()
