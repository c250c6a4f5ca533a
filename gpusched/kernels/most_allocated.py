"""``most_allocated``: kube-scheduler's NodeResourcesFit MostAllocated score,
prefer the fullest node (bin packing).

Integer arithmetic exactly as kube-scheduler's ``mostRequestedScore`` and
``mostResourceScorer``, so a profile ported from kube-scheduler ranks nodes the same way:
per resource, with ``requested = used + pod request`` (used = alloc - free, at least 0),
the score is ``min(requested, alloc) * 100 // alloc``;
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
def most_allocated_nb(
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
    out: npt.NDArray[np.float64],
) -> None:
    """Write the MostAllocated score of every row into ``out``."""
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
                total += _resource_score(alloc, max(np.int64(0), alloc - free) + req) * w
                weights += w
            if weights > 0:
                score = total // weights
        out[n] = np.float64(score)


@njit_kernel
def _resource_score(alloc: Int, requested: Int) -> Int:
    return min(requested, alloc) * 100 // alloc


def most_allocated_np(
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
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`most_allocated_nb`."""
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
        total += np.where(has, _resource_score_np(alloc, requested) * w, 0)
        weights += np.where(has, w, 0)
    score = total // np.where(weights > 0, weights, 1)
    out[:] = np.where(rows & (weights > 0), score, 0).astype(np.float64)


def _resource_score_np(
    alloc: npt.NDArray[np.int64], requested: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    safe = np.where(alloc > 0, alloc, 1)
    return np.minimum(requested, alloc) * 100 // safe
