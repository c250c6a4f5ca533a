"""The FGD paper's baseline score kernels equal their NumPy twins."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.kernels.fgd_baselines import (
    bestfit_raw_nb,
    bestfit_raw_np,
    clustering_score_nb,
    clustering_score_np,
    dotprod_score_nb,
    dotprod_score_np,
    packing_score_fgd_nb,
    packing_score_fgd_np,
)
from tests.builders import fgd_columns


@pytest.mark.parametrize("seed", range(6))
def test_baseline_twins(seed: int) -> None:
    cl = fgd_columns(seed)
    rows = np.flatnonzero(cl["valid"])
    rng = np.random.default_rng(seed)
    tags = rng.integers(0, 3, size=(len(cl["count"]), 9)).astype(np.int32)
    for pc, gpu_total, milli, num, tag in [
        (4000, 300, 300, 1, 0),
        (12000, 2000, 1000, 2, 2),
        (2000, 0, 0, 0, -1),
    ]:
        for nb, np_, extra in [
            (bestfit_raw_nb, bestfit_raw_np, (cl["cpu"], pc, gpu_total)),
            (dotprod_score_nb, dotprod_score_np, (cl["cpu"], pc, gpu_total)),
            (packing_score_fgd_nb, packing_score_fgd_np, (milli, num)),
            (clustering_score_nb, clustering_score_np, (tags, tag)),
        ]:
            a = np.full(len(rows), -1.0)
            b = np.full(len(rows), -2.0)
            nb(rows, cl["free"], cl["count"], *extra, a)
            np_(rows, cl["free"], cl["count"], *extra, b)
            np.testing.assert_array_equal(a, b)
