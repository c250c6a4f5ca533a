"""``thermal_filter``: the node passes while below the red line; unknown (NaN) passes.

An unknown temperature passes because a missing exporter must not take GPUs out of
service; ``thermal_score`` gives such nodes a neutral score instead. Rows outside ``rows``
fail. Comparisons are made in float64, so a red line such as 82.3 is not rounded to float32.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel


@njit_kernel
def thermal_filter_nb(
    rows: npt.NDArray[np.bool_],
    node_temp: npt.NDArray[np.float32],
    red_line: float,
    out_ok: npt.NDArray[np.bool_],
) -> int:
    """Write the pass mask into ``out_ok``; return the number of passing rows."""
    passed: Int = 0
    for n in range(rows.shape[0]):
        t = np.float64(node_temp[n])
        ok = rows[n] and (np.isnan(t) or t < red_line)
        out_ok[n] = ok
        passed += ok
    return int(passed)


def thermal_filter_np(
    rows: npt.NDArray[np.bool_],
    node_temp: npt.NDArray[np.float32],
    red_line: float,
    out_ok: npt.NDArray[np.bool_],
) -> int:
    """NumPy twin of :func:`thermal_filter_nb`."""
    t = node_temp.astype(np.float64)
    out_ok[:] = rows & (np.isnan(t) | (t < red_line))
    return int(out_ok.sum())
