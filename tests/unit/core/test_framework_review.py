"""Framework runner edge cases found in review."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpusched.config.profile import PluginRef
from gpusched.core.runtime.framework import Framework
from gpusched.framework import Code, CycleState, Rows, Scores
from gpusched.model.pod import PodInfo
from tests.unit.core.fakes import make_pod
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
