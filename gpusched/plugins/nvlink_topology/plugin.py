"""NVLinkTopology (PreScore + Score): where a multi-GPU whole-card pod's cards sit in a
node's NVLink islands (kernels/nvlink_score.py): inside one island without breaking an
intact one best, breaking a bigger intact island worse, spanning islands worst (worst of all
for `gpusched.io/nvlink: preferred`). Nodes whose layout is unknown score neutral.

PreScore skips the pod (no score at all, so the other plugins' sums are untouched) when it
is not a whole-card pod of at least two cards, or when no feasible node has a known island
layout: a cluster without inventories (GPU Feature Discovery only, the openb trace) is
scheduled exactly as without this plugin.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Code, Status
from gpusched.kernels import nvlink_score_nb, nvlink_score_np
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.no_data import mark_no_data
from gpusched.plugins.helper.row_cache import RowCache

nvlink_score = pick(nvlink_score_nb, nvlink_score_np)


class NVLinkTopology:
    name: ClassVar[str] = "NVLinkTopology"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "how the cards sit in NVLink islands: 70-100 inside one island without breaking an "
            "intact one, 30-60 breaking an intact island, 20 spanning (0 for nvlink: preferred); "
            "50 layout unknown"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle
        self._known: NDArray[np.bool_] = np.zeros(0, np.bool_)
        self._any_known = False
        self._stamp: tuple[int, int, int] = (-1, -1, -1)
        # A row's score depends only on the row and the request's shape: kept per shape
        # and recomputed for the rows changed since (the per-pod cost follows churn).
        self._scores: RowCache[NDArray[np.float64]] = RowCache()

    def known_rows(self, snap: NodeColumns) -> NDArray[np.bool_]:
        """Per row, whether the node's island layout is known (it has cards, each in an
        island >= 0); recomputed only when a row's cards are rewritten or rows come or go."""
        stamp = (snap.card_layout, snap.membership, snap.capacity)
        if stamp != self._stamp:
            present = snap.card_model >= 0
            self._known = (
                snap.node_valid
                & present.any(axis=1)
                & ~(present & (snap.card_island < 0)).any(axis=1)
            )
            self._any_known = bool(self._known.any())
            self._stamp = stamp
        return self._known

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if pod.request.gpu_cards < 2:
            return Status(Code.SKIP)
        known = self.known_rows(self.handle.snapshot)
        # A cluster without islands (the common GFD-only case) answers without a gather.
        if not self._any_known or not known[rows].any():
            return Status(Code.SKIP)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        req = pod.request
        allowed = snap.allowed_models(req.gpu_models)
        shape = (req.gpu_cards, req.gpu_mem_mib, int(req.nvlink), req.gpu_models, len(allowed))

        def some(which: NDArray[np.intp]) -> NDArray[np.float64]:
            out = np.empty(len(which), np.float64)
            nvlink_score(
                which,
                snap.card_free_milli,
                snap.card_free_mem,
                snap.card_model,
                snap.card_healthy,
                snap.card_island,
                req.gpu_cards,
                req.gpu_mem_mib,
                allowed,
                int(req.nvlink),
                out,
            )
            return out

        def every() -> NDArray[np.float64]:
            full = np.zeros(snap.capacity, np.float64)
            valid = snap.valid_rows().astype(np.intp)
            full[valid] = some(valid)
            return full

        def changed(full: NDArray[np.float64], which: NDArray[np.intp]) -> None:
            full[which] = some(which)

        scores: Scores = self._scores.get(snap, shape, every, changed)[rows]
        # A node whose islands nobody published scores UNKNOWN (50): no data, not a fit.
        known = self.known_rows(snap)
        mark_no_data(state, self.name, lambda r, _: not (0 <= r < len(known) and bool(known[r])))
        return scores
