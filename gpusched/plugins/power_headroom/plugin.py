"""PowerHeadroom: a Score on how far a node's cards draw below their power limit, from the
snapshot's per-card `card_power` (draw) and `card_power_limit` (enforced limit) columns.

    headroom = (sum limit - sum draw) / sum limit   over the node's cards with both readings fresh
    score    = 100 x clip(headroom / ampleHeadroomFraction, 0, 1)

A node with no card reading both (no telemetry, or a source without the limit) scores a
neutral 50: unknown power is neither preferred nor punished.

A Score of its own rather than a second term in Thermal: the data comes and goes on its
own (the limit is missing where the exporter does not publish it, while temperatures
flow), so each needs its own neutral; an operator tunes or disables one without the other
(`plugins.score`), and the decision record shows each one's score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import NODE_NOTES, Handle, Rows, Scores, ScoreUnit
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.no_data import always, mark_no_data
from gpusched.plugins.power_headroom.args import PowerHeadroomArgs

UNKNOWN_SCORE = 50.0


class PowerHeadroom:
    name: ClassVar[str] = "PowerHeadroom"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "100 x (power limit - draw) / limit of the node's cards over ampleHeadroomFraction, "
            "capped; 50 without power readings"
        ),
    )
    Args: ClassVar[type[PowerHeadroomArgs]] = PowerHeadroomArgs

    def __init__(self, args: PowerHeadroomArgs | None, handle: Handle) -> None:
        self.args = args or PowerHeadroomArgs()
        self.handle = handle

    def headroom(self, rows: Rows) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(headroom fraction, Σ limit in W) per row of `rows`; NaN / 0 where unknown."""
        snap = self.handle.snapshot
        limit = snap.card_power_limit[rows].astype(np.float64)
        draw = snap.card_power[rows].astype(np.float64)
        known = ~np.isnan(limit) & ~np.isnan(draw) & (limit > 0)
        lim_sum = np.where(known, limit, 0.0).sum(axis=1)
        draw_sum = np.where(known, draw, 0.0).sum(axis=1)
        frac = np.full(len(rows), np.nan)
        np.divide(lim_sum - draw_sum, lim_sum, out=frac, where=lim_sum > 0)
        return frac, lim_sum

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        out = np.full(len(rows), UNKNOWN_SCORE)
        if snap.telemetry_version == 0:
            # No ingestion pass ever wrote a reading (node_sampled_at is all NaN): a
            # cluster without telemetry, or the simulator without heat, reads no column.
            self._record(state, None)
            return out
        # Rows with no fresh reading at all are unknown: skip the per-card work for them.
        fresh = np.flatnonzero(~np.isnan(snap.node_sampled_at[rows]))
        if len(fresh) == 0:
            self._record(state, None)
            return out
        frac, lim = self.headroom(rows[fresh])
        known = ~np.isnan(frac)
        ample = self.args.ample_headroom_fraction
        out[fresh[known]] = np.clip(frac[known] * (100.0 / ample), 0.0, 100.0)
        self._record(state, (rows, fresh, frac, lim))
        return out

    # -- the decision record --------------------------------------------------------------

    def _record(
        self,
        state: CycleState,
        seen: tuple[Rows, NDArray[np.intp], NDArray[np.float64], NDArray[np.float64]] | None,
    ) -> None:
        """Register the chosen node's note (draw, limit, headroom) and whether its score was
        UNKNOWN_SCORE for want of readings ("no data"), both from what this Score computed:
        `seen` is (rows, the indices of the fresh ones, their headroom and Σ limit), None
        when no row had a fresh reading. The record is written after binding (or a gang's
        wait at Permit), when the readings may have changed: it must not look again."""
        notes = state.get(NODE_NOTES)
        if notes is None:
            notes = {}
            state.write(NODE_NOTES, notes)
        if seen is None:
            notes[self.name] = _no_telemetry
            mark_no_data(state, self.name, always)
            return
        rows, fresh, frac, lim = seen

        def at(row: int, index: int) -> int:
            """The row's place in `frac` and `lim`; -1 when Score had no headroom for it
            (no fresh reading, no card with both readings, or not scored)."""
            if not (0 <= index < len(rows) and rows[index] == row):
                hits = np.flatnonzero(rows == row)
                if len(hits) == 0:
                    return -1
                index = int(hits[0])
            j = int(np.searchsorted(fresh, index))
            if j < len(fresh) and fresh[j] == index and not math.isnan(frac[j]):
                return j
            return -1

        def note(row: int) -> Mapping[str, object]:
            j = at(row, -1)
            if j < 0:
                return {"telemetry": "none"}
            return {
                "telemetry": "fresh",
                "limitW": round(float(lim[j]), 1),
                "headroom": round(float(frac[j]), 3),
            }

        notes[self.name] = note
        # UNKNOWN_SCORE stood in exactly where Score had no headroom.
        mark_no_data(state, self.name, lambda row, index: at(row, index) < 0)


def _no_telemetry(row: int) -> Mapping[str, object]:
    return {"telemetry": "none"}
