"""preemption_victims: the numba kernel against its NumPy twin on random clusters and victim
tables, plus hand-checked cases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import preemption_victims_nb, preemption_victims_np


def _case(seed: int, n: int, k: int, c: int) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    used = rng.integers(0, 3, (n, k))  # 0: empty slot, 1: whole card pod, 2: share
    milli = np.zeros((n, k, c), np.int32)
    gmem = np.zeros((n, k, c), np.int32)
    total = np.full((n, c), 16000, np.int32)
    free_milli = np.full((n, c), 1000, np.int32)
    free_mem = total.copy()
    for r in range(n):
        for s in range(k):
            card = int(rng.integers(0, c))
            if used[r, s] == 1 and free_milli[r, card] == 1000:
                milli[r, s, card], gmem[r, s, card] = 1000, 16000
            elif used[r, s] == 2 and free_milli[r, card] >= 300:
                milli[r, s, card], gmem[r, s, card] = 300, 4800
            else:
                used[r, s] = 0
                continue
            free_milli[r, card] -= milli[r, s, card]
            free_mem[r, card] -= gmem[r, s, card]
    n_units = n * k + 3
    unit = np.where(used > 0, np.arange(n * k).reshape(n, k), -1)
    # A few slots become members of three multi-slot units (gangs).
    for g in range(3):
        rows, ks = np.nonzero(unit >= 0)
        if len(rows):
            pick_ = rng.choice(len(rows), size=min(2, len(rows)), replace=False)
            unit[rows[pick_], ks[pick_]] = n * k + g
    unit[rng.random((n, k)) < 0.2] = -1
    cost = rng.random(n_units).round(3)
    order = np.lexsort(
        (np.where(unit >= 0, unit, 1 << 40), -cost[np.maximum(unit, 0)], unit < 0), axis=-1
    )
    order = np.where(np.take_along_axis(unit >= 0, order, axis=-1), order, -1).astype(np.int64)
    return {
        "card_free_milli": free_milli,
        "card_free_mem": free_mem,
        "card_total_mem": total,
        "card_model": np.zeros((n, c), np.int16),
        "card_healthy": rng.random((n, c)) < 0.95,
        "card_island": (np.arange(c)[None, :] // 2 * np.ones((n, 1))).astype(np.int8),
        "node_cpu_free": rng.integers(0, 8000, n).astype(np.int64),
        "node_mem_free": rng.integers(0, 1 << 34, n).astype(np.int64),
        "node_pods_free": rng.integers(0, 3, n).astype(np.int32),
        "candidates": rng.random(n) < 0.9,
        "allowed_models": np.ones(1, np.bool_),
        "slot_unit": unit.astype(np.int64),
        "slot_cpu": rng.integers(0, 4000, (n, k)).astype(np.int64),
        "slot_mem": rng.integers(0, 1 << 33, (n, k)).astype(np.int64),
        "slot_milli": milli,
        "slot_gmem": gmem,
        "order": order,
        "unit_cost": cost,
        "unit_pods": rng.integers(1, 4, n_units).astype(np.int64),
        "unit_prio": rng.integers(-5, 5, n_units).astype(np.int64),
        "unit_viol": rng.integers(0, 2, n_units).astype(np.int64),
    }


def _run(kernel: object, case: dict[str, object], req: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    n, k = case["slot_unit"].shape  # type: ignore[attr-defined]
    outs = (
        np.zeros(n, np.bool_),
        np.zeros(n, np.float64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        np.zeros((n, k), np.bool_),
    )
    a = case
    got = kernel(  # type: ignore[operator]
        a["card_free_milli"], a["card_free_mem"], a["card_total_mem"], a["card_model"],
        a["card_healthy"], a["card_island"], a["node_cpu_free"], a["node_mem_free"],
        a["node_pods_free"], a["candidates"], a["allowed_models"], *req,
        a["slot_unit"], a["slot_cpu"], a["slot_mem"], a["slot_milli"], a["slot_gmem"],
        a["order"], a["unit_cost"], a["unit_pods"], a["unit_prio"], a["unit_viol"], *outs,
    )  # fmt: skip
    return (np.asarray(got), *outs)


REQUESTS = st.tuples(
    st.sampled_from([0, 1, 2, 4]),  # cards
    st.sampled_from([0, 250, 600]),  # milli (shared when no cards)
    st.sampled_from([0, 8000]),  # GPU memory MiB
    st.sampled_from([0, 2]),  # NVLink required?
    st.integers(0, 6000),  # cpu
    st.integers(0, 1 << 33),  # memory
)


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 12),
    k=st.integers(1, 6),
    c=st.integers(1, 8),
    req=REQUESTS,
)
def test_kernel_equals_twin(seed: int, n: int, k: int, c: int, req: tuple[int, ...]) -> None:
    case = _case(seed, n, k, c)
    nb = _run(preemption_victims_nb, case, req)
    tw = _run(preemption_victims_np, case, req)
    for x, y in zip(nb, tw, strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_cheapest_unit_that_makes_room_is_the_victim() -> None:
    # One node, two cards, both held whole by slots 0 (cost 5) and 1 (cost 2): a 1-card pod
    # evicts the cheaper one, a 2-card pod both, a 3-card pod is infeasible.
    case: dict[str, object] = {
        "card_free_milli": np.zeros((1, 2), np.int32),
        "card_free_mem": np.zeros((1, 2), np.int32),
        "card_total_mem": np.full((1, 2), 16000, np.int32),
        "card_model": np.zeros((1, 2), np.int16),
        "card_healthy": np.ones((1, 2), np.bool_),
        "card_island": np.zeros((1, 2), np.int8),
        "node_cpu_free": np.array([1000], np.int64),
        "node_mem_free": np.array([1 << 30], np.int64),
        "node_pods_free": np.array([5], np.int32),
        "candidates": np.ones(1, np.bool_),
        "allowed_models": np.ones(1, np.bool_),
        "slot_unit": np.array([[0, 1]], np.int64),
        "slot_cpu": np.zeros((1, 2), np.int64),
        "slot_mem": np.zeros((1, 2), np.int64),
        "slot_milli": np.array([[[1000, 0], [0, 1000]]], np.int32),
        "slot_gmem": np.array([[[16000, 0], [0, 16000]]], np.int32),
        "order": np.array([[0, 1]], np.int64),  # most expensive first
        "unit_cost": np.array([5.0, 2.0]),
        "unit_pods": np.ones(2, np.int64),
        "unit_prio": np.array([1, 3], np.int64),
        "unit_viol": np.zeros(2, np.int64),
    }
    for kernel in (preemption_victims_nb, preemption_victims_np):
        one = _run(kernel, case, (1, 0, 0, 0, 0, 0))
        assert one[1].tolist() == [True] and one[2].tolist() == [2.0]
        assert one[7].tolist() == [[False, True]] and one[4].tolist() == [3]
        two = _run(kernel, case, (2, 0, 0, 0, 0, 0))
        assert two[2].tolist() == [7.0] and two[3].tolist() == [2]
        three = _run(kernel, case, (3, 0, 0, 0, 0, 0))
        assert three[0] == 0 and three[1].tolist() == [False]
