"""``allocated_score``: kube-scheduler's NodeResourcesFit LeastAllocated (``most=False``,
prefer the emptiest node: spreading) and MostAllocated (``most=True``, prefer the fullest:
bin packing) scores; one kernel, as the two differ only in the per-resource formula.

Integer arithmetic exactly as kube-scheduler's ``leastRequestedScore``/``mostRequestedScore``
and their resource scorers, so a profile ported from kube-scheduler ranks nodes the same
way: per resource, with ``requested = used + pod request`` (used = alloc - free, at least 0),
the score is ``(alloc - requested) * 100 // alloc`` (0 when ``requested > alloc``) for
LeastAllocated and ``min(requested, alloc) * 100 // alloc`` for MostAllocated;
the node score is the integer weighted mean
``sum(score * weight) // sum(weight)`` over the resources the node has (``alloc > 0``).
As in kube-scheduler, an extended resource (the GPU) counts only when the pod requests it.

GPU as milli over the node's usable cards: ``alloc = 1000 * usable``,
``free = free_milli_total`` (both from ``gpu_summary``); ``req_gpu_milli`` is
``1000 * k`` for whole-card pods and the pod's milli for shared ones.

Rows outside ``rows`` score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel


@njit_kernel
def allocated_score_nb(
    rows: npt.NDArray[np.bool_],
    node_cpu_alloc: npt.NDArray[np.int64],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_alloc: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    usable: npt.NDArray[np.int16],
    free_milli_total: npt.NDArray[np.int32],
    req_cpu: int,
    req_mem_bytes: int,
    req_gpu_milli: int,
    weight_cpu: int,
    weight_mem: int,
    weight_gpu: int,
    most: bool,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the LeastAllocated (or, with ``most``, MostAllocated) score of every row."""
    for n in range(rows.shape[0]):
        score: Int = 0
        if rows[n]:
            total: Int = 0
            weights: Int = 0
            for res in range(3):
                if res == 0:
                    alloc = np.int64(node_cpu_alloc[n])
                    free = np.int64(node_cpu_free[n])
                    req = np.int64(req_cpu)
                    w = np.int64(weight_cpu)
                elif res == 1:
                    alloc = np.int64(node_mem_alloc[n])
                    free = np.int64(node_mem_free[n])
                    req = np.int64(req_mem_bytes)
                    w = np.int64(weight_mem)
                else:
                    alloc = np.int64(usable[n]) * 1000
                    free = np.int64(free_milli_total[n])
                    req = np.int64(req_gpu_milli)
                    w = np.int64(weight_gpu)
                    if req == 0:
                        continue
                if alloc <= 0:
                    continue
                total += _resource_score(alloc, max(np.int64(0), alloc - free) + req, most) * w
                weights += w
            if weights > 0:
                score = total // weights
        out[n] = np.float64(score)


@njit_kernel
def _resource_score(alloc: Int, requested: Int, most: bool) -> Int:
    if most:
        return min(requested, alloc) * 100 // alloc
    if requested > alloc:
        return 0
    return (alloc - requested) * 100 // alloc


def allocated_score_np(
    rows: npt.NDArray[np.bool_],
    node_cpu_alloc: npt.NDArray[np.int64],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_alloc: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    usable: npt.NDArray[np.int16],
    free_milli_total: npt.NDArray[np.int32],
    req_cpu: int,
    req_mem_bytes: int,
    req_gpu_milli: int,
    weight_cpu: int,
    weight_mem: int,
    weight_gpu: int,
    most: bool,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`allocated_score_nb`."""
    gpu_alloc = usable.astype(np.int64) * 1000
    resources = [
        (node_cpu_alloc.astype(np.int64), node_cpu_free.astype(np.int64), req_cpu, weight_cpu),
        (
            node_mem_alloc.astype(np.int64),
            node_mem_free.astype(np.int64),
            req_mem_bytes,
            weight_mem,
        ),
    ]
    if req_gpu_milli != 0:
        resources.append((gpu_alloc, free_milli_total.astype(np.int64), req_gpu_milli, weight_gpu))
    total = np.zeros(rows.shape[0], dtype=np.int64)
    weights = np.zeros(rows.shape[0], dtype=np.int64)
    for alloc, free, req, w in resources:
        has = alloc > 0
        requested = np.maximum(0, alloc - free) + req
        total += np.where(has, _resource_score_np(alloc, requested, most) * w, 0)
        weights += np.where(has, w, 0)
    score = total // np.where(weights > 0, weights, 1)
    out[:] = np.where(rows & (weights > 0), score, 0).astype(np.float64)


def _resource_score_np(
    alloc: npt.NDArray[np.int64], requested: npt.NDArray[np.int64], most: bool
) -> npt.NDArray[np.int64]:
    safe = np.where(alloc > 0, alloc, 1)
    if most:
        return np.minimum(requested, alloc) * 100 // safe
    return np.where(requested > alloc, 0, (alloc - requested) * 100 // safe)
