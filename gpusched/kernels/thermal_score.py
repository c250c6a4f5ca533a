"""``thermal_score``: prefer cool nodes, linear from ``cool`` (100) to ``red_line`` (0).

``100 * (red_line - temp) / (red_line - cool)`` clipped to [0, 100]; defaults are 50 °C and
the 82 °C red line. An unknown temperature (NaN) scores a neutral 50: a node whose exporter
is down is neither preferred nor punished. Rows outside ``rows`` score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel

COOL_C = 50.0
RED_LINE_C = 82.0
UNKNOWN_SCORE = 50.0


@njit_kernel
def thermal_score_nb(
    rows: npt.NDArray[np.bool_],
    node_temp: npt.NDArray[np.float32],
    cool: float,
    red_line: float,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the thermal score of every row into ``out``."""
    width = red_line - cool
    for n in range(rows.shape[0]):
        score = 0.0
        if rows[n]:
            t = np.float64(node_temp[n])
            if np.isnan(t):
                score = UNKNOWN_SCORE
            elif width <= 0.0:
                # A degenerate band (config allows cool == red_line) is a step at the line.
                score = 100.0 if t < red_line else 0.0
            else:
                score = min(100.0, max(0.0, (red_line - t) * 100.0 / width))
        out[n] = score


def thermal_score_np(
    rows: npt.NDArray[np.bool_],
    node_temp: npt.NDArray[np.float32],
    cool: float,
    red_line: float,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`thermal_score_nb`."""
    t = node_temp.astype(np.float64)
    width = red_line - cool
    if width <= 0.0:
        score = np.where(t < red_line, 100.0, 0.0)
    else:
        score = np.clip((red_line - t) * 100.0 / width, 0.0, 100.0)
    score = np.where(np.isnan(t), UNKNOWN_SCORE, score)
    out[:] = np.where(rows, score, 0.0)
