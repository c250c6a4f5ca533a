"""``spread_score``: PodTopologySpread's soft constraints, kube-scheduler's raw score.

Over the feasible ``rows``: a row is ignored (score 0, ``out_ignored``) when
``require_all`` and it lacks some constraint's topology key (``dom[k, row] < 0``). Per
constraint ``k`` the domains that count are those of the rows not ignored; each gets the
matching pods of every eligible node in it (``eligible[k, n]``, over all nodes, not only
the feasible ones), and the constraint weighs ``log(size + 2)`` where size is the number of
such domains (plus one when rows not ignored lack the key: without ``require_all``
kube-scheduler files them under the empty value, a domain of their own that no row scores
from), or the number of rows not ignored when ``hostname[k]`` (the key is
kubernetes.io/hostname: each node its own domain, counted from its own pods,
``counts[k, row]``, whatever its eligibility). A row's score sums, over the constraints
whose key it has, ``count * weight + (max_skew - 1)``, rounded half away from zero as Go's
math.Round (the float sum is kept in constraint order so the twin matches bit for bit).

``totals`` (int64[K, D]) and ``seen`` (bool[K, D]) are scratch, D at least every
constraint's domain count.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel


@njit_kernel
def spread_score_nb(
    rows: npt.NDArray[np.intp],
    dom: npt.NDArray[np.int32],
    eligible: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
    max_skew: npt.NDArray[np.int64],
    hostname: npt.NDArray[np.bool_],
    require_all: bool,
    totals: npt.NDArray[np.int64],
    seen: npt.NDArray[np.bool_],
    out_ignored: npt.NDArray[np.bool_],
    out_score: npt.NDArray[np.int64],
) -> None:
    n_constraints, n_nodes = dom.shape
    n_rows = rows.shape[0]
    kept: Int = 0
    for r in range(n_rows):
        row = rows[r]
        ignored = False
        if require_all:
            for k in range(n_constraints):
                if dom[k, row] < 0:
                    ignored = True
                    break
        out_ignored[r] = ignored
        kept += not ignored
    weight = np.empty(n_constraints, np.float64)
    for k in range(n_constraints):
        totals[k, :] = 0
        seen[k, :] = False
        size: Int = 0
        unlabelled = False
        for r in range(n_rows):
            d = dom[k, rows[r]]
            if out_ignored[r]:
                continue
            if d < 0:
                unlabelled = True
            elif not seen[k, d]:
                seen[k, d] = True
                size += 1
        size += unlabelled
        if hostname[k]:
            size = kept
        weight[k] = math.log(float(size + 2))
        for n in range(n_nodes):
            d = dom[k, n]
            if eligible[k, n] and d >= 0 and seen[k, d]:
                totals[k, d] += counts[k, n]
    for r in range(n_rows):
        if out_ignored[r]:
            out_score[r] = 0
            continue
        row = rows[r]
        s = 0.0
        for k in range(n_constraints):
            d = dom[k, row]
            if d < 0:
                continue
            cnt = counts[k, row] if hostname[k] else totals[k, d]
            s += float(cnt) * weight[k] + float(max_skew[k] - 1)
        f = math.floor(s)
        out_score[r] = np.int64(f) + (1 if s - f >= 0.5 else 0)


def spread_score_np(
    rows: npt.NDArray[np.intp],
    dom: npt.NDArray[np.int32],
    eligible: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
    max_skew: npt.NDArray[np.int64],
    hostname: npt.NDArray[np.bool_],
    require_all: bool,
    totals: npt.NDArray[np.int64],
    seen: npt.NDArray[np.bool_],
    out_ignored: npt.NDArray[np.bool_],
    out_score: npt.NDArray[np.int64],
) -> None:
    """NumPy twin of :func:`spread_score_nb`."""
    n_constraints = dom.shape[0]
    n_rows = len(rows)
    width = totals.shape[1]
    at = dom[:, rows]  # [K, R]
    ignored = (at < 0).any(axis=0) if require_all else np.zeros(n_rows, np.bool_)
    out_ignored[:n_rows] = ignored
    kept = int((~ignored).sum())
    s = np.zeros(n_rows, np.float64)
    for k in range(n_constraints):
        used = at[k][~ignored & (at[k] >= 0)]
        seen[k] = np.bincount(used, minlength=width)[:width] > 0
        unlabelled = bool((~ignored & (at[k] < 0)).any())
        size = kept if hostname[k] else int(seen[k].sum()) + unlabelled
        weight = math.log(float(size + 2))
        safe = np.where(dom[k] >= 0, dom[k], 0)
        counted = eligible[k] & (dom[k] >= 0) & seen[k][safe]
        totals[k] = 0
        np.add.at(totals[k], dom[k][counted], counts[k][counted])
        has = at[k] >= 0
        cnt = counts[k][rows] if hostname[k] else totals[k][np.where(has, at[k], 0)]
        s += np.where(has, cnt.astype(np.float64) * weight + float(max_skew[k] - 1), 0.0)
    f = np.floor(s)
    score = f.astype(np.int64) + (s - f >= 0.5)
    out_score[:n_rows] = np.where(ignored, 0, score)
