"""`gpusched run`'s arguments: the effective configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.cli import build_parser
from gpusched.daemon.main import RunArgs, effective_config, run_main
from gpusched.kube import faults
from gpusched.plugins import default_registry


@pytest.mark.parametrize(
    ("argv", "in_file", "expected"),
    [
        ([], None, True),  # the default
        ([], False, False),  # the file decides without the flag
        (["--leader-elect=false"], True, False),  # the flag wins
        (["--leader-elect"], False, True),
        (["--leader-elect", "true"], None, True),
    ],
)
def test_the_leader_elect_flag_overrides_the_file(
    tmp_path: Path, argv: list[str], in_file: bool | None, expected: bool
) -> None:
    config = tmp_path / "config.yaml"
    text = "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
    if in_file is not None:
        text += f"leaderElection: {{leaderElect: {str(in_file).lower()}}}\n"
    config.write_text(text)
    args = build_parser().parse_args(["run", "--config", str(config), *argv])
    run = RunArgs(config=args.config, leader_elect=args.leader_elect)
    got = effective_config(run, default_registry())
    assert got.leader_election.leader_elect is expected


def test_a_malformed_fault_variable_stops_start_up_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUSCHED_FAULT", "bind-sent:soon")
    assert run_main(RunArgs(kubeconfig="/nonexistent")) == 2
    err = capsys.readouterr().err
    assert "GPUSCHED_FAULT='bind-sent:soon'" in err and "<point>:<n>" in err
    assert faults.armed() is None


def test_the_gpu_map_is_off_by_default_and_needs_the_metrics_port(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build_parser().parse_args(["run"]).gpu_map is False
    assert build_parser().parse_args(["run", "--gpu-map"]).gpu_map is True
    assert run_main(RunArgs(metrics_port=0, gpu_map=True)) == 2
    assert "--gpu-map is served on the metrics port" in capsys.readouterr().err
