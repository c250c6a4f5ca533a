"""The FGD paper's baseline policies as kernels (docs/fgd-protocol.md section 8).

Each writes one score per row of ``rows`` into ``out`` with the published plugin's integer
arithmetic (Go ``int64()`` truncation and int division), so the scores tie exactly where
the published ones do: ties decide the random tie-break, hence the measured numbers.

* ``bestfit_raw``: ``int64((1 - s) * 100)``, ``s = 0.5 (cpu_left - cpu) / 128000 +
  0.5 (G_idle - gpu) / 8000``; the plugin then min-max normalises with ``go_normalize``.
* ``dotprod_score``: 0 if the CPU does not fit, else ``int64(100 (1 - d / 2))`` with
  ``d = cpu_left/128000 * cpu/128000 + G_idle/8000 * gpu/8000``.
* ``packing_score``: GpuPacking's tiers (untouched node 17..33, a fresh card 33..49, only
  used cards 50..100); CPU-only pods score 0.
* ``clustering_score``: ``25 (8000 - G_idle) / 8000`` plus 75/50/25/0 by whether the node
  already holds pods of the pod's GPU shape tag (only them / also others / no GPU pods /
  only others); CPU-only pods score 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_kernel

CPU_NORM = 128000.0
GPU_NORM = 8000.0


@njit_kernel
def _idle(card_free_milli: npt.NDArray[np.int32], k: Int, r: Int) -> Int:
    g = np.int64(0)
    for c in range(k):
        g += np.int64(card_free_milli[r, c])
    return g


@njit_kernel
def bestfit_raw_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    pod_cpu: int,
    pod_gpu_total: int,
    out: npt.NDArray[np.float64],
) -> None:
    for i in range(rows.shape[0]):
        r = rows[i]
        g = _idle(card_free_milli, np.int64(node_card_count[r]), r)
        s = (
            0.5 * np.float64(node_cpu_free[r] - pod_cpu) / CPU_NORM
            + 0.5 * np.float64(g - pod_gpu_total) / GPU_NORM
        )
        out[i] = np.float64(np.int64((1.0 - s) * 100.0))


def bestfit_raw_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    pod_cpu: int,
    pod_gpu_total: int,
    out: npt.NDArray[np.float64],
) -> None:
    g = _idle_np(card_free_milli, node_card_count, rows)
    s = (
        0.5 * (node_cpu_free[rows] - pod_cpu).astype(np.float64) / CPU_NORM
        + 0.5 * (g - pod_gpu_total).astype(np.float64) / GPU_NORM
    )
    out[:] = np.trunc((1.0 - s) * 100.0)


def _idle_np(
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    rows: npt.NDArray[np.intp],
) -> npt.NDArray[np.int64]:
    present = np.arange(card_free_milli.shape[1])[None, :] < node_card_count[rows, None]
    out: npt.NDArray[np.int64] = np.where(present, card_free_milli[rows], 0).sum(axis=1)
    return out.astype(np.int64)


def go_normalize(scores: npt.NDArray[np.float64]) -> None:
    """``NormalizeScore`` of plugin_utils.go in place: ``(s - low) * 100 / (high - low)``
    with Go int64 division (all 0 when every score is equal). Tiny, so no kernel."""
    if len(scores) == 0:
        return
    low = int(scores.min())
    high = int(scores.max())
    if high == low:
        scores[:] = 0.0
        return
    num = (scores.astype(np.int64) - low) * 100
    scores[:] = (num // (high - low)).astype(np.float64)  # num >= 0: floor == trunc


@njit_kernel
def dotprod_score_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    pod_cpu: int,
    pod_gpu_total: int,
    out: npt.NDArray[np.float64],
) -> None:
    for i in range(rows.shape[0]):
        r = rows[i]
        if node_cpu_free[r] < pod_cpu:
            out[i] = 0.0
            continue
        g = _idle(card_free_milli, np.int64(node_card_count[r]), r)
        d = (np.float64(node_cpu_free[r]) / CPU_NORM) * (np.float64(pod_cpu) / CPU_NORM) + (
            np.float64(g) / GPU_NORM
        ) * (np.float64(pod_gpu_total) / GPU_NORM)
        out[i] = np.float64(np.int64(100.0 * (1.0 - d / 2.0)))


def dotprod_score_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    pod_cpu: int,
    pod_gpu_total: int,
    out: npt.NDArray[np.float64],
) -> None:
    g = _idle_np(card_free_milli, node_card_count, rows).astype(np.float64)
    cpu = node_cpu_free[rows].astype(np.float64)
    d = (cpu / CPU_NORM) * (float(pod_cpu) / CPU_NORM) + (g / GPU_NORM) * (
        float(pod_gpu_total) / GPU_NORM
    )
    score = np.trunc(100.0 * (1.0 - d / 2.0))
    out[:] = np.where(node_cpu_free[rows] < pod_cpu, 0.0, score)


@njit_kernel
def packing_score_fgd_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    pod_milli: int,
    pod_num: int,
    out: npt.NDArray[np.float64],
) -> None:
    """GpuPacking (``pod_num == 0``: CPU-only, scores 0)."""
    n_cards = card_free_milli.shape[1]
    order = np.empty(n_cards, np.int64)
    for i in range(rows.shape[0]):
        r = rows[i]
        if pod_num == 0:
            out[i] = 0.0
            continue
        k = np.int64(node_card_count[r])
        free = 0
        for c in range(k):
            if card_free_milli[r, c] == 1000:
                free += 1
        if free == k:
            out[i] = np.float64(33 - free if 33 - free > free else free)
            continue
        # stable sort of the cards by free share, ascending (insertion sort, k <= 63)
        for c in range(k):
            j = c
            while j > 0 and card_free_milli[r, order[j - 1]] > card_free_milli[r, c]:
                order[j] = order[j - 1]
                j -= 1
            order[j] = c
        taken = 0
        fresh = 0
        pct = np.int64(0)
        for j in range(k):
            left = np.int64(card_free_milli[r, order[j]])
            if taken < pod_num and left >= pod_milli:
                taken += 1
                if left == 1000:
                    fresh += 1
                pct += left * 100 // 1000
        if fresh > 0:
            out[i] = np.float64(max(50 - fresh, 33))
        else:
            tier = np.int64(100) - pct // 10
            out[i] = np.float64(tier if tier > 50 else 50)


def packing_score_fgd_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    pod_milli: int,
    pod_num: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`packing_score_fgd_nb`."""
    if pod_num == 0:
        out[:] = 0.0
        return
    n_cards = card_free_milli.shape[1]
    k = node_card_count[rows].astype(np.int64)
    present = np.arange(n_cards)[None, :] < k[:, None]
    left = np.where(present, card_free_milli[rows].astype(np.int64), 1 << 20)
    free = (present & (left == 1000)).sum(axis=1)
    untouched = np.maximum(33 - free, free)
    order = np.argsort(left, axis=1, kind="stable")
    srt = np.take_along_axis(left, order, axis=1)
    ok = srt >= pod_milli
    taken = np.cumsum(ok, axis=1) <= pod_num
    sel = ok & taken & (srt < (1 << 20))
    fresh = (sel & (srt == 1000)).sum(axis=1)
    pct = np.where(sel, srt * 100 // 1000, 0).sum(axis=1)
    used = np.where(fresh > 0, np.maximum(50 - fresh, 33), np.maximum(100 - pct // 10, 50))
    out[:] = np.where(free == k, untouched, used).astype(np.float64)


@njit_kernel
def clustering_score_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    tag_counts: npt.NDArray[np.int32],
    pod_tag: int,
    out: npt.NDArray[np.float64],
) -> None:
    """GpuClustering; ``tag_counts[row, t]``: GPU pods of shape tag t on the row
    (``pod_tag < 0``: CPU-only pod, scores 0)."""
    n_tags = tag_counts.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        if pod_tag < 0:
            out[i] = 0.0
            continue
        g = _idle(card_free_milli, np.int64(node_card_count[r]), r)
        base = 25 * (8000 - g) // 8000 if 8000 - g >= 0 else -((25 * (g - 8000)) // 8000)
        kinds = 0
        for t in range(n_tags):
            if tag_counts[r, t] > 0:
                kinds += 1
        same = tag_counts[r, pod_tag] > 0
        if same and kinds == 1:
            out[i] = np.float64(base + 75)
        elif same:
            out[i] = np.float64(base + 50)
        elif kinds == 0:
            out[i] = np.float64(base + 25)
        else:
            out[i] = np.float64(base)


def clustering_score_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    tag_counts: npt.NDArray[np.int32],
    pod_tag: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`clustering_score_nb`."""
    if pod_tag < 0:
        out[:] = 0.0
        return
    g = _idle_np(card_free_milli, node_card_count, rows)
    num = 25 * (8000 - g)
    base = np.where(num >= 0, num // 8000, -((-num) // 8000))  # Go truncation
    tc = tag_counts[rows]
    kinds = (tc > 0).sum(axis=1)
    same = tc[:, pod_tag] > 0
    out[:] = np.where(
        same & (kinds == 1),
        base + 75,
        np.where(same, base + 50, np.where(kinds == 0, base + 25, base)),
    ).astype(np.float64)
