"""`gpusched` with bad input: a message naming what was wrong, a non-zero exit, no traceback."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusched.cli import build_parser, check_config_main, main
from gpusched.framework.registry import Registry
from gpusched.plugins import default_registry
from gpusched.sim.fgd_owners import OWNERS
from gpusched.sim.fgd_protocol import TIE_BREAKS
from gpusched.sim.openb import POD_COLUMNS

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\n"


PODS = ",".join(POD_COLUMNS) + "\np-0,1000,1024,1,500,,LS,Running,0,10,0\n"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    d.mkdir()
    (d / "openb_node_list_gpu_node.csv").write_text(NODES)
    (d / "openb_pod_list_default.csv").write_text(PODS)
    return d


def fails(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    """main(argv) exits non-zero (argparse: SystemExit 2) with every `expected` in its output."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    text = out.out + out.err
    assert rc != 0, text
    assert "Traceback" not in text
    for e in expected:
        assert e in text, text
    return text


def test_check_config_on_a_file_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe profiles: []\n")
    fails(["check-config", str(bad)], capsys, str(bad), "UTF-8")


def test_run_config_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe")
    fails(["run", "--config", str(bad)], capsys, str(bad), "UTF-8")


@pytest.mark.parametrize("name", ["missing", "missing.conf"])
def test_run_config_path_without_yaml_suffix_is_read_as_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """--config is a path, whatever its suffix: a missing file is reported as missing, not
    parsed as YAML text ("expected a mapping, got '/tmp/missing'")."""
    path = tmp_path / name
    text = fails(["run", "--config", str(path)], capsys, str(path), "No such file")
    assert "expected a mapping" not in text


def test_run_config_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = fails(["run", "--config", str(tmp_path)], capsys, str(tmp_path), "directory")
    assert "expected a mapping" not in text


def test_run_with_a_missing_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope"
    text = fails(
        ["run", "--kubeconfig", str(path), "--metrics-port", "0"], capsys, str(path), "not found"
    )
    assert "current-context" not in text


def test_run_without_any_cluster_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    text = fails(
        ["run", "--metrics-port", "0"],
        capsys,
        "KUBERNETES_SERVICE_HOST",
        str(tmp_path / ".kube" / "config"),
        "--kubeconfig",
    )
    assert "current-context" not in text


def test_run_with_kubeconfig_env_naming_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a"))
    fails(["run", "--metrics-port", "0"], capsys, "$KUBECONFIG", str(tmp_path / "a"))


def test_run_with_an_unreachable_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Port 1 on loopback: connection refused at once. The daemon must say so and stop, not
    retry a watch forever in silence."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1',"
        " insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    fails(
        ["run", "--kubeconfig", str(kc), "--metrics-port", "0", "--leader-elect=false"],
        capsys,
        "https://127.0.0.1:1",
        "cannot reach",
        str(kc),
    )


def test_run_with_a_bad_metrics_port(capsys: pytest.CaptureFixture[str]) -> None:
    fails(["run", "--metrics-port", "99999"], capsys, "--metrics-port")
    fails(["run", "--metrics-port", "-1"], capsys, "--metrics-port")


@pytest.mark.parametrize("protocol", ["fgd", "replay"])
def test_simulate_with_a_trace_dir_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    missing = tmp_path / "nope"
    fails(
        ["simulate", "--protocol", protocol, "--trace-dir", str(missing)],
        capsys,
        str(missing),
        "--trace-dir",
    )


