"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.packing import cutting_stock


def test_cutting_stock_on_known_mixes() -> None:
    # Three 400s: two per card, so 1.5 cards in the LP, each 400 priced 1/2.
    lp = cutting_stock(np.array([40]), np.array([2]), np.array([3.0]), 100)
    assert lp.bins == pytest.approx(1.5) and lp.lower_bound == pytest.approx(1.5)
    assert lp.prices[0] == pytest.approx(0.5)
    # 810 beside 160: one card per 810, the 160s ride along for free.
    lp = cutting_stock(np.array([16, 81]), np.array([6, 1]), np.array([5.0, 5.0]), 100)
    assert lp.bins == pytest.approx(5.0)
    assert lp.prices[1] == pytest.approx(1.0) and lp.prices[0] == pytest.approx(0.0)
