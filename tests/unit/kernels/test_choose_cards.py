"""choose_cards: twin equality, agreement with gpu_summary, never over-allocates; cool cards
first among equally good ones, and exactly the old choice without telemetry."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import choose_cards_nb, choose_cards_np, gpu_summary_np
from gpusched.kernels._card_rules import shared_need_np, usable_cards_np
from tests.builders import ALL, Cluster, Request, clusters, one_node_cluster, requests, summarise


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request]:
    cl = draw(clusters(max_n=24))
    return cl, draw(requests(cl.n_models))


def pick(kernel: Callable[..., np.ndarray], cl: Cluster, req: Request, row: int) -> np.ndarray:
    return kernel(*cl.cards(), cl.card_temp, row, *req.args())


def allowed(cl: Cluster, req: Request, row: int, c: int) -> bool:
    m = int(cl.card_model[row, c])
    return (
        bool(cl.card_healthy[row, c])
        and 0 <= m < req.allowed_models.size
        and bool(req.allowed_models[m])
    )


@settings(max_examples=150, deadline=None)
@given(cases())
def test_choice_is_valid_and_agrees_with_summary(case: tuple[Cluster, Request]) -> None:
    cl, req = case
    _, s = summarise(gpu_summary_np, cl, req)
    for row in range(cl.n):
        if not cl.node_valid[row]:
            continue
        got = pick(choose_cards_nb, cl, req, row)
        np.testing.assert_array_equal(got, pick(choose_cards_np, cl, req, row))
        assert got.dtype == np.int64
        assert (got.size > 0) == bool(s.fit[row])
        if got.size == 0:
            continue
        assert np.unique(got).size == got.size
        milli = cl.card_free_milli[row].astype(np.int64)
        mem = cl.card_free_mem[row].astype(np.int64)
        if req.req_cards > 0:
            assert got.size == req.req_cards
            for c in got:
                assert allowed(cl, req, row, int(c))
                assert milli[c] == 1000 and mem[c] >= req.req_mem
            islands = cl.card_island[row, got]
            if req.nvlink == 2:
                assert (islands >= 0).all() and (islands == islands[0]).all()
            # Whole cards are taken whole: nothing is left on them, nothing goes negative.
            milli[got] = 0
            mem[got] = 0
        else:
            (c,) = got
            assert allowed(cl, req, row, int(c))
            total = int(cl.card_total_mem[row, c])
            # A card of unknown memory (0) is chosen only for a pod asking no memory.
            assert total > 0 or req.req_mem == 0
            by_mem = -(-req.req_mem * 1000 // total) if total > 0 else 0
            need_milli = max(req.req_milli, by_mem)
            need_mem = max(req.req_mem, req.req_milli * total // 1000)
            assert milli[c] - need_milli == s.best_leftover[row]
            assert bool(milli[c] < 1000) == bool(s.best_is_partial[row])
            milli[c] -= need_milli
            mem[c] -= need_mem
        assert (milli >= 0).all() and (mem >= 0).all()


def test_whole_cards_keep_the_big_island() -> None:
    # Island 0 has 4 intact cards, island 1 has 2: a 2-card job takes island 1.
    cl = one_node_cluster([1000] * 6, island=[0, 0, 0, 0, 1, 1])
    for nvlink in (0, 1, 2):
        got = choose_cards_nb(*cl.cards(), cl.card_temp, 0, 2, 0, 0, ALL, nvlink)
        assert got.tolist() == [4, 5]


def test_whole_cards_span_islands_only_when_allowed() -> None:
    cl = one_node_cluster([1000, 1000, 500, 1000, 1000], island=[0, 0, 0, 1, 1])
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 3, 0, 0, ALL, 1).tolist() == [0, 1, 3]
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 3, 0, 0, ALL, 2).size == 0


def test_shared_pod_takes_the_tightest_card() -> None:
    cl = one_node_cluster([1000, 600, 300, 250])
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 0, 250, 0, ALL, 0).tolist() == [3]
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 0, 500, 0, ALL, 0).tolist() == [1]
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 0, 700, 0, ALL, 0).tolist() == [0]


def test_half_used_node_takes_a_half_share_but_no_whole_card() -> None:
    cl = one_node_cluster([500, 500, 500, 500])
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 1, 0, 0, ALL, 0).size == 0
    assert choose_cards_nb(*cl.cards(), cl.card_temp, 0, 0, 500, 0, ALL, 0).tolist() == [0]


# --- cool cards first ----------------------------------------------------------------------


def legacy_choice(cl: Cluster, req: Request, row: int) -> list[int]:
    """The choice before temperatures existed (the previous NumPy twin, frozen here as the
    oracle): lowest-index cards of the tightest island, lowest-index best fit."""
    free_milli = cl.card_free_milli[row].astype(np.int64)
    free_mem = cl.card_free_mem[row].astype(np.int64)
    usable = usable_cards_np(cl.card_model[row], cl.card_healthy[row], req.allowed_models)
    if req.req_cards > 0:
        idx = np.flatnonzero(usable & (free_milli == 1000) & (free_mem >= req.req_mem))
        if idx.size < req.req_cards:
            return []
        islands = cl.card_island[row][idx]
        grouped = islands >= 0 if req.nvlink == 2 else np.ones(idx.size, dtype=np.bool_)
        ids, first, counts = np.unique(islands[grouped], return_index=True, return_counts=True)
        holds = counts >= req.req_cards
        if holds.any():
            first_card = idx[grouped][first][holds]
            best = np.lexsort((first_card, counts[holds]))[0]
            return [int(c) for c in idx[islands == ids[holds][best]][: req.req_cards]]
        return [] if req.nvlink == 2 else [int(c) for c in idx[: req.req_cards]]
    need_milli, need_mem, has_mem = shared_need_np(
        req.req_milli, req.req_mem, cl.card_total_mem[row]
    )
    fits = usable & has_mem & (free_milli >= need_milli) & (free_mem >= need_mem)
    if not fits.any():
        return []
    return [int(np.argmin(np.where(fits, free_milli - need_milli, 1 << 30)))]


def heat(cl: Cluster, row: int) -> np.ndarray:
    """The documented ranking temperature: the reading, else the node's median, else 0."""
    t = cl.card_temp[row].astype(np.float64)
    known = t[~np.isnan(t)]
    return np.where(np.isnan(t), np.median(known) if known.size else 0.0, t)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_without_telemetry_the_choice_is_the_old_one(case: tuple[Cluster, Request]) -> None:
    cl, req = case
    cl.card_temp[:] = np.nan
    for row in range(cl.n):
        want = legacy_choice(cl, req, row)
        for kernel in (choose_cards_nb, choose_cards_np):
            assert pick(kernel, cl, req, row).tolist() == want
    # A node whose cards all read the same temperature is as good as one with none.
    cl.card_temp[:] = 61.0
    for row in range(cl.n):
        assert pick(choose_cards_nb, cl, req, row).tolist() == legacy_choice(cl, req, row)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_coolest_among_equally_good_cards(case: tuple[Cluster, Request]) -> None:
    """Same quality by the old rules (island size, best-fit leftover), and no card left out
    that was as good and strictly cooler than one taken."""
    cl, req = case
    for row in range(cl.n):
        got = pick(choose_cards_nb, cl, req, row)
        old = legacy_choice(cl, req, row)
        assert (got.size > 0) == bool(old)
        if got.size == 0:
            continue
        assert got.tolist() == sorted(got.tolist())
        h = heat(cl, row)
        if req.req_cards == 0:
            # The same leftover as the old best fit, and the coolest card with it.
            (c,) = got
            (o,) = old
            milli = cl.card_free_milli[row]
            assert milli[c] == milli[o] or cl.card_total_mem[row, c] != cl.card_total_mem[row, o]
            assert h[c] <= h[o]
            continue
        islands = cl.card_island[row]
        pool = _eligible(cl, req, row)
        if (islands[old] == islands[old[0]]).all():
            # An island holds k (spanning never lands in one): the same island as before.
            assert (islands[got] == islands[old[0]]).all()
            pool = pool[islands[pool] == islands[old[0]]]
        left = np.setdiff1d(pool, got)
        if left.size:
            assert h[left].min() >= h[got].max()


