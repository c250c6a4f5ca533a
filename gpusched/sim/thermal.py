"""The simulator's physical heat model, per card (docs/telemetry-simheat.md gives the sources).

It is deliberately not the Thermal plugin's projection (node temperature + a linear 40 °C x
allocated share): the plugin sees only sampled, delayed, noisy readings of this model
(gpusched/sim/telemetry_feed.py), as it sees DCGM's through Prometheus in a cluster.

Per card, with u its activity (0-1: the allocated share of the card times each pod's duty
factor, capped at 1):

    P(u)      = P_idle + (P_tdp - P_idle) * u                       power, W
    R         = DESIGN_RISE_C / P_tdp * (1 + FAN_SAT_PER_C * max(0, T_in - DESIGN_INLET_C))
    T_target  = T_in + offset + R * P(u)                           steady state, °C
    dT/dt     = (T_target - T) / TAU_S                             first-order lag

`T_in` is the rack's inlet air (cold aisle or a hot rack), `offset` the node's and the
card's position (air preheated by the cards upstream). The thermal resistance is the
one that gives the card its design rise at TDP; it grows with the inlet temperature because
the fans, already near full speed, cannot make up for warmer air (fan curve saturation):
the rise from work is a product of the inlet and the power, not the plugin's sum. A card
whose target is above MAX_OPERATING_C is held there by clock throttling (its power capped
at what keeps it there); the time a loaded card spends held there is throttled time,
counted in GPU-hours (cards' worth of allocation x time).

Inputs change only at events (a pod binds or leaves), so between events every card follows
the closed-form solution; the clock never ticks for nothing.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.model.node import FULL_CARD_MILLI

# Inlet air (ASHRAE TC 9.9 class A1: recommended 18-27 °C, allowable up to 32 °C). A normal
# rack takes cold-aisle air around 24 °C; a "hot" rack (next to the hot aisle, recirculated
# exhaust, a weak CRAH) sits at the top of the allowable range.
NORMAL_INLET_C = 24.0
HOT_INLET_C = 32.0
RACK_INLET_SD_C = 1.0  # rack-to-rack spread of the inlet within its class
NODE_OFFSET_SD_C = 1.5  # per server: fan wear, cabling, position in the rack
# Cards further down a server's airflow breathe air the cards upstream heated: the last card
# runs this much warmer than the first at the same load, plus a per-card spread.
CARD_POSITION_RISE_C = 4.0
CARD_OFFSET_SD_C = 1.0
# The rise over inlet a card is designed for at TDP and the design inlet: SXM boards under
# full load run ~65-75 °C core in a 25 °C room (NVIDIA DGX user guides' operating ranges).
DESIGN_RISE_C = 45.0
DESIGN_INLET_C = 25.0
# Fan curve saturation: each degree of inlet above the design inlet costs 3 % more rise.
FAN_SAT_PER_C = 0.03
# First-order lag of die + heat sink (air-cooled SXM: tens of seconds to a minute).
TAU_S = 60.0
# GPU "max operating" temperature, where clocks drop to hold the card (nvidia-smi -q on
# A100/H100 SXM reports 85-87 °C; slowdown 89-90 °C, shutdown 92 °C above it).
MAX_OPERATING_C = 87.0
# The Thermal plugin's default red line (plugins/thermal/args.py): the report counts time
# above it. A figure of the cluster, not an input of the model.
RED_LINE_C = 82.0
# HBM reads warmer than the core under load (same package, closer to the VRM).
HBM_RISE_C = 5.0
# Each pod's duty factor: allocated cards are not busy all the time (data loading,
# checkpoints, evaluation); drawn per pod from this range, from its uid and the seed.
DUTY_MIN = 0.7
DUTY_MAX = 1.0


@dataclass(frozen=True, slots=True)
class CardPower:
    idle_w: float
    tdp_w: float


# Board power by model (NVIDIA datasheets: H100 SXM 700 W, A100 SXM 400 W, V100 SXM2 300 W,
# T4 70 W, A10 150 W, P100 SXM 300 W); idle about a tenth of TDP (nvidia-smi on idle SXM
# boards reads 50-90 W). Matched by substring of the card's model, first match wins.
POWER_BY_MODEL: tuple[tuple[str, CardPower], ...] = (
    ("H100", CardPower(70.0, 700.0)),
    ("H800", CardPower(70.0, 700.0)),
    ("A100", CardPower(50.0, 400.0)),
    ("A800", CardPower(50.0, 400.0)),
    ("V100", CardPower(40.0, 300.0)),
    ("P100", CardPower(30.0, 300.0)),
    ("A10", CardPower(20.0, 150.0)),
    ("T4", CardPower(10.0, 70.0)),
)
DEFAULT_POWER = CardPower(40.0, 300.0)  # an unknown model: a V100-class board


def card_power(model: str) -> CardPower:
    upper = model.upper()
    for key, power in POWER_BY_MODEL:
        if key in upper:
            return power
    return DEFAULT_POWER


@dataclass(frozen=True, slots=True)
class Site:
    """Where a GPU node sits: its rack's inlet air and its own offset (°C)."""

    inlet_c: float
    offset_c: float


