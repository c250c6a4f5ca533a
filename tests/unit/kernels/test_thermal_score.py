"""thermal_score on hand-made temperatures."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpusched.kernels import (
    thermal_score_nb,
)
from tests.builders import score_one_node

Kernel = Callable[..., None]


@pytest.mark.parametrize(
    ("temp", "score"),
    [(40.0, 100.0), (50.0, 100.0), (66.0, 50.0), (82.0, 0.0), (90.0, 0.0), (float("nan"), 50.0)],
)
def test_thermal_score(temp: float, score: float) -> None:
    assert score_one_node(thermal_score_nb, np.array([temp], dtype=np.float32), 50.0, 82.0) == score
