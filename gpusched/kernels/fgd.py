"""Fragmentation gradient descent (FGD, Weng et al., USENIX ATC 2023): kernels.

Fragmentation of node n against a target workload M = [(class m, p_m)] (the FGD
simulator's ``NodeGpuShareFragAmount``, see docs/fgd-protocol.md section 7):

    G(n)    = idle milli-GPU of n (sum of its cards' free share)
    f(n, m) = sum of the free share of cards with free < milli_m   if m fits on n ("Q3":
              model accessible, cpu_free >= cpu_m, #cards with free >= milli_m >= num_m)
            = G(n)                                                   otherwise (CPU-only
              class, wrong model, not enough cards or CPU)
    F(n)    = sum_m p_m f(n, m)

A pod's FGD score on a node is the drop ``F(n) - F(n + pod)`` (milli-GPU); for a shared pod
every card that can hold it is tried and the best one kept (ties: lowest index).

Two kernels share per-node statistics so a cycle is O(rows x classes), not
O(rows x cards x classes x cards):

* ``fgd_refresh``: per (row, class) the count of cards with ``free >= milli_m`` and the sum
  of free share below ``milli_m``, and F(n), recomputed only for rows whose card or CPU
  columns changed since the last call (``seen_*`` keep the last values) or all rows when
  ``force`` (new target workload, node set changed);
* ``fgd_refresh_rows``: the same for the listed rows only (those stamped since the last
  refresh, ``NodeColumns.row_version``): a refresh after one bind costs one row, not a
  compare of every card column;
* ``fgd_delta``: for each candidate row, F(n) - F(n + pod), using that one placement
  changes those statistics card by card (a card going from ``l`` to ``l'`` moves the count
  by ``[l' >= mm] - [l >= mm]`` and the sum by ``l'[l' < mm] - l[l < mm]``).

``card_by_raw`` picks a shared pod's card by the raw delta even when the score is
quantised (the published plugin takes the first card with the best integer score, which
throws away up to 40 milli-GPU of difference between cards).
``quantize`` gives the published plugin's score, ``int64(100 * sigmoid(delta / 1000))``
(0..99), and makes it the card choice criterion (first card with the best integer score),
as ``fgd_score.go`` does; otherwise the raw delta (milli-GPU) is returned and the card with
the largest delta wins. Both twins evaluate the same floating-point operations in the same
order, so their results are bit-identical.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import Int, njit_inline, njit_kernel


@njit_inline
def _refresh_row(
    r: Int,
    force: bool,
    node_valid: npt.NDArray[np.bool_],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    seen_free: npt.NDArray[np.int32],
    seen_cpu: npt.NDArray[np.int64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
) -> bool:
    """Recompute row ``r``'s statistics if it changed since last seen (or ``force``);
    returns whether it did. Shared by both refresh kernels so the two cannot drift."""
    n_cards = card_free_milli.shape[1]
    n_cls = cls_p.shape[0]
    n_models = cls_access.shape[1]
    if not node_valid[r]:
        before[r] = 0.0
        return False
    stale = force or node_cpu_free[r] != seen_cpu[r]
    if not stale:
        for c in range(n_cards):
            if card_free_milli[r, c] != seen_free[r, c]:
                stale = True
                break
    if not stale:
        return False
    seen_cpu[r] = node_cpu_free[r]
    for c in range(n_cards):
        seen_free[r, c] = card_free_milli[r, c]
    k = np.int64(node_card_count[r])
    g = np.int64(0)
    for c in range(k):
        g += np.int64(card_free_milli[r, c])
    model = np.int64(card_model[r, 0]) if k > 0 else np.int64(-1)
    cpu = node_cpu_free[r]
    total = 0.0
    for m in range(n_cls):
        mm = cls_milli[m]
        if mm == 0 or model < 0 or model >= n_models or not cls_access[m, model]:
            cnt[r, m] = 0
            fs[r, m] = 0
            total += cls_p[m] * np.float64(g)
            continue
        cn = 0
        s = np.int64(0)
        for c in range(k):
            left = np.int64(card_free_milli[r, c])
            if left >= mm:
                cn += 1
            else:
                s += left
        cnt[r, m] = cn
        fs[r, m] = s
        if cn >= cls_num[m] and cpu >= cls_cpu[m]:
            total += cls_p[m] * np.float64(s)
        else:
            total += cls_p[m] * np.float64(g)
    before[r] = total
    return True


@njit_kernel
def fgd_refresh_nb(
    force: bool,
    node_valid: npt.NDArray[np.bool_],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    seen_free: npt.NDArray[np.int32],
    seen_cpu: npt.NDArray[np.int64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
) -> int:
    """Recompute the statistics of changed rows (all rows if ``force``); returns how many."""
    done = 0
    for r in range(card_free_milli.shape[0]):
        if _refresh_row(
            r,
            force,
            node_valid,
            card_free_milli,
            node_card_count,
            card_model,
            node_cpu_free,
            seen_free,
            seen_cpu,
            cls_cpu,
            cls_milli,
            cls_num,
            cls_p,
            cls_access,
            cnt,
            fs,
            before,
        ):
            done += 1
    return done


def fgd_refresh_np(
    force: bool,
    node_valid: npt.NDArray[np.bool_],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    seen_free: npt.NDArray[np.int32],
    seen_cpu: npt.NDArray[np.int64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
) -> int:
    """NumPy twin of :func:`fgd_refresh_nb`."""
    n_rows, n_cards = card_free_milli.shape
    changed = (card_free_milli != seen_free).any(axis=1) | (node_cpu_free != seen_cpu)
    if force:
        changed = np.ones(n_rows, np.bool_)
    before[~node_valid] = 0.0
    rows = np.flatnonzero(changed & node_valid)
    if len(rows) == 0:
        return 0
    seen_cpu[rows] = node_cpu_free[rows]
    seen_free[rows] = card_free_milli[rows]
    k = node_card_count[rows].astype(np.int64)
    present = np.arange(n_cards)[None, :] < k[:, None]
    left = np.where(present, card_free_milli[rows].astype(np.int64), 0)
    g = left.sum(axis=1).astype(np.float64)
    model = np.where(k > 0, card_model[rows, 0].astype(np.int64), -1)
    n_models = cls_access.shape[1]
    in_range = (model >= 0) & (model < n_models)
    safe_model = np.where(in_range, model, 0)
    cpu = node_cpu_free[rows]
    total = np.zeros(len(rows), np.float64)
    for m in range(len(cls_p)):
        mm = int(cls_milli[m])
        acc = in_range & cls_access[m, safe_model] & (mm != 0)
        fits = present & (left >= mm)
        cn = fits.sum(axis=1)
        s = np.where(present & ~fits, left, 0).sum(axis=1)
        cnt[rows, m] = np.where(acc, cn, 0)
        fs[rows, m] = np.where(acc, s, 0)
        q3 = acc & (cn >= cls_num[m]) & (cpu >= cls_cpu[m])
        total += cls_p[m] * np.where(q3, s.astype(np.float64), g)
    before[rows] = total
    return len(rows)


@njit_kernel
def fgd_refresh_rows_nb(
    rows: npt.NDArray[np.intp],
    node_valid: npt.NDArray[np.bool_],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    seen_free: npt.NDArray[np.int32],
    seen_cpu: npt.NDArray[np.int64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
) -> int:
    """:func:`fgd_refresh_nb` (unforced) over the rows of ``rows`` only; returns how many
    of them were stale."""
    done = 0
    for i in range(rows.shape[0]):
        if _refresh_row(
            rows[i],
            False,
            node_valid,
            card_free_milli,
            node_card_count,
            card_model,
            node_cpu_free,
            seen_free,
            seen_cpu,
            cls_cpu,
            cls_milli,
            cls_num,
            cls_p,
            cls_access,
            cnt,
            fs,
            before,
        ):
            done += 1
    return done


def fgd_refresh_rows_np(
    rows: npt.NDArray[np.intp],
    node_valid: npt.NDArray[np.bool_],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    node_cpu_free: npt.NDArray[np.int64],
    seen_free: npt.NDArray[np.int32],
    seen_cpu: npt.NDArray[np.int64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
) -> int:
    """NumPy twin of :func:`fgd_refresh_rows_nb`: :func:`fgd_refresh_np` on the gathered
    rows, its results scattered back."""
    sub_seen_free, sub_seen_cpu = seen_free[rows], seen_cpu[rows]
    sub_cnt, sub_fs, sub_before = cnt[rows], fs[rows], before[rows]
    done = fgd_refresh_np(
        False,
        node_valid[rows],
        card_free_milli[rows],
        node_card_count[rows],
        card_model[rows],
        node_cpu_free[rows],
        sub_seen_free,
        sub_seen_cpu,
        cls_cpu,
        cls_milli,
        cls_num,
        cls_p,
        cls_access,
        sub_cnt,
        sub_fs,
        sub_before,
    )
    seen_free[rows], seen_cpu[rows] = sub_seen_free, sub_seen_cpu
    cnt[rows], fs[rows], before[rows] = sub_cnt, sub_fs, sub_before
    return done


@njit_kernel
def _sigmoid_score(delta: float) -> float:
    # plugin_utils.go sigmoid, then int64() truncation (the value is positive).
    return np.float64(np.int64(100.0 / (1.0 + math.exp(-delta / 1000.0))))


@njit_kernel
def fgd_delta_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    allowed: npt.NDArray[np.bool_],
    pod_cpu: int,
    pod_milli: int,
    pod_cards: int,
    quantize: bool,
    card_by_raw: bool,
    out_value: npt.NDArray[np.float64],
    out_card: npt.NDArray[np.int16],
) -> None:
    """Per row of ``rows``: the FGD value of placing the pod there and, for a shared pod,
    the card (``out_card``; -1 for whole-card and CPU-only pods or when nothing fits).

    ``pod_cards > 0``: whole cards (the lowest-index usable intact ones); else
    ``pod_milli > 0``: a share of one card; else a CPU-only pod.
    """
    n_cls = cls_p.shape[0]
    n_models = cls_access.shape[1]
    n_allowed = allowed.shape[0]
    pc = np.int64(pod_cpu)
    pm = np.int64(pod_milli)
    for i in range(rows.shape[0]):
        r = rows[i]
        k = np.int64(node_card_count[r])
        g = np.int64(0)
        for c in range(k):
            g += np.int64(card_free_milli[r, c])
        model = np.int64(card_model[r, 0]) if k > 0 else np.int64(-1)
        cpu2 = node_cpu_free[r] - pc
        b = before[r]
        if pod_cards > 0 or pm == 0:
            # One after-state: whole cards go 1000 -> 0 (count drops by the cards taken,
            # sums unchanged since 1000 >= any class share and 0 < it), CPU-only pods
            # change the CPU alone.
            taken = np.int64(0)
            if pod_cards > 0:
                for c in range(k):
                    mdl = np.int64(card_model[r, c])
                    if (
                        taken < pod_cards
                        and card_free_milli[r, c] == 1000
                        and card_healthy[r, c]
                        and 0 <= mdl < n_allowed
                        and allowed[mdl]
                    ):
                        taken += 1
            g2 = g - 1000 * taken
            after = 0.0
            for m in range(n_cls):
                mm = cls_milli[m]
                if mm == 0 or model < 0 or model >= n_models or not cls_access[m, model]:
                    after += cls_p[m] * np.float64(g2)
                    continue
                cn = np.int64(cnt[r, m]) - taken
                if cn >= cls_num[m] and cpu2 >= cls_cpu[m]:
                    after += cls_p[m] * np.float64(fs[r, m])
                else:
                    after += cls_p[m] * np.float64(g2)
            d = b - after
            out_value[i] = _sigmoid_score(d) if quantize else d
            out_card[i] = -1
            continue
        best = -1.0e300
        best_c = -1
        g2 = g - pm
        for c in range(k):
            left = np.int64(card_free_milli[r, c])
            mdl = np.int64(card_model[r, c])
            if left < pm or not card_healthy[r, c] or not (0 <= mdl < n_allowed and allowed[mdl]):
                continue
            dup = False
            for c0 in range(c):
                if (
                    np.int64(card_free_milli[r, c0]) == left
                    and card_model[r, c0] == mdl
                    and card_healthy[r, c0]
                ):
                    dup = True
                    break
            if dup:
                continue  # same after-state as an earlier card, which wins ties
            l2 = left - pm
            after = 0.0
            for m in range(n_cls):
                mm = cls_milli[m]
                if mm == 0 or model < 0 or model >= n_models or not cls_access[m, model]:
                    after += cls_p[m] * np.float64(g2)
                    continue
                cn = np.int64(cnt[r, m])
                s = fs[r, m]
                if left >= mm:
                    cn -= 1
                else:
                    s -= left
                if l2 >= mm:
                    cn += 1
                else:
                    s += l2
                if cn >= cls_num[m] and cpu2 >= cls_cpu[m]:
                    after += cls_p[m] * np.float64(s)
                else:
                    after += cls_p[m] * np.float64(g2)
            d = b - after
            v = _sigmoid_score(d) if quantize and not card_by_raw else d
            if v > best:
                best = v
                best_c = c
        if best_c >= 0 and quantize and card_by_raw:
            best = _sigmoid_score(best)  # monotone: the best raw card has the best score
        out_value[i] = best if best_c >= 0 else 0.0
        out_card[i] = best_c


def _sigmoid_score_np(delta: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    with np.errstate(over="ignore"):
        return np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))


def fgd_delta_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    cnt: npt.NDArray[np.int16],
    fs: npt.NDArray[np.int64],
    before: npt.NDArray[np.float64],
    cls_cpu: npt.NDArray[np.int64],
    cls_milli: npt.NDArray[np.int64],
    cls_num: npt.NDArray[np.int64],
    cls_p: npt.NDArray[np.float64],
    cls_access: npt.NDArray[np.bool_],
    allowed: npt.NDArray[np.bool_],
    pod_cpu: int,
    pod_milli: int,
    pod_cards: int,
    quantize: bool,
    card_by_raw: bool,
    out_value: npt.NDArray[np.float64],
    out_card: npt.NDArray[np.int16],
) -> None:
    """NumPy twin of :func:`fgd_delta_nb` (vectorised over rows, loops over cards)."""
    n_cards = card_free_milli.shape[1]
    k = node_card_count[rows].astype(np.int64)
    present = np.arange(n_cards)[None, :] < k[:, None]
    left = np.where(present, card_free_milli[rows].astype(np.int64), 0)
    g = left.sum(axis=1)
    model = np.where(k > 0, card_model[rows, 0].astype(np.int64), -1)
    n_models = cls_access.shape[1]
    in_range = (model >= 0) & (model < n_models)
    safe_model = np.where(in_range, model, 0)
    cm = card_model[rows].astype(np.int64)
    cm_ok = (cm >= 0) & (cm < allowed.shape[0])
    usable = present & card_healthy[rows] & cm_ok
    usable[cm_ok] &= allowed[cm[cm_ok]]
    cpu2 = node_cpu_free[rows] - pod_cpu
    b = before[rows]
    acc = [in_range & cls_access[m, safe_model] & (cls_milli[m] != 0) for m in range(len(cls_p))]

    if pod_cards > 0 or pod_milli == 0:
        taken = np.zeros(len(rows), np.int64)
        if pod_cards > 0:
            intact = usable & (left == 1000)
            taken = np.minimum(intact.sum(axis=1), pod_cards)
        g2 = (g - 1000 * taken).astype(np.float64)
        after = np.zeros(len(rows), np.float64)
        for m in range(len(cls_p)):
            cn = cnt[rows, m].astype(np.int64) - taken
            q3 = acc[m] & (cn >= cls_num[m]) & (cpu2 >= cls_cpu[m])
            after += cls_p[m] * np.where(q3, fs[rows, m].astype(np.float64), g2)
        d = b - after
        out_value[:] = _sigmoid_score_np(d) if quantize else d
        out_card[:] = -1
        return

    g2 = (g - pod_milli).astype(np.float64)
    best = np.full(len(rows), -1.0e300)
    best_c = np.full(len(rows), -1, np.int64)
    for c in range(n_cards):
        lc = left[:, c]
        ok = usable[:, c] & (lc >= pod_milli)
        if not ok.any():
            continue
        l2 = lc - pod_milli
        after = np.zeros(len(rows), np.float64)
        for m in range(len(cls_p)):
            mm = cls_milli[m]
            cn = cnt[rows, m].astype(np.int64) - (lc >= mm) + (l2 >= mm)
            s = fs[rows, m] - np.where(lc < mm, lc, 0) + np.where(l2 < mm, l2, 0)
            q3 = acc[m] & (cn >= cls_num[m]) & (cpu2 >= cls_cpu[m])
            after += cls_p[m] * np.where(q3, s.astype(np.float64), g2)
        d = b - after
        v = _sigmoid_score_np(d) if quantize and not card_by_raw else d
        better = ok & (v > best)
        best = np.where(better, v, best)
        best_c = np.where(better, c, best_c)
    if quantize and card_by_raw:
        best = _sigmoid_score_np(best)
    out_value[:] = np.where(best_c >= 0, best, 0.0)
    out_card[:] = best_c.astype(np.int16)
