"""Thermal through the real framework: the red-line filter, the score ramp; a shared pod
that names only GPU memory is GPU work too."""

from __future__ import annotations

import numpy as np

from gpusched.core.schedule_one import Result
from gpusched.framework import CycleState
from gpusched.plugins.thermal import Thermal
from gpusched.plugins.thermal.args import ThermalArgs
from tests.builders import ai_pod, ai_sim, gpu_node, read_temps


def test_thermal_red_line_filter_and_projection() -> None:
    s = ai_sim(
        gpu_node("hot", cards=8),
        gpu_node("warm", cards=8),
        gpu_node("unknown", cards=8),
        temps={"hot": 81.0, "warm": 70.0},
    )
    # A 4-card job would warm an 8-card node by 20 °C: "warm" would reach 90 °C.
    d = s.submit(ai_pod("big", gpu_cards=4))
    assert d.node == "unknown"  # no telemetry: allowed, scored neutral
    d = s.submit(ai_pod("small", gpu_milli=100))
    assert d.node in ("warm", "unknown")
    d = s.submit(ai_pod("big2", gpu_cards=4))
    assert d.node == "unknown"
    d = s.submit(ai_pod("big3", gpu_cards=4))
    assert d.result is Result.UNSCHEDULABLE
    assert "2 node(s) at or above the thermal red line (82 °C)" in d.message


def test_thermal_scores_neutral_without_data_and_ramps_to_red_line() -> None:
    s = ai_sim(
        gpu_node("a", cards=4),
        gpu_node("b", cards=4),
        gpu_node("c", cards=4),
        gpu_node("d", cards=4),
    )
    snap = s.snapshot
    read_temps(s, {"a": 60.0, "b": 78.5, "c": 90.0})
    plugin = Thermal(ThermalArgs(), s.handle)
    rows = np.array([snap.row_of(n) for n in "abcd"], np.intp)
    scores = plugin.score(CycleState(), ai_pod("cpu"), rows)
    assert scores.tolist() == [100.0, 50.0, 0.0, 50.0]


def test_memory_only_shared_pod_is_kept_off_a_node_at_the_red_line() -> None:
    s = ai_sim(gpu_node("hot", cards=4, mem=40960), temps={"hot": 85.0})
    snap = s.snapshot
    plugin = Thermal(ThermalArgs(), s.handle)
    cand = snap.node_valid.copy()
    # 20 GiB of a 40 GiB card is half the card's compute (the share rule), like gpu-milli 500.
    for p in (ai_pod("milli", gpu_milli=500), ai_pod("mem", gpu_mem_mib=20480)):
        res = plugin.filter(CycleState(), p, cand)
        assert not res.feasible[snap.row_of("hot")], p.name


def test_heavy_threshold_applies_to_the_memory_share() -> None:
    s = ai_sim(gpu_node("hot", cards=4, mem=40960), temps={"hot": 85.0})
    snap = s.snapshot
    plugin = Thermal(ThermalArgs(heavy_min_gpu_milli=600), s.handle)
    cand = snap.node_valid.copy()
    row = snap.row_of("hot")
    assert plugin.filter(CycleState(), ai_pod("light", gpu_mem_mib=20480), cand).feasible[row]
    assert not plugin.filter(CycleState(), ai_pod("heavy", gpu_mem_mib=30720), cand).feasible[row]
    assert plugin.filter(CycleState(), ai_pod("cpu"), cand).feasible[row]
