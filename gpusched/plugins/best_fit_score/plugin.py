"""BestFitScore (Score + NormalizeScore): the FGD paper's BestFit baseline.

The node left with the least CPU and GPU after the placement wins (``best_fit_score.go``),
then the published integer min-max normalisation over the feasible nodes, which merges
nearby raw values into ties. Cards: GPUFit's best fit.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.kernels.dispatch import pick
from gpusched.kernels.fgd_baselines import bestfit_raw_nb, bestfit_raw_np, go_normalize
from gpusched.model.pod import PodInfo

bestfit_raw = pick(bestfit_raw_nb, bestfit_raw_np)


class BestFitScore:
    name: ClassVar[str] = "BestFitScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (int, 0-100)",
        (
            "100 x (1 - the node's CPU and GPU left after the pod, as shares of 128 cores and 8 "
            "GPUs): fuller nodes higher; min-max normalised"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        out = np.empty(len(rows), np.float64)
        bestfit_raw(
            rows,
            snap.card_free_milli,
            snap.node_card_count,
            snap.node_cpu_free,
            pod.request.cpu_milli,
            pod.request.gpu_milli_total,
            out,
        )
        return out

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        go_normalize(scores)