def rack_inlet(hot: bool, rng: np.random.Generator) -> float:
    """A rack's inlet air: its class (hot aisle or cold) plus the rack-to-rack spread."""
    return float((HOT_INLET_C if hot else NORMAL_INLET_C) + rng.normal(0.0, RACK_INLET_SD_C))


def node_site(inlet: float, rng: np.random.Generator) -> Site:
    """A GPU node's site in a rack breathing `inlet`: its own offset drawn from `rng`."""
    return Site(float(inlet), float(NODE_OFFSET_SD_C * rng.normal()))


@dataclass(frozen=True, slots=True)
class HeatEnvironment:
    """The physical side of a simulated cluster: each GPU node's site, and the seed that
    draws the per-card offsets and the pods' duty factors. A node not listed has no
    sensors (no readings: the plugins see "no data", as for a node without an exporter)."""

    sites: Mapping[str, Site]
    seed: int = 0
    tau_s: float = TAU_S
    max_operating_c: float = MAX_OPERATING_C
    red_line_c: float = RED_LINE_C


@dataclass(slots=True)
class HeatTotals:
    """What the model accumulated since the start (virtual seconds)."""

    throttled_gpu_s: float = 0.0  # cards' worth of allocation x time held at max operating
    red_line_node_s: float = 0.0  # GPU nodes x time with some card above the red line
    node_s: float = 0.0  # GPU nodes x time (the share's denominator)


def duty_factor(seed: int, uid: str) -> float:
    """A pod's duty factor, fixed by the seed and its uid (the same in every policy)."""
    h = zlib.crc32(uid.encode(), seed & 0xFFFFFFFF) / 0xFFFFFFFF
    return DUTY_MIN + (DUTY_MAX - DUTY_MIN) * h


