"""Card prices: what a shared pod of each size costs in cards, from the learnt size mix.

The cutting-stock LP (Gilmore-Gomory, gpusched/packing/cutting_stock.py) of the learnt mix
of shared-pod sizes gives a dual price per size: the share of a card a pod of that size
takes in an optimal packing of the mix (a 470 costs 1/2: two fill a card; an 810 costs 1:
nothing useful fits beside it).
``value[g]`` is the most a gap of g milli can earn at those prices. Putting a pod of size s
in a gap g then loses ``value[g] - value[g - s] - price(s)`` cards (>= 0): zero when the
pod completes a pattern of an optimal packing, positive when it leaves a gap the mix
cannot fill as well. With ``cpu_per_card`` the node's gaps count only as far as its free
CPU can serve them (``gpusched/kernels/card_prices.py``). Measured on the FGD protocol in
docs/fgd-results.md.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.snapshot import NodeColumns
from gpusched.kernels.card_prices import price_loss_nb, price_loss_np
from gpusched.kernels.dispatch import pick
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.packing import cutting_stock
from gpusched.plugins.helper.row_cache import RowCache

price_loss = pick(price_loss_nb, price_loss_np)

UNIT = 10  # milli per step: gap values 0..100 steps
STEPS = FULL_CARD_MILLI // UNIT


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
        snap: NodeColumns,
        prices: CardPrices,
        *,
        milli: int,
        cpu: int,
        models: tuple[str, ...],
        use_cpu: bool,
        rows: NDArray[np.intp] | None = None,
    ) -> Losses:
        """(loss, card) per snapshot row (capacity-long; rows not valid hold junk). With
        `rows`, only those rows are brought up to date (RowCache.rows: a Score's candidates)
        and only they may be read."""
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
        if rows is not None:

            def alloc() -> Losses:
                return np.zeros(snap.capacity, np.float64), np.full(snap.capacity, -1, np.int16)

            return self.rows(snap, shape, rows, alloc, recompute)
        return self.get(snap, shape, compute_all, recompute)
