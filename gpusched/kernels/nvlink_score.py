"""``nvlink_score``: how well a whole-card pod's cards sit in a node's NVLink islands.

For each row of ``rows`` (an index array, the feasible rows), with the pod's eligible cards
(``gpu_summary``'s card rules: usable, intact, at least ``req_mem`` MiB free) grouped by
island, an island's *size* being the node's cards in it and its *free* count the eligible
ones, the island ``choose_cards`` would take (the fewest free cards that still hold k, ties
to the lowest first card) decides the score:

* it is partly used, or intact with exactly k cards: ``100 - 30 * (free - k) / size``, in
  (70, 100]: the pod fits without breaking an intact island, a tighter fit scores higher;
* it is intact and larger than k (the pod breaks a whole island):
  ``60 - 30 * (size - k) / size``, in [30, 60): the bigger the island broken, the lower;
* no island holds k (the cards must span islands; never under ``nvlink == 2``, whose
  Filter refused such rows): ``SPAN_PREFERRED`` (0) for ``nvlink == 1`` (the pod asked for
  one island), ``SPAN_NONE`` (20) otherwise (the pod does not care, the cluster loses
  islands either way).

A row whose layout is unknown (no card, or any card in island -1: GPU Feature Discovery
nodes, the openb trace's nodes) scores ``UNKNOWN`` (50), neither favoured nor punished.
Writes ``out[i]`` for ``rows[i]``; allocates nothing.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._card_rules import INTACT_MILLI, MAX_CARDS, card_usable, usable_cards_np
from gpusched.kernels._jit import njit_kernel

UNKNOWN = 50.0
SPAN_NONE = 20.0
SPAN_PREFERRED = 0.0
# Island ids are int8 in [-1, 126] (snapshot MAX_ISLAND): the twin's per-island tables.
_ISLANDS = 128


@njit_kernel
def nvlink_score_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    req_cards: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out: npt.NDArray[np.float64],
) -> None:
    """Write the island-fit score of each of ``rows`` into ``out``."""
    C = card_free_milli.shape[1]
    if C > MAX_CARDS:
        raise ValueError("nvlink_score: more than 63 card slots per node")
    k = np.int64(req_cards)
    r_mem = np.int64(req_mem)
    for i in range(rows.shape[0]):
        n = rows[i]
        present = np.int64(0)
        elig = np.int64(0)
        known = True
        for c in range(C):
            if card_model[n, c] < 0:
                continue
            present |= np.int64(1) << c
            if card_island[n, c] < 0:
                known = False
            if (
                card_usable(np.int64(card_model[n, c]), card_healthy[n, c], allowed_models)
                and card_free_milli[n, c] == INTACT_MILLI
                and np.int64(card_free_mem[n, c]) >= r_mem
            ):
                elig |= np.int64(1) << c
        if present == 0 or not known:
            out[i] = UNKNOWN
            continue
        best_free = np.int64(C + 1)
        best_size = np.int64(0)
        for c in range(C):
            if not (present >> c) & 1:
                continue
            isl = card_island[n, c]
            first = True
            for d in range(c):
                if (present >> d) & 1 and card_island[n, d] == isl:
                    first = False
                    break
            if not first:
                continue
            size = np.int64(0)
            free = np.int64(0)
            for d in range(c, C):
                if (present >> d) & 1 and card_island[n, d] == isl:
                    size += 1
                    if (elig >> d) & 1:
                        free += 1
            if k <= free < best_free:
                best_free = free
                best_size = size
        if best_size == 0:
            out[i] = SPAN_PREFERRED if nvlink == 1 else SPAN_NONE
        elif best_free < best_size or best_size == k:
            out[i] = 100.0 - 30.0 * np.float64(best_free - k) / np.float64(best_size)
        else:
            out[i] = 60.0 - 30.0 * np.float64(best_size - k) / np.float64(best_size)


def nvlink_score_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    req_cards: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out: npt.NDArray[np.float64],
) -> None:
    """NumPy twin of :func:`nvlink_score_nb`."""
    C = card_free_milli.shape[1]
    if C > MAX_CARDS:
        raise ValueError("nvlink_score: more than 63 card slots per node")
    R = rows.shape[0]
    if R == 0:
        return
    model = card_model[rows]
    island = card_island[rows].astype(np.int64)
    present = model >= 0
    elig = (
        present
        & usable_cards_np(model, card_healthy[rows], allowed_models)
        & (card_free_milli[rows] == INTACT_MILLI)
        & (card_free_mem[rows].astype(np.int64) >= req_mem)
    )
    known = np.any(present, axis=1) & ~np.any(present & (island < 0), axis=1)
    # Per (row, island) tables, over the present cards of known rows.
    r_idx = np.repeat(np.arange(R), C).reshape(R, C)
    take = present & known[:, None]
    flat = r_idx[take] * _ISLANDS + island[take]
    size = np.bincount(flat, minlength=R * _ISLANDS).reshape(R, _ISLANDS).astype(np.int64)
    free = (
        np.bincount(flat, weights=elig[take], minlength=R * _ISLANDS)
        .reshape(R, _ISLANDS)
        .astype(np.int64)
    )
    # Each island's first card: written from the last card down, so the lowest one stays.
    first = np.full((R, _ISLANDS), C, np.int64)
    for c in range(C - 1, -1, -1):
        on = take[:, c]
        first[r_idx[on, c], island[on, c]] = c
    holds = (size > 0) & (free >= req_cards)
    # The fewest free cards, then the lowest first card: choose_cards' island.
    key = np.where(holds, free * (MAX_CARDS + 1) + first, np.iinfo(np.int64).max)
    pick = np.argmin(key, axis=1)
    found = holds[np.arange(R), pick]
    f = free[np.arange(R), pick]
    s = size[np.arange(R), pick]
    safe = np.maximum(s, 1).astype(np.float64)
    fits = 100.0 - 30.0 * (f - req_cards).astype(np.float64) / safe
    breaks = 60.0 - 30.0 * (s - req_cards).astype(np.float64) / safe
    span = SPAN_PREFERRED if nvlink == 1 else SPAN_NONE
    score = np.where(found, np.where((f < s) | (s == req_cards), fits, breaks), span)
    out[:R] = np.where(known, score, UNKNOWN)
