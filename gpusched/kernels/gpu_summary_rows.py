"""``gpu_summary_rows``: ``gpu_summary`` recomputed on a few rows, written in place.

A cached summary (plugins/helper/gpu_state.py SummaryCache) is brought up to date on the rows
that changed since it was computed: gather those rows' card columns, run ``gpu_summary``
over them, scatter the outputs back. In NumPy that is six gathers, six small output arrays
and six scatters, each call costing more than its work for the handful of rows a pod
changes; here it is one call. The per-row results are ``gpu_summary``'s own (the kernel
runs on the gathered rows), so the cache holds exactly what a full pass would give.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel
from gpusched.kernels.gpu_summary import gpu_summary_nb, gpu_summary_np


@njit_kernel
def gpu_summary_rows_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    rows: npt.NDArray[np.intp],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out_fit: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_best_leftover: npt.NDArray[np.int32],
    out_best_is_partial: npt.NDArray[np.bool_],
    out_free_milli_total: npt.NDArray[np.int32],
) -> None:
    """Recompute the summary outputs of `rows` (full-length outputs, updated in place)."""
    k = rows.shape[0]
    c = card_free_milli.shape[1]
    free_milli = np.empty((k, c), np.int32)
    free_mem = np.empty((k, c), np.int32)
    total_mem = np.empty((k, c), np.int32)
    model = np.empty((k, c), np.int16)
    healthy = np.empty((k, c), np.bool_)
    island = np.empty((k, c), np.int8)
    valid = np.empty(k, np.bool_)
    for i in range(k):
        r = rows[i]
        valid[i] = node_valid[r]
        for j in range(c):
            free_milli[i, j] = card_free_milli[r, j]
            free_mem[i, j] = card_free_mem[r, j]
            total_mem[i, j] = card_total_mem[r, j]
            model[i, j] = card_model[r, j]
            healthy[i, j] = card_healthy[r, j]
            island[i, j] = card_island[r, j]
    fit = np.zeros(k, np.bool_)
    intact = np.zeros(k, np.int16)
    usable = np.zeros(k, np.int16)
    leftover = np.zeros(k, np.int32)
    partial = np.zeros(k, np.bool_)
    free_total = np.zeros(k, np.int32)
    gpu_summary_nb(
        free_milli,
        free_mem,
        total_mem,
        model,
        healthy,
        island,
        valid,
        np.ones(k, np.bool_),
        req_cards,
        req_milli,
        req_mem,
        allowed_models,
        nvlink,
        fit,
        intact,
        usable,
        leftover,
        partial,
        free_total,
    )
    for i in range(k):
        r = rows[i]
        out_fit[r] = fit[i]
        out_intact[r] = intact[i]
        out_usable[r] = usable[i]
        out_best_leftover[r] = leftover[i]
        out_best_is_partial[r] = partial[i]
        out_free_milli_total[r] = free_total[i]


def gpu_summary_rows_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    rows: npt.NDArray[np.intp],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out_fit: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_best_leftover: npt.NDArray[np.int32],
    out_best_is_partial: npt.NDArray[np.bool_],
    out_free_milli_total: npt.NDArray[np.int32],
) -> None:
    """NumPy twin of :func:`gpu_summary_rows_nb`."""
    k = len(rows)
    fit = np.zeros(k, np.bool_)
    intact = np.zeros(k, np.int16)
    usable = np.zeros(k, np.int16)
    leftover = np.zeros(k, np.int32)
    partial = np.zeros(k, np.bool_)
    free_total = np.zeros(k, np.int32)
    gpu_summary_np(
        card_free_milli[rows],
        card_free_mem[rows],
        card_total_mem[rows],
        card_model[rows],
        card_healthy[rows],
        card_island[rows],
        node_valid[rows],
        np.ones(k, np.bool_),
        req_cards,
        req_milli,
        req_mem,
        allowed_models,
        nvlink,
        fit,
        intact,
        usable,
        leftover,
        partial,
        free_total,
    )
    out_fit[rows] = fit
    out_intact[rows] = intact
    out_usable[rows] = usable
    out_best_leftover[rows] = leftover
    out_best_is_partial[rows] = partial
    out_free_milli_total[rows] = free_total
