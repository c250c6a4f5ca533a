"""gpu_summary_rows: numba equals twin, and both equal a full gpu_summary pass on the rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import gpu_summary_nb, gpu_summary_rows_nb, gpu_summary_rows_np
from tests.builders import Cluster, Request, Summary, clusters, requests, summarise


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request, np.ndarray]:
    cl = draw(clusters())
    req = draw(requests(cl.n_models))
    picked = draw(st.lists(st.integers(0, max(cl.n - 1, 0)), max_size=cl.n, unique=True))
    rows = np.array(sorted(picked) if cl.n else [], np.intp)
    return cl, req, rows


@settings(max_examples=150, deadline=None)
@given(cases())
def test_rows_refresh_equals_a_full_pass(case: tuple[Cluster, Request, np.ndarray]) -> None:
    cl, req, rows = case
    _, full = summarise(gpu_summary_nb, cl, req)
    for kernel in (gpu_summary_rows_nb, gpu_summary_rows_np):
        # Start from garbage: the refreshed rows must be overwritten, the others untouched.
        got = Summary.empty(cl.n)
        for out in got.outs():
            out[...] = 1
        kernel(*cl.cards(), cl.node_valid, rows, *req.args(), *got.outs())
        untouched = np.ones(cl.n, np.bool_)
        untouched[rows] = False
        for want, out in zip(full.outs(), got.outs(), strict=True):
            np.testing.assert_array_equal(out[rows], want[rows])
            assert (out[untouched] == 1).all()
