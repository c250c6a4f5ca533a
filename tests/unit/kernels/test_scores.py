"""thermal_score: numba equals twin, scores within [0, 100]."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from gpusched.kernels import thermal_score_nb, thermal_score_np
from tests.builders import Cluster, clusters


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_scores_equal_twins(cl: Cluster) -> None:
    for cool, red in ((50.0, 82.0), (60.0, 60.0)):
        got = np.full(cl.n, -7.0)
        want = np.full(cl.n, -7.0)
        thermal_score_nb(cl.node_valid, cl.node_temp, cool, red, got)
        thermal_score_np(cl.node_valid, cl.node_temp, cool, red, want)
        np.testing.assert_array_equal(got, want)
        assert ((got >= 0.0) & (got <= 100.0)).all()
