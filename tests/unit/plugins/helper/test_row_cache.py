"""RowCache: changed rows recomputed, a resize or a big change recomputes all, LRU bound."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.plugins.helper.row_cache import RowCache

Rows = NDArray[np.int64]


def _doubler(
    snap: Snapshot, calls: list[str]
) -> tuple[Callable[[], Rows], Callable[[Rows, NDArray[np.intp]], None]]:
    def compute_all() -> NDArray[np.int64]:
        calls.append("all")
        return snap.node_cpu_free * 2

    def recompute(out: NDArray[np.int64], rows: NDArray[np.intp]) -> None:
        calls.append(f"rows {rows.tolist()}")
        out[rows] = snap.node_cpu_free[rows] * 2

    return compute_all, recompute


def test_only_changed_rows_are_recomputed_until_a_big_change() -> None:
    snap = Snapshot(4, capacity=64)
    cache: RowCache[NDArray[np.int64]] = RowCache()
    calls: list[str] = []
    compute_all, recompute = _doubler(snap, calls)
    first = cache.get(snap, "shape", compute_all, recompute)
    snap.node_cpu_free[5] = 7
    snap.touch(5)
    again = cache.get(snap, "shape", compute_all, recompute)
    assert again is first and again[5] == 14
    for row in range(8):  # an eighth of the rows: one pass is cheaper
        snap.touch(row)
    cache.get(snap, "shape", compute_all, recompute)
    assert calls == ["all", "rows [5]", "all"]
    assert (cache.full, cache.partial) == (2, 1)


def test_shapes_are_bounded_least_recently_used_first() -> None:
    snap = Snapshot(4, capacity=16)
    cache: RowCache[NDArray[np.int64]] = RowCache(max_shapes=2)
    calls: list[str] = []
    compute_all, recompute = _doubler(snap, calls)
    for shape in ("a", "b", "a", "c", "a", "b"):
        cache.get(snap, shape, compute_all, recompute)
    # "b" was evicted by "c" (a was used more recently), so it is computed again.
    assert calls == ["all", "all", "all", "all"]


def test_rows_computes_only_rows_asked_and_not_current() -> None:
    snap = Snapshot(4, capacity=16)
    cache: RowCache[NDArray[np.int64]] = RowCache()
    calls: list[str] = []
    _, recompute = _doubler(snap, calls)

    def alloc() -> NDArray[np.int64]:
        return np.zeros(snap.capacity, np.int64)

    def ask(*rows: int) -> NDArray[np.int64]:
        return cache.rows(snap, "shape", np.array(rows, np.intp), alloc, recompute)

    snap.node_cpu_free[:] = np.arange(16)
    ask(1, 2)
    ask(1, 2, 3)  # 1 and 2 are current: only 3
    snap.node_cpu_free[2] = 100
    snap.touch(2)
    out = ask(1, 2, 3)
    assert out[2] == 200 and out[3] == 6
    ask(5)
    assert calls == ["rows [1, 2]", "rows [3]", "rows [2]", "rows [5]"]
    assert (cache.full, cache.partial, cache.computed_rows) == (1, 3, 5)
    ask(1, 2, 3, 5)
    assert len(calls) == 4  # nothing changed since: nothing computed