@pytest.mark.parametrize("protocol", ["fgd", "replay"])
def test_simulate_with_a_pods_file_that_does_not_exist(
    trace: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    argv = ["simulate", "--protocol", protocol, "--trace-dir", str(trace), "--pods", "nope.csv"]
    fails(argv, capsys, "nope.csv", "not found")


@pytest.mark.parametrize("protocol", ["fgd", "replay"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (",".join(POD_COLUMNS) + "\np-0,abc,1024,1,500,,LS,Running,0,10,0\n", "cpu_milli"),
        ("name,cpu_milli,memory_mib\np-0,1,1\n", "missing columns"),
    ],
)
def test_simulate_with_a_malformed_pod_csv(
    trace: Path,
    capsys: pytest.CaptureFixture[str],
    protocol: str,
    content: str,
    expected: str,
) -> None:
    (trace / "bad.csv").write_text(content)
    argv = ["simulate", "--protocol", protocol, "--trace-dir", str(trace), "--pods", "bad.csv"]
    fails(argv, capsys, "bad.csv", expected)


@pytest.mark.parametrize("seeds", ["x", "5-1", ",", "1-x"])
@pytest.mark.parametrize("protocol", ["fgd", "replay"])
def test_simulate_with_bad_seeds(
    trace: Path, capsys: pytest.CaptureFixture[str], seeds: str, protocol: str
) -> None:
    argv = ["simulate", "--protocol", protocol, "--trace-dir", str(trace), "--seeds", seeds]
    fails(argv, capsys, "--seeds", repr(seeds))


@pytest.mark.parametrize("protocol", ["fgd", "replay"])
def test_simulate_with_an_unknown_policy(
    trace: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    argv = ["simulate", "--protocol", protocol, "--trace-dir", str(trace), "--seeds", "1"]
    fails([*argv, "--policies", "Nope"], capsys, "Nope", "known")


def test_simulate_fgd_with_a_missing_config(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--protocol", "fgd", "--trace-dir", str(trace), "--seeds", "1"]
    fails([*argv, "--config", str(tmp_path / "no.yaml")], capsys, "no.yaml", "No such file")


@pytest.mark.parametrize("flag", ["--json-out", "--curves-out", "--plot-out"])
@pytest.mark.parametrize("protocol", ["fgd", "replay"])
def test_simulate_output_into_a_missing_directory_fails_before_the_run(
    trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    protocol: str,
) -> None:
    out = tmp_path / "no" / "such" / "out.x"
    argv = ["simulate", "--protocol", protocol, "--trace-dir", str(trace), "--seeds", "1"]
    text = fails([*argv, "--policies", "ai-scheduler", flag, str(out)], capsys, flag, str(out))
    assert "seed 1:" not in text  # nothing was simulated


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--racks", "0"),
        ("--racks", "-2"),
        ("--nodes-per-rack", "0"),
        ("--load", "-1"),
        ("--load", "0"),
        ("--load", "nan"),
        ("--time-compression", "0"),
        ("--timeout", "-5"),
        ("--cluster-fraction", "0"),
        ("--cluster-fraction", "1.5"),
        ("--job-window", "-1"),
    ],
)
def test_simulate_rejects_out_of_range_numbers(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    fails(["simulate", flag, value], capsys, flag, value)


def test_simulate_with_an_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    fails(
        ["simulate", "--racks", "1", "--nodes-per-rack", "1", "--profiles", "Nope"],
        capsys,
        "Nope",
        "ai-scheduler",
    )


def test_tie_break_choices_are_the_protocols(capsys: pytest.CaptureFixture[str]) -> None:
    """The parser lists them literally (so `--help` needs no numpy); they must not drift."""
    parser = build_parser()
    assert parser.parse_args(["simulate"]).tie_break == TIE_BREAKS[0]
    for rule in TIE_BREAKS:
        assert parser.parse_args(["simulate", "--tie-break", rule]).tie_break == rule
    fails(["simulate", "--tie-break", "first"], capsys, "invalid choice", *TIE_BREAKS)


def test_owners_choices_are_the_variants(capsys: pytest.CaptureFixture[str]) -> None:
    """Listed literally in the parser like the tie-breaks; they must not drift."""
    parser = build_parser()
    assert parser.parse_args(["simulate"]).owners == OWNERS[0]
    for owners in OWNERS:
        assert parser.parse_args(["simulate", "--owners", owners]).owners == owners
    fails(["simulate", "--owners", "jobs"], capsys, "invalid choice", *OWNERS)


ROOT = Path(__file__).resolve().parents[2]


EXAMPLE = ROOT / "config" / "scheduler-config.yaml"


def test_check_config_main_ok(capsys: pytest.CaptureFixture[str]) -> None:
    # The shipped example against the real plugins and their typed args.
    assert check_config_main(str(EXAMPLE), default_registry()) == 0
    out = capsys.readouterr()
    assert out.out == "OK: 2 profiles (ai-scheduler, least-allocated)\n"
    assert out.err == ""


def test_check_config_main_errors(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "maxCardsPerNode: 99\nprofiles:\n- schedulerName: a\n  plugins:\n"
        "    score: {enabled: [{name: Spread, weight: 0}]}\n"
    )
    assert check_config_main(str(f), registry) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{f}: 2 errors",
        "  maxCardsPerNode: must be between 1 and 63, got 99",
        "  profiles[0].plugins.score.enabled[Spread].weight:"
        " must be a positive finite number, got 0",
    ]


def test_check_config_main_build_failure(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "profiles: [{schedulerName: a, plugins: {filter: {enabled: [{name: Broken}]}}}]\n"
    )
    assert check_config_main(str(f), registry) == 1
    assert "Broken refuses to start" in capsys.readouterr().err


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's parser, nested ones included, with its full command name."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _subparsers(sub)


def test_every_option_of_every_command_has_help() -> None:
    """`--help` is the reference users read first: an option without a line there (as
    `simulate --seed/--racks/--nodes-per-rack` were) is undocumented."""
    commands = dict(_subparsers(build_parser()))
    assert {"gpusched run", "gpusched simulate", "gpusched variants write"} <= set(commands)
    missing = [
        f"{name} {action.option_strings[0]}"
        for name, parser in commands.items()
        for action in parser._actions
        if action.option_strings and action.help in (None, "")
    ]
    assert missing == []


def test_top_level_help_describes_the_product(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "secondary scheduler" in out and "schedulerName" in out
    for command in ("simulate", "run", "agent", "variants", "check-config"):
        assert command in out
    assert "arrive with their issues" not in out
