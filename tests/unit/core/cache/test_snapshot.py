"""The snapshot's numpy columns: rows kept while it grows."""

from __future__ import annotations

from tests.builders import cache_with


def test_snapshot_grows_and_keeps_rows() -> None:
    c = cache_with(*[f"n{i}" for i in range(70)])
    snap = c.snapshot
    assert snap.size == 70 and snap.capacity >= 70
    assert snap.names[snap.row_of("n69")] == "n69"
    assert int(snap.card_free_milli[snap.row_of("n0")].sum()) == 8000
