"""``spread_filter``: PodTopologySpread's hard constraints over every candidate row.

For each constraint ``k`` (rows of the 2-D inputs), the matching pods of the eligible rows
are summed per topology domain (``dom[k, n]``: a dense domain id, -1 when the node lacks the
topology key; ``eligible[k, n]``: the node is counted, i.e. it carries every constraint's
key and passes the constraint's node inclusion policies). The global minimum is the least
total over the domains that have an eligible node, or 0 when fewer domains than
``min_domains[k]`` have one (kube-scheduler's minMatchNum). A candidate row then fails at
the first constraint, in order, whose key it lacks (``SPREAD_MISSING_LABEL``) or whose skew
``total[domain] + self_match - global minimum`` exceeds ``max_skew[k]`` (``SPREAD_SKEW``);
a domain without eligible nodes has a total of 0. Rows outside ``candidates`` get
``SPREAD_NOT_EVALUATED``.

``totals`` (int64[K, D]) and ``present`` (bool[K, D]) are scratch with D at least every
constraint's domain count; the per-domain totals are left in ``totals`` for the caller.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel

SPREAD_OK = 0
SPREAD_MISSING_LABEL = 1
SPREAD_SKEW = 2
SPREAD_NOT_EVALUATED = -1
# kube-scheduler's criticalPaths start at MaxInt32: the minimum when no domain is eligible
# (only reachable with minDomains 0, which validation refuses).
NO_DOMAIN_MIN = 2**31 - 1


@njit_kernel
def spread_filter_nb(
    candidates: npt.NDArray[np.bool_],
    dom: npt.NDArray[np.int32],
    eligible: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
    self_match: npt.NDArray[np.int64],
    max_skew: npt.NDArray[np.int64],
    min_domains: npt.NDArray[np.int64],
    totals: npt.NDArray[np.int64],
    present: npt.NDArray[np.bool_],
    out_code: npt.NDArray[np.int8],
) -> int:
    """Write each row's code into ``out_code``; return the number of passing rows."""
    n_constraints = dom.shape[0]
    n_rows = candidates.shape[0]
    gmin = np.empty(n_constraints, np.int64)
    for k in range(n_constraints):
        totals[k, :] = 0
        present[k, :] = False
        for n in range(n_rows):
            d = dom[k, n]
            if eligible[k, n] and d >= 0:
                totals[k, d] += counts[k, n]
                present[k, d] = True
        n_present: Int = 0
        least = np.int64(NO_DOMAIN_MIN)
        for d in range(totals.shape[1]):
            if present[k, d]:
                n_present += 1
                least = min(least, totals[k, d])
        gmin[k] = 0 if n_present < min_domains[k] else least
    passed: Int = 0
    for n in range(n_rows):
        if not candidates[n]:
            out_code[n] = SPREAD_NOT_EVALUATED
            continue
        code = SPREAD_OK
        for k in range(n_constraints):
            d = dom[k, n]
            if d < 0:
                code = SPREAD_MISSING_LABEL
                break
            if totals[k, d] + self_match[k] - gmin[k] > max_skew[k]:
                code = SPREAD_SKEW
                break
        out_code[n] = code
        passed += code == SPREAD_OK
    return int(passed)


def spread_filter_np(
    candidates: npt.NDArray[np.bool_],
    dom: npt.NDArray[np.int32],
    eligible: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
    self_match: npt.NDArray[np.int64],
    max_skew: npt.NDArray[np.int64],
    min_domains: npt.NDArray[np.int64],
    totals: npt.NDArray[np.int64],
    present: npt.NDArray[np.bool_],
    out_code: npt.NDArray[np.int8],
) -> int:
    """NumPy twin of :func:`spread_filter_nb`."""
    n_constraints, n_rows = dom.shape
    width = totals.shape[1]
    code = np.where(candidates, SPREAD_OK, SPREAD_NOT_EVALUATED).astype(np.int8)
    undecided = candidates.copy()
    for k in range(n_constraints):
        counted = eligible[k] & (dom[k] >= 0)
        ids = dom[k][counted]
        totals[k] = 0
        np.add.at(totals[k], ids, counts[k][counted])
        present[k] = np.bincount(ids, minlength=width)[:width] > 0
        n_present = int(present[k].sum())
        least = int(totals[k][present[k]].min()) if n_present else NO_DOMAIN_MIN
        gmin = 0 if n_present < min_domains[k] else least
        missing = undecided & (dom[k] < 0)
        code[missing] = SPREAD_MISSING_LABEL
        undecided &= ~missing
        domain = np.where(dom[k] >= 0, dom[k], 0)
        skew = totals[k][domain] + self_match[k] - gmin
        over = undecided & (skew > max_skew[k])
        code[over] = SPREAD_SKEW
        undecided &= ~over
    out_code[:n_rows] = code
    return int((code == SPREAD_OK).sum())
