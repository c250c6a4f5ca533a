"""GpuPackingScore (Score): the FGD paper's GpuPacking baseline: used cards first, then a
fresh card on a used node, then untouched nodes (fewest cards first). Cards: best fit."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.kernels.dispatch import pick
from gpusched.kernels.fgd_baselines import packing_score_fgd_nb, packing_score_fgd_np
from gpusched.model.pod import PodInfo

packing_score_fgd = pick(packing_score_fgd_nb, packing_score_fgd_np)


class GpuPackingScore:
    name: ClassVar[str] = "GpuPackingScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "tiers: used cards only 50-100, a fresh card on a used node 33-49, an untouched node "
            "17-33"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        req = pod.request
        out = np.empty(len(rows), np.float64)
        num = req.gpu_cards or (1 if req.gpu_milli > 0 else 0)
        milli = 1000 if req.gpu_cards else req.gpu_milli
        packing_score_fgd(rows, snap.card_free_milli, snap.node_card_count, milli, num, out)
        return out
