"""RandomScore (PreScore + Score): the FGD paper's Random baseline.

PreScore draws one feasible node, which scores 100 (all others 0); a shared pod gets a
uniformly random card among those that can hold it (written to CARD_HINT), whole-card
pods GPUFit's own choice (intact cards; the lowest-index ones without telemetry).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.gpu_state import CARD_HINT, CARD_HINT_BY
from gpusched.plugins.random_score.args import RandomScoreArgs

_PICK: StateKey[int] = StateKey("RandomScore/pick")


class RandomScore:
    name: ClassVar[str] = "RandomScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0 or 100)",
        "100 on the one node drawn at random, 0 elsewhere",
    )
    Args: ClassVar[type[RandomScoreArgs]] = RandomScoreArgs

    def __init__(self, args: RandomScoreArgs | None, handle: Handle) -> None:
        self.args = args or RandomScoreArgs()
        self.handle = handle
        self.rng = np.random.default_rng(self.args.seed)

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        row = int(rows[self.rng.integers(len(rows))])
        state.write(_PICK, row)
        req = pod.request
        if req.gpu_cards == 0 and req.gpu_milli > 0:
            snap = self.handle.snapshot
            k = int(snap.node_card_count[row])
            fits = np.flatnonzero(snap.card_free_milli[row, :k] >= req.gpu_milli)
            if len(fits):
                hint = np.full(snap.capacity, -1, np.int16)
                hint[row] = int(fits[self.rng.integers(len(fits))])
                state.write(CARD_HINT, hint)
                state.write(CARD_HINT_BY, "RandomScore's pick: a random card that fits")
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.zeros(len(rows), np.float64)
        # Without its PreScore (a profile may disable it) nothing was picked: all tie.
        out[rows == state.get(_PICK, -1)] = 100.0
        return out
