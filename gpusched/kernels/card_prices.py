"""Card-price kernels: the knapsack behind the cutting-stock LP, and the per-card loss.

Sizes and gaps are in *steps* (``unit`` milli each; a pod's size rounded up, a gap rounded
down). ``prices`` are the LP's dual prices per size, in cards.

* ``knapsack``: bounded knapsack over capacities 0..steps, at most ``caps[i]`` copies of
  size ``units[i]`` worth ``prices[i]``; writes ``value[g]`` = the most a gap of g steps
  can earn (monotone in g: the empty filling fits everywhere) and the filling of a whole
  card (``pattern``). Copies are added one at a time as 0/1 items; a copy replaces the
  current best only when strictly better, so both twins keep the same pattern.
* ``price_loss``: for each candidate row, the card a shared pod of ``milli`` loses the
  least on, and that loss in cards. A node's gaps are worth ``total = sum value[gap]``;
  with ``cpu_per_card > 0`` no more than its free CPU can serve,
  ``min(total, cpu_free / cpu_per_card)``. The loss of putting the pod on card c is
  ``worth(before) - worth(after) - price`` (clamped at 0): zero when the pod completes a
  pattern of an optimal packing and does not take CPU the node's other gaps need. Losses
  are rounded to ``LOSS_QUANTUM``; ties go to the tightest card, then the lowest index.
  No usable card: ``card = -1``, loss ``NO_CARD_LOSS``.

Both twins add a row's card values in card order, so their floats are bit-identical.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._jit import njit_kernel

NO_CARD_LOSS = 2.0
# Losses are rounded to this many cards, so placements that differ by float noise or a
# few milli-GPU tie and the tightest card wins.
LOSS_QUANTUM = 1e-3


@njit_kernel
def knapsack_nb(
    units: npt.NDArray[np.int64],
    caps: npt.NDArray[np.int64],
    prices: npt.NDArray[np.float64],
    steps: int,
    value: npt.NDArray[np.float64],
    pattern: npt.NDArray[np.int64],
) -> None:
    k = len(units)
    take = np.zeros((steps + 1, k), np.int64)
    for g in range(steps + 1):
        value[g] = 0.0
    for i in range(k):
        u = units[i]
        if u <= 0 or u > steps or prices[i] <= 0.0:
            continue
        copies = min(caps[i], steps // u)
        for _ in range(copies):
            for g in range(steps, u - 1, -1):
                cand = value[g - u] + prices[i]
                if cand > value[g]:
                    value[g] = cand
                    for j in range(k):
                        take[g, j] = take[g - u, j]
                    take[g, i] += 1
    for j in range(k):
        pattern[j] = take[steps, j]


def knapsack_np(
    units: npt.NDArray[np.int64],
    caps: npt.NDArray[np.int64],
    prices: npt.NDArray[np.float64],
    steps: int,
    value: npt.NDArray[np.float64],
    pattern: npt.NDArray[np.int64],
) -> None:
    k = len(units)
    val = np.zeros(steps + 1)
    take = np.zeros((steps + 1, k), np.int64)
    for i in range(k):
        u = int(units[i])
        if u <= 0 or u > steps or prices[i] <= 0.0:
            continue
        for _ in range(int(min(caps[i], steps // u))):
            # One 0/1 copy: every capacity reads the table as it was before this copy.
            cand = val[: steps + 1 - u] + prices[i]
            better = np.zeros(steps + 1, np.bool_)
            better[u:] = cand > val[u:]
            src = np.nonzero(better)[0] - u
            new_take = take.copy()
            new_take[better] = take[src]
            new_take[better, i] += 1
            val = np.where(better, np.concatenate((np.zeros(u), cand)), val)
            take = new_take
    value[:] = val
    pattern[:] = take[steps]


@njit_kernel
def price_loss_nb(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    allowed: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    value: npt.NDArray[np.float64],
    unit: int,
    milli: int,
    price: float,
    cpu: int,
    cpu_per_card: float,
    out_loss: npt.NDArray[np.float64],
    out_card: npt.NDArray[np.int16],
) -> None:
    steps = len(value) - 1
    for i in range(len(rows)):
        r = rows[i]
        n = node_card_count[r]
        total = 0.0
        for c in range(n):
            if card_model[r, c] >= 0:
                total += value[min(card_free_milli[r, c] // unit, steps)]
        before = total
        cpu_after = 0.0
        if cpu_per_card > 0.0:
            before = min(total, node_cpu_free[r] / cpu_per_card)
            cpu_after = (node_cpu_free[r] - cpu) / cpu_per_card
        best = NO_CARD_LOSS
        best_card = -1
        best_free = 0
        for c in range(n):
            m = card_model[r, c]
            free = card_free_milli[r, c]
            if m < 0 or not card_healthy[r, c] or not allowed[m] or free < milli:
                continue
            g = value[min(free // unit, steps)]
            after = total - g + value[max(free - milli, 0) // unit]
            if cpu_per_card > 0.0:
                after = min(after, cpu_after)
            loss = np.floor(max(before - after - price, 0.0) / LOSS_QUANTUM + 0.5) * LOSS_QUANTUM
            if best_card < 0 or loss < best or (loss == best and free < best_free):
                best = loss
                best_card = c
                best_free = free
        out_loss[i] = best
        out_card[i] = best_card


def price_loss_np(
    rows: npt.NDArray[np.intp],
    card_free_milli: npt.NDArray[np.int32],
    node_card_count: npt.NDArray[np.int16],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    allowed: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    value: npt.NDArray[np.float64],
    unit: int,
    milli: int,
    price: float,
    cpu: int,
    cpu_per_card: float,
    out_loss: npt.NDArray[np.float64],
    out_card: npt.NDArray[np.int16],
) -> None:
    steps = len(value) - 1
    free = card_free_milli[rows].astype(np.int64)
    model = card_model[rows]
    width = free.shape[1]
    present = (np.arange(width)[None, :] < node_card_count[rows][:, None]) & (model >= 0)
    worth = np.where(present, value[np.minimum(free // unit, steps)], 0.0)
    total = np.zeros(len(rows))
    for c in range(width):  # card order, as the kernel adds
        total = np.where(present[:, c], total + worth[:, c], total)
    usable = present & card_healthy[rows] & allowed[np.maximum(model, 0)] & (free >= milli)
    after = total[:, None] - worth + value[np.maximum(free - milli, 0) // unit]
    before = total
    if cpu_per_card > 0.0:
        cpu_free = node_cpu_free[rows]
        before = np.minimum(total, cpu_free / cpu_per_card)
        after = np.minimum(after, ((cpu_free - cpu) / cpu_per_card)[:, None])
    raw = np.maximum(before[:, None] - after - price, 0.0)
    loss = np.where(usable, np.floor(raw / LOSS_QUANTUM + 0.5) * LOSS_QUANTUM, np.inf)
    best = loss.min(axis=1, initial=np.inf)
    tight = np.where(usable & (loss == best[:, None]), free, np.iinfo(np.int64).max)
    card = np.argmin(tight, axis=1)
    found = usable.any(axis=1)
    out_loss[:] = np.where(found, best, NO_CARD_LOSS)
    out_card[:] = np.where(found, card, -1)
