"""``best_fit_score``: prefer the node the pod fits most tightly, from ``gpu_summary``.

* shared pod: ``100 - leftover * 100 / 1000`` (leftover milli of the best-fit card, computed
  as ``100 - 0.1 * leftover`` in both twins: no division per row);
* whole-card pod: ``100 - 100 * (intact - k) / usable`` (spare intact cards, relative to
  the node's usable cards; ``best_leftover`` already holds ``intact - k``).

Rows outside ``rows`` score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def best_fit_score_nb(
    rows: npt.NDArray[np.bool_],
    usable: npt.NDArray[np.int16],
    best_leftover: npt.NDArray[np.int32],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the best-fit score of every row into ``out``."""
    # Branch-free: ``rows`` is a random mask, a branch on it mispredicts.
    for n in range(rows.shape[0]):
        left = np.float64(best_leftover[n])
        us = np.float64(usable[n])
        score: float
        if req_cards == 0:
            score = 100.0 - 0.1 * left
        else:
            score = 100.0 - 100.0 * left / max(us, 1.0) if us > 0.0 else 0.0
        out[n] = min(100.0, max(0.0, score)) if rows[n] else 0.0


def best_fit_score_np(
    rows: npt.NDArray[np.bool_],
    usable: npt.NDArray[np.int16],
    best_leftover: npt.NDArray[np.int32],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`best_fit_score_nb`."""
    left = best_leftover.astype(np.float64)
    if req_cards == 0:
        score = 100.0 - 0.1 * left
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(usable > 0, 100.0 - 100.0 * left / usable.astype(np.float64), 0.0)
    out[:] = np.where(rows, np.clip(score, 0.0, 100.0), 0.0)
