"""The per-pod backoff: doubles up to the cap."""

from __future__ import annotations

from gpusched.core.queue import backoff_duration


def test_backoff_doubles_to_the_cap() -> None:
    assert [backoff_duration(n, 1.0, 10.0) for n in range(6)] == [0, 1, 2, 4, 8, 10]
    assert backoff_duration(10_000, 1.0, 10.0) == 10.0
