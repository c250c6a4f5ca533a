"""Gang workloads in the simulator: `Simulation.arrive`, the Permit idle GPU-hours, the
replay's gang option and figures, the gang generator. Hand-built cases whose numbers are
computed by hand; the clock is virtual (nothing timed)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from gpusched.cli import main
from gpusched.core.queue.queue import GATED
from gpusched.core.schedule_one import Result
from gpusched.model import keys
from gpusched.model.pod import Gang, GangAPI, PodInfo
from gpusched.plugins import default_registry
from gpusched.sim.demo import run_profile
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import (
    GANG_CARDS,
    GANG_SIZES,
    generate_fleet,
    generate_gang_workload,
)
from gpusched.sim.openb import POD_COLUMNS, TracePod
from gpusched.sim.replay import ReplayRun, policy_profile, replay
from gpusched.sim.replay_workload import ReplayConfig, build_workload, rack_layout
from tests.builders import ai_sim, gang_pod, gpu_node, trace_nodes, trace_pod

# -- the engine: arrive and the Permit idle GPU-hours -------------------------------------


def test_arrive_returns_none_for_a_held_member_and_the_decision_for_the_last() -> None:
    s = ai_sim(gpu_node("n0", rack="r0"), gpu_node("n1", rack="r0"))
    bound: list[str] = []
    s.on_bound(lambda d: bound.append(d.pod.name))
    assert s.arrive(gang_pod("a", "g", 2)) is None
    assert s.queue.where("uid-a") == GATED
    with pytest.raises(ValueError, match="held at PreEnqueue"):
        s.submit(gang_pod("x", "h", 2))  # submit still refuses a pod it cannot decide
    d = s.arrive(gang_pod("b", "g", 2))
    assert d is not None and d.result is Result.SCHEDULED
    assert sorted(bound) == ["a", "b"]
    assert s.permit_idle_gpu_hours == 0.0  # the gang completed in one instant


def _one_member_waits() -> tuple[Simulation, PodInfo]:
    """A 2-member gang whose member b is held by a scheduling gate: a passes PreEnqueue (two
    members exist), takes 8 cards and waits at Permit for b."""
    s = ai_sim(gpu_node("n0", rack="r0"), gpu_node("n1", rack="r0"))
    b = dataclasses.replace(gang_pod("b", "g", 2), scheduling_gates=("x.io/hold",))
    assert s.arrive(b) is None
    d = s.arrive(gang_pod("a", "g", 2))
    assert d is not None and d.result is Result.WAITING
    return s, b


def test_a_member_waiting_5_s_at_permit_holds_8_cards_for_5_s() -> None:
    s, b = _one_member_waits()
    bound: list[str] = []
    s.on_bound(lambda d: bound.append(d.pod.name))
    s.advance(5.0)
    assert s.cache.is_assumed("uid-a") and bound == []
    s.events.pod_changed(dataclasses.replace(b, scheduling_gates=()))  # b's gate is lifted
    s.run()
    assert sorted(bound) == ["a", "b"]
    assert s.permit_idle_gpu_hours == pytest.approx(8 * 5 / 3600)
    s.advance(100.0)  # nothing waits any more: no more idle time
    assert s.permit_idle_gpu_hours == pytest.approx(8 * 5 / 3600)


def test_a_permit_wait_is_counted_only_until_its_timeout() -> None:
    s, _ = _one_member_waits()
    s.advance(1000.0)  # GangScheduling's default Permit timeout: 300 s
    assert s.cache.get("uid-a") is None  # timed out and unreserved
    assert s.permit_idle_gpu_hours == pytest.approx(8 * 300 / 3600)


# -- the replay: the gang option and the gang figures -------------------------------------


def _replay(pods: list[TracePod], policy: str, *, gangs: bool, timeout: float = 600) -> ReplayRun:
    cfg = ReplayConfig(gangs=gangs, timeout_s=timeout)
    wl = build_workload(pods, cfg)
    return replay(
        wl,
        rack_layout(trace_nodes(2, 2), 3, cfg),
        policy,
        default_registry(),
        seed=3,
        cfg=cfg,
        keep_starts=True,
        warm_up=False,
    )


def _two_pod_job(blocker_leaves: int | None) -> list[TracePod]:
    # Two 2-card nodes. x (another shape, so not in the job) fills one from t=0; the job's
    # two 2-card pods arrive at t=10 and run 1000 s. A CPU pod ends the trace later (a pod
    # deleted at the trace's last deletion time was still running: it would never leave).
    return [
        trace_pod("x", 0, blocker_leaves, gpus=2, cpu=2000),
        trace_pod("j0", 10, 1010, gpus=2),
        trace_pod("j1", 10, 1010, gpus=2),
        trace_pod("end", 2000, 2100, gpus=0, cpu=100),
    ]


def test_build_workload_makes_every_multi_pod_job_a_gang_of_its_size() -> None:
    pods = [*_two_pod_job(100), trace_pod("solo", 500, 600, gpus=1, cpu=3000)]
    wl = build_workload(pods, ReplayConfig(gangs=True))
    by_name = {p.info.name: p for p in wl.pods}
    job = by_name["j0"].job
    assert job and by_name["j1"].job == job
    for name in ("j0", "j1"):
        info = by_name[name].info
        assert info.gang == Gang(f"{info.namespace}/{job}", 2, GangAPI.ANNOTATIONS)
        assert info.annotations[keys.GANG_NAME] == job
        assert info.annotations[keys.GANG_TOTAL] == "2"
    assert by_name["x"].info.gang is None and by_name["solo"].info.gang is None
    plain = build_workload(pods, ReplayConfig())
    assert all(p.info.gang is None for p in plain.pods)


@pytest.mark.parametrize("policy", ["ai-scheduler", "least-allocated"])
def test_a_gang_starts_whole_when_room_frees(policy: str) -> None:
    run = _replay(_two_pod_job(100), policy, gangs=True)
    # Not j0 alone at t=10: both once x's cards are free at 100 (under ai-scheduler later,
    # once Thermal's readings of the cards x heated have cooled).
    assert run.starts["j0"] == run.starts["j1"]
    assert run.starts["j0"] == 100 if policy == "least-allocated" else run.starts["j0"] > 100
    assert run.multi_jobs == 1 and run.jobs_completed == 1 and run.partial_jobs == 0
    wait = run.starts["j0"] - 10
    assert run.gang_wait_s == pytest.approx(wait) and run.gang_wait_p90_s == pytest.approx(wait)
    assert run.partial_idle_gpu_h == 0.0 and run.permit_idle_gpu_h == 0.0
    assert run.errors == 0


def test_without_gang_scheduling_a_job_starts_in_parts_and_holds_cards() -> None:
    run = _replay(_two_pod_job(100), "least-allocated-nogang", gangs=True)
    assert run.starts["j0"] == 10 or run.starts["j1"] == 10
    assert max(run.starts["j0"], run.starts["j1"]) == 100
    assert run.jobs_completed == 1 and run.partial_jobs == 0
    assert run.gang_wait_s == pytest.approx(90)
    # One pod's 2 cards held from t=10 until its sibling starts at t=100.
    assert run.partial_idle_gpu_h == pytest.approx(2 * 90 / 3600)


def test_a_partial_start_is_counted_and_a_gang_never_starts_in_part() -> None:
    # x never leaves: only one of the job's pods can ever run.
    blind = _replay(_two_pod_job(None), "least-allocated-nogang", gangs=True)
    assert blind.partial_jobs == 1 and blind.jobs_completed == 0
    assert math.isnan(blind.gang_wait_s)
    # The started pod holds 2 cards over its whole 1000 s run, its sibling never comes.
    assert blind.partial_idle_gpu_h == pytest.approx(2 * 1000 / 3600)
    gang = _replay(_two_pod_job(None), "ai-scheduler", gangs=True)
    assert gang.partial_jobs == 0 and gang.jobs_completed == 0
    assert gang.partial_idle_gpu_h == 0.0 and gang.started == 2  # only x and the CPU pod
    assert gang.gave_up == 2


def test_the_nogang_profile_drops_gang_scheduling_everywhere() -> None:
    reg = default_registry()
    prof = policy_profile("least-allocated-nogang", reg)
    names = {ref.name for refs in prof.plugins.values() for ref in refs}
    assert "GangScheduling" not in names and "PrioritySort" in names
    assert prof.scheduler_name == "least-allocated-nogang"
    assert "GangScheduling" in {
        ref.name for refs in policy_profile("least-allocated", reg).plugins.values() for ref in refs
    }


# -- the generator ------------------------------------------------------------------------


def test_gang_workload_is_reproducible_by_seed_and_gangs_have_their_size() -> None:
    fleet = generate_fleet(seed=1, racks=4, nodes_per_rack=4)
    a = generate_gang_workload(fleet, seed=5, load=1.0)
    assert a == generate_gang_workload(fleet, seed=5, load=1.0)
    assert a != generate_gang_workload(fleet, seed=6, load=1.0)
    sizes = Counter(p.gang.name for p in a if p.gang is not None)
    assert sizes, "the workload should hold gangs"
    singles = [p for p in a if p.gang is None]
    assert singles, "and single pods"
    for p in a:
        assert p.request.gpu_cards in GANG_CARDS
        if p.gang is not None:
            assert p.gang.api is GangAPI.ANNOTATIONS
            assert p.gang.min_member == sizes[p.gang.name]  # minMember = the job's size
            assert p.gang.min_member in GANG_SIZES
            assert p.annotations[keys.GANG_TOTAL] == str(p.gang.min_member)
            assert p.job_id == p.gang.name.split("/")[1]
    # A gang's pods arrive together and share one shape.
    for name in sizes:
        idx = [i for i, p in enumerate(a) if p.gang is not None and p.gang.name == name]
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        assert len({a[i].request for i in idx}) == 1
    demand = sum(p.request.gpu_cards for p in a) * 1000
    assert demand >= fleet.gpu_milli_capacity


def test_gang_workload_runs_all_or_nothing_in_the_simulator() -> None:
    fleet = generate_fleet(seed=2, racks=4, nodes_per_rack=4)
    pods = generate_gang_workload(fleet, seed=2, load=1.5)
    s = ai_sim(*fleet.nodes)
    started: Counter[str] = Counter()
    s.on_bound(lambda d: started.update([d.pod.gang.name] if d.pod.gang else []))
    for p in pods:
        s.arrive(p)
    sizes = Counter(p.gang.name for p in pods if p.gang is not None)
    assert started, "some gangs should start"
    assert all(started[g] in (0, n) for g, n in sizes.items())  # never part of a gang
    assert any(started[g] == 0 for g in sizes), "load 1.5 leaves some gangs out"


def test_gang_share_is_checked() -> None:
    with pytest.raises(ValueError, match="gang_share"):
        generate_gang_workload(generate_fleet(racks=1, nodes_per_rack=1), gang_share=2)


# -- regressions found by the gang replay -------------------------------------------------


def test_a_withdrawn_member_no_longer_counts_for_its_gang() -> None:
    s = ai_sim(gpu_node("n0", rack="r0"))
    a, b = gang_pod("a", "g", 2), gang_pod("b", "g", 2)
    assert s.arrive(a) is None
    s.withdraw(a.uid)
    assert not s.handle.gang_members("ns/g")
    assert s.arrive(b) is None  # one member exists, not two: b is held


def test_the_cli_reports_the_gang_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,T4\nn-1,64000,262144,2,T4\n"
    )
    rows = [
        "x,2000,1024,2,1000,,LS,Running,0,100,0",
        "j0,1000,1024,2,1000,,LS,Running,10,1010,10",
        "j1,1000,1024,2,1000,,LS,Running,10,1010,10",
        "end,100,1024,0,0,,LS,Running,2000,2100,2000",
    ]
    (trace / "openb_pod_list_default.csv").write_text(
        ",".join(POD_COLUMNS) + "\n" + "\n".join(rows) + "\n"
    )
    out = tmp_path / "out.json"
    argv = ["simulate", "--protocol", "replay", "--trace-dir", str(trace), "--seeds", "1"]
    policies = "ai-scheduler,least-allocated-nogang"
    assert main([*argv, "--gangs", "--policies", policies, "--json-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "multi-pod jobs partially started" in text and "multi-pod jobs are gangs" in text
    data = json.loads(out.read_text())
    assert data["config"]["gangs"] is True
    gang, blind = data["policies"]["ai-scheduler"], data["policies"]["least-allocated-nogang"]
    assert gang["jobs_completed"] == [1] and gang["partial_idle_gpu_h"]["mean"] == 0.0
    assert blind["partial_idle_gpu_h"]["mean"] == pytest.approx(2 * 90 / 3600)


def test_the_demo_runs_a_gang_workload_and_counts_unplaced_gangs_whole() -> None:
    fleet = generate_fleet(seed=2, racks=4, nodes_per_rack=4)
    pods = generate_gang_workload(fleet, seed=2, load=1.5)
    reg = default_registry()
    result = run_profile(fleet, pods, policy_profile("ai-scheduler", reg), reg, seed=2)
    # The same arrivals (2 s apart, the demo's default) through a bare simulation with the
    # same heat model: which pods bound.
    s = Simulation(fleet.nodes, policy_profile("ai-scheduler", reg), reg, seed=2, heat=fleet.heat)
    bound: set[str] = set()
    s.on_bound(lambda d: bound.add(d.pod.uid))
    for i, p in enumerate(pods):
        s.advance(i * 2.0)
        d = s.arrive(p)
        if p.gang is None and d is not None and d.result is not Result.SCHEDULED:
            s.withdraw(p.uid)
    assert result.errors == 0
    assert sum(result.unplaced.values()) == len(pods) - len(bound) > 0


def test_a_gang_does_not_cross_the_thermal_red_line() -> None:
    # One 8-card node reading 55 °C: one 4-card pod projects 75 °C (allowed). No heat
    # model: the reading stays 55 °C, as telemetry does for the first scrapes after work
    # lands, so a second plain pod also projects 75 °C and binds: nothing it reads shows
    # the first. A gang's second member counts its sibling waiting at Permit (95 °C).
    def run(gang: bool) -> int:
        s = ai_sim(gpu_node("n0", rack="r0"), temps={"n0": 55.0})
        bound: set[str] = set()
        s.on_bound(lambda d: bound.add(d.pod.name))
        for name in ("a", "b"):
            p = gang_pod(name, "g", 2, cards=4)
            s.arrive(p if gang else dataclasses.replace(p, gang=None))
        return len(bound)

    assert run(gang=False) == 2
    # Each member counts its siblings waiting at Permit: the second is refused there, and
    # the gang starts whole or not at all.
    assert run(gang=True) == 0
