"""thermal_filter and fit_resources: numba equals twin; reason codes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import (
    REASON_NOT_EVALUATED,
    REASON_OK,
    fit_resources_nb,
    fit_resources_np,
    thermal_filter_nb,
    thermal_filter_np,
)
from tests.builders import Cluster, clusters


@settings(max_examples=100, deadline=None)
@given(clusters(), st.integers(0, 130_000), st.integers(0, 2**38), st.floats(40.0, 100.0))
def test_filters_equal_twins(cl: Cluster, cpu: int, mem: int, red_line: float) -> None:
    n = cl.n
    ok_nb, ok_np = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    why_nb, why_np = np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.int8)
    args = (cl.node_valid, cl.node_cpu_free, cl.node_mem_free, cl.node_pods_free, cpu, mem)
    assert fit_resources_nb(*args, ok_nb, why_nb) == fit_resources_np(*args, ok_np, why_np)
    np.testing.assert_array_equal(ok_nb, ok_np)
    np.testing.assert_array_equal(why_nb, why_np)
    assert ((why_nb == REASON_OK) == ok_nb).all()
    assert (why_nb[~cl.node_valid] == REASON_NOT_EVALUATED).all()
    targs = (cl.node_valid, cl.node_temp, red_line)
    assert thermal_filter_nb(*targs, ok_nb) == thermal_filter_np(*targs, ok_np)
    np.testing.assert_array_equal(ok_nb, ok_np)
