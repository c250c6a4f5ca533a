"""choose_cards: twin equality, agreement with gpu_summary, never over-allocates."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import choose_cards_nb, choose_cards_np, gpu_summary_np
from tests.builders import ALL, Cluster, Request, clusters, one_node_cluster, requests, summarise


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request]:
    cl = draw(clusters(max_n=24))
    return cl, draw(requests(cl.n_models))


def pick(kernel: Callable[..., np.ndarray], cl: Cluster, req: Request, row: int) -> np.ndarray:
    return kernel(*cl.cards(), row, *req.args())


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
        got = choose_cards_nb(*cl.cards(), 0, 2, 0, 0, ALL, nvlink)
        assert got.tolist() == [4, 5]


def test_whole_cards_span_islands_only_when_allowed() -> None:
    cl = one_node_cluster([1000, 1000, 500, 1000, 1000], island=[0, 0, 0, 1, 1])
    assert choose_cards_nb(*cl.cards(), 0, 3, 0, 0, ALL, 1).tolist() == [0, 1, 3]
    assert choose_cards_nb(*cl.cards(), 0, 3, 0, 0, ALL, 2).size == 0


def test_shared_pod_takes_the_tightest_card() -> None:
    cl = one_node_cluster([1000, 600, 300, 250])
    assert choose_cards_nb(*cl.cards(), 0, 0, 250, 0, ALL, 0).tolist() == [3]
    assert choose_cards_nb(*cl.cards(), 0, 0, 500, 0, ALL, 0).tolist() == [1]
    assert choose_cards_nb(*cl.cards(), 0, 0, 700, 0, ALL, 0).tolist() == [0]


def test_half_used_node_takes_a_half_share_but_no_whole_card() -> None:
    cl = one_node_cluster([500, 500, 500, 500])
    assert choose_cards_nb(*cl.cards(), 0, 1, 0, 0, ALL, 0).size == 0
    assert choose_cards_nb(*cl.cards(), 0, 0, 500, 0, ALL, 0).tolist() == [0]
