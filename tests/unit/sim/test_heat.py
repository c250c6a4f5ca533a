"""The simulator's heat model (sim/thermal.py) and its sampled telemetry
(sim/telemetry_feed.py): lag, non-linearity, throttling accounting, sampling delay, and that
the readings reach the plugins only through the daemon's ingestion."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpusched.cli import main
from gpusched.config import builtin_profile
from gpusched.framework import CycleState
from gpusched.plugins import default_registry
from gpusched.plugins.thermal import Thermal
from gpusched.plugins.thermal.args import ThermalArgs
from gpusched.sim.engine import Simulation
from gpusched.sim.openb import POD_COLUMNS
from gpusched.sim.replay import policy_profile
from gpusched.sim.telemetry_feed import Sampling
from gpusched.sim.thermal import (
    DESIGN_INLET_C,
    DESIGN_RISE_C,
    FAN_SAT_PER_C,
    MAX_OPERATING_C,
    TAU_S,
    HeatEnvironment,
    Site,
    card_power,
    duty_factor,
)
from gpusched.telemetry.ingest import NodeState
from tests.builders import ai_pod, gpu_node

H100 = "NVIDIA-H100-80GB-HBM3"
QUIET = Sampling(temp_noise_c=0.0, power_noise=0.0)


def _sim(
    sites: dict[str, Site], sampling: Sampling = QUIET, cards: int = 8, seed: int = 1
) -> Simulation:
    reg = default_registry()
    nodes = [gpu_node(n, cards=cards, model=H100) for n in sites]
    env = HeatEnvironment(sites, seed=seed)
    return Simulation(
        nodes, builtin_profile("ai-scheduler", reg), reg, seed=1, heat=env, sampling=sampling
    )


def test_a_card_warms_with_a_first_order_lag_after_work_lands() -> None:
    s = _sim({"n0": Site(24.0, 0.0)})
    heat = s.heat
    assert heat is not None
    idle = heat.temp[0, 0]
    s.submit(ai_pod("a", gpu_cards=8))
    target = heat.target()[0, 0]
    assert target > idle + 20  # an H100 at work draws ~10x its idle power
    assert heat.temp[0, 0] == idle  # binding changes nothing at once
    s.advance(TAU_S)
    assert heat.temp[0, 0] == pytest.approx(target + (idle - target) * math.exp(-1))
    s.advance(20 * TAU_S)
    assert heat.temp[0, 0] == pytest.approx(target, abs=1e-6)
    s.delete(next(iter(s.cluster.bound)))
    s.advance(21 * TAU_S)
    assert heat.temp[0, 0] == pytest.approx(idle + (target - idle) * math.exp(-1))


def test_the_rise_from_work_grows_with_the_inlet_not_added_to_it() -> None:
    # The same work on two nodes 8 °C apart in inlet: the plugin's model adds the same
    # rise to both; the physical one multiplies the power by a resistance that grows with
    # the inlet (fans near saturation), so the warm node rises more.
    s = _sim({"cold": Site(24.0, 0.0), "hot": Site(32.0, 0.0)}, cards=1)
    heat = s.heat
    assert heat is not None
    idle = heat.target().copy()
    for name in ("cold", "hot"):
        heat.bind(name, name, (0,), (1000,))
    rise = heat.target() - idle
    power = card_power(H100)
    duty = [duty_factor(1, "cold"), duty_factor(1, "hot")]
    for i, (inlet, d) in enumerate(((24.0, duty[0]), (32.0, duty[1]))):
        r = DESIGN_RISE_C / power.tdp_w * (1 + FAN_SAT_PER_C * max(0.0, inlet - DESIGN_INLET_C))
        assert rise[i, 0] == pytest.approx(r * (power.tdp_w - power.idle_w) * d)
    per_duty = rise[:, 0] / np.asarray(duty)
    assert per_duty[1] / per_duty[0] == pytest.approx(1 + FAN_SAT_PER_C * 7)


def test_a_card_above_max_operating_is_held_there_and_counts_throttled_hours() -> None:
    # A 40 °C inlet: a busy H100 wants well over 87 °C.
    s = _sim({"n0": Site(40.0, 0.0)}, cards=1)
    heat = s.heat
    assert heat is not None
    t0 = float(heat.temp[0, 0])
    heat.bind("a", "n0", (0,), (1000,))
    target = float(heat.target()[0, 0])
    assert target > MAX_OPERATING_C
    reach = TAU_S * math.log((target - t0) / (target - MAX_OPERATING_C))
    s.advance(reach / 2)
    assert heat.totals.throttled_gpu_s == 0.0 and heat.temp[0, 0] < MAX_OPERATING_C
    s.advance(reach + 600)
    assert heat.temp[0, 0] == MAX_OPERATING_C
    assert heat.totals.throttled_gpu_s == pytest.approx(600.0)
    # Above the 82 °C red line from when it crossed it, with the same closed form.
    cross = TAU_S * math.log((target - t0) / (target - 82.0))
    assert heat.totals.red_line_node_s == pytest.approx(reach + 600 - cross)
    # The power a sensor reads is what holds the card at 87 °C, less than the demand.
    held = heat.power_w(heat.temp)[0, 0]
    assert held < card_power(H100).tdp_w * duty_factor(1, "a")


def test_half_a_card_heats_half_as_much_and_only_its_own_card() -> None:
    s = _sim({"n0": Site(24.0, 0.0)}, cards=2)
    heat = s.heat
    assert heat is not None
    idle = heat.target().copy()
    heat.bind("a", "n0", (1,), (500,))
    rise = heat.target() - idle
    assert rise[0, 0] == 0.0
    power = card_power(H100)
    r = DESIGN_RISE_C / power.tdp_w
    assert rise[0, 1] == pytest.approx(r * (power.tdp_w - power.idle_w) * 0.5 * duty_factor(1, "a"))
    heat.release("a")
    assert heat.target() == pytest.approx(idle)


def test_readings_are_sampled_delayed_and_applied_at_refresh_ticks() -> None:
    # Scrapes every 15 s visible 10 s later; the daemon refreshes every 15 s. At the tick
    # t=15 the newest visible scrape is t=0; at t=30 the scrape of t=15.
    s = _sim({"n0": Site(24.0, 0.0)})
    heat = s.heat
    assert heat is not None
    row = s.snapshot.row_of("n0")
    s.submit(ai_pod("a", gpu_cards=8))
    true_at_15 = heat.temps_after(15.0)[0]
    s.advance(14.0)
    assert math.isnan(s.snapshot.node_temp[row])  # no refresh yet
    s.advance(29.0)
    idle_reading = float(s.snapshot.node_temp[row])
    assert s.snapshot.card_sampled_at[row, 0] == 0.0
    s.advance(30.0)
    assert s.snapshot.card_sampled_at[row, 0] == 15.0
    assert s.snapshot.card_temp[row].tolist() == np.round(true_at_15[0]).tolist()
    assert s.snapshot.node_temp[row] > idle_reading
    # Meanwhile the card itself is warmer than anything the scheduler has read.
    assert heat.temp[0].max() > s.snapshot.node_temp[row] + 1


def test_a_stale_window_makes_the_nodes_neutral_through_the_ingestion() -> None:
    # The exporter is down from 100 s: readings age past staleAfterSeconds (60 s) and the
    # ingestion clears them, so Thermal scores the node neutral instead of reading it cold
    # or as it last was; the next scrape after the outage brings it back.
    s = _sim({"n0": Site(24.0, 0.0)}, Sampling(temp_noise_c=0.0, outages=((100.0, 400.0),)))
    row = s.snapshot.row_of("n0")
    s.submit(ai_pod("a", gpu_cards=4))
    s.advance(90.0)
    assert not math.isnan(s.snapshot.node_temp[row])
    s.advance(165.0)  # the last scrape (t=90) is 75 s old
    assert math.isnan(s.snapshot.node_temp[row])
    assert np.isnan(s.snapshot.card_temp[row]).all()
    assert s.feed is not None and s.feed.last_report is not None
    assert s.feed.last_report.states[NodeState.STALE] == 1
    plugin = Thermal(ThermalArgs(), s.handle)
    score = plugin.score(CycleState(), ai_pod("b", gpu_cards=1), np.array([row], np.intp))
    assert score.tolist() == [50.0]
    s.advance(420.0)
    assert not math.isnan(s.snapshot.node_temp[row])
    assert s.feed.last_report.states[NodeState.FRESH] == 1


def test_a_node_without_a_site_reports_nothing() -> None:
    reg = default_registry()
    nodes = [gpu_node("n0", model=H100), gpu_node("bare", model=H100)]
    s = Simulation(
        nodes,
        builtin_profile("ai-scheduler", reg),
        reg,
        heat=HeatEnvironment({"n0": Site(24.0, 0.0)}),
    )
    s.advance(60.0)
    assert not math.isnan(s.snapshot.node_temp[s.snapshot.row_of("n0")])
    assert math.isnan(s.snapshot.node_temp[s.snapshot.row_of("bare")])


def test_sensor_noise_is_seeded_and_readings_are_whole_degrees() -> None:
    def readings(seed: int) -> list[float]:
        s = _sim({"n0": Site(24.0, 0.0)}, Sampling(), seed=seed)
        s.advance(30.0)
        return [float(x) for x in s.snapshot.card_temp[s.snapshot.row_of("n0")]]

    a = readings(3)
    assert a == readings(3)
    assert all(x == round(x) for x in a)


def test_the_nothermal_variant_drops_thermal_and_keeps_the_rest() -> None:
    reg = default_registry()
    names = {
        ref.name for refs in policy_profile("ai-scheduler", reg).plugins.values() for ref in refs
    }
    prof = policy_profile("ai-scheduler-nothermal", reg)
    without = {ref.name for refs in prof.plugins.values() for ref in refs}
    assert "Thermal" in names and "Thermal" not in without
    assert without == names - {"Thermal"}
    assert prof.scheduler_name == "ai-scheduler-nothermal"


def test_the_replay_cli_reports_the_heat_figures_per_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two H100 nodes busy for an hour, scraped every 30 s: the figures are in the table and
    # the JSON for both policies, within their bounds.
    trace = tmp_path / "trace"
    trace.mkdir()
    nodes = "".join(f"n-{i},64000,262144,8,H100\n" for i in range(2))
    (trace / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + nodes
    )
    rows = [f"p{i},1000,1024,8,1000,,LS,Running,{i},3600,{i}" for i in range(2)]
    rows.append("end,100,1024,0,0,,LS,Running,1800,4000,1800")
    (trace / "openb_pod_list_default.csv").write_text(
        ",".join(POD_COLUMNS) + "\n" + "\n".join(rows) + "\n"
    )
    out = tmp_path / "out.json"
    argv = ["simulate", "--protocol", "replay", "--trace-dir", str(trace), "--seeds", "1"]
    policies = "ai-scheduler,ai-scheduler-nothermal"
    hot = ["--scrape-interval", "30", "--telemetry-delay", "5"]
    assert main([*argv, *hot, "--policies", policies, "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "node-hours above the 82 °C red line" in text and "throttled GPU-hours" in text
    data = json.loads(out.read_text())
    assert data["config"]["scrape_interval_s"] == 30.0
    for policy in ("ai-scheduler", "ai-scheduler-nothermal"):
        entry = data["policies"][policy]
        assert 0.0 <= entry["red_line_pct"]["mean"] <= 100.0
        assert entry["throttled_gpu_h"]["mean"] >= 0.0
        assert entry["hottest_max_c"]["mean"] <= MAX_OPERATING_C + 1e-9
