"""thermal_filter and fit_resources: numba equals twin; reason codes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import (
    REASON_CPU,
    REASON_MEMORY,
    REASON_NOT_EVALUATED,
    REASON_OK,
    REASON_PODS,
    fit_resources_nb,
    fit_resources_np,
    thermal_filter_nb,
    thermal_filter_np,
)

from ._clusters import Cluster, clusters


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


def test_fit_resources_reasons() -> None:
    rows = np.array([True, True, True, True, False])
    cpu = np.array([100, 4000, 4000, 4000, 4000], dtype=np.int64)
    mem = np.array([10, 10, 2**30, 2**30, 2**30], dtype=np.int64)
    pods = np.array([5, 5, 0, 5, 5], dtype=np.int32)
    ok = np.zeros(5, dtype=np.bool_)
    why = np.zeros(5, dtype=np.int8)
    assert fit_resources_nb(rows, cpu, mem, pods, 1000, 2**20, ok, why) == 1
    assert why.tolist() == [REASON_CPU, REASON_MEMORY, REASON_PODS, REASON_OK, REASON_NOT_EVALUATED]


def test_thermal_filter_lets_unknown_through() -> None:
    temp = np.array([70.0, 82.0, np.nan, 82.2], dtype=np.float32)
    ok = np.zeros(4, dtype=np.bool_)
    assert thermal_filter_nb(np.ones(4, dtype=np.bool_), temp, 82.0, ok) == 2
    assert ok.tolist() == [True, False, True, False]
