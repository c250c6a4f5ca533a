"""Score kernels: numba equals twin on random summaries, scores in [0, 100], examples."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
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
from tests.builders import (
    Cluster,
    Request,
    Summary,
    clusters,
    col_bool,
    col_i16,
    col_i32,
    requests,
    score_one_node,
    summarise,
)

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


def test_packing_and_best_fit_examples() -> None:
    assert score_one_node(packing_score_nb, col_i16(8), col_bool(False), 1) == 30.0
    assert score_one_node(packing_score_nb, col_i16(1), col_bool(False), 0) == 100.0
    assert score_one_node(packing_score_nb, col_i16(3), col_bool(True), 0) == 70.0
    assert score_one_node(best_fit_score_nb, col_i16(8), col_i32(250), 0) == 75.0
    assert score_one_node(best_fit_score_nb, col_i16(8), col_i32(2), 2) == 75.0
