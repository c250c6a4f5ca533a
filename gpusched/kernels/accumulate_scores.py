"""``accumulate_scores``: the runtime's weighted sum of one Score plugin's scores, checked.

``total[i] += weight * scores[i]`` for every row, and whether every score lies in
``[lo, hi]`` (a NaN does not). One pass instead of NumPy's four (``min``, ``max``, the
product, the sum), each of which costs more in call overhead than in work for the few
thousand feasible rows of a cycle. The product and the sum are the same two float64
operations in the same order as ``total += weight * scores``, so totals are bit-identical.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel


@njit_kernel
def accumulate_scores_nb(
    total: npt.NDArray[np.float64],
    scores: npt.NDArray[np.float64],
    weight: float,
    lo: float,
    hi: float,
) -> bool:
    """Add ``weight * scores`` into ``total``; True iff every score is in [lo, hi]."""
    ok = True
    for i in range(total.shape[0]):
        s = scores[i]
        if not (s >= lo and s <= hi):
            ok = False
        total[i] += weight * s
    return ok


def accumulate_scores_np(
    total: npt.NDArray[np.float64],
    scores: npt.NDArray[np.float64],
    weight: float,
    lo: float,
    hi: float,
) -> bool:
    """NumPy twin of :func:`accumulate_scores_nb`."""
    ok = bool(np.all((scores >= lo) & (scores <= hi)))
    total += weight * scores
    return ok
