"""The cutting-stock LP (Gilmore-Gomory): how few cards a mix of shared-pod sizes needs.

Its dual prices are what GPUFragmentation's card prices charge a pod
(plugins/gpu_fragmentation/prices.py), and its optimum is the packing bound the simulator
reports (sim/packing_bound.py). A module of its own, below plugins and sim, so neither
imports the other for it: not a kernel (it drives HiGHS, an LP solver with state, rather
than mapping arrays to arrays), but it prices columns with the knapsack kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
from numpy.typing import NDArray

from gpusched.kernels.card_prices import knapsack_nb, knapsack_np
from gpusched.kernels.dispatch import pick

try:
    # The core class highspy.Highs wraps: it prints no banner (see quiet_solver).
    from highspy._core import _Highs as _Solver
except ImportError:  # pragma: no cover - a highspy laid out differently
    from highspy import Highs as _Solver

knapsack = pick(knapsack_nb, knapsack_np)

# A column enters while its patterns' dual value exceeds one card by more than this.
_ENTER = 1e-9
_MAX_COLUMNS = 1000


@dataclass(frozen=True, slots=True)
class CuttingStock:
    bins: float  # LP optimum: cards needed, fractionally
    prices: NDArray[np.float64]  # dual price per size, rescaled so no card is worth > 1
    lower_bound: float  # sum(demand * prices): a lower bound on the cards needed
    value: NDArray[np.float64]  # value[g]: the most a gap of g steps earns at `prices`


def cutting_stock(
    units: NDArray[np.int64], caps: NDArray[np.int64], demand: NDArray[np.float64], steps: int
) -> CuttingStock:
    """min cards s.t. every size's demand is covered, by column generation (HiGHS for the
    restricted LP, the exact knapsack kernel for pricing). ``caps`` bounds the copies of a
    size in one card (its demand for an instance, steps // units for a mix).

    The returned prices are rescaled by the best pattern's value at the last pricing, so
    every card filling is worth at most 1 whatever the solver's tolerances: weak duality
    then makes ``lower_bound`` a true lower bound."""
    n = len(units)
    h = quiet_solver()
    inf = highspy.kHighsInf
    no_index = np.zeros(0, np.int32)
    for i in range(n):
        h.addRow(float(demand[i]), inf, 0, no_index, np.zeros(0))
    for i in range(n):  # one size per card: a feasible start
        h.addCol(1.0, 0.0, inf, 1, np.array([i], np.int32), np.array([float(caps[i])]))
    value = np.zeros(steps + 1)
    pattern = np.zeros(n, np.int64)
    prices = np.zeros(n)
    best = 0.0
    for _ in range(_MAX_COLUMNS):
        h.run()
        status = h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"cutting-stock LP not solved: HiGHS model status {status}")
        prices = np.maximum(0.0, np.asarray(h.getSolution().row_dual, np.float64))
        knapsack(units, caps, prices, steps, value, pattern)
        best = float(value[steps])
        if best <= 1.0 + _ENTER:
            break
        idx = np.nonzero(pattern)[0].astype(np.int32)
        h.addCol(1.0, 0.0, inf, len(idx), idx, pattern[idx].astype(np.float64))
    # The knapsack is linear in the prices, so its last table rescales with them.
    scale = 1.0 / max(1.0, best)
    return CuttingStock(
        bins=float(h.getInfo().objective_function_value),
        prices=prices * scale,
        lower_bound=float((demand * prices).sum() * scale),
        value=value * scale,
    )


def quiet_solver() -> Any:
    """A HiGHS instance that prints nothing. ``highspy.Highs()`` writes a banner to stdout
    as it is built (its callback set-up calls into HiGHS before ``output_flag`` can be
    cleared), which would land among the daemon's JSON log lines; the core class it wraps
    does not."""
    h = _Solver()
    h.setOptionValue("output_flag", False)
    return h
