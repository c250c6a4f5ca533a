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

**Cool cards first.** Among cards those rules find equally good, the coolest go first:
whole-card pods take the k coolest cards of the chosen island (or of all eligible cards
when spanning); the island itself is chosen as above, temperatures aside
(NVLinkTopology's score reads which island that is); a shared pod's best-fit ties go to
the coolest card. Temperatures are the fresh ``card_temp`` readings (°C). A card without
one (NaN) is neither hot nor cool: it counts as the median of the node's known cards, so a
card with no exporter reading never wins as "cold" nor is avoided as "hot". Remaining ties
(and a node with no readings at all, where every card counts the same) fall to the lowest
index, so without telemetry the choice is exactly the one the rules above make alone. The
chosen indices are returned ascending.

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
def card_heat_nb(temps: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Each card's temperature for ranking (float64): its reading, or the median of the
    node's readings when it has none; all 0.0 when the node has no reading at all."""
    C = temps.shape[0]
    known = np.empty(C, dtype=np.float64)
    n = 0
    for c in range(C):
        t = np.float64(temps[c])
        if not np.isnan(t):
            known[n] = t
            n += 1
    out = np.zeros(C, dtype=np.float64)
    if n == 0:
        return out
    middle = np.median(known[:n])
    for c in range(C):
        t = np.float64(temps[c])
        out[c] = middle if np.isnan(t) else t
    return out


@njit_kernel
def choose_cards_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    card_temp: npt.NDArray[np.float32],
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
    heat = card_heat_nb(card_temp[row])
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
        pool = np.int64(0)
        for c in range(C):
            if (elig >> c) & 1 and (
                best_first < 0 or card_island[row, c] == card_island[row, best_first]
            ):
                pool |= np.int64(1) << c
        # The k coolest of the pool (ties: lowest index), returned in index order.
        taken = np.int64(0)
        for _ in range(k):
            pick = -1
            for c in range(C):
                if (pool >> c) & 1 and not (taken >> c) & 1 and (pick < 0 or heat[c] < heat[pick]):
                    pick = c
            taken |= np.int64(1) << pick
        out = np.empty(k, dtype=np.int64)
        n = 0
        for c in range(C):
            if (taken >> c) & 1:
                out[n] = c
                n += 1
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
        if fm < need_milli or np.int64(card_free_mem[row, c]) < need_mem:
            continue
        left = fm - need_milli
        if left < best or (left == best and heat[c] < heat[best_c]):
            best = left
            best_c = c
    if best_c < 0:
        return empty
    out = np.empty(1, dtype=np.int64)
    out[0] = best_c
    return out


def card_heat_np(temps: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """NumPy twin of :func:`card_heat_nb`."""
    t = temps.astype(np.float64)
    unknown = np.isnan(t)
    if unknown.all():
        return np.zeros(t.shape, dtype=np.float64)
    return np.where(unknown, np.median(t[~unknown]), t)


def choose_cards_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    card_temp: npt.NDArray[np.float32],
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
    heat = card_heat_np(card_temp[row])
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
            pool = idx[islands == ids[holds][pick]]
        elif nvlink == 2:
            return empty
        else:
            pool = idx
        coolest = pool[np.lexsort((pool, heat[pool]))[:req_cards]]
        return np.sort(coolest).astype(np.int64)
    need_milli, need_mem, has_mem = shared_need_np(req_milli, req_mem, card_total_mem[row])
    fits = np.flatnonzero(usable & has_mem & (free_milli >= need_milli) & (free_mem >= need_mem))
    if fits.size == 0:
        return empty
    leftover = free_milli[fits] - need_milli[fits]
    best = fits[np.lexsort((fits, heat[fits], leftover))[0]]
    return np.array([int(best)], dtype=np.int64)
