"""FGDScore (Score): fragmentation gradient descent as published (Weng et al., ATC 2023).

A node scores by how much the placement lowers its fragmentation against the target
workload; for a shared pod every card that can hold it is tried and the best is written to
CARD_HINT, which GPUFit's Reserve takes (the published ``gpuSelMethod: FGDScore``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores
from gpusched.model.pod import PodInfo
from gpusched.plugins.fgd_score.args import FGDScoreArgs
from gpusched.plugins.fgd_score.target import FragCache
from gpusched.plugins.gpu_fit.state import CARD_HINT, GPU_REQUEST

NEUTRAL = 50.0


class FGDScore:
    name: ClassVar[str] = "FGDScore"
    Args: ClassVar[type[FGDScoreArgs]] = FGDScoreArgs

    def __init__(self, args: FGDScoreArgs | None, handle: Handle) -> None:
        self.args = args or FGDScoreArgs()
        self.handle = handle
        self.cache = FragCache()
        self.cache.set_target(self.args.target_workload)

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        if not self.cache.classes:
            return np.full(len(rows), NEUTRAL)
        snap = self.handle.snapshot
        req = pod.request
        request = state.get(GPU_REQUEST)
        allowed = request.allowed if request is not None else snap.allowed_models(req.gpu_models)
        value, card = self.cache.delta(
            snap,
            rows,
            cpu=req.cpu_milli,
            milli=req.gpu_milli if not req.gpu_cards else 1000,
            cards=req.gpu_cards,
            allowed=allowed,
            quantize=self.args.quantize,
        )
        if req.gpu_cards == 0 and req.gpu_milli > 0:
            hint = np.full(snap.capacity, -1, np.int16)
            hint[rows] = card
            state.write(CARD_HINT, hint)
        if self.args.quantize:
            return value
        # Unquantised: the same sigmoid without the truncation, still in [0, 100].
        out: Scores = 100.0 / (1.0 + np.exp(-np.clip(value, -5e5, 5e5) / 1000.0))
        return out
