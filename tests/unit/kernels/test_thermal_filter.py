"""thermal_filter: unknown temperatures pass."""

from __future__ import annotations

import numpy as np

from gpusched.kernels import (
    thermal_filter_nb,
)


def test_thermal_filter_lets_unknown_through() -> None:
    temp = np.array([70.0, 82.0, np.nan, 82.2], dtype=np.float32)
    ok = np.zeros(4, dtype=np.bool_)
    assert thermal_filter_nb(np.ones(4, dtype=np.bool_), temp, 82.0, ok) == 2
    assert ok.tolist() == [True, False, True, False]
