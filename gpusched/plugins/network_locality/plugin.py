"""NetworkLocality (PreScore + Score): a training job's pods prefer the NVLink fabric clique,
then the rack, then the spine, where the job's other pods already run, so gradient traffic
stays on NVLink, then off the core.

Score of a node, with c, r, s the shares of the job's placed nodes in this node's clique
(GFD's nvidia.com/gpu.clique), rack and spine:

    100 · c + R · max(r - c, 0) + 50 · max(s - max(r, c), 0),   clipped to [0, 100]

R = 100 when none of the job's placed nodes is in a clique (c = 0: the rack-and-spine
formula exactly, so a cluster without cliques is scored as before), 75 when some are (a node
in the job's clique then outranks one merely in its rack).
A pod without a job (label ai.training/job-id, else its gang) or whose job has nothing
placed yet is not scored by this plugin (Skip), which leaves the other terms to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo

SAME_CLIQUE = 100.0
SAME_RACK = 100.0
SAME_RACK_WITH_CLIQUES = 75.0
SAME_SPINE = 50.0


@dataclass(frozen=True, slots=True)
class _Shares:
    rack: NDArray[np.float64]  # by rack id
    spine: NDArray[np.float64]  # by spine id
    clique: NDArray[np.float64]  # by clique id; empty when no placed node is in a clique


_SHARES: StateKey[_Shares] = StateKey("NetworkLocality/shares")


def _shares(ids: NDArray[np.int32], size: int) -> NDArray[np.float64]:
    """The share of each domain id among the labelled rows (-1 = unlabelled, left out);
    empty when no row is labelled."""
    ids = ids[ids >= 0]
    if len(ids) == 0:
        return np.zeros(0, np.float64)
    out: NDArray[np.float64] = np.bincount(ids, minlength=size).astype(np.float64) / len(ids)
    return out


def _at(shares: NDArray[np.float64], ids: NDArray[np.int32]) -> NDArray[np.float64]:
    """`shares[id]` per row, 0 for an unlabelled row or when nothing is labelled."""
    if len(shares) == 0:
        return np.zeros(len(ids), np.float64)
    inside = (ids >= 0) & (ids < len(shares))
    return np.where(inside, shares[np.clip(ids, 0, len(shares) - 1)], 0.0)


class NetworkLocality:
    name: ClassVar[str] = "NetworkLocality"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "share of the job's placed nodes in this node's NVLink clique (100), rack (75-100) or"
            " spine (50)"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if not pod.job_id:
            return Status(Code.SKIP)
        placed = self.handle.job_rows(pod.job_key)
        snap = self.handle.snapshot
        rack = _shares(snap.node_rack[placed], len(snap.racks))
        clique = _shares(snap.node_clique[placed], len(snap.cliques))
        if len(rack) == 0 and len(clique) == 0:
            return Status(Code.SKIP)
        spine = _shares(snap.node_spine[placed], len(snap.spines))
        state.write(_SHARES, _Shares(rack, spine, clique))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        shares = state.get(_SHARES)
        if shares is None:
            return np.zeros(len(rows), np.float64)
        snap = self.handle.snapshot
        rack_share = _at(shares.rack, snap.node_rack[rows])
        spine_share = _at(shares.spine, snap.node_spine[rows])
        if len(shares.clique) == 0:
            out: Scores = SAME_RACK * rack_share + SAME_SPINE * np.maximum(
                spine_share - rack_share, 0.0
            )
            return np.clip(out, 0.0, 100.0)
        clique_share = _at(shares.clique, snap.node_clique[rows])
        out = (
            SAME_CLIQUE * clique_share
            + SAME_RACK_WITH_CLIQUES * np.maximum(rack_share - clique_share, 0.0)
            + SAME_SPINE * np.maximum(spine_share - np.maximum(rack_share, clique_share), 0.0)
        )
        return np.clip(out, 0.0, 100.0)
