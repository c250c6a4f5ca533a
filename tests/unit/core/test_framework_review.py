"""Framework runner edge cases found in review."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import numpy as np

from gpusched.config.profile import PluginRef, Point, Profile
from gpusched.core.runtime.framework import Framework
from gpusched.framework import Code, CycleState, Rows, Scores, Status
from gpusched.framework.registry import Registry
from gpusched.model.pod import PodInfo
from tests.unit.core.fakes import Binder, Sort, make_pod
from tests.unit.core.test_framework import handle, profile, registry


class NaNScore:
    name: ClassVar[str] = "NaNScore"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.full(len(rows), 50.0)
        out[0] = np.nan
        return out


def test_nan_score_is_an_error_not_a_crash_at_select() -> None:
    reg = registry()
    reg.register(NaNScore)
    fw = Framework(profile(score=(PluginRef("NaNScore", 1.0),)), reg, handle())
    res, st = fw.run_score(CycleState(), make_pod(), np.arange(3, dtype=np.intp))
    # A NaN passed the [0, 100] check, and select() then found no best row (empty ties).
    assert res is None
    assert st.code is Code.ERROR and st.plugin == "NaNScore"


class _Raises:
    """Reserve, Permit and PostBind that raise: a plugin bug."""

    name = "Raises"

    def __init__(self, args: object, handle: object) -> None:
        self.unreserved = 0

    def reserve(self, state: CycleState, pod: object, node: str) -> Status:
        raise RuntimeError("reserve bug")

    def unreserve(self, state: CycleState, pod: object, node: str) -> None:
        self.unreserved += 1
        raise RuntimeError("unreserve bug")

    def permit(self, state: CycleState, pod: object, node: str) -> tuple[Status, float]:
        raise RuntimeError("permit bug")

    async def post_bind(self, state: CycleState, pod: object, node: str) -> None:
        raise RuntimeError("post-bind bug")


def test_plugin_exceptions_after_filtering_become_error_statuses() -> None:

    reg = Registry()
    for cls in (Sort, Binder, _Raises):
        reg.register(cls)
    profile = Profile(
        "p",
        {
            Point.QUEUE_SORT: (PluginRef("Sort"),),
            Point.BIND: (PluginRef("Binder"),),
            Point.RESERVE: (PluginRef("Raises"),),
            Point.PERMIT: (PluginRef("Raises"),),
            Point.POST_BIND: (PluginRef("Raises"),),
        },
    )
    fw = Framework(profile, reg, handle(3))
    pod = make_pod()
    st = fw.run_reserve(CycleState(), pod, "n0")
    assert st.code is Code.ERROR and "Reserve raised" in st.message() and st.plugin == "Raises"
    assert fw.plugins["Raises"].unreserved == 1  # undone even though Unreserve raises too
    st = fw.run_permit(CycleState(), pod, "n0")
    assert st.code is Code.ERROR and "Permit raised" in st.message()
    asyncio.run(fw.run_post_bind(CycleState(), pod, "n0"))  # logged, not raised
