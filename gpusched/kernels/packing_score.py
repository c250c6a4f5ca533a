"""``packing_score``: the seed's GPU-count packing score, from the ``gpu_summary`` columns.

``100 - 10 * (intact cards left after placement)``, clipped to [0, 100]: nodes the pod
leaves with no intact card score highest. A whole-card pod takes k intact cards; a shared
pod takes one only when its best-fit card is intact (not ``best_is_partial``).

Rows outside ``rows`` score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def packing_score_nb(
    rows: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    best_is_partial: npt.NDArray[np.bool_],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the packing score of every row into ``out``."""
    # Branch-free: ``rows`` is a random mask, a branch on it mispredicts.
    k = np.int64(req_cards)
    for n in range(rows.shape[0]):
        taken = k if k > 0 else np.int64(not best_is_partial[n])
        remaining = np.float64(np.int64(intact[n]) - taken)
        score = min(100.0, max(0.0, 100.0 - 10.0 * remaining))
        out[n] = score if rows[n] else 0.0


def packing_score_np(
    rows: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    best_is_partial: npt.NDArray[np.bool_],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`packing_score_nb`."""
    taken = req_cards if req_cards > 0 else (~best_is_partial).astype(np.int64)
    remaining = intact.astype(np.int64) - taken
    score = np.clip(100.0 - 10.0 * remaining.astype(np.float64), 0.0, 100.0)
    out[:] = np.where(rows, score, 0.0)