class HeatModel:
    """Every GPU card's temperature over the virtual clock, from the work bound to it."""

    def __init__(self, snapshot: Snapshot, env: HeatEnvironment) -> None:
        self.env = env
        names = [n for n in env.sites if snapshot.row_of(n) >= 0]
        rows = [snapshot.row_of(n) for n in names]
        counts = [int(snapshot.node_card_count[r]) for r in rows]
        keep = [i for i, c in enumerate(counts) if c > 0]
        self.names = [names[i] for i in keep]
        self.rows = np.asarray([rows[i] for i in keep], np.intp)  # snapshot rows
        self.index = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        c = max((counts[i] for i in keep), default=1)
        self.present = np.zeros((n, c), np.bool_)
        idle = np.zeros((n, c))
        tdp = np.ones((n, c))
        inlet = np.zeros((n, c))
        offset = np.zeros((n, c))
        rng = np.random.default_rng([env.seed, 0xCA2D])
        for i, name in enumerate(self.names):
            node = snapshot.nodes[int(self.rows[i])]
            assert node is not None
            site = env.sites[name]
            k = counts[keep[i]]
            self.present[i, :k] = True
            for j, card in enumerate(node.cards[:k]):
                power = card_power(card.model)
                idle[i, j], tdp[i, j] = power.idle_w, power.tdp_w
            inlet[i, :k] = site.inlet_c
            position = CARD_POSITION_RISE_C * np.arange(k) / max(1, k - 1)
            offset[i, :k] = site.offset_c + position + rng.normal(0.0, CARD_OFFSET_SD_C, k)
        self.idle_w = idle
        self.tdp_w = tdp
        self.inlet_c = inlet
        self.offset_c = offset
        fan = 1.0 + FAN_SAT_PER_C * np.maximum(0.0, inlet - DESIGN_INLET_C)
        self.r_cw = DESIGN_RISE_C / tdp * fan  # °C per W
        self.activity = np.zeros((n, c))  # 0-1 per card
        # Activity is the allocation times each pod's duty, capped at a full card; the sum
        # is kept uncapped so a release takes back exactly what its bind added.
        self._activity_sum = np.zeros((n, c))
        self.alloc = np.zeros((n, c))  # cards' worth allocated (throttling accounting)
        self.temp = np.where(self.present, self.target(), np.nan)  # start at idle
        self.t = 0.0
        self.totals = HeatTotals()
        self._loads: dict[str, tuple[int, tuple[int, ...], tuple[float, ...], float]] = {}

    # -- inputs ----------------------------------------------------------------------------

    def target(self) -> NDArray[np.float64]:
        """Each card's steady-state temperature under its current load (no ceiling)."""
        power = self.idle_w + (self.tdp_w - self.idle_w) * self.activity
        return self.inlet_c + self.offset_c + self.r_cw * power

    def bind(self, uid: str, node: str, cards: tuple[int, ...], milli: tuple[int, ...]) -> None:
        """A pod started on `cards` of `node` with `milli` of each: from now its cards
        heat with it. Call after `advance_to` the bind's time."""
        i = self.index.get(node)
        if i is None or not cards or uid in self._loads:
            return
        shares = tuple(m / FULL_CARD_MILLI for m in milli)
        duty = duty_factor(self.env.seed, uid)
        self._loads[uid] = (i, cards, shares, duty)
        self._apply(i, cards, shares, duty, 1.0)

    def release(self, uid: str) -> None:
        """A pod left (finished, deleted, evicted): its cards cool from now."""
        load = self._loads.pop(uid, None)
        if load is not None:
            self._apply(*load, -1.0)

    def _apply(
        self, i: int, cards: tuple[int, ...], shares: tuple[float, ...], duty: float, sign: float
    ) -> None:
        for card, share in zip(cards, shares, strict=True):
            if card < self.present.shape[1]:
                self.alloc[i, card] = max(0.0, self.alloc[i, card] + sign * share)
        for card, share in zip(cards, shares, strict=True):
            if card < self.present.shape[1]:
                v = self._activity_sum[i, card] + sign * share * duty
                self._activity_sum[i, card] = 0.0 if abs(v) < 1e-9 else v
        self.activity[i] = np.clip(self._activity_sum[i], 0.0, 1.0)

    # -- time ------------------------------------------------------------------------------

    def temps_after(self, dt: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(temperature, seconds held at max operating) per card `dt` seconds after the
        model's time, inputs unchanged."""
        target = self.target()
        t0 = self.temp
        top = self.env.max_operating_c
        if dt <= 0:
            return t0.copy(), np.zeros_like(t0)
        decay = math.exp(-dt / self.env.tau_s)
        free = target + (t0 - target) * decay
        with np.errstate(divide="ignore", invalid="ignore"):
            # Time to reach the ceiling, rising from below towards a target above it.
            reach = self.env.tau_s * np.log((target - t0) / (target - top))
        capped = target > top
        reach = np.where(t0 >= top, 0.0, reach)
        held = np.where(capped, np.clip(np.nan_to_num(dt - reach, nan=0.0), 0.0, dt), 0.0)
        temp = np.where(capped & (held > 0), top, free)
        return np.where(self.present, temp, np.nan), np.where(self.present, held, 0.0)

    def _above(self, t1: NDArray[np.float64], dt: float) -> float:
        """GPU node-seconds above the red line over the next `dt` (temperatures t0 -> t1,
        each card monotone on the way: above on a prefix, a suffix or the whole)."""
        line = self.env.red_line_c
        t0 = np.where(self.present, self.temp, -math.inf)
        t1 = np.where(self.present, t1, -math.inf)
        target = self.target()
        both = (t0 >= line) & (t1 >= line)
        with np.errstate(divide="ignore", invalid="ignore"):
            rising = (t0 < line) & (t1 >= line)
            t_up = self.env.tau_s * np.log((target - t0) / (target - line))
            falling = (t0 >= line) & (t1 < line)
            t_down = self.env.tau_s * np.log((t0 - target) / (line - target))
        suffix = np.where(rising, np.clip(dt - np.nan_to_num(t_up, nan=dt), 0.0, dt), 0.0)
        prefix = np.where(falling, np.clip(np.nan_to_num(t_down, nan=0.0), 0.0, dt), 0.0)
        whole = both.any(axis=1)
        a = prefix.max(axis=1)
        b = suffix.max(axis=1)
        per_node = np.where(whole, dt, np.minimum(dt, a + b))
        return float(per_node.sum())

    def advance_to(self, t: float) -> None:
        """Run the cards to virtual time `t` (inputs unchanged since the last call),
        accumulating throttled GPU-seconds and node-seconds above the red line."""
        dt = t - self.t
        if dt <= 0:
            return
        temp, held = self.temps_after(dt)
        totals = self.totals
        totals.throttled_gpu_s += float((held * np.minimum(self.alloc, 1.0)).sum())
        totals.red_line_node_s += self._above(temp, dt)
        totals.node_s += dt * len(self.names)
        self.temp = temp
        self.t = t

    # -- what a sensor reads ---------------------------------------------------------------

    def power_w(self, temp: NDArray[np.float64]) -> NDArray[np.float64]:
        """Board power at the given temperatures: the demand, or what holds a throttled card
        at max operating."""
        demand = self.idle_w + (self.tdp_w - self.idle_w) * self.activity
        held = (self.env.max_operating_c - self.inlet_c - self.offset_c) / self.r_cw
        throttled = (temp >= self.env.max_operating_c) & (self.target() > temp)
        return np.where(throttled, np.minimum(demand, held), demand)

    def node_hottest(self, temp: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """Each GPU node's hottest card (true temperature, not a reading)."""
        t = self.temp if temp is None else temp
        return np.nanmax(np.where(self.present, t, -math.inf), axis=1)  # type: ignore[no-any-return]

    def hottest(self) -> float:
        return float(self.node_hottest().max()) if len(self.names) else math.nan
