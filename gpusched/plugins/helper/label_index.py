"""Label columns over the snapshot's interned label sets, so selectors run as numpy.

Real nodes carry unique labels (`kubernetes.io/hostname`), so there are about as many
label sets as nodes and evaluating a selector once per label set in Python would cost a
Python loop over the cluster for every new selector. Instead, for each label key a
selector mentions we keep one int32 column over label-set ids (the id of the key's value,
-1 when absent), built once per key and extended only for label sets interned since; a
requirement is then one vector op over that column.

Label-set ids are content-addressed and never reused within an epoch of the snapshot's
interner (`NodeColumns.labelsets.epoch`), so columns never go stale; a freed id keeps an
empty dict here (no row points at it). A plugin (NodeAffinity, PodTopologySpread,
InterPodAffinity) drops its whole index when the handle hands out a different Snapshot
object or the epoch changes (ids renumbered): `synced_index`.

The same columns give each row's topology domain for a key (`LabelIndex.rows`, the dense
value id through `node_labelset`), which PodTopologySpread and InterPodAffinity's kernels
index by.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.interfaces import Rows
from gpusched.framework.snapshot import MAX_WATCHED_KEYS, NodeColumns
from gpusched.model.selector import Requirement, parse_int64
from gpusched.plugins.helper.node_selector import Required, Term

Bools = NDArray[np.bool_]


class KeyColumn:
    __slots__ = ("codes", "ids", "numbers", "numeric", "values")

    def __init__(self) -> None:
        self.codes = np.empty(0, np.int32)  # per label set: value id, -1 = key absent
        self.values: list[str] = []
        self.ids: dict[str, int] = {}
        self.numbers = np.empty(0, np.int64)  # per value id: its int64 value (Gt/Lt)
        self.numeric = np.empty(0, np.bool_)  # per value id: parses as int64

    def extend(self, dicts: list[Mapping[str, str]], key: str) -> None:
        start, end = len(self.codes), len(dicts)
        if start >= end:
            return
        before = len(self.values)
        new = np.empty(end - start, np.int32)
        for i in range(start, end):
            value = dicts[i].get(key)
            if value is None:
                new[i - start] = -1
                continue
            vid = self.ids.get(value)
            if vid is None:
                vid = self.ids[value] = len(self.values)
                self.values.append(value)
            new[i - start] = vid
        self.codes = np.concatenate([self.codes, new])
        if len(self.values) > before:
            parsed = [parse_int64(v) for v in self.values[before:]]
            self.numbers = np.concatenate(
                [self.numbers, np.array([p or 0 for p in parsed], np.int64)]
            )
            self.numeric = np.concatenate(
                [self.numeric, np.array([p is not None for p in parsed], np.bool_)]
            )


class LabelIndex:
    """Per-key columns over label-set ids of one snapshot."""

    __slots__ = ("_columns", "_dicts", "epoch", "snapshot")

    def __init__(self, snapshot: NodeColumns) -> None:
        self.snapshot = snapshot
        self.epoch = snapshot.labelsets.epoch
        self._dicts: list[Mapping[str, str]] = []
        self._columns: dict[str, KeyColumn] = {}

    def __len__(self) -> int:
        return len(self._dicts)

    def sync(self) -> int:
        """Take in label sets interned since the last call; returns how many there are."""
        snap = self.snapshot
        for i in range(len(self._dicts), len(snap.labelsets)):
            self._dicts.append(snap.labels_of(i))
        return len(self._dicts)

    def column(self, key: str) -> KeyColumn:
        col = self._columns.get(key)
        if col is None:
            if len(self._columns) >= MAX_WATCHED_KEYS:
                # Keys come from pod selectors: keep as many columns as keys are watched.
                self._columns.clear()
            col = self._columns[key] = KeyColumn()
        col.extend(self._dicts, key)
        return col

    def rows(self, key: str) -> tuple[NDArray[np.int32], list[str]]:
        """Each snapshot row's value id for `key` (length `len(snapshot.node_valid)`; -1 for
        an empty row or a node without the key) and the values by id: a row's topology
        domain (PodTopologySpread, InterPodAffinity). Call `sync` first."""
        col = self.column(key)
        labelset = self.snapshot.node_labelset
        out = np.full(len(labelset), -1, np.int32)
        # An empty row's label set is -1 (the snapshot frees it with the node).
        has = labelset >= 0
        if len(col.codes):
            out[has] = col.codes[labelset[has]]
        return out, col.values

    # -- selectors as masks over label-set ids -----------------------------------------------

    def requirement(self, r: Requirement) -> Bools:
        col = self.column(r.key)
        present = col.codes >= 0
        if r.op in ("In", "NotIn"):
            ids = [col.ids[v] for v in r.values if v in col.ids]
            hit = (
                np.isin(col.codes, np.array(ids, np.int32))
                if ids
                else np.zeros(len(col.codes), np.bool_)
            )
            return hit if r.op == "In" else ~hit
        if r.op == "Exists":
            return present
        if r.op == "DoesNotExist":
            return ~present
        safe = np.where(present, col.codes, 0)
        if len(col.values) == 0 or r.number is None:
            return np.zeros(len(col.codes), np.bool_)
        nums = col.numbers[safe]
        cmp = nums > r.number if r.op == "Gt" else nums < r.number
        return present & col.numeric[safe] & cmp

    def term_labels(self, t: Term) -> Bools:
        out = np.ones(len(self._dicts), np.bool_)
        for r in t.labels or ():
            out &= self.requirement(r)
        return out

    def node_selector(self, req: Required) -> Bools:
        out = np.ones(len(self._dicts), np.bool_)
        for key, value in req.node_selector:
            col = self.column(key)
            vid = col.ids.get(value)
            if vid is None:
                return np.zeros(len(self._dicts), np.bool_)
            out &= col.codes == vid
        return out


def synced_index(index: LabelIndex | None, snapshot: NodeColumns) -> LabelIndex:
    """`index` if it still belongs to `snapshot` (the same object, the same epoch of label-set
    ids), else a new one; synced. The caller declares its keys watched before (declaring
    one may renumber the label sets)."""
    if index is None or index.snapshot is not snapshot or index.epoch != snapshot.labelsets.epoch:
        index = LabelIndex(snapshot)
    index.sync()
    return index


def field_mask(snap: NodeColumns, rows: Rows, term: Term) -> Bools:
    """The term's metadata.name requirements on `rows` (all True without matchFields)."""
    out = np.ones(len(rows), np.bool_)
    for f in term.fields:
        eq = rows == snap.rows.get(f.name, -1)
        out &= eq if f.op == "In" else ~eq
    return out


