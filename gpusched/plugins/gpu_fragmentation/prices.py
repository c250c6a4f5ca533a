"""Card prices: what a shared pod of each size costs in cards, from the learnt size mix.

The cutting-stock LP (Gilmore-Gomory) of the learnt mix of shared-pod sizes gives a dual
price per size: the share of a card a pod of that size takes in an optimal packing of the
mix (a 470 costs 1/2: two fill a card; an 810 costs 1: nothing useful fits beside it).
``value[g]`` is the most a gap of g milli can earn at those prices. Putting a pod of size s
in a gap g then loses ``value[g] - value[g - s] - price(s)`` cards (>= 0): zero when the
pod completes a pattern of an optimal packing, positive when it leaves a gap the mix
cannot fill as well. With ``cpu_per_card`` the node's gaps count only as far as its free
CPU can serve them (``gpusched/kernels/card_prices.py``). Measured on the FGD protocol in
docs/fgd-results.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.row_cache import RowCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.kernels.card_prices import knapsack_nb, knapsack_np, price_loss_nb, price_loss_np
from gpusched.kernels.dispatch import pick
from gpusched.model.node import FULL_CARD_MILLI

knapsack = pick(knapsack_nb, knapsack_np)
price_loss = pick(price_loss_nb, price_loss_np)

UNIT = 10  # milli per step: gap values 0..100 steps
STEPS = FULL_CARD_MILLI // UNIT
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
    import highspy

    n = len(units)
    h = _quiet_solver()
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


def _quiet_solver() -> Any:
    """A HiGHS instance that prints nothing. ``highspy.Highs()`` writes a banner to stdout
    as it is built (its callback set-up calls into HiGHS before ``output_flag`` can be
    cleared), which would land among the daemon's JSON log lines; the core class it wraps
    does not."""
    try:
        from highspy._core import _Highs as Solver
    except ImportError:  # pragma: no cover - a highspy laid out differently
        from highspy import Highs as Solver
    h = Solver()
    h.setOptionValue("output_flag", False)
    return h


def size_steps(milli: int) -> int:
    """A pod's size in steps, rounded up (it needs at least this much)."""
    return -(-milli // UNIT)


class CardPrices:
    """Dual prices of the learnt shared-size mix and the gap values they imply."""

    def __init__(self) -> None:
        self.sizes = np.zeros(0, np.int64)  # milli, ascending
        self.prices = np.zeros(0, np.float64)
        self.value = np.zeros(STEPS + 1)
        # CPU milli the learnt GPU pods ask per card of GPU; 0 = do not weigh CPU.
        self.cpu_per_card = 0.0
        self.solves = 0

    @property
    def ready(self) -> bool:
        return len(self.sizes) > 0

    def price_of(self, milli: int) -> float:
        """A learnt size's price; any other size is charged the value of the space it
        takes, which keeps its loss >= 0 (value is superadditive)."""
        i = int(np.searchsorted(self.sizes, milli))
        if i < len(self.sizes) and self.sizes[i] == milli:
            return float(self.prices[i])
        return float(self.value[min(STEPS, size_steps(milli))])

    def update(self, mix: Mapping[int, float], cpu_per_card: float = 0.0) -> None:
        """Re-solve for a mix {milli per card: weight} of shared (one-card) pods."""
        items = sorted((m, w) for m, w in mix.items() if 0 < m < FULL_CARD_MILLI and w > 0)
        self.cpu_per_card = max(0.0, cpu_per_card)
        if not items:
            self.sizes, self.prices = np.zeros(0, np.int64), np.zeros(0)
            self.value = np.zeros(STEPS + 1)
            return
        sizes = np.array([m for m, _ in items], np.int64)
        weight = np.array([w for _, w in items], np.float64)
        units = np.array([size_steps(int(m)) for m in sizes], np.int64)
        caps = STEPS // units
        # Scale-free: demand in "cards of pods" keeps the LP well conditioned.
        lp = cutting_stock(units, caps, weight / weight.sum() * 1000.0, STEPS)
        self.sizes, self.prices, self.value = sizes, lp.prices, lp.value
        self.solves += 1


Losses = tuple[NDArray[np.float64], NDArray[np.int16]]  # per snapshot row: loss, card


class LossCache(RowCache[Losses]):
    """Each row's card-price loss for recent request shapes (RowCache): a row's loss depends
    on that row and the prices alone, so only rows changed since are recomputed."""

    def losses(
        self,
        snap: Snapshot,
        prices: CardPrices,
        *,
        milli: int,
        cpu: int,
        models: tuple[str, ...],
        use_cpu: bool,
    ) -> Losses:
        """(loss, card) per snapshot row (capacity-long; rows not valid hold junk)."""
        per_card = prices.cpu_per_card if use_cpu else 0.0
        allowed = snap.allowed_models(models)
        price = prices.price_of(milli)

        def recompute(out: Losses, rows: NDArray[np.intp]) -> None:
            loss = np.empty(len(rows), np.float64)
            card = np.empty(len(rows), np.int16)
            price_loss(
                rows,
                snap.card_free_milli,
                snap.node_card_count,
                snap.card_model,
                snap.card_healthy,
                allowed,
                snap.node_cpu_free,
                prices.value,
                UNIT,
                milli,
                price,
                cpu,
                per_card,
                loss,
                card,
            )
            out[0][rows] = loss
            out[1][rows] = card

        def compute_all() -> Losses:
            out = (np.empty(snap.capacity, np.float64), np.empty(snap.capacity, np.int16))
            recompute(out, np.arange(snap.capacity, dtype=np.intp))
            return out

        # The prices' generation and the model count are part of the shape: a re-solve or
        # a new model changes every row's loss.
        shape = (milli, cpu, models, per_card, prices.solves, len(snap.models))
        return self.get(snap, shape, compute_all, recompute)
