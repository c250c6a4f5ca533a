"""Topology domains of the snapshot's rows: for a label key, each row's domain id.

A domain is one value of the key (`topology.kubernetes.io/zone=a`); a row whose node lacks
the key, or an empty row, is in no domain (-1). The ids index the arrays of the
`domain_counts` / `domain_gather` kernels.

Read through the snapshot's interned label sets, so nothing walks the nodes in Python per
pod: the caller declares its keys watched first (`NodeColumns.watch_labels`, which puts the
key into every label set), then one int32 code per label-set id and key is kept and extended
only for label sets interned since; a row's domain is a gather through `node_labelset`.
Label-set ids are never reused within an epoch of the interner, so the codes never go stale;
a new Snapshot object or a new epoch starts afresh.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.snapshot import MAX_WATCHED_KEYS, NodeColumns


class _KeyCodes:
    __slots__ = ("codes", "ids", "values")

    def __init__(self) -> None:
        self.codes = np.empty(0, np.int32)  # per label-set id: domain id, -1 = key absent
        self.ids: dict[str, int] = {}
        self.values: list[str] = []


class TopologyDomains:
    """Per-row domain ids for label keys over one snapshot."""

    __slots__ = ("_epoch", "_keys", "_snapshot")

    def __init__(self) -> None:
        self._snapshot: NodeColumns | None = None
        self._epoch = -1
        self._keys: dict[str, _KeyCodes] = {}

    def rows(self, snap: NodeColumns, key: str) -> tuple[NDArray[np.int32], list[str]]:
        """(domain id per row, length `len(snap.node_valid)`, -1 outside any domain; the
        domain values by id). `key` must have been declared watched (`watch_labels`) before
        any of this cycle's keys were read: declaring one may renumber the label sets."""
        if snap is not self._snapshot or snap.labelsets.epoch != self._epoch:
            self._snapshot, self._epoch = snap, snap.labelsets.epoch
            self._keys.clear()
        col = self._keys.get(key)
        if col is None:
            if len(self._keys) >= MAX_WATCHED_KEYS:
                self._keys.clear()
            col = self._keys[key] = _KeyCodes()
        start, end = len(col.codes), len(snap.labelsets)
        if end > start:
            new = np.full(end - start, -1, np.int32)
            for i in range(start, end):
                value = snap.labels_of(i).get(key)
                if value is not None:
                    got = col.ids.get(value)
                    if got is None:
                        got = col.ids[value] = len(col.values)
                        col.values.append(value)
                    new[i - start] = got
            col.codes = np.concatenate([col.codes, new])
        labelset = snap.node_labelset
        out = np.full(len(labelset), -1, np.int32)
        has = (labelset >= 0) & snap.node_valid
        if len(col.codes):
            out[has] = col.codes[labelset[has]]
        return out, col.values
