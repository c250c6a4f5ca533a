"""fit_resources: the reason codes."""

from __future__ import annotations

import numpy as np

from gpusched.kernels import (
    REASON_CPU,
    REASON_MEMORY,
    REASON_NOT_EVALUATED,
    REASON_OK,
    REASON_PODS,
    fit_resources_nb,
)


def test_fit_resources_reasons() -> None:
    rows = np.array([True, True, True, True, False])
    cpu = np.array([100, 4000, 4000, 4000, 4000], dtype=np.int64)
    mem = np.array([10, 10, 2**30, 2**30, 2**30], dtype=np.int64)
    pods = np.array([5, 5, 0, 5, 5], dtype=np.int32)
    ok = np.zeros(5, dtype=np.bool_)
    why = np.zeros(5, dtype=np.int8)
    assert fit_resources_nb(rows, cpu, mem, pods, 1000, 2**20, ok, why) == 1
    assert why.tolist() == [REASON_CPU, REASON_MEMORY, REASON_PODS, REASON_OK, REASON_NOT_EVALUATED]
