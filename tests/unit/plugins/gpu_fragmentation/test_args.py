"""GPUFragmentation: the online shape learner, its args and the optional score terms."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.plugins.gpu_fragmentation.args import GPUFragmentationArgs


@pytest.mark.parametrize(
    "bad",
    [
        {"pack_weight": -1.0},
        {"card_fit_weight": 51.0},
        {"sos_weight": -0.5},
        {"cpu_balance_weight": 60.0},
        {"refresh_pods": 0},
        {"price_weight": 101.0},
        {"price_refresh_pods": 0},
    ],
)
def test_args_validate(bad: dict[str, Any]) -> None:
    assert GPUFragmentationArgs(**bad).validate()