class RequiredEval:
    """A Required selector against one LabelIndex: `pure` over label-set ids covers the
    nodeSelector and every term without matchFields; each term with matchFields keeps its
    own label table, ANDed with the row's name at evaluation."""

    __slots__ = ("_field", "_index", "_n", "_pure", "req")

    def __init__(self, req: Required) -> None:
        self.req = req
        self._index: LabelIndex | None = None
        self._n = -1
        self._pure: Bools = np.empty(0, np.bool_)
        self._field: list[tuple[Bools, Term]] = []

    def _tables(self, index: LabelIndex) -> None:
        if index is self._index and len(index) == self._n:
            return
        ns = index.node_selector(self.req)
        terms = self.req.terms
        if terms is None:
            pure = ns
        else:
            matched = np.zeros(len(index), np.bool_)
            for t in terms:
                if not t.fields:
                    matched |= index.term_labels(t)
            pure = ns & matched
        self._field = [(ns & index.term_labels(t), t) for t in terms or () if t.fields]
        self._pure, self._index, self._n = pure, index, len(index)

    def mask(self, index: LabelIndex, rows: Rows) -> Bools:
        self._tables(index)
        snap = index.snapshot
        ls = snap.node_labelset[rows]
        out = self._pure[ls]
        for table, term in self._field:
            out |= table[ls] & field_mask(snap, rows, term)
        return out
