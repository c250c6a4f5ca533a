"""Per-row results of recent request shapes, brought up to date incrementally.

Workloads repeat a few pod shapes, and between two pods only the rows the cache touched
(a bind, a deletion, a node update) change (``NodeColumns.row_version``). A plugin whose
per-row result depends only on that row and the request shape keeps the result per shape
and recomputes just the changed rows: a pod then costs one vector compare of the row
versions plus the changed rows, not a pass over every card column. GPUFit's summary and
GPUFragmentation's card-price losses both use it.
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
        self.full = 0
        self.partial = 0

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
