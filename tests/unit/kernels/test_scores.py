"""Score kernels: numba equals twin on random summaries, scores in [0, 100], examples."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import (
    allocated_score_nb,
    allocated_score_np,
    best_fit_score_nb,
    best_fit_score_np,
    frag_score_nb,
    frag_score_np,
    gpu_summary_np,
    packing_score_nb,
    packing_score_np,
    thermal_score_nb,
    thermal_score_np,
)

from ._clusters import Cluster, Request, Summary, clusters, requests, summarise

Kernel = Callable[..., None]


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request, Summary]:
    cl = draw(clusters())
    req = draw(requests(cl.n_models))
    _, s = summarise(gpu_summary_np, cl, req)
    return cl, req, s


def both(nb: Kernel, np_: Kernel, *args: object) -> np.ndarray:
    n = len(args[0])  # type: ignore[arg-type]
    got = np.full(n, -7.0)
    want = np.full(n, -7.0)
    nb(*args, got)
    np_(*args, want)
    np.testing.assert_array_equal(got, want)
    assert ((got >= 0.0) & (got <= 100.0)).all()
    return got


@settings(max_examples=150, deadline=None)
@given(cases(), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3))
def test_scores_equal_twins(
    case: tuple[Cluster, Request, Summary], w_cpu: int, w_mem: int, w_gpu: int
) -> None:
    cl, req, s = case
    rows = s.fit
    k = req.req_cards
    out = both(
        frag_score_nb,
        frag_score_np,
        rows,
        s.intact,
        s.usable,
        s.best_leftover,
        s.best_is_partial,
        k,
    )
    assert (out[~rows] == 0.0).all()
    both(packing_score_nb, packing_score_np, rows, s.intact, s.best_is_partial, k)
    both(best_fit_score_nb, best_fit_score_np, rows, s.usable, s.best_leftover, k)
    gpu_milli = 1000 * k if k > 0 else req.req_milli
    for most in (False, True):
        both(
            allocated_score_nb,
            allocated_score_np,
            cl.node_valid,
            cl.node_cpu_alloc,
            cl.node_cpu_free,
            cl.node_mem_alloc,
            cl.node_mem_free,
            s.usable,
            s.free_milli_total,
            1500,
            2**30,
            gpu_milli,
            w_cpu,
            w_mem,
            w_gpu,
            most,
        )
    both(thermal_score_nb, thermal_score_np, cl.node_valid, cl.node_temp, 50.0, 82.0)
    both(thermal_score_nb, thermal_score_np, cl.node_valid, cl.node_temp, 60.0, 60.0)


def one(kernel: Kernel, *args: object) -> float:
    out = np.zeros(1)
    kernel(np.ones(1, dtype=np.bool_), *args, out)
    return float(out[0])


def i16(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int16)


def i32(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int32)


def b(v: bool) -> np.ndarray:
    return np.array([v], dtype=np.bool_)


def test_frag_score_examples() -> None:
    # Whole cards: filling all 4 intact cards is best, 1 of 8 is poor.
    assert one(frag_score_nb, i16(4), i16(8), i32(0), b(False), 4) == 100.0
    assert one(frag_score_nb, i16(8), i16(8), i32(7), b(False), 1) == 12.5
    # Shared: a tight partial card beats tearing; tearing prefers nodes with few intact.
    assert one(frag_score_nb, i16(8), i16(8), i32(0), b(True), 0) == 100.0
    assert one(frag_score_nb, i16(8), i16(8), i32(500), b(True), 0) == 75.0
    assert one(frag_score_nb, i16(8), i16(8), i32(750), b(False), 0) == 0.0
    assert one(frag_score_nb, i16(2), i16(8), i32(750), b(False), 0) == 30.0


def test_packing_and_best_fit_examples() -> None:
    assert one(packing_score_nb, i16(8), b(False), 1) == 30.0
    assert one(packing_score_nb, i16(1), b(False), 0) == 100.0
    assert one(packing_score_nb, i16(3), b(True), 0) == 70.0
    assert one(best_fit_score_nb, i16(8), i32(250), 0) == 75.0
    assert one(best_fit_score_nb, i16(8), i32(2), 2) == 75.0


def test_allocated_scores_follow_kube_scheduler() -> None:
    # cpu: 4000 of 8000 used + 2000 asked -> least (8000-6000)*100//8000 = 25, most 75.
    # mem: 0 of 1000 used + 500 -> least 50, most 50. gpu: 8 cards, 4000 free, 1000 asked
    # -> requested 5000 of 8000: least 37, most 62. Weighted 1:1:2 -> (25+50+74)//4 = 37.
    args = (
        np.array([8000], dtype=np.int64),
        np.array([4000], dtype=np.int64),
        np.array([1000], dtype=np.int64),
        np.array([1000], dtype=np.int64),
        i16(8),
        i32(4000),
        2000,
        500,
        1000,
    )
    assert one(allocated_score_nb, *args, 1, 1, 2, False) == (25 + 50 + 2 * 37) // 4
    assert one(allocated_score_nb, *args, 1, 1, 2, True) == (75 + 50 + 2 * 62) // 4
    # Without a GPU request the GPU does not count (kube's extended-resource rule).
    no_gpu = (*args[:-1], 0)
    assert one(allocated_score_nb, *no_gpu, 1, 1, 2, False) == (25 + 50) // 2


@pytest.mark.parametrize(
    ("temp", "score"),
    [(40.0, 100.0), (50.0, 100.0), (66.0, 50.0), (82.0, 0.0), (90.0, 0.0), (float("nan"), 50.0)],
)
def test_thermal_score(temp: float, score: float) -> None:
    assert one(thermal_score_nb, np.array([temp], dtype=np.float32), 50.0, 82.0) == score
