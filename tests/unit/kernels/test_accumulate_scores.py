"""accumulate_scores: numba equals twin, bit for bit; the range check catches NaN and bounds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpusched.kernels import accumulate_scores_nb, accumulate_scores_np

scores = st.floats(-5.0, 105.0, width=64) | st.just(float("nan"))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 64).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=st.floats(0.0, 1e4, width=64)),
            hnp.arrays(np.float64, n, elements=scores),
        )
    ),
    st.floats(1e-6, 10.0),
)
def test_accumulate_equals_twin(arrays: tuple[np.ndarray, np.ndarray], weight: float) -> None:
    total, s = arrays
    got, want = total.copy(), total.copy()
    ok_nb = accumulate_scores_nb(got, s, weight, 0.0, 100.0)
    ok_np = accumulate_scores_np(want, s, weight, 0.0, 100.0)
    assert ok_nb == ok_np
    np.testing.assert_array_equal(got, want)
    # The sum is exactly NumPy's `total += weight * scores`.
    np.testing.assert_array_equal(got, total + weight * s)


def test_range_check() -> None:
    total = np.zeros(3)
    assert accumulate_scores_nb(total, np.array([0.0, 50.0, 100.0]), 2.0, 0.0, 100.0)
    assert total.tolist() == [0.0, 100.0, 200.0]
    assert not accumulate_scores_nb(np.zeros(2), np.array([1.0, np.nan]), 1.0, 0.0, 100.0)
    assert not accumulate_scores_nb(np.zeros(2), np.array([100.5, 1.0]), 1.0, 0.0, 100.0)
    assert not accumulate_scores_nb(np.zeros(1), np.array([-0.1]), 1.0, 0.0, 100.0)
