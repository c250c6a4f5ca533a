"""``frag_score``: the seed's fragmentation score, from the ``gpu_summary`` columns (O(N)).

* whole-card pod (k cards): ``100 * k / intact``. Exactly filling a node's intact cards
  scores 100; taking 1 of 8 intact cards scores 12.5, so whole cards stay together for
  the jobs that need many.
* shared pod: filling an already partial card scores in [50, 100],
  ``100 - 50 * leftover / 1000`` (the tighter the fit the better); tearing an intact card
  scores in [0, 40], ``40 * (1 - intact / usable)``, so when a card must be torn it is torn
  on the node with the fewest intact cards left.

Rows outside ``rows`` (normally the summary's ``fit``) score 0. Both twins compute the
partial-card score as ``100 - 0.05 * leftover``: one division per row fewer.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def frag_score_nb(
    rows: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    usable: npt.NDArray[np.int16],
    best_leftover: npt.NDArray[np.int32],
    best_is_partial: npt.NDArray[np.bool_],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the fragmentation score of every row into ``out``."""
    # Branch-free selects in two loops (one per request kind): ``rows`` is a random mask,
    # branching on it mispredicts about every other row; the loops vectorise.
    k100 = 100.0 * np.float64(req_cards)
    if req_cards > 0:
        for n in range(rows.shape[0]):
            it = np.float64(intact[n])
            score = min(100.0, k100 / max(it, 1.0)) if it > 0.0 else 0.0
            out[n] = score if rows[n] else 0.0
    else:
        for n in range(rows.shape[0]):
            it = np.float64(intact[n])
            us = np.float64(usable[n])
            fill = 100.0 - 0.05 * np.float64(best_leftover[n])
            tear = 40.0 * (1.0 - it / max(us, 1.0)) if us > 0.0 else 0.0
            score = min(100.0, max(0.0, fill if best_is_partial[n] else tear))
            out[n] = score if rows[n] else 0.0


def frag_score_np(
    rows: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    usable: npt.NDArray[np.int16],
    best_leftover: npt.NDArray[np.int32],
    best_is_partial: npt.NDArray[np.bool_],
    req_cards: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`frag_score_nb`."""
    fi = intact.astype(np.float64)
    fu = usable.astype(np.float64)
    if req_cards > 0:
        score = np.where(
            intact > 0, np.minimum(100.0, 100.0 * req_cards / np.maximum(fi, 1.0)), 0.0
        )
    else:
        fill = 100.0 - 0.05 * best_leftover.astype(np.float64)
        tear = np.where(usable > 0, 40.0 * (1.0 - fi / np.maximum(fu, 1.0)), 0.0)
        score = np.clip(np.where(best_is_partial, fill, tear), 0.0, 100.0)
    out[:] = np.where(rows, score, 0.0)
