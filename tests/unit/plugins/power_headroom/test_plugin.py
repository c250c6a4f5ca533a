"""PowerHeadroom: the ramp on a node's power headroom, unknown power neutral, only cards
with both readings counted; the args' validation; the node the ai-scheduler picks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpusched.config.settings import Telemetry
from gpusched.framework import CycleState
from gpusched.framework.interfaces import NODE_NOTES
from gpusched.model.telemetry import CardReading
from gpusched.plugins.power_headroom import PowerHeadroom
from gpusched.plugins.power_headroom.args import PowerHeadroomArgs
from gpusched.sim.engine import Simulation
from gpusched.telemetry.ingest import TelemetryIngest
from tests.builders import ai_pod, ai_sim, gpu_node

NOW = 1000.0


def _power(s: Simulation, node: str, *cards: tuple[float, float]) -> None:
    """`cards`: (draw, limit) in W per card; NaN for a missing value."""
    readings = [
        CardReading(node, i, "", NOW, gpu_temp=50.0, power_w=draw, power_limit_w=limit)
        for i, (draw, limit) in enumerate(cards)
    ]
    TelemetryIngest(s.snapshot, Telemetry()).apply(readings, now=NOW)


def _scores(s: Simulation, plugin: PowerHeadroom, *nodes: str) -> list[float]:
    rows = np.array([s.snapshot.row_of(n) for n in nodes], np.intp)
    return [round(x, 6) for x in plugin.score(CycleState(), ai_pod("p", gpu_cards=1), rows)]


def test_headroom_ramp_and_unknown_is_neutral() -> None:
    s = ai_sim(*(gpu_node(n, cards=2) for n in "abcdef"))
    _power(s, "a", (100.0, 400.0), (100.0, 400.0))  # 75 % left: ample
    _power(s, "b", (340.0, 400.0), (340.0, 400.0))  # 15 % left: 60 points of the 25 % ramp
    _power(s, "c", (420.0, 400.0), (400.0, 400.0))  # over the limit (a transient): 0
    _power(s, "d", (300.0, math.nan), (300.0, math.nan))  # no limit published: unknown
    # One card with both readings counts alone: 300 of 400 W drawn, 25 % left.
    _power(s, "e", (300.0, 400.0), (math.nan, 400.0))
    plugin = PowerHeadroom(PowerHeadroomArgs(), s.handle)
    assert _scores(s, plugin, "a", "b", "c", "d", "e", "f") == [100.0, 60.0, 0.0, 50.0, 100.0, 50.0]
    steep = PowerHeadroom(PowerHeadroomArgs(ample_headroom_fraction=1.0), s.handle)
    assert _scores(s, steep, "a", "b", "e") == [75.0, 15.0, 25.0]


def test_stale_power_is_neutral() -> None:
    s = ai_sim(gpu_node("a", cards=1))
    _power(s, "a", (390.0, 400.0))
    plugin = PowerHeadroom(PowerHeadroomArgs(), s.handle)
    assert _scores(s, plugin, "a") == [10.0]
    TelemetryIngest(s.snapshot, Telemetry(stale_after_seconds=60.0)).apply([], now=NOW + 61)
    assert _scores(s, plugin, "a") == [50.0]


def test_the_ai_scheduler_prefers_power_headroom_between_equal_nodes() -> None:
    s = ai_sim(gpu_node("busy", cards=8), gpu_node("calm", cards=8))
    _power(s, "busy", *[(390.0, 400.0)] * 8)
    _power(s, "calm", *[(90.0, 400.0)] * 8)
    d = s.submit(ai_pod("p", gpu_cards=1))
    assert d.node == "calm"
    note = d.state.read(NODE_NOTES)["PowerHeadroom"](s.snapshot.row_of("calm"))
    assert note == {"telemetry": "fresh", "limitW": 3200.0, "headroom": 0.775}


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_args_validate(bad: float) -> None:
    errors = PowerHeadroomArgs(ample_headroom_fraction=bad).validate()
    assert [k for k, _ in errors] == ["ampleHeadroomFraction"]
