"""TaintToleration (Filter, PreScore, Score, NormalizeScore).

Filter: every NoSchedule/NoExecute taint of a node must be tolerated. Score: the number of
PreferNoSchedule taints the pod does not tolerate, normalised reversed (fewer is better).

Work is per distinct taint set, not per node: the snapshot interns each node's taint tuple
(`node_taintset`, -1 = untainted), so a cluster of 5 000 nodes with 3 kinds of taints costs
3 toleration checks per pod, and untainted rows never leave numpy. Results are cached per
toleration signature: taint-set ids are content-addressed and never reused for other
content within an epoch of the snapshot's interner, so a cached verdict for an id stays true
until the ids are renumbered (`taintsets.epoch`: freed sets piled up) and only ids interned
since the last call need evaluating (no need to drop the cache on `generation`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import FilterResult, Handle, Mask, Rows, Scores, ScoreUnit
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Status
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.normalize import default_normalize_score
from gpusched.plugins.helper.tolerations import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    Toleration,
    parse_tolerations,
    tolerated,
)

REASON_PREFIX = "node(s) had untolerated taint"
# kube-scheduler v1.36 names no taint in its message (the differential test reads it from
# the live binary: "3 node(s) had untolerated taint(s)"): the keys and values of a
# cluster's taints are not the pod owner's to read.
REASON = f"{REASON_PREFIX}(s)"
# FilterResult codes are int8: past this many distinct taint texts in one answer, the rest
# share a generic reason (a cluster with >126 distinct untolerated taints is pathological).
_MAX_REASONS = 127
_GENERIC = REASON
_CACHE_LIMIT = 1024  # toleration signatures kept; a busy cluster sees a few dozen


class _FilterTable:
    """Per toleration signature: for each taint-set id, -1 if tolerated, else the index of
    the first untolerated taint's text in `texts`."""

    __slots__ = ("_text_ids", "first_bad", "texts")

    def __init__(self) -> None:
        self.first_bad = np.empty(0, np.int32)
        self.texts: list[str] = []
        self._text_ids: dict[str, int] = {}

    def extend(self, snap: NodeColumns, tolerations: tuple[Toleration, ...]) -> None:
        start = len(self.first_bad)
        end = len(snap.taintsets)
        if start >= end:
            return
        grown = np.empty(end, np.int32)
        grown[:start] = self.first_bad
        for ts in range(start, end):
            grown[ts] = -1
            for taint in snap.taints_of(ts):
                if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerated(tolerations, taint):
                    text = REASON
                    idx = self._text_ids.setdefault(text, len(self.texts))
                    if idx == len(self.texts):
                        self.texts.append(text)
                    grown[ts] = idx
                    break  # kube-scheduler reports the first untolerated taint
        self.first_bad = grown


class _ScoreTable:
    """Per PreferNoSchedule-toleration signature: intolerable PreferNoSchedule taints per
    taint-set id."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = np.empty(0, np.int64)

    def extend(self, snap: NodeColumns, tolerations: tuple[Toleration, ...]) -> None:
        start = len(self.counts)
        end = len(snap.taintsets)
        if start >= end:
            return
        grown = np.empty(end, np.int64)
        grown[:start] = self.counts
        for ts in range(start, end):
            grown[ts] = sum(
                1
                for taint in snap.taints_of(ts)
                if taint.effect == PREFER_NO_SCHEDULE and not tolerated(tolerations, taint)
            )
        self.counts = grown


_PREFER_TOLERATIONS: StateKey[tuple[Toleration, ...]] = StateKey("TaintToleration/preScore")


class TaintToleration:
    name: ClassVar[str] = "TaintToleration"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "taints (count)",
        (
            "PreferNoSchedule taints of the node the pod does not tolerate; fewer is better "
            "(normalisation reverses it)"
        ),
    )

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle
        self._snap: NodeColumns | None = None
        self._epoch = -1
        self._filter: dict[tuple[Toleration, ...], _FilterTable] = {}
        self._score: dict[tuple[Toleration, ...], _ScoreTable] = {}

    def _tables_for(self, snap: NodeColumns) -> None:
        # Ids belong to one Snapshot object and one epoch of its taint-set ids: a rebuilt
        # snapshot (re-list) or renumbered ids start afresh.
        if snap is not self._snap or snap.taintsets.epoch != self._epoch:
            self._snap = snap
            self._epoch = snap.taintsets.epoch
            self._filter.clear()
            self._score.clear()
        if len(self._filter) > _CACHE_LIMIT:
            self._filter.clear()
        if len(self._score) > _CACHE_LIMIT:
            self._score.clear()

    # -- Filter ----------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        snap = self.handle.snapshot
        if not snap.taintsets.live:
            return FilterResult(candidates)  # no node has a taint: nothing to read per row
        n = len(candidates)
        taintset = snap.node_taintset[:n]
        tainted = candidates & (taintset >= 0)
        if not tainted.any():
            return FilterResult(candidates)
        self._tables_for(snap)
        sig = parse_tolerations(pod.tolerations)
        table = self._filter.get(sig)
        if table is None:
            table = self._filter[sig] = _FilterTable()
        table.extend(snap, sig)

        rows = np.flatnonzero(tainted)
        bad = table.first_bad[taintset[rows]]
        rejected_rows = rows[bad >= 0]
        if len(rejected_rows) == 0:
            return FilterResult(candidates)
        feasible = candidates.copy()
        feasible[rejected_rows] = False

        # Codes index only the texts present in this answer, so the Diagnosis lists the
        # taints that actually blocked this pod.
        present, local = np.unique(bad[bad >= 0], return_inverse=True)
        reasons = [table.texts[int(i)] for i in present]
        if len(reasons) > _MAX_REASONS:
            local = np.minimum(local, _MAX_REASONS - 1)
            reasons = [*reasons[: _MAX_REASONS - 1], _GENERIC]
        codes = np.zeros(n, np.int8)
        codes[rejected_rows] = local.astype(np.int8)
        return FilterResult(feasible, tuple(reasons), codes, unresolvable=True)

    # -- Score -----------------------------------------------------------------------------

    @staticmethod
    def _prefer_tolerations(pod: PodInfo) -> tuple[Toleration, ...]:
        # kube-scheduler's getAllTolerationPreferNoSchedule: only tolerations with an empty
        # effect or PreferNoSchedule can tolerate a PreferNoSchedule taint.
        return tuple(
            t for t in parse_tolerations(pod.tolerations) if t.effect in ("", PREFER_NO_SCHEDULE)
        )

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        state.write(_PREFER_TOLERATIONS, self._prefer_tolerations(pod))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        snap = self.handle.snapshot
        out = np.zeros(len(rows), np.float64)
        taintset = snap.node_taintset[rows]
        tainted = taintset >= 0
        if not tainted.any():
            return out
        sig = state.get(_PREFER_TOLERATIONS)
        if sig is None:  # PreScore disabled in the profile
            sig = self._prefer_tolerations(pod)
        self._tables_for(snap)
        table = self._score.get(sig)
        if table is None:
            table = self._score[sig] = _ScoreTable()
        table.extend(snap, sig)
        out[tainted] = table.counts[taintset[tainted]]
        return out

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        default_normalize_score(scores, reverse=True)
