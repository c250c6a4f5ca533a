"""Thermal: a shared pod that names only GPU memory is GPU work too."""

from __future__ import annotations

from gpusched.framework import CycleState
from gpusched.plugins.thermal import Thermal
from gpusched.plugins.thermal.args import ThermalArgs
from tests.unit.plugins.test_gpu_plugins import gpu_node, pod, sim


def test_memory_only_shared_pod_is_kept_off_a_node_at_the_red_line() -> None:
    s = sim(gpu_node("hot", cards=4, mem=40960), temps={"hot": 85.0})
    snap = s.snapshot
    plugin = Thermal(ThermalArgs(), s.handle)
    cand = snap.node_valid.copy()
    # 20 GiB of a 40 GiB card is half the card's compute (the share rule), like gpu-milli 500.
    for p in (pod("milli", gpu_milli=500), pod("mem", gpu_mem_mib=20480)):
        res = plugin.filter(CycleState(), p, cand)
        assert not res.feasible[snap.row_of("hot")], p.name


def test_heavy_threshold_applies_to_the_memory_share() -> None:
    s = sim(gpu_node("hot", cards=4, mem=40960), temps={"hot": 85.0})
    snap = s.snapshot
    plugin = Thermal(ThermalArgs(heavy_min_gpu_milli=600), s.handle)
    cand = snap.node_valid.copy()
    row = snap.row_of("hot")
    assert plugin.filter(CycleState(), pod("light", gpu_mem_mib=20480), cand).feasible[row]
    assert not plugin.filter(CycleState(), pod("heavy", gpu_mem_mib=30720), cand).feasible[row]
    assert plugin.filter(CycleState(), pod("cpu"), cand).feasible[row]
