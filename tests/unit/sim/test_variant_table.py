"""The variants table (sim/variant_table.py): every case run, resumable, the bound beside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched.sim.variant_table import Row, main
from tests.unit.sim.test_variants import write_tiny_trace


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    return write_tiny_trace(tmp_path / "trace")


def test_every_case_policy_and_seed_is_run_once_and_kept(
    trace_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    argv = ["--trace-dir", str(trace_dir), "--seeds", "1", "--jobs", "1", "--out", str(out)]
    argv += ["--cases", "gpuspec10,gpuspec10+spec50"]
    assert main(argv) == 0
    kept = json.loads(out.read_text())
    assert len(kept) == 2 * 4  # cases x (FGD, ai-scheduler, bound, bound-any), one seed
    # The bound that assumes every shared pod placed is NaN where that cannot hold.
    assert all(0.0 <= v <= 100.0 for k, v in kept.items() if not k.endswith("|bound|1"))
    table = capsys.readouterr().out
    assert "| gpuspec10 |" in table and "| gpuspec10+spec50 |" in table
    # The bound without assumption is a lower bound for every policy on every seed.
    for key, v in kept.items():
        case, policy, seed = key.split("|")
        if not policy.startswith("bound"):
            assert kept[f"{case}|bound-any|{seed}"] <= v + 0.01, key  # curves are rounded
    # A second run finds everything done: nothing is run again.
    assert main(argv) == 0
    assert "0 runs to do" in capsys.readouterr().err


def test_a_row_says_how_much_of_fgds_gap_is_closed() -> None:
    line = Row("x", fgd=[6.0, 6.0], ai=[4.0, 5.0], bound=[4.0, 4.0], bound_any=[3, 3]).line()
    # FGD 6, ai 4.5, bound 4: 1.5 of the 2 points closed; ai is 25 % below FGD.
    assert line == "| x | 6.00 | 4.50 ± 0.50 | -25 % | 4.00 | 3.00 | 75 % | 0/2 |"
    # ai below the bound that assumes shared pods placed: judged against the other one.
    line = Row("y", fgd=[6.0], ai=[4.0], bound=[4.5], bound_any=[2.0]).line()
    assert line == "| y | 6.00 | 4.00 ± 0.00 | -33 % | 4.50 | 2.00 | 50 %* | 0/1 |"


def test_a_bad_case_fails_before_any_run(trace_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        main(["--trace-dir", str(trace_dir), "--cases", "nosuchtrace", "--jobs", "1"])
