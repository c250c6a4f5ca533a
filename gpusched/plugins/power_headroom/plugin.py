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
from gpusched.plugins.helper.no_data import mark_no_data
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
        self._note(state)
        # UNKNOWN_SCORE stands in where no card has both readings (the note's own test).
        mark_no_data(state, self.name, self._unknown)
        if snap.telemetry_version == 0:
            # No ingestion pass ever wrote a reading (node_sampled_at is all NaN): a
            # cluster without telemetry, or the simulator without heat, reads no column.
            return out
        # Rows with no fresh reading at all are unknown: skip the per-card work for them.
        fresh = np.flatnonzero(~np.isnan(snap.node_sampled_at[rows]))
        if len(fresh) == 0:
            return out
        frac, _ = self.headroom(rows[fresh])
        known = ~np.isnan(frac)
        ample = self.args.ample_headroom_fraction
        out[fresh[known]] = np.clip(frac[known] * (100.0 / ample), 0.0, 100.0)
        return out

    def _unknown(self, row: int, index: int) -> bool:
        """Whether `score` gave the row UNKNOWN_SCORE for want of readings (its three
        cases); one row's few cards in plain Python, for the decision record."""
        snap = self.handle.snapshot
        if snap.telemetry_version == 0 or math.isnan(float(snap.node_sampled_at[row])):
            return True
        pairs = zip(snap.card_power_limit[row].tolist(), snap.card_power[row].tolist(), strict=True)
        return not any(lim > 0 and not math.isnan(d) for lim, d in pairs)

    def _note(self, state: CycleState) -> None:
        """The chosen node's draw, limit and headroom for the decision record."""
        notes = state.get(NODE_NOTES)
        if notes is None:
            notes = {}
            state.write(NODE_NOTES, notes)

        def note(row: int) -> Mapping[str, object]:
            frac, lim = self.headroom(np.array([row], np.intp))
            if np.isnan(frac[0]):
                return {"telemetry": "none"}
            return {
                "telemetry": "fresh",
                "limitW": round(float(lim[0]), 1),
                "headroom": round(float(frac[0]), 3),
            }

        notes[self.name] = note
