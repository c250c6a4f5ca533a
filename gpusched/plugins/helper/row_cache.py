"""Per-row results of recent request shapes, brought up to date incrementally.

Workloads repeat a few pod shapes, and between two pods only the rows the cache touched
(a bind, a deletion, a node update) change (``NodeColumns.row_version``). A plugin whose
per-row result depends only on that row and the request shape keeps the result per shape
and recomputes just the changed rows: a pod then costs one vector compare of the row
versions plus the changed rows, not a pass over every card column. GPUFit's summary,
NVLinkTopology's scores and GPUFragmentation's FGD term, pack term and card-price losses
use it.

`get` keeps every row current (a Filter that reads all candidates). `rows` computes only the
rows asked for that are not already current for the shape (a Score, whose candidate rows
after filtering may be a handful: a first-seen shape then costs those rows, not the whole
snapshot); a row changed since is marked not current and computed again when next asked.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.snapshot import NodeColumns

T = TypeVar("T")


class RowCache(Generic[T]):
    def __init__(self, max_shapes: int = 64) -> None:
        self.max_shapes = max_shapes
        self._entries: dict[Hashable, tuple[T, int]] = {}
        # `rows` entries: the result, the snapshot version seen, and which rows are current.
        self._lazy: dict[Hashable, tuple[T, int, NDArray[np.bool_]]] = {}
        self.full = 0
        self.partial = 0
        self.computed_rows = 0  # rows computed by `rows`, for tests and benchmarks

    def get(
        self,
        snap: NodeColumns,
        shape: Hashable,
        compute_all: Callable[[], T],
        recompute: Callable[[T, NDArray[np.intp]], None],
    ) -> T:
        """The result for `shape`: cached and refreshed on the rows changed since, or
        `compute_all()` when new, when the columns were resized, or when an eighth of the
        rows changed (one pass is then cheaper than gathering them)."""
        key = (shape, id(snap), snap.capacity)
        entry = self._entries.pop(key, None)
        if entry is not None:
            value, seen = entry
            changed = snap.changed_rows(seen)
            if len(changed) * 8 < snap.capacity:
                if len(changed):
                    recompute(value, changed)
                self.partial += 1
            else:
                value = compute_all()
                self.full += 1
        else:
            value = compute_all()
            self.full += 1
        if len(self._entries) >= self.max_shapes:
            # Least recently used first: dicts keep insertion order, and a hit re-inserts.
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (value, snap.version)
        return value

    def rows(
        self,
        snap: NodeColumns,
        shape: Hashable,
        rows: NDArray[np.intp],
        alloc: Callable[[], T],
        recompute: Callable[[T, NDArray[np.intp]], None],
    ) -> T:
        """The result for `shape` with every row of `rows` current: `alloc()` makes an
        empty (capacity-long) result for a new shape or after a resize, and `recompute`
        fills the rows of `rows` not computed since they last changed. Other rows hold
        whatever they held (stale or junk): read only `rows` from it."""
        key = (shape, id(snap), snap.capacity)
        entry = self._lazy.pop(key, None)
        if entry is None:
            value, current = alloc(), np.zeros(snap.capacity, np.bool_)
            self.full += 1
        else:
            value, seen, current = entry
            current &= snap.row_version <= seen
            self.partial += 1
        need = rows[~current[rows]]
        if len(need):
            recompute(value, need)
            current[need] = True
            self.computed_rows += len(need)
        if len(self._lazy) >= self.max_shapes:
            self._lazy.pop(next(iter(self._lazy)))  # least recently used, as in `get`
        self._lazy[key] = (value, snap.version, current)
        return value
