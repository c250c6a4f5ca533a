"""Thermal's args: validation."""

from __future__ import annotations

import pytest

from gpusched.plugins.thermal.args import ThermalArgs


@pytest.mark.parametrize("bad", [{"cool_celsius": 90.0}, {"red_line_celsius": -1.0}])
def test_thermal_args_validate(bad: dict[str, float]) -> None:
    assert ThermalArgs(**bad).validate()  # type: ignore[arg-type]
