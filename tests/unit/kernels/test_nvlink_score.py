"""nvlink_score: twin equality on random clusters, agreement with choose_cards, and the
order of the cases (fits < breaks an island < spans; unknown layout neutral)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import choose_cards_np, gpu_summary_np, nvlink_score_nb, nvlink_score_np
from gpusched.kernels.nvlink_score import SPAN_NONE, SPAN_PREFERRED, UNKNOWN
from tests.builders import Cluster, Request, clusters, one_node_cluster, requests, summarise


def score(kernel: object, cl: Cluster, req: Request, rows: np.ndarray) -> np.ndarray:
    out = np.full(len(rows), -7.0)  # garbage: every row must be written
    kernel(  # type: ignore[operator]
        rows,
        cl.card_free_milli,
        cl.card_free_mem,
        cl.card_model,
        cl.card_healthy,
        cl.card_island,
        req.req_cards,
        req.req_mem,
        req.allowed_models,
        req.nvlink,
        out,
    )
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request]:
    cl = draw(clusters(max_n=32))
    if draw(st.booleans()):
        # Most random rows have some card of unknown island; make the layout known.
        present = cl.card_model >= 0
        cl.card_island[present & (cl.card_island < 0)] = 0
    req = draw(requests(cl.n_models))
    req.req_cards = max(req.req_cards, draw(st.integers(1, 8)))
    req.req_milli = 0
    return cl, req


@settings(max_examples=200, deadline=None)
@given(cases())
def test_kernel_equals_twin_and_follows_choose_cards(case: tuple[Cluster, Request]) -> None:
    cl, req = case
    _, s = summarise(gpu_summary_np, cl, req)
    rows = np.flatnonzero(s.fit & cl.node_valid).astype(np.intp)
    got = score(nvlink_score_nb, cl, req, rows)
    np.testing.assert_array_equal(got, score(nvlink_score_np, cl, req, rows))
    assert ((got >= 0.0) & (got <= 100.0)).all()
    for i, row in enumerate(rows.tolist()):
        present = cl.card_model[row] >= 0
        if (cl.card_island[row][present] < 0).any():
            assert got[i] == UNKNOWN
            continue
        cards = choose_cards_np(*cl.cards(), cl.card_temp, row, *req.args())
        one_island = np.unique(cl.card_island[row, cards]).size == 1
        # Spanning scores below every fit inside one island, and only when the cards span.
        assert (got[i] <= SPAN_NONE) == (not one_island)


def test_the_cases_in_order() -> None:
    req = Request(4, 0, 0, np.ones(1, np.bool_), 1)
    rows = np.zeros(1, np.intp)

    def one(free: list[int], island: list[int], nvlink: int = 1, k: int = 4) -> float:
        cl = one_node_cluster(free, island=island)
        r = Request(k, 0, 0, req.allowed_models, nvlink)
        return float(score(nvlink_score_nb, cl, r, rows)[0])

    exact = one([1000] * 4 + [0] * 4, [0] * 4 + [1] * 4)  # island 0 free, island 1 busy
    # k=2: island 1 (3 free of 4) is the tightest; island 0 stays whole.
    partial = one([1000] * 4 + [0, 1000, 1000, 1000], [0] * 4 + [1] * 4, k=2)
    breaks_8 = one([1000] * 8, [0] * 8)
    breaks_6 = one([1000] * 6, [0] * 6)
    spans = one([1000, 1000, 0, 0, 1000, 1000, 0, 0], [0] * 4 + [1] * 4)
    spans_none = one([1000, 1000, 0, 0, 1000, 1000, 0, 0], [0] * 4 + [1] * 4, nvlink=0)
    unknown = one([1000] * 8, [-1] * 8)
    assert exact == 100.0
    assert partial == 100.0 - 30.0 * 1 / 4
    assert breaks_8 < breaks_6 < partial
    assert (spans, spans_none) == (SPAN_PREFERRED, SPAN_NONE)
    assert spans < spans_none < breaks_8
    assert unknown == UNKNOWN
    assert np.array_equal(
        score(nvlink_score_np, one_node_cluster([1000] * 8, island=[0] * 8), req, rows), [45.0]
    )
