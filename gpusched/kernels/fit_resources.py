"""``fit_resources``: the node CPU / memory / pod-slot filter, with a reason code per row.

Reason codes (int8) let the framework print kube-scheduler's messages without re-checking:
0 fits, 1 insufficient cpu, 2 insufficient memory, 3 too many pods (no free pod slot),
-1 not evaluated (row outside ``rows``). The first failing check wins, in that order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel

REASON_NOT_EVALUATED = -1
REASON_OK = 0
REASON_CPU = 1
REASON_MEMORY = 2
REASON_PODS = 3


@njit_kernel
def fit_resources_nb(
    rows: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    req_cpu: int,
    req_mem_bytes: int,
    out_ok: npt.NDArray[np.bool_],
    out_reason: npt.NDArray[np.int8],
) -> int:
    """Write the pass mask and reason codes; return the number of passing rows."""
    passed = 0
    for n in range(rows.shape[0]):
        reason = REASON_NOT_EVALUATED
        if rows[n]:
            if node_cpu_free[n] < req_cpu:
                reason = REASON_CPU
            elif node_mem_free[n] < req_mem_bytes:
                reason = REASON_MEMORY
            elif node_pods_free[n] < 1:
                reason = REASON_PODS
            else:
                reason = REASON_OK
        out_reason[n] = reason
        out_ok[n] = reason == REASON_OK
        passed += reason == REASON_OK
    return passed


def fit_resources_np(
    rows: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    req_cpu: int,
    req_mem_bytes: int,
    out_ok: npt.NDArray[np.bool_],
    out_reason: npt.NDArray[np.int8],
) -> int:
    """NumPy twin of :func:`fit_resources_nb`."""
    reason = np.select(
        [~rows, node_cpu_free < req_cpu, node_mem_free < req_mem_bytes, node_pods_free < 1],
        [REASON_NOT_EVALUATED, REASON_CPU, REASON_MEMORY, REASON_PODS],
        REASON_OK,
    )
    out_reason[:] = reason
    out_ok[:] = reason == REASON_OK
    return int(out_ok.sum())
