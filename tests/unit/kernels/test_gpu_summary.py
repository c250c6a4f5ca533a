"""gpu_summary: the numba kernel equals its NumPy twin; hand-computed examples."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import choose_cards_nb, choose_cards_np, gpu_summary_nb, gpu_summary_np
from tests.builders import (
    ALL,
    Cluster,
    Request,
    build_cluster,
    clusters,
    one_node_cluster,
    requests,
    summarise,
)

SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request, np.ndarray]:
    cl = draw(clusters())
    req = draw(requests(cl.n_models))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cand = rng.random(cl.n) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    return cl, req, cand


@SETTINGS
@given(cases())
def test_kernel_equals_twin(case: tuple[Cluster, Request, np.ndarray]) -> None:
    cl, req, cand = case
    n_nb, nb = summarise(gpu_summary_nb, cl, req, cand)
    n_np, ref = summarise(gpu_summary_np, cl, req, cand)
    assert n_nb == n_np == int(ref.fit.sum())
    for got, want in zip(nb.outs(), ref.outs(), strict=True):
        np.testing.assert_array_equal(got, want)


@SETTINGS
@given(cases())
def test_rows_outside_candidates_are_cleared(case: tuple[Cluster, Request, np.ndarray]) -> None:
    cl, req, cand = case
    _, s = summarise(gpu_summary_nb, cl, req, cand)
    off = ~(cand & cl.node_valid)
    assert not s.fit[off].any()
    assert (s.intact[off] == 0).all() and (s.usable[off] == 0).all()
    assert (s.best_leftover[off] == -1).all() and (s.free_milli_total[off] == 0).all()
    assert (s.best_leftover[~s.fit] == -1).all()
    assert (s.intact <= s.usable).all()


def test_many_blocks_and_odd_slot_counts() -> None:
    # Beyond one block of rows, and slot counts where the 8-slot fast path does not apply.
    for c in (1, 3, 8, 12):
        cl = build_cluster(seed=c, n=1500, c=c, n_models=3, p_intact=0.5)
        req = Request(2, 0, 0, np.ones(3, dtype=np.bool_), 2)
        shared = Request(0, 300, 9000, np.array([True, False, True]), 0)
        for r in (req, shared):
            _, nb = summarise(gpu_summary_nb, cl, r)
            _, ref = summarise(gpu_summary_np, cl, r)
            for got, want in zip(nb.outs(), ref.outs(), strict=True):
                np.testing.assert_array_equal(got, want)


def test_more_than_64_models_uses_the_gather_path() -> None:
    cl = build_cluster(seed=5, n=300, c=8, n_models=70, p_intact=0.5)
    allowed = np.random.default_rng(1).random(70) < 0.5
    for r in (Request(1, 0, 0, allowed, 0), Request(0, 250, 0, allowed, 0)):
        _, nb = summarise(gpu_summary_nb, cl, r)
        _, ref = summarise(gpu_summary_np, cl, r)
        assert nb.fit.any()
        for got, want in zip(nb.outs(), ref.outs(), strict=True):
            np.testing.assert_array_equal(got, want)


def test_80gb_whole_card_job_fits_where_intact_cards_exist() -> None:
    cl = one_node_cluster([0, 500, 1000, 1000])
    _, s = summarise(gpu_summary_nb, cl, Request(1, 0, 81920, ALL, 0))
    assert s.fit[0] and s.intact[0] == 2 and s.best_leftover[0] == 1
    assert s.usable[0] == 4 and s.free_milli_total[0] == 2500
    # The same job does not fit on 40 GB cards, intact or not.
    small = one_node_cluster([1000, 1000], total_mem=40960)
    _, s = summarise(gpu_summary_nb, small, Request(1, 0, 81920, ALL, 0))
    assert not s.fit[0] and s.intact[0] == 0


def test_half_used_node_refuses_whole_card_but_takes_half_share() -> None:
    cl = one_node_cluster([500, 500, 500, 500])
    _, s = summarise(gpu_summary_nb, cl, Request(1, 0, 0, ALL, 0))
    assert not s.fit[0] and s.intact[0] == 0
    _, s = summarise(gpu_summary_nb, cl, Request(0, 500, 0, ALL, 0))
    assert s.fit[0] and s.best_leftover[0] == 0 and s.best_is_partial[0]


def test_shared_memory_request_raises_the_milli_need() -> None:
    # 20 GB of an 80 GB card is a quarter of it: 250 milli, so a 200-milli card is too small
    # even for a 100-milli pod, and the 400-milli card is the best fit (150 left).
    cl = one_node_cluster([200, 400, 1000])
    _, s = summarise(gpu_summary_nb, cl, Request(0, 100, 20480, ALL, 0))
    assert s.fit[0] and s.best_leftover[0] == 150 and s.best_is_partial[0]


def test_nvlink_required_needs_one_known_island() -> None:
    split = one_node_cluster([1000] * 4, island=[0, 0, 1, 1])
    _, s = summarise(gpu_summary_nb, split, Request(4, 0, 0, ALL, 2))
    assert not s.fit[0]
    _, s = summarise(gpu_summary_nb, split, Request(4, 0, 0, ALL, 1))
    assert s.fit[0]
    unknown = one_node_cluster([1000] * 4, island=[-1] * 4)
    _, s = summarise(gpu_summary_nb, unknown, Request(2, 0, 0, ALL, 2))
    assert not s.fit[0]
    _, s = summarise(gpu_summary_nb, unknown, Request(2, 0, 0, ALL, 1))
    assert s.fit[0]


def test_disallowed_and_unhealthy_cards_do_not_count() -> None:
    cl = one_node_cluster([1000, 1000, 1000])
    cl.card_healthy[0, 0] = False
    _, s = summarise(gpu_summary_nb, cl, Request(3, 0, 0, ALL, 0))
    assert not s.fit[0] and s.intact[0] == 2 and s.usable[0] == 2
    _, s = summarise(gpu_summary_nb, cl, Request(1, 0, 0, np.zeros(1, dtype=np.bool_), 0))
    assert not s.fit[0] and s.usable[0] == 0


def test_over_allocated_card_counts_no_free_share() -> None:
    # The cache keeps pods the API bound beyond a card's share, so free_milli can go
    # negative; the 8-slot SWAR sum must neither borrow across lanes nor differ from the twin.
    for c in (8, 4):
        cl = one_node_cluster([-200] + [1000] * (c - 1))
        allowed = np.ones(1, dtype=np.bool_)
        for req in (Request(1, 0, 0, allowed, 0), Request(0, 300, 0, allowed, 0)):
            _, nb = summarise(gpu_summary_nb, cl, req)
            _, ref = summarise(gpu_summary_np, cl, req)
            assert nb.free_milli_total[0] == ref.free_milli_total[0] == (c - 1) * 1000
            for got, want in zip(nb.outs(), ref.outs(), strict=True):
                np.testing.assert_array_equal(got, want)


def test_card_of_unknown_memory_serves_compute_shares_only() -> None:
    # A GFD node without the nvidia.com/gpu.memory label: card memory 0 (unknown).
    cl = one_node_cluster([1000, 300], total_mem=0)
    for kernel in (gpu_summary_nb, gpu_summary_np):
        _, s = summarise(kernel, cl, Request(0, 250, 0, ALL, 0))
        assert s.fit[0] and s.best_leftover[0] == 50 and s.best_is_partial[0]
        _, s = summarise(kernel, cl, Request(0, 250, 1024, ALL, 0))
        assert not s.fit[0]
    for chooser in (choose_cards_nb, choose_cards_np):
        assert list(chooser(*cl.cards(), cl.card_temp, 0, 0, 250, 0, ALL, 0)) == [1]
        assert list(chooser(*cl.cards(), cl.card_temp, 0, 0, 250, 1024, ALL, 0)) == []
