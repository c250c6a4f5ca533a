"""FGD protocol invariants on a small inline trace (no ../shared needed)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gpusched.cli import main
from gpusched.plugins import default_registry
from gpusched.sim import fgd_report
from gpusched.sim.fgd_protocol import (
    Placement,
    PolicyResult,
    SeedRun,
    Stat,
    discrete_curve,
    load_trace,
    parse_policies,
    parse_seeds,
    run_seed,
)
from gpusched.sim.openb import POD_COLUMNS
from tests.builders import TINY_NODES, tiny_pods, tiny_trace
from tests.traces import require_openb

TRACE = tiny_trace()
REG = default_registry()
POLICIES = ("FGD", "BestFit", "GpuPacking", "GpuClustering", "DotProduct", "Random", "ai-scheduler")


@pytest.mark.parametrize("policy", POLICIES)
def test_invariants(policy: str) -> None:
    run = run_seed(TRACE, policy, 42, REG, keep_placements=True)
    assert run.errors == 0
    cap = sum(n.gpu for n in TINY_NODES) * 1000
    assert run.capacity == cap
    per_card: dict[tuple[str, int], int] = defaultdict(int)
    used = 0
    for p in run.placements:
        for c, m in zip(p.gpu_ids, p.gpu_milli, strict=True):
            per_card[(p.node, c)] += m
            used += m
    # No card is ever over-allocated; allocation accounting matches the placements.
    assert all(v <= 1000 for v in per_card.values())
    assert used == run.used[-1]
    # Arrived demand counts every arrival, dropped ones included, and reaches 1.3x.
    assert np.all(np.diff(run.arrived) >= 0)
    assert run.arrived[-1] >= 1.2 * cap
    assert np.all(run.used <= run.arrived)
    assert run.dropped == sum(1 for p in run.placements if not p.node)


@pytest.mark.parametrize("policy", ["FGD", "Random", "ai-scheduler"])
def test_seed_reproduces_placements(policy: str) -> None:
    a = run_seed(TRACE, policy, 43, REG, keep_placements=True)
    b = run_seed(TRACE, policy, 43, REG, keep_placements=True)
    assert a.placements == b.placements


def test_model_constraint_respected() -> None:
    run = run_seed(TRACE, "FGD", 44, REG, keep_placements=True)
    by_name = {p.name: p for p in TRACE.pods}
    for p in run.placements:
        src = by_name[p.pod.split("-tuned-")[0]]
        if p.node and src.gpu_spec and src.num_gpu:
            model = next(n.model for n in TINY_NODES if n.sn == p.node)
            assert model in src.gpu_spec.split("|")


def test_discrete_curve_rounds_and_falls_back() -> None:
    cap = 1000
    arrived = np.array([100, 200, 400, 404], np.int64)  # 10%, 20%, 40%, 40.4%
    used = np.array([100, 150, 300, 310], np.int64)
    c = discrete_curve(arrived, used, cap)
    assert c[10] == 10.0 and c[20] == 15.0
    assert c[40] == 30.5  # mean of the two samples at 40 %
    assert c[41] == 30.5  # no sample at 41: neighbours 40..42
    assert np.isnan(c[30])


def test_parsers() -> None:
    assert parse_seeds("42-44,50") == [42, 43, 44, 50]
    assert parse_policies("fgd,bestfit,ai") == ["FGD", "BestFit", "ai-scheduler"]
    with pytest.raises(KeyError):
        parse_policies("nope")


def test_outputs(tmp_path: Path) -> None:
    runs = [run_seed(TRACE, "BestFit", s, REG, keep_placements=True) for s in (42, 43)]
    res = [PolicyResult("BestFit", runs)]
    data = fgd_report.to_json("tiny", res, {})
    entry = data["policies"]["BestFit"]["unallocated_pct_at_100"]
    assert set(entry) == {"mean", "std"}
    fgd_report.write_curves(tmp_path / "c.csv", "tiny", res)
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 3
    path = fgd_report.write_placements(tmp_path / "pl", runs[0])
    lines = path.read_text().splitlines()
    assert lines[0] == "seq,pod,node,gpu_ids,gpu_milli"
    assert len(lines) == len(runs[0].placements) + 1


def test_load_trace_from_csv(tmp_path: Path) -> None:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\n"
    )
    (tmp_path / "openb_pod_list_x.csv").write_text(
        ",".join(POD_COLUMNS) + "\np-0,1000,1024,1,500,,LS,Running,0,10,0\n"
    )
    tr = load_trace(tmp_path, "openb_pod_list_x.csv")
    assert tr.name == "x" and len(tr.nodes) == 1 and len(tr.pods) == 1


def test_config_profiles_are_measured_as_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--config FILE` measures a user's own profile next to the built-in policies."""

    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"{n.sn},{n.cpu_milli},{n.memory_mib},{n.gpu},{n.model}\n" for n in TINY_NODES)
    )
    (tmp_path / "openb_pod_list_tiny.csv").write_text(
        ",".join(POD_COLUMNS)
        + "\n"
        + "".join(
            f"{p.name},{p.cpu_milli},{p.memory_mib},{p.num_gpu},{p.gpu_milli},{p.gpu_spec},"
            "LS,Running,0,10,0\n"
            for p in tiny_pods()
        )
    )
    config = tmp_path / "mine.yaml"
    config.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\nprofiles:\n"
        "- schedulerName: packed\n  plugins:\n    score:\n      disabled: [{name: '*'}]\n"
        "      enabled: [{name: BestFitScore, weight: 1}]\n"
    )
    argv = [
        "simulate",
        "--protocol",
        "fgd",
        "--trace-dir",
        str(tmp_path),
        "--pods",
        "openb_pod_list_tiny.csv",
        "--seeds",
        "42",
        "--config",
        str(config),
        "--policies",
        "packed,BestFit",
        "--json-out",
        str(tmp_path / "out.json"),
    ]
    assert main(argv) == 0

    out = json.loads((tmp_path / "out.json").read_text())["policies"]
    assert set(out) == {"packed", "BestFit"}
    # The same scoring through the user's profile gives the built-in policy's result.
    assert out["packed"]["unallocated_pct_at_100"] == out["BestFit"]["unallocated_pct_at_100"]
    assert "packed" in capsys.readouterr().out


