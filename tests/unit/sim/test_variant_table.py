"""The variants table (sim/variant_table.py): every case run, resumable, the bound beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched.sim.openb import TracePod, write_nodes, write_pods
from gpusched.sim.variant_table import Row, main
from tests.unit.sim.test_variants import NODES


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    d.mkdir()
    write_nodes(d / "openb_node_list_gpu_node.csv", NODES)
    shapes = [(4000, 1, 300, ""), (8000, 1, 1000, ""), (3000, 0, 0, ""), (6000, 1, 500, "T4")]
    pods = [TracePod(f"p-{i:03d}", *shapes[i % 4][:1], 4096, *shapes[i % 4][1:]) for i in range(80)]
    write_pods(d / "openb_pod_list_gpuspec10.csv", pods)
    return d


def test_every_case_policy_and_seed_is_run_once_and_kept(
    trace_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    argv = ["--trace-dir", str(trace_dir), "--seeds", "1", "--jobs", "1", "--out", str(out)]
    argv += ["--cases", "gpuspec10,gpuspec10+spec50"]
    assert main(argv) == 0
    kept = json.loads(out.read_text())
    assert len(kept) == 2 * 3  # cases x (FGD, ai-scheduler, bound), one seed
    assert all(0.0 <= v <= 100.0 for v in kept.values())
    table = capsys.readouterr().out
    assert "| gpuspec10 |" in table and "| gpuspec10+spec50 |" in table
    # The bound is a lower bound for every policy on every seed.
    for key, v in kept.items():
        case, policy, seed = key.split("|")
        if policy != "bound":
            assert kept[f"{case}|bound|{seed}"] <= v + 1e-9, key
    # A second run finds everything done: nothing is run again.
    assert main(argv) == 0
    assert "0 runs to do" in capsys.readouterr().err


def test_a_row_says_how_much_of_fgds_gap_is_closed() -> None:
    line = Row("x", fgd=[6.0, 6.0], ai=[4.0, 5.0], bound=[4.0, 4.0]).line()
    # FGD 6, ai 4.5, bound 4: 1.5 of the 2 points closed; ai is 25 % below FGD.
    assert line == "| x | 6.00 | 4.50 ± 0.50 | -25 % | 4.00 | 75 % | 0/2 |"


def test_a_bad_case_fails_before_any_run(trace_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        main(["--trace-dir", str(trace_dir), "--cases", "nosuchtrace", "--jobs", "1"])
