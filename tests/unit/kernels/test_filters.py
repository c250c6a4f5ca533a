"""thermal_filter: numba equals twin."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import thermal_filter_nb, thermal_filter_np
from tests.builders import Cluster, clusters


@settings(max_examples=100, deadline=None)
@given(clusters(), st.floats(40.0, 100.0))
def test_filters_equal_twins(cl: Cluster, red_line: float) -> None:
    n = cl.n
    ok_nb, ok_np = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    targs = (cl.node_valid, cl.node_temp, red_line)
    assert thermal_filter_nb(*targs, ok_nb) == thermal_filter_np(*targs, ok_np)
    np.testing.assert_array_equal(ok_nb, ok_np)
