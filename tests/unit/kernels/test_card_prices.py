"""Card-price kernels: numba kernel == NumPy twin, knapsack == brute force, and the loss
rule's properties on random clusters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels.card_prices import (
    NO_CARD_LOSS,
    knapsack_nb,
    knapsack_np,
    price_loss_nb,
    price_loss_np,
)
from tests.builders import fgd_columns

ITEMS = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 4), st.floats(0.0, 1.0)), min_size=1, max_size=4
)


@given(ITEMS, st.integers(1, 20))
@settings(max_examples=80, deadline=None)
def test_knapsack_twins_and_brute_force(items: list[tuple[int, int, float]], steps: int) -> None:
    units = np.array([u for u, _, _ in items], np.int64)
    caps = np.array([c for _, c, _ in items], np.int64)
    prices = np.array([p for _, _, p in items], np.float64)
    outs = []
    for fn in (knapsack_nb, knapsack_np):
        value = np.full(steps + 1, -1.0)
        pattern = np.full(len(items), -1, np.int64)
        fn(units, caps, prices, steps, value, pattern)
        outs.append((value, pattern))
    (v1, p1), (v2, p2) = outs
    assert np.array_equal(v1, v2) and np.array_equal(p1, p2)
    # The pattern fills one card (steps), within the caps, and is worth value[steps].
    assert int((p1 * units).sum()) <= steps and np.all((p1 >= 0) & (p1 <= caps))
    assert float((p1 * prices).sum()) == pytest.approx(v1[steps])
    for g in range(steps + 1):
        brute = max(
            float(np.dot(take, prices))
            for take in itertools.product(*(range(int(c) + 1) for c in caps))
            if int(np.dot(take, units)) <= g
        )
        assert v1[g] == pytest.approx(brute)


def _value(seed: int) -> np.ndarray:
    """A monotone gap-value table (what the knapsack produces)."""
    rng = np.random.default_rng(seed + 7)
    return np.maximum.accumulate(np.concatenate(([0.0], rng.random(100) * 0.05)).cumsum())


@given(
    st.integers(0, 10_000),
    st.sampled_from([50, 160, 320, 470, 810]),
    st.floats(0.0, 1.0),
    st.integers(0, 16000),
    st.sampled_from([0.0, 4000.0, 12000.0]),
)
@settings(max_examples=80, deadline=None)
def test_price_loss_twins(seed: int, milli: int, price: float, cpu: int, per_card: float) -> None:
    cl = fgd_columns(seed)
    value = _value(seed)
    value /= value[-1]
    allowed = np.array([True, seed % 3 != 0])
    rows = np.nonzero(np.random.default_rng(seed).random(len(cl["count"])) > 0.2)[0].astype(np.intp)
    outs = []
    for fn in (price_loss_nb, price_loss_np):
        loss = np.full(len(rows), -1.0)
        card = np.full(len(rows), 99, np.int16)
        fn(
            rows, cl["free"], cl["count"], cl["model"], cl["healthy"], allowed, cl["cpu"],
            value, 10, milli, price, cpu, per_card, loss, card,
        )  # fmt: skip
        outs.append((loss, card))
    (l1, c1), (l2, c2) = outs
    assert np.array_equal(l1, l2) and np.array_equal(c1, c2)
    for i, r in enumerate(rows):
        usable = [
            c
            for c in range(cl["count"][r])
            if cl["model"][r, c] >= 0
            and cl["healthy"][r, c]
            and allowed[cl["model"][r, c]]
            and cl["free"][r, c] >= milli
        ]
        if not usable:
            assert c1[i] == -1 and l1[i] == NO_CARD_LOSS
            continue
        assert c1[i] in usable and l1[i] >= 0.0


def test_price_loss_prefers_completing_a_pattern_and_spares_cpu() -> None:
    # Gap values of a mix of 470s only: a gap earns 0.5 per 470 it holds.
    value = np.array([0.5 * (g // 47) for g in range(101)])
    free = np.array([[1000, 530, 800, 0], [1000, 1000, 0, 0]], np.int32)
    count = np.array([3, 2], np.int16)
    model = np.array([[0, 0, 0, -1], [0, 0, -1, -1]], np.int16)
    healthy = np.ones((2, 4), np.bool_)
    allowed = np.array([True])
    for fn in (price_loss_nb, price_loss_np):
        loss = np.zeros(2)
        card = np.zeros(2, np.int16)
        rows = np.array([0, 1], np.intp)
        cpu = np.array([64000, 64000], np.int64)
        cols = (free, count, model, healthy, allowed)
        fn(rows, *cols, cpu, value, 10, 470, 0.5, 0, 0.0, loss, card)
        # Row 0: the 530 gap completes a pair and is the tightest zero-loss card.
        assert card[0] == 1 and loss[0] == 0.0
        # With CPU for only 2 more cards' worth on row 0 (worth 1 + 0.5 + 0.5 = 2 before),
        # a pod taking CPU loses the gap value it can no longer serve.
        cpu = np.array([16000, 64000], np.int64)
        fn(rows, *cols, cpu, value, 10, 470, 0.5, 8000, 8000.0, loss, card)
        assert loss[0] == pytest.approx(0.5)
        assert loss[1] == 0.0
