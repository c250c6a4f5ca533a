"""``balanced_score``: kube-scheduler's NodeResourcesBalancedAllocation score per row.

``alloc`` and ``requested`` are ``(k, m)``: for each of k resources (in the configured
order) and each of m rows, the allocatable amount and the amount requested once the pod is
placed. Per row, exactly upstream's ``balancedResourceScorer``: a resource with allocatable
0 is left out; each fraction ``float64(requested) / float64(allocatable)`` is capped at 1;
with two fractions ``std = |f1 - f2| / 2``, with more the population std (the mean from the
fractions summed in order, then the squared deviations summed in order), with fewer 0; the
score is ``int64((1 - std) * 100)``. The float operations and their order are upstream's,
so scores match kube-scheduler's bit for bit, truncation edges included.

``balanced_cpu_mem`` is the same computation specialised to kube-scheduler's default
resources (cpu and memory), reading the snapshot's columns at a ``rows`` index array
instead of amounts gathered beforehand: the plugin's usual case, a third of the time.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel

MAX_NODE_SCORE = 100.0


@njit_kernel
def balanced_score_nb(
    alloc: npt.NDArray[np.int64],
    requested: npt.NDArray[np.int64],
    out: npt.NDArray[np.float64],
) -> None:
    """Write each row's balanced-allocation score into ``out`` (length m)."""
    k = alloc.shape[0]
    for j in range(alloc.shape[1]):
        count = 0
        total = 0.0
        first = 0.0
        second = 0.0
        for i in range(k):
            a = alloc[i, j]
            if a == 0:
                continue
            f = float(requested[i, j]) / float(a)
            f = min(f, 1.0)
            total += f
            if count == 0:
                first = f
            elif count == 1:
                second = f
            count += 1
        std = 0.0
        if count == 2:
            std = abs((first - second) / 2)
        elif count > 2:
            mean = total / count
            acc = 0.0
            for i in range(k):
                a = alloc[i, j]
                if a == 0:
                    continue
                f = float(requested[i, j]) / float(a)
                f = min(f, 1.0)
                acc = acc + (f - mean) * (f - mean)
            std = math.sqrt(acc / count)
        out[j] = math.trunc((1.0 - std) * MAX_NODE_SCORE)


def balanced_score_np(
    alloc: npt.NDArray[np.int64],
    requested: npt.NDArray[np.int64],
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`balanced_score_nb`."""
    k, n = alloc.shape
    valid = alloc > 0
    # The 1 only avoids dividing by 0 where the resource is left out anyway.
    frac = np.minimum(requested / np.where(valid, alloc, 1), 1.0)
    std = np.zeros(n, np.float64)
    if k == 2:
        both = valid[0] & valid[1]
        std[both] = np.abs((frac[0, both] - frac[1, both]) / 2)
    elif k > 2:
        count = np.count_nonzero(valid, axis=0)
        seen = np.zeros(n, np.int64)
        first = np.zeros(n, np.float64)
        second = np.zeros(n, np.float64)
        total = np.zeros(n, np.float64)
        for i in range(k):
            v = valid[i]
            first = np.where(v & (seen == 0), frac[i], first)
            second = np.where(v & (seen == 1), frac[i], second)
            seen += v
            # Adding 0.0 for a left-out resource keeps the running sum bit for bit.
            total = total + np.where(v, frac[i], 0.0)
        two = count == 2
        std[two] = np.abs((first[two] - second[two]) / 2)
        many = count > 2
        if many.any():
            mean = total[many] / count[many]
            acc = np.zeros(int(np.count_nonzero(many)), np.float64)
            for i in range(k):
                d = frac[i, many] - mean
                acc = acc + np.where(valid[i, many], d * d, 0.0)
            std[many] = np.sqrt(acc / count[many])
    out[:] = np.trunc((1.0 - std) * MAX_NODE_SCORE)


@njit_kernel
def balanced_cpu_mem_nb(
    rows: npt.NDArray[np.intp],
    node_cpu_alloc: npt.NDArray[np.int64],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_alloc: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    req_cpu: int,
    req_mem: int,
    out: npt.NDArray[np.float64],
) -> None:
    """``balanced_score_nb`` for the default resources (cpu and memory, either order: the
    two-fraction std is symmetric) read straight from the snapshot's columns at ``rows``,
    requested = alloc - free + the pod's request; ``out[j]`` is the score of ``rows[j]``.
    Saves gathering four columns per pod."""
    for j in range(rows.shape[0]):
        r = rows[j]
        ca = node_cpu_alloc[r]
        ma = node_mem_alloc[r]
        std = 0.0
        if ca != 0 and ma != 0:
            fc = float(ca - node_cpu_free[r] + req_cpu) / float(ca)
            fc = min(fc, 1.0)
            fm = float(ma - node_mem_free[r] + req_mem) / float(ma)
            fm = min(fm, 1.0)
            std = abs((fc - fm) / 2)
        out[j] = math.trunc((1.0 - std) * MAX_NODE_SCORE)


def balanced_cpu_mem_np(
    rows: npt.NDArray[np.intp],
    node_cpu_alloc: npt.NDArray[np.int64],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_alloc: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    req_cpu: int,
    req_mem: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`balanced_cpu_mem_nb`."""
    ca = node_cpu_alloc[rows]
    ma = node_mem_alloc[rows]
    both = (ca != 0) & (ma != 0)
    fc = np.minimum((ca - node_cpu_free[rows] + req_cpu) / np.where(both, ca, 1), 1.0)
    fm = np.minimum((ma - node_mem_free[rows] + req_mem) / np.where(both, ma, 1), 1.0)
    std = np.where(both, np.abs((fc - fm) / 2), 0.0)
    out[:] = np.trunc((1.0 - std) * MAX_NODE_SCORE)