def _eligible(cl: Cluster, req: Request, row: int) -> np.ndarray:
    usable = usable_cards_np(cl.card_model[row], cl.card_healthy[row], req.allowed_models)
    free = (cl.card_free_milli[row] == 1000) & (cl.card_free_mem[row] >= req.req_mem)
    return np.flatnonzero(usable & free)


def test_whole_cards_take_the_coolest_of_the_island() -> None:
    cl = one_node_cluster([1000] * 8, island=[0, 0, 0, 0, 1, 1, 1, 1])
    cl.card_temp[0] = [70, 71, 55, 80, 40, 41, 42, 43]
    for kernel in (choose_cards_nb, choose_cards_np):
        # Islands tie on size: the first stays the choice (NVLinkTopology scores that
        # island), however cool the other; inside it the two coolest (55, 70).
        assert kernel(*cl.cards(), cl.card_temp, 0, 2, 0, 0, ALL, 0).tolist() == [0, 2]
        # Spanning (no island holds 5): the five coolest of all.
        assert kernel(*cl.cards(), cl.card_temp, 0, 5, 0, 0, ALL, 0).tolist() == [2, 4, 5, 6, 7]


def test_the_tightest_island_still_wins_over_a_cooler_bigger_one() -> None:
    cl = one_node_cluster([1000] * 6, island=[0, 0, 0, 0, 1, 1])
    cl.card_temp[0] = [30, 30, 30, 30, 80, 80]
    for kernel in (choose_cards_nb, choose_cards_np):
        assert kernel(*cl.cards(), cl.card_temp, 0, 2, 0, 0, ALL, 0).tolist() == [4, 5]


def test_a_card_without_reading_counts_as_the_median() -> None:
    # Known 40, 60, 80 -> median 60: the unknown card 3 ranks with the 60 °C card, after
    # it on the index tie-break, and before the 80 °C card.
    cl = one_node_cluster([1000] * 4)
    cl.card_temp[0] = [80, 60, 40, np.nan]
    for kernel in (choose_cards_nb, choose_cards_np):
        assert kernel(*cl.cards(), cl.card_temp, 0, 1, 0, 0, ALL, 0).tolist() == [2]
        assert kernel(*cl.cards(), cl.card_temp, 0, 2, 0, 0, ALL, 0).tolist() == [1, 2]
        assert kernel(*cl.cards(), cl.card_temp, 0, 3, 0, 0, ALL, 0).tolist() == [1, 2, 3]


def test_shared_pod_best_fit_ties_go_to_the_coolest_card() -> None:
    cl = one_node_cluster([500, 500, 1000, 500])
    cl.card_temp[0] = [75, 66, 20, 70]
    for kernel in (choose_cards_nb, choose_cards_np):
        # Cards 0, 1, 3 leave the same 250 free; card 2 (coolest) is not a best fit.
        assert kernel(*cl.cards(), cl.card_temp, 0, 0, 250, 0, ALL, 0).tolist() == [1]
