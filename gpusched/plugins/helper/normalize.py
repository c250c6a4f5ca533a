"""kube-scheduler's helper.DefaultNormalizeScore, on a whole score vector at once.

Kept in integers, as kube-scheduler does (`maxPriority * score / maxCount` in int64), so a
node that kube-scheduler scores 33 scores 33 here too, not 33.33: equal totals then tie the
same way and the decision record reads the same numbers.
"""

from __future__ import annotations

import numpy as np

from gpusched.framework.interfaces import MAX_NODE_SCORE, Scores


def default_normalize_score(
    scores: Scores, *, reverse: bool, max_priority: float = MAX_NODE_SCORE
) -> None:
    """Map raw non-negative counts to [0, max_priority] in place.

    reverse=False: the highest raw score gets max_priority, others proportionally (floored).
    reverse=True: the same, then flipped (max_priority - score), so fewer is better.
    All zeros stay 0 (reverse=False) or all become max_priority (reverse=True).
    """
    if len(scores) == 0:
        return
    top = int(scores.max())
    if top <= 0:
        scores[:] = max_priority if reverse else 0.0
        return
    raw = scores.astype(np.int64)
    out = (int(max_priority) * raw) // top
    if reverse:
        out = int(max_priority) - out
    scores[:] = out
