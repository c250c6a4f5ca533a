"""``resource_fit``: NodeResourcesFit's Filter over pod slots, cpu and memory, in one pass.

Per row: ``hits`` says which checks fail whatever the candidates (row 0: no pod slot left;
then, when the pod asks for it, cpu short of ``req_cpu``; then memory short of ``req_mem``:
kube-scheduler skips a resource the pod does not request); ``feasible`` is a candidate with
no failing check; ``unresolvable`` a rejected candidate whose allocatable is below a
request (no preemption frees what the node never had). Returns the number of rejected
candidates. NumPy evaluates this as a dozen passes over 10,000-row columns, each from
cold memory inside a scheduling cycle; here it is one.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel


@njit_kernel
def resource_fit_nb(
    candidates: npt.NDArray[np.bool_],
    pods_free: npt.NDArray[np.int32],
    cpu_free: npt.NDArray[np.int64],
    mem_free: npt.NDArray[np.int64],
    cpu_alloc: npt.NDArray[np.int64],
    mem_alloc: npt.NDArray[np.int64],
    req_cpu: int,
    req_mem: int,
    out_hits: npt.NDArray[np.bool_],
    out_feasible: npt.NDArray[np.bool_],
    out_unresolvable: npt.NDArray[np.bool_],
) -> int:
    """Write the three outputs over ``len(candidates)`` rows; ``out_hits`` has one row per
    check made (pod slots, then cpu if ``req_cpu > 0``, then memory if ``req_mem > 0``)."""
    cpu = np.int64(req_cpu)
    mem = np.int64(req_mem)
    use_cpu = cpu > 0
    use_mem = mem > 0
    mem_row = 2 if use_cpu else 1
    rejected: Int = 0
    for n in range(candidates.shape[0]):
        bad = pods_free[n] < 1
        out_hits[0, n] = bad
        never = False
        if use_cpu:
            short = cpu_free[n] < cpu
            out_hits[1, n] = short
            bad = bad or short
            never = cpu_alloc[n] < cpu
        if use_mem:
            short = mem_free[n] < mem
            out_hits[mem_row, n] = short
            bad = bad or short
            never = never or mem_alloc[n] < mem
        rejected_here = bad and candidates[n]
        out_feasible[n] = candidates[n] and not bad
        out_unresolvable[n] = rejected_here and never
        if rejected_here:
            rejected += 1
    return int(rejected)


def resource_fit_np(
    candidates: npt.NDArray[np.bool_],
    pods_free: npt.NDArray[np.int32],
    cpu_free: npt.NDArray[np.int64],
    mem_free: npt.NDArray[np.int64],
    cpu_alloc: npt.NDArray[np.int64],
    mem_alloc: npt.NDArray[np.int64],
    req_cpu: int,
    req_mem: int,
    out_hits: npt.NDArray[np.bool_],
    out_feasible: npt.NDArray[np.bool_],
    out_unresolvable: npt.NDArray[np.bool_],
) -> int:
    """NumPy twin of :func:`resource_fit_nb`."""
    n = len(candidates)
    out_hits[0] = pods_free[:n] < 1
    never = np.zeros(n, np.bool_)
    i = 1
    if req_cpu > 0:
        out_hits[i] = cpu_free[:n] < req_cpu
        never |= cpu_alloc[:n] < req_cpu
        i += 1
    if req_mem > 0:
        out_hits[i] = mem_free[:n] < req_mem
        never |= mem_alloc[:n] < req_mem
        i += 1
    bad = np.logical_or.reduce(out_hits[:i], axis=0) & candidates
    out_feasible[:] = candidates & ~bad
    out_unresolvable[:] = bad & never
    return int(np.count_nonzero(bad))
