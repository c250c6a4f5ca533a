"""DotProductScore (Score): the FGD paper's DotProd baseline (``merge``/``max``): the node
whose free (CPU, GPU) vector is least aligned with the pod's wins. Cards: best fit."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.kernels.dispatch import pick
from gpusched.kernels.fgd_baselines import dotprod_score_nb, dotprod_score_np
from gpusched.model.pod import PodInfo

dotprod_score = pick(dotprod_score_nb, dotprod_score_np)


class DotProductScore:
    name: ClassVar[str] = "DotProductScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (int, 0-100)",
        (
            "100 x (1 - dot product of the node's free CPU/GPU and the pod's request / 2): least "
            "aligned free vector highest"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        out = np.empty(len(rows), np.float64)
        dotprod_score(
            rows,
            snap.card_free_milli,
            snap.node_card_count,
            snap.node_cpu_free,
            pod.request.cpu_milli,
            pod.request.gpu_milli_total,
            out,
        )
        return out