def test_default_trace_bestfit_and_ai_scheduler_on_seed42() -> None:
    """The real trace: BestFit lands near its published mean, and the ai-scheduler
    profile (learning online) stays under issue 4's 4.05 % on the default trace."""
    trace = load_trace(require_openb("openb_pod_list_default.csv"), "openb_pod_list_default.csv")
    best_fit = 100 - run_seed(trace, "BestFit", 42, REG).curve()[100]
    assert abs(best_fit - 7.14) < 0.6
    ai = 100 - run_seed(trace, "ai-scheduler", 42, REG).curve()[100]
    assert ai < 4.05 < best_fit


def test_discrete_curve_rounds_half_to_even() -> None:
    # 0.5 % and 2.5 % round down to 0 and 2 (half to even), 1.5 % up to 2, as Python's round.
    c = discrete_curve(np.array([5, 15, 25], np.int64), np.array([1, 2, 4], np.int64), 1000)
    assert c[0] == 0.1 and c[2] == 0.3  # 2: mean of 0.2 and 0.4
    assert c[1] == 0.23  # no sample rounds to 1: neighbours 0..2, mean of the three, rounded


def test_stat_is_population_std_and_outputs_have_the_documented_shape(tmp_path: Path) -> None:

    s = Stat.of([4.0, 6.0])
    assert s.mean == 5.0 and s.std == 1.0  # population, not sample (1.41)
    run = SeedRun("FGD", 42, np.array([100], np.int64), np.array([10], np.int64), 100, 1.0)
    run.placements = [Placement(0, "p0", "n1", (0, 3), (1000, 1000)), Placement(1, "p1", "")]
    path = fgd_report.write_placements(tmp_path, run)
    assert path.name == "FGD-42.csv"
    assert path.read_text().splitlines() == [
        "seq,pod,node,gpu_ids,gpu_milli",
        "0,p0,n1,0|3,1000|1000",
        "1,p1,,,",
    ]
    data = fgd_report.to_json("t", [PolicyResult("FGD", [run])], {})
    assert data["policies"]["FGD"]["unallocated_pct_at_100"] == {"mean": 90.0, "std": 0.0}
    fgd_report.write_plot(tmp_path / "c.png", "t", [PolicyResult("FGD", [run])])
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
