"""GPUFragmentation (Score): place pods so the cluster keeps usable GPU shapes.

A whole-card request prefers nodes it fills (taking 4 of 4 intact cards beats 4 of 8, which
would leave the 8-card node unable to host an 8-card job); a shared request fills an
already partial card, best fit first, rather than tearing an intact one. CPU-only pods
prefer nodes without GPUs, then GPU nodes already in use, so they do not eat the CPU a
whole-node GPU job will need.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores
from gpusched.kernels import frag_score_nb, frag_score_np
from gpusched.kernels.dispatch import pick
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodInfo
from gpusched.plugins.gpu_fit.state import summary_for

frag_score = pick(frag_score_nb, frag_score_np)

# CPU-only pods: a node without GPUs scores 100, a GPU node up to this, more when its
# cards are already busy.
CPU_POD_ON_GPU_NODE_MAX = 50.0


class GPUFragmentation:
    name: ClassVar[str] = "GPUFragmentation"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        request, summary = summary_for(state, snap, pod)
        if request is None or summary is None:
            return self._cpu_pod(rows)
        mask = np.zeros(snap.capacity, np.bool_)
        mask[rows] = True
        out = np.zeros(snap.capacity, np.float64)
        frag_score(
            mask,
            summary.intact,
            summary.usable,
            summary.best_leftover,
            summary.best_is_partial,
            request.cards,
            out,
        )
        return out[rows]

    def _cpu_pod(self, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        cards = snap.node_card_count[rows].astype(np.float64)
        intact = (snap.card_free_milli[rows] == FULL_CARD_MILLI).sum(axis=1)
        busy = np.divide(cards - intact, cards, out=np.zeros_like(cards), where=cards > 0)
        return np.where(cards == 0, 100.0, CPU_POD_ON_GPU_NODE_MAX * busy)
