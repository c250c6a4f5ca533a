"""GpuClusteringScore (Score): the FGD paper's GpuClustering baseline: pods of the same
GPU shape ("share-gpu", "1-gpu", "2-gpu", ...) gather on the same nodes. Cards: best fit.

The per-node count of GPU pods by shape comes from the cache's pods of each node,
recounted only for rows whose card columns changed since the last cycle.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.kernels.dispatch import pick
from gpusched.kernels.fgd_baselines import clustering_score_nb, clustering_score_np
from gpusched.model.pod import PodInfo, PodRequest

clustering_score = pick(clustering_score_nb, clustering_score_np)


def shape_tag(req: PodRequest, n_tags: int) -> int:
    """0 for a shared pod, k for k whole cards, -1 for CPU-only (no tag)."""
    if req.gpu_cards:
        return min(req.gpu_cards, n_tags - 1)
    return 0 if req.gpu_milli > 0 else -1


class GpuClusteringScore:
    name: ClassVar[str] = "GpuClusteringScore"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "75/50/25/0 by whether the node holds only/also/no/only other pods of this GPU shape,"
            " + 25 x its used GPU share"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle
        self._seen = np.zeros((0, 0), np.int32)
        self._tags = np.zeros((0, 0), np.int32)
        self._membership = -1

    def _tag_counts(self) -> NDArray[np.int32]:
        snap = self.handle.snapshot
        n_tags = snap.max_cards + 1
        # Counts follow a row's node and its pods (which change its free shares); a label
        # change (GPU Feature Discovery's timestamp every minute) recounts nothing.
        if self._seen.shape != snap.card_free_milli.shape or snap.membership != self._membership:
            self._seen = np.full_like(snap.card_free_milli, -1)
            self._tags = np.zeros((snap.capacity, n_tags), np.int32)
            self._membership = snap.membership
        changed = np.flatnonzero((snap.card_free_milli != self._seen).any(axis=1))
        for row in changed:
            counts = np.zeros(n_tags, np.int32)
            name = snap.names[row]
            if name:
                for p in self.handle.pods_on_node(name):
                    t = shape_tag(p.request, n_tags)
                    if t >= 0:
                        counts[t] += 1
            self._tags[row] = counts
            self._seen[row] = snap.card_free_milli[row]
        return self._tags

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        tags = self._tag_counts()
        out = np.empty(len(rows), np.float64)
        tag = shape_tag(pod.request, tags.shape[1])
        clustering_score(rows, snap.card_free_milli, snap.node_card_count, tags, tag, out)
        return out
