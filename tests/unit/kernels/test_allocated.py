"""The Least/MostAllocated kernels follow kube-scheduler."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpusched.kernels import (
    allocated_score_nb,
)
from tests.builders import (
    col_i16,
    col_i32,
    score_one_node,
)

Kernel = Callable[..., None]


def test_allocated_scores_follow_kube_scheduler() -> None:
    # cpu: 4000 of 8000 used + 2000 asked -> least (8000-6000)*100//8000 = 25, most 75.
    # mem: 0 of 1000 used + 500 -> least 50, most 50. gpu: 8 cards, 4000 free, 1000 asked
    # -> requested 5000 of 8000: least 37, most 62. Weighted 1:1:2 -> (25+50+74)//4 = 37.
    args = (
        np.array([8000], dtype=np.int64),
        np.array([4000], dtype=np.int64),
        np.array([1000], dtype=np.int64),
        np.array([1000], dtype=np.int64),
        col_i16(8),
        col_i32(4000),
        2000,
        500,
        1000,
    )
    assert score_one_node(allocated_score_nb, *args, 1, 1, 2, False) == (25 + 50 + 2 * 37) // 4
    assert score_one_node(allocated_score_nb, *args, 1, 1, 2, True) == (75 + 50 + 2 * 62) // 4
    # Without a GPU request the GPU does not count (kube's extended-resource rule).
    no_gpu = (*args[:-1], 0)
    assert score_one_node(allocated_score_nb, *no_gpu, 1, 1, 2, False) == (25 + 50) // 2
