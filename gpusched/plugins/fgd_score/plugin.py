"""FGDScore (Score): fragmentation gradient descent as published (Weng et al., ATC 2023).

A node scores by how much the placement lowers its fragmentation against the target
workload; for a shared pod every card that can hold it is tried and the best is written to
CARD_HINT, which GPUFit's Reserve takes (the published ``gpuSelMethod: FGDScore``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.model.pod import PodInfo
from gpusched.plugins.fgd_score.args import FGDScoreArgs
from gpusched.plugins.helper.fgd_target import FragCache, score_placements
from gpusched.plugins.helper.no_data import always, mark_no_data

NEUTRAL = 50.0


class FGDScore:
    name: ClassVar[str] = "FGDScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (int, 0-99)",
        (
            "100 x sigmoid(dF / 1000), dF the drop of the node's fragmentation in milli-GPU "
            "against the target workload (50: no fragmentation change)"
        ),
    )
    Args: ClassVar[type[FGDScoreArgs]] = FGDScoreArgs

    def __init__(self, args: FGDScoreArgs | None, handle: Handle) -> None:
        self.args = args or FGDScoreArgs()
        self.handle = handle
        self.cache = FragCache()
        self.cache.set_target(self.args.target_workload)

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        if not self.cache.classes:
            mark_no_data(state, self.name, always)  # no target workload: all NEUTRAL
            return np.full(len(rows), NEUTRAL)
        scores, _ = score_placements(
            self.cache, state, self.handle.snapshot, pod, rows, quantize=self.args.quantize
        )
        return scores
