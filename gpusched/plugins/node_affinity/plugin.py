"""NodeAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore).

Filter: nodeSelector and requiredDuringSchedulingIgnoredDuringExecution. Score: the summed
weights of the matching preferredDuringSchedulingIgnoredDuringExecution terms, normalised
so the best node gets 100.

A pod's selector is parsed once per distinct (nodeSelector, nodeAffinity) signature; its
label part becomes a bool table over the snapshot's label-set ids (computed with numpy
from per-key label columns, see plugins/helper/label_index.py) and a row's verdict is a
gather through `node_labelset`. Only `metadata.name` matchFields need the row itself.

Label sets hold only the label keys something selects on (framework/snapshot.py): before
reading them, every cycle declares the keys of the pod's selector and of addedAffinity
(`NodeColumns.watch_labels`), so a key never seen before is part of the label sets by the
time the tables are computed, and labels nobody selects on never make new label sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
    Rows,
    Scores,
    ScoreUnit,
)
from gpusched.framework.status import Code, Status
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.label_index import (
    Bools,
    LabelIndex,
    RequiredEval,
    field_mask,
    synced_index,
)
from gpusched.plugins.helper.node_selector import (
    Preferred,
    Required,
    Term,
    freeze,
    parse_preferred,
    parse_required,
)
from gpusched.plugins.helper.normalize import default_normalize_score
from gpusched.plugins.node_affinity.args import NodeAffinityArgs

REASON_POD = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
REASON_CONFLICT = "pod affinity terms conflict"
PREFIX = "spec.affinity.nodeAffinity"

_CACHE_LIMIT = 4096  # distinct selector signatures kept; a cluster sees a few hundred


def _label_keys(req: Required | None, pref: Preferred | None) -> tuple[str, ...]:
    keys: dict[str, None] = {}
    if req is not None:
        keys.update((k, None) for k, _ in req.node_selector)
        for t in req.terms or ():
            keys.update((r.key, None) for r in t.labels or ())
    if pref is not None:
        for _, t in pref.terms:
            keys.update((r.key, None) for r in t.labels or ())
    return tuple(keys)


class _PreferredEval:
    """Preferred terms against one LabelIndex: summed weights of label-only terms per
    label-set id, plus per-row checks for terms with matchFields."""

    __slots__ = ("_field", "_index", "_n", "_weights", "pref")

    def __init__(self, pref: Preferred) -> None:
        self.pref = pref
        self._index: LabelIndex | None = None
        self._n = -1
        self._weights: NDArray[np.int64] = np.empty(0, np.int64)
        self._field: list[tuple[int, Bools, Term]] = []

    def _tables(self, index: LabelIndex) -> None:
        if index is self._index and len(index) == self._n:
            return
        weights = np.zeros(len(index), np.int64)
        field: list[tuple[int, Bools, Term]] = []
        for w, t in self.pref.terms:
            if t.fields:
                field.append((w, index.term_labels(t), t))
            else:
                weights += np.where(index.term_labels(t), w, 0)
        self._weights, self._field, self._index, self._n = weights, field, index, len(index)

    def scores(self, index: LabelIndex, rows: Rows) -> NDArray[np.int64]:
        self._tables(index)
        snap = index.snapshot
        ls = snap.node_labelset[rows]
        out = self._weights[ls].copy()
        for w, table, term in self._field:
            out += np.where(table[ls] & field_mask(snap, rows, term), w, 0)
        return out


@dataclass(frozen=True, slots=True)
class _Entry:
    required: RequiredEval | None
    preferred: _PreferredEval | None
    errors: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # the label keys the selector reads


_STATE: StateKey[_Entry] = StateKey("NodeAffinity/selector")
# The entry of a pod with neither a nodeSelector nor an affinity.
_NOTHING = _Entry(None, None)


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "term weight (sum)",
        (
            "sum of the weights of the pod's preferred node-affinity terms the node matches; "
            "normalised to 0-100 by the highest"
        ),
    )
    Args: ClassVar[type[NodeAffinityArgs]] = NodeAffinityArgs

    def __init__(self, args: NodeAffinityArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, NodeAffinityArgs)
        self.handle = handle
        added: Mapping[str, Any] = self.args.added_affinity or {}
        errors: list[str] = []
        req = parse_required({}, added, "addedAffinity", errors)
        pref = parse_preferred(added, "addedAffinity", errors)
        self._added_required = RequiredEval(req) if req is not None else None
        self._added_preferred = _PreferredEval(pref) if pref is not None else None
        self._added_keys = _label_keys(req, pref)
        # No addedAffinity: a pod without selector or affinity has nothing to check here.
        self._plain = req is None and pref is None
        self._index: LabelIndex | None = None
        self._entries: dict[Any, _Entry] = {}

    # -- shared ----------------------------------------------------------------------------

    def _sync(self, keys: tuple[str, ...] = ()) -> LabelIndex:
        """The label index, after declaring `keys` and addedAffinity's keys watched."""
        snap = self.handle.snapshot
        if keys:
            snap.watch_labels(keys)
        if self._added_keys:
            snap.watch_labels(self._added_keys)
        # The parsed selectors stay across a new index; their tables follow it.
        index = self._index = synced_index(self._index, snap)
        return index

    def _entry(self, pod: PodInfo) -> _Entry:
        raw_affinity: Any = pod.affinity
        node_affinity: Any = (
            raw_affinity.get("nodeAffinity") if isinstance(raw_affinity, Mapping) else None
        )
        sig = freeze((pod.node_selector, node_affinity))
        got = self._entries.get(sig)
        if got is not None:
            return got
        errors: list[str] = []
        if node_affinity is not None and not isinstance(node_affinity, Mapping):
            errors.append(f"{PREFIX}: Invalid value: {node_affinity!r}: must be an object")
            node_affinity = None
        na: Mapping[str, Any] = node_affinity or {}
        req = parse_required(pod.node_selector, na, PREFIX, errors)
        pref = parse_preferred(na, PREFIX, errors)
        got = _Entry(
            RequiredEval(req) if req is not None else None,
            _PreferredEval(pref) if pref is not None else None,
            tuple(errors),
            _label_keys(req, pref),
        )
        if len(self._entries) >= _CACHE_LIMIT:
            self._entries.clear()
        self._entries[sig] = got
        return got

    def _state_entry(self, state: CycleState, pod: PodInfo) -> _Entry:
        got = state.get(_STATE)
        if got is None:  # PreFilter/PreScore disabled in the profile
            got = self._entry(pod)
            self._sync(got.keys)
        return got

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if self._plain and not pod.node_selector and not pod.affinity:
            # Most pods select nothing: no selector to parse, no label index to sync (the
            # sync was most of this plugin's per-pod cost at 10,000 nodes).
            state.write(_STATE, _NOTHING)
            return None, Status(Code.SKIP, (), self.name)
        snap = self.handle.snapshot
        entry = self._entry(pod)
        self._sync(entry.keys)
        if entry.errors:
            # The API server rejects such pods, so this is a pod that bypassed validation:
            # it can never match, and the message says which field to fix.
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, entry.errors, self.name)
        state.write(_STATE, entry)
        if entry.required is None and self._added_required is None:
            return None, Status(Code.SKIP, (), self.name)
        terms = entry.required.req.terms if entry.required is not None else None
        if not terms:
            return None, Status()
        # Like kube-scheduler: if every term pins metadata.name with In, only those nodes
        # are candidates at all.
        names: set[str] = set()
        for t in terms:
            pinned = t.names_in()
            if pinned is None:
                return None, Status()
            names |= pinned
        if not names:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (REASON_CONFLICT,), self.name)
        rows = sorted(r for n in names if (r := snap.rows.get(n)) is not None)
        return PreFilterResult(np.array(rows, np.intp)), Status()

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        entry = self._state_entry(state, pod)
        index = self._sync(entry.keys)
        n = len(candidates)
        if entry.errors:
            return FilterResult(np.zeros(n, np.bool_), (REASON_POD,), unresolvable=True)
        rows = np.flatnonzero(candidates)
        feasible = candidates.copy()
        codes: NDArray[np.int8] | None = None
        if self._added_required is not None:
            # The scheduler-enforced affinity is checked first, as upstream.
            ok = self._added_required.mask(index, rows)
            feasible[rows[~ok]] = False
            codes = np.zeros(n, np.int8)
            codes[rows[~ok]] = 1
            rows = rows[ok]
        if entry.required is not None:
            ok = entry.required.mask(index, rows)
            feasible[rows[~ok]] = False
        return FilterResult(feasible, (REASON_POD, REASON_ENFORCED), codes, unresolvable=True)

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Status:
        entry = self._state_entry(state, pod)
        if entry.errors:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, entry.errors, self.name)
        state.write(_STATE, entry)
        if entry.preferred is None and self._added_preferred is None:
            return Status(Code.SKIP, (), self.name)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        entry = self._state_entry(state, pod)
        index = self._sync(entry.keys)
        total = np.zeros(len(rows), np.int64)
        if self._added_preferred is not None:
            total += self._added_preferred.scores(index, rows)
        if entry.preferred is not None and not entry.errors:
            total += entry.preferred.scores(index, rows)
        return total.astype(np.float64)

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        default_normalize_score(scores, reverse=False)
