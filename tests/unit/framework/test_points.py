"""The extension points' method table matches the Protocols."""

from __future__ import annotations

import pytest

from gpusched.config.profile import Point
from gpusched.framework import interfaces
from gpusched.framework.points import POINT_METHODS
from tests.fake_plugins import (
    fake,
)

_PROTOCOLS: dict[Point, type] = {
    Point.PRE_ENQUEUE: interfaces.PreEnqueuePlugin,
    Point.QUEUE_SORT: interfaces.QueueSortPlugin,
    Point.PRE_FILTER: interfaces.PreFilterPlugin,
    Point.FILTER: interfaces.FilterPlugin,
    Point.POST_FILTER: interfaces.PostFilterPlugin,
    Point.PRE_SCORE: interfaces.PreScorePlugin,
    Point.SCORE: interfaces.ScorePlugin,
    Point.RESERVE: interfaces.ReservePlugin,
    Point.PERMIT: interfaces.PermitPlugin,
    Point.PRE_BIND: interfaces.PreBindPlugin,
    Point.BIND: interfaces.BindPlugin,
    Point.POST_BIND: interfaces.PostBindPlugin,
}


@pytest.mark.parametrize("point", list(Point))
def test_point_methods_match_the_protocols(point: Point) -> None:
    members = {
        name
        for name in vars(_PROTOCOLS[point])
        if not name.startswith("_") and callable(getattr(_PROTOCOLS[point], name))
    }
    assert set(POINT_METHODS[point]) == members
    full = fake("Full", point)
    assert isinstance(full(None, None), _PROTOCOLS[point])
