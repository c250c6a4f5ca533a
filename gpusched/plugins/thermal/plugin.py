"""Thermal: no new heavy GPU work on a node at its throttling red line (Filter, with
hysteresis), and a preference for cool nodes (Score), from the snapshot's `node_temp`
column (the hottest card with a fresh reading).

A node without fresh temperature data (NaN) passes the filter and scores neutral (50):
missing telemetry is reported by the telemetry reader, never taken as "cold".

The latch (hysteresis) lives here, one per profile, because the red line and the margin
are this plugin's args: a node whose hottest card read at or above the red line is latched
until it reads below `redLineCelsius - hysteresisCelsius`; while latched it takes no heavy
work whatever the projection says. The latch is brought up to date from the columns
(vectorised, idempotent: the same readings give the same latch) after every ingestion pass
(`telemetry_updated`, which the runtime calls: every sample is judged, also while no pod is
waiting); Filter and Score look again only when the snapshot's telemetry or rows changed
since (`telemetry_version`, `membership`), so an attempt pays nothing for it. A latched
node whose telemetry goes stale keeps its latch but is not held by it (stale is no data:
neutral, as everywhere); the next fresh reading decides again, so 83 °C, stale, 81 °C is
still latched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import (
    NODE_NOTES,
    FilterResult,
    Handle,
    Mask,
    Rows,
    Scores,
    ScoreUnit,
)
from gpusched.kernels import (
    thermal_filter_nb,
    thermal_filter_np,
    thermal_score_nb,
    thermal_score_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.kernels.thermal_score import UNKNOWN_SCORE
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.no_data import always, mark_no_data
from gpusched.plugins.thermal.args import ThermalArgs

thermal_filter = pick(thermal_filter_nb, thermal_filter_np)
thermal_score = pick(thermal_score_nb, thermal_score_np)

# Filter reason codes (FilterResult.codes).
AT_RED_LINE = 0
COOLING = 1


class Thermal:
    name: ClassVar[str] = "Thermal"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        "temperature headroom: 100 at or below coolCelsius, falling linearly to 0 at"
        " redLineCelsius, for the hottest card's temperature projected with the pod",
    )
    Args: ClassVar[type[ThermalArgs]] = ThermalArgs

    def __init__(self, args: ThermalArgs | None, handle: Handle) -> None:
        self.args = args or ThermalArgs()
        self.handle = handle
        red = self.args.red_line_celsius
        self.release_celsius = red - self.args.hysteresis_celsius
        self.reasons = (
            f"node(s) at or above the thermal red line ({red:g} °C)",
            "node(s) cooling after reaching the thermal red line"
            f" (below {self.release_celsius:g} °C required)",
        )
        self.reason = self.reasons[AT_RED_LINE]
        # One flag per snapshot row; the names of the latched nodes carry the latch over
        # when rows are reused or the snapshot grows (membership changes).
        self.latched = np.zeros(0, np.bool_)
        self._latched_names: frozenset[str] = frozenset()
        self._membership = -1
        self._seen = (-1, -1, -1)  # (telemetry_version, membership, rows) last observed
        self.any_fresh = False  # whether the last look found any fresh reading

    # -- the latch ------------------------------------------------------------------------

    def observe(self) -> NDArray[np.bool_]:
        """Bring the latch up to date with the current readings; the latch per row."""
        snap = self.handle.snapshot
        n = len(snap.node_valid)
        seen = (snap.telemetry_version, snap.membership, n)
        if seen == self._seen:
            return self.latched  # no reading and no row changed since the last look
        self._seen = seen
        if len(self.latched) != n or snap.membership != self._membership:
            latched = np.zeros(n, np.bool_)
            for name in self._latched_names:
                row = snap.row_of(name)
                if row >= 0:
                    latched[row] = True
            self.latched = latched
            self._membership = snap.membership
        fresh = ~np.isnan(snap.node_temp)
        self.any_fresh = bool(fresh.any())
        if not self.any_fresh:
            return self.latched  # no reading anywhere: nothing to latch or release
        # float64 as the kernels compare: a red line such as 82.3 is not rounded to float32.
        temp = snap.node_temp.astype(np.float64)
        now = (self.latched | (fresh & (temp >= self.args.red_line_celsius))) & ~(
            fresh & (temp < self.release_celsius)
        )
        now &= snap.node_valid
        if not np.array_equal(now, self.latched):
            self.latched = now
            self._latched_names = frozenset(snap.names[r] for r in np.flatnonzero(now))
        return self.latched

    def telemetry_updated(self) -> None:
        self.observe()

    # -- StatefulPlugin: the latch, for a copy of the scheduler (explain) ------------------

    def export_state(self) -> frozenset[str]:
        """The latched nodes' names (as of the last look; the copy looks again at the same
        readings, so it reaches the same latch)."""
        return self._latched_names

    def import_state(self, state: object) -> None:
        if not isinstance(state, frozenset):
            raise TypeError(f"Thermal state is a frozenset of node names, got {type(state)}")
        self._latched_names = frozenset(str(name) for name in state)
        # Rebuilt from the names at the next look, on this instance's snapshot rows.
        self.latched = np.zeros(0, np.bool_)
        self._membership = -1
        self._seen = (-1, -1, -1)

    # -- projection -----------------------------------------------------------------------

    def _gpus(self, pod: PodInfo, rows: Rows | slice) -> NDArray[np.float32]:
        """Cards' worth of GPU the pod takes on each node."""
        snap = self.handle.snapshot
        req = pod.request
        gpus = np.full(len(snap.node_card_count[rows]), req.gpu_milli_total / 1000.0, np.float32)
        if req.gpu_cards == 0 and req.gpu_mem_mib:
            # A memory request takes the matching share of compute on that node's cards.
            card_mem = snap.card_total_mem[rows, 0].astype(np.float32)
            by_mem = np.divide(
                np.float32(req.gpu_mem_mib),
                card_mem,
                out=np.ones_like(card_mem),
                where=card_mem > 0,
            )
            gpus = np.maximum(gpus, by_mem)
        return gpus

    def _projected(
        self,
        pod: PodInfo,
        rows: Rows | slice,
        gpus: NDArray[np.float32] | None = None,
        temp: NDArray[np.float32] | None = None,
    ) -> NDArray[np.float32]:
        """Temperature each node would reach with the pod (NaN stays NaN); `temp`: the
        rows' readings when the caller already took them."""
        snap = self.handle.snapshot
        if temp is None:
            temp = snap.node_temp[rows]
        cards = snap.node_card_count[rows].astype(np.float32)
        if gpus is None:
            gpus = self._gpus(pod, rows)
        # Pods placed but not yet seen bound (a gang's members waiting at Permit, bindings
        # in flight) heat the node too once they start, though no temperature shows them
        # yet: without them every member of a gang would be judged alone.
        pending = self._pending_gpus(len(snap.node_valid))
        if pending is not None:
            gpus = gpus + pending[rows]
        share = np.divide(gpus, cards, out=np.zeros_like(cards), where=cards > 0)
        rise = np.float32(self.args.full_load_rise_celsius) * np.minimum(share, np.float32(1.0))
        return (temp + rise).astype(np.float32)

    def _pending_gpus(self, n: int) -> NDArray[np.float32] | None:
        """Cards' worth of GPU per row held by assumed pods; None when there are none."""
        out: NDArray[np.float32] | None = None
        snap = self.handle.snapshot
        for pod, node in self.handle.assumed_pods():
            milli = pod.request.gpu_milli_total
            row = snap.row_of(node)
            if milli <= 0 or row < 0:
                continue
            if out is None:
                out = np.zeros(n, np.float32)
            out[row] += np.float32(milli / 1000.0)
        return out

    # -- extension points -----------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        latched = self.observe()
        req = pod.request
        heavy_min = max(1, self.args.heavy_min_gpu_milli)
        if req.gpu_milli_total < heavy_min and not (req.gpu_cards == 0 and req.gpu_mem_mib):
            return FilterResult(candidates)
        if not self.any_fresh:
            # No node has a fresh reading: every node is "no data" and passes (the FGD
            # protocol and any cluster without telemetry take this path, at no cost).
            self._note(state, None, None, None)
            return FilterResult(candidates)
        n = len(candidates)
        rows = slice(0, n)
        gpus = self._gpus(pod, rows)
        seen = self.handle.snapshot.node_temp[:n].copy()  # the record's, as judged now
        projected = self._projected(pod, rows, gpus, seen)
        self._note(state, seen, projected, None)
        ok = np.empty(n, np.bool_)
        thermal_filter(candidates, projected, self.args.red_line_celsius, ok)
        temp = seen.astype(np.float64)
        # Held by the latch: only on a fresh reading (a stale latched node is no data).
        held = candidates & latched[:n] & ~np.isnan(temp)
        ok &= ~held
        if req.gpu_milli_total < heavy_min:
            # Heavy only through its GPU memory: as heavy as the card share it implies there.
            ok |= candidates & (gpus * np.float32(1000.0) < np.float32(heavy_min))
        codes = np.where(
            held & (temp < self.args.red_line_celsius), np.int8(COOLING), np.int8(AT_RED_LINE)
        ).astype(np.int8)
        # Evicting pods does not cool a node now: preemption cannot make such a node fit.
        return FilterResult(ok, self.reasons, codes, unresolvable=True)

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        self.observe()
        if not self.any_fresh:
            self._note(state, None, None, None)
            return np.full(len(rows), UNKNOWN_SCORE)
        temp = self.handle.snapshot.node_temp[rows]  # a copy (rows is an index array)
        projected = self._projected(pod, rows, temp=temp)
        self._note(state, temp, projected, rows)
        out = np.empty(len(rows), np.float64)
        thermal_score(
            np.ones(len(rows), np.bool_),
            projected,
            self.args.cool_celsius,
            self.args.red_line_celsius,
            out,
        )
        return out

    # -- the decision record --------------------------------------------------------------

    def _note(
        self,
        state: CycleState,
        temp: NDArray[np.float32] | None,
        projected: NDArray[np.float32] | None,
        rows: Rows | None,
    ) -> None:
        """Register this attempt's view of the nodes for the decision record, worded only
        for the chosen node when the record is written. `temp` (the readings judged) and
        `projected` are per row of `rows`, or per snapshot row when `rows` is None; None
        when nothing was projected. They are this attempt's own arrays, not the columns:
        the record is written after binding (or a gang's wait at Permit), when a newer
        reading may have arrived or the row may hold another node."""
        notes = state.get(NODE_NOTES)
        if notes is None:
            notes = {}
            state.write(NODE_NOTES, notes)
        latched = self.latched  # observe() replaces the array, never writes into it

        def index_of(row: int) -> int:
            """Where the row is in `temp` and `projected`; -1: not there."""
            if projected is None:
                return -1
            if rows is None:
                return row if 0 <= row < len(projected) else -1
            hit = np.flatnonzero(rows == row)
            return int(hit[0]) if len(hit) else -1

        def note(row: int) -> Mapping[str, object]:
            i = index_of(row)
            t = float(temp[i]) if temp is not None and i >= 0 else math.nan
            p = float(projected[i]) if projected is not None and i >= 0 else math.nan
            fresh = not math.isnan(t)
            return {
                "telemetry": "fresh" if fresh else "none",
                "tempC": round(t, 1) if fresh else None,
                "projectedC": round(p, 1) if not math.isnan(p) else None,
                "latched": bool(0 <= row < len(latched) and latched[row]),
            }

        notes[self.name] = note

        # No temperature the attempt could project from: the score there is UNKNOWN_SCORE.
        def no_data(row: int, index: int) -> bool:
            assert projected is not None
            if rows is not None and 0 <= index < len(projected):
                return bool(np.isnan(projected[index]))  # projected is per scored row
            i = index_of(row)
            return i < 0 or math.isnan(float(projected[i]))

        mark_no_data(state, self.name, always if projected is None else no_data)
