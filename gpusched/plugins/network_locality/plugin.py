"""NetworkLocality (PreScore + Score): a training job's pods prefer the rack, then the
spine, where the job's other pods already run, so gradient traffic stays off the core.

Score of a node = 100 · (share of the job's placed nodes in this node's rack)
                + 50 · (share in this node's spine but another rack).
A pod without a job (label ai.training/job-id, else its gang) or whose job has nothing
placed yet is not scored by this plugin (Skip), which leaves the other terms to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import Handle, Rows, Scores
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo

SAME_RACK = 100.0
SAME_SPINE = 50.0


@dataclass(frozen=True, slots=True)
class _Shares:
    rack: NDArray[np.float64]  # by rack id
    spine: NDArray[np.float64]  # by spine id


_SHARES: StateKey[_Shares] = StateKey("NetworkLocality/shares")


class NetworkLocality:
    name: ClassVar[str] = "NetworkLocality"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        if not pod.job_id:
            return Status(Code.SKIP)
        placed = self.handle.job_rows(pod.job_key)
        snap = self.handle.snapshot
        racks = snap.node_rack[placed]
        racks = racks[racks >= 0]
        if len(racks) == 0:
            return Status(Code.SKIP)
        spines = snap.node_spine[placed]
        spines = spines[spines >= 0]
        rack = np.bincount(racks, minlength=len(snap.racks)).astype(np.float64) / len(racks)
        spine = (
            np.bincount(spines, minlength=len(snap.spines)).astype(np.float64) / len(spines)
            if len(spines)
            else np.zeros(len(snap.spines))
        )
        state.write(_SHARES, _Shares(rack, spine))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        shares = state.get(_SHARES)
        if shares is None:
            return np.zeros(len(rows), np.float64)
        snap = self.handle.snapshot
        r = snap.node_rack[rows]
        s = snap.node_spine[rows]
        rack_share = np.where(r >= 0, shares.rack[np.maximum(r, 0)], 0.0)
        spine_share = np.where(
            s >= 0, shares.spine[np.maximum(s, 0)] if len(shares.spine) else 0.0, 0.0
        )
        out: Scores = SAME_RACK * rack_share + SAME_SPINE * np.maximum(
            spine_share - rack_share, 0.0
        )
        return np.clip(out, 0.0, 100.0)
