"""The extension points, defined once: each point's name, its Protocol and its methods.

The configuration (`gpusched.config`: which plugin runs where) and the runtime
(`gpusched.core.runtime.framework`: which plugins it calls) both read this table, so a new
point or a renamed method changes one place.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Mapping

from gpusched.framework.interfaces import (
    BindPlugin,
    FilterPlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)


class Point(enum.Enum):
    """An extension point; the value is its key in a profile's `plugins:` mapping."""

    PRE_ENQUEUE = "preEnqueue"
    QUEUE_SORT = "queueSort"
    PRE_FILTER = "preFilter"
    FILTER = "filter"
    POST_FILTER = "postFilter"
    PRE_SCORE = "preScore"
    SCORE = "score"
    RESERVE = "reserve"
    PERMIT = "permit"
    PRE_BIND = "preBind"
    BIND = "bind"
    POST_BIND = "postBind"


PROTOCOLS: Mapping[Point, type] = {
    Point.PRE_ENQUEUE: PreEnqueuePlugin,
    Point.QUEUE_SORT: QueueSortPlugin,
    Point.PRE_FILTER: PreFilterPlugin,
    Point.FILTER: FilterPlugin,
    Point.POST_FILTER: PostFilterPlugin,
    Point.PRE_SCORE: PreScorePlugin,
    Point.SCORE: ScorePlugin,
    Point.RESERVE: ReservePlugin,
    Point.PERMIT: PermitPlugin,
    Point.PRE_BIND: PreBindPlugin,
    Point.BIND: BindPlugin,
    Point.POST_BIND: PostBindPlugin,
}


def _methods(protocol: type) -> tuple[str, ...]:
    # The methods the Protocol itself declares (Plugin's `name` is an attribute, and
    # Protocol machinery is private), in declaration order.
    return tuple(
        name
        for name, member in vars(protocol).items()
        if not name.startswith("_") and inspect.isfunction(member)
    )


POINT_METHODS: Mapping[Point, tuple[str, ...]] = {p: _methods(c) for p, c in PROTOCOLS.items()}
"""The methods a plugin class needs for each point. The loader checks them on the class with
`implements`, because the Protocols are runtime-checkable on instances only and a file must
validate without constructing plugins; the runtime checks instances against PROTOCOLS."""


def implements(cls: object, point: Point) -> bool:
    """Whether a plugin class has the methods of `point`'s Protocol."""
    return all(callable(getattr(cls, m, None)) for m in POINT_METHODS[point])
