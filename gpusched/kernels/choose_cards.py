"""``choose_cards``: the card indices one pod gets on one node row.

Same card rules as ``gpu_summary`` (see its module docstring); the two must agree: this
returns cards exactly when the summary says the row fits.

* whole-card pod (k cards): among the eligible (intact) cards, group by NVLink island and
  take the lowest-index k cards of the island that holds at least k with the fewest eligible
  cards (ties -> the island whose first card has the lowest index). Taking from the
  tightest island keeps big islands whole for later NVLink jobs; that holds for
  ``nvlink == 0`` too (the pod does not care where its cards sit, others do). Unknown
  island (-1) cards form one group, except under ``nvlink == 2``, where they never count.
  When no island holds k: ``nvlink == 2`` gets nothing, otherwise the lowest-index k
  eligible cards (spanning islands).
* shared pod: the best-fit card (smallest ``free_milli - need_milli``, ties -> lowest index).

Returns an int64 array of length k (whole) or 1 (shared), or empty when nothing fits. It
allocates: it runs once per scheduled pod, not per node.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._card_rules import (
    INTACT_MILLI,
    MAX_CARDS,
    NO_LEFTOVER,
    card_usable,
    shared_need_mem,
    shared_need_milli,
    shared_need_np,
    usable_cards_np,
)
from gpusched.kernels._jit import njit_kernel


@njit_kernel
def choose_cards_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    row: int,
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
) -> npt.NDArray[np.int64]:
    """Card indices for the pod on node ``row`` (empty when it does not fit)."""
    C = card_free_milli.shape[1]
    if C > MAX_CARDS:
        raise ValueError("choose_cards: more than 63 card slots per node")
    k = np.int64(req_cards)
    r_milli = np.int64(req_milli)
    r_mem = np.int64(req_mem)
    empty = np.empty(0, dtype=np.int64)
    if k > 0:
        elig = np.int64(0)
        count = 0
        for c in range(C):
            ok = card_usable(np.int64(card_model[row, c]), card_healthy[row, c], allowed_models)
            if (
                ok
                and card_free_milli[row, c] == INTACT_MILLI
                and np.int64(card_free_mem[row, c]) >= r_mem
            ):
                elig |= np.int64(1) << c
                count += 1
        if count < k:
            return empty
        best_first = -1
        best_count = C + 1
        for c in range(C):
            if not (elig >> c) & 1:
                continue
            isl = card_island[row, c]
            if nvlink == 2 and isl < 0:
                continue
            first = True
            for d in range(c):
                if (elig >> d) & 1 and card_island[row, d] == isl:
                    first = False
                    break
            if not first:
                continue
            in_island = 0
            for d in range(c, C):
                if (elig >> d) & 1 and card_island[row, d] == isl:
                    in_island += 1
            if k <= in_island < best_count:
                best_count = in_island
                best_first = c
        if best_first < 0 and nvlink == 2:
            return empty
        out = np.empty(k, dtype=np.int64)
        taken = 0
        for c in range(C):
            if taken == k:
                break
            if not (elig >> c) & 1:
                continue
            if best_first >= 0 and card_island[row, c] != card_island[row, best_first]:
                continue
            out[taken] = c
            taken += 1
        return out
    best_c = -1
    best = np.int64(NO_LEFTOVER)
    for c in range(C):
        if not card_usable(np.int64(card_model[row, c]), card_healthy[row, c], allowed_models):
            continue
        tm = np.int64(card_total_mem[row, c])
        if tm <= 0 and r_mem > 0:
            continue  # unknown memory serves compute shares only
        fm = np.int64(card_free_milli[row, c])
        need_milli = shared_need_milli(r_milli, r_mem, tm)
        need_mem = shared_need_mem(r_milli, r_mem, tm)
        if (
            fm >= need_milli
            and np.int64(card_free_mem[row, c]) >= need_mem
            and fm - need_milli < best
        ):
            best = fm - need_milli
            best_c = c
    if best_c < 0:
        return empty
    out = np.empty(1, dtype=np.int64)
    out[0] = best_c
    return out


def choose_cards_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    row: int,
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
) -> npt.NDArray[np.int64]:
    """NumPy twin of :func:`choose_cards_nb`."""
    if card_free_milli.shape[1] > MAX_CARDS:
        raise ValueError("choose_cards: more than 63 card slots per node")
    empty = np.empty(0, dtype=np.int64)
    free_milli = card_free_milli[row].astype(np.int64)
    free_mem = card_free_mem[row].astype(np.int64)
    usable = usable_cards_np(card_model[row], card_healthy[row], allowed_models)
    if req_cards > 0:
        idx = np.flatnonzero(usable & (free_milli == INTACT_MILLI) & (free_mem >= req_mem))
        if idx.size < req_cards:
            return empty
        islands = card_island[row][idx]
        grouped = islands >= 0 if nvlink == 2 else np.ones(idx.size, dtype=np.bool_)
        ids, first, counts = np.unique(islands[grouped], return_index=True, return_counts=True)
        holds = counts >= req_cards
        if holds.any():
            first_card = idx[grouped][first][holds]
            pick = np.lexsort((first_card, counts[holds]))[0]
            chosen: npt.NDArray[np.int64] = idx[islands == ids[holds][pick]][:req_cards]
            return chosen.astype(np.int64)
        if nvlink == 2:
            return empty
        return idx[:req_cards].astype(np.int64)
    need_milli, need_mem, has_mem = shared_need_np(req_milli, req_mem, card_total_mem[row])
    fits = usable & has_mem & (free_milli >= need_milli) & (free_mem >= need_mem)
    if not fits.any():
        return empty
    leftover = np.where(fits, free_milli - need_milli, NO_LEFTOVER)
    return np.array([int(np.argmin(leftover))], dtype=np.int64)
