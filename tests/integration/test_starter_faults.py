"""The starter's bad days: a binary that dies at start, a port that is taken. Each error must
say what happened and what to do, and leave no process or temp dir behind."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from gpusched.devcluster import ClusterOptions, LocalCluster, StartError, find_binaries
from gpusched.devcluster.cluster import Endpoints
from gpusched.devcluster.processes import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_temp_dir_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A private temp dir: the machine's /tmp also holds the session cluster's and any
    # other test run's work dirs, which come and go on their own.
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield
    assert list(private.glob("gpusched-cluster-*")) == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A $GPUSCHED_BIN_DIR linking the real binaries, for a test to replace one of them."""
    try:
        binaries = find_binaries()
    except Exception as exc:
        pytest.fail(str(exc), pytrace=False)
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, path in binaries.all().items():
        (directory / name).symlink_to(path)
    monkeypatch.setenv("GPUSCHED_BIN_DIR", str(directory))
    return directory


def test_a_binary_that_dies_at_start_is_reported_with_its_log(bin_dir: Path) -> None:
    fake = bin_dir / "kube-apiserver"
    fake.unlink()
    fake.write_text("#!/bin/sh\necho 'E0101 flag provided but not defined: -bogus' >&2\nexit 3\n")
    fake.chmod(0o755)
    local = LocalCluster(ClusterOptions(kwok=False, kube_scheduler=False))

    with pytest.raises(StartError) as error:
        local.start()

    message = str(error.value)
    assert "kube-apiserver exited with code 3 at start" in message
    assert "flag provided but not defined" in message  # the log's tail is in the message
    assert not local.processes
    assert not local.workdir.exists()  # etcd's temp dir is gone too


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_taken_after_it_was_picked_is_retried(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race free_port() cannot rule out: another process binds the port first.
    handed_out = iter([taken_port])
    monkeypatch.setattr(
        "gpusched.devcluster.cluster.free_port", lambda: next(handed_out, None) or free_port()
    )
    messages: list[str] = []

    with LocalCluster(
        ClusterOptions(kwok=False, kube_scheduler=False, log=messages.append)
    ) as local:
        assert local.ports.etcd != taken_port
        pids = [p.pid for p in local.processes]
        assert any("port taken" in m for m in messages)
    assert not any(_alive(pid) for pid in pids)


def test_a_port_always_taken_fails_with_advice(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = iter(range(1000))
    per_attempt = len(fields(Endpoints))
    # Every attempt's first port (etcd's client port) is the taken one.
    monkeypatch.setattr(
        "gpusched.devcluster.cluster.free_port",
        lambda: taken_port if next(calls) % per_attempt == 0 else free_port(),
    )
    local = LocalCluster(ClusterOptions(kwok=False, kube_scheduler=False))

    with pytest.raises(StartError, match=r"etcd exited .* port it was given is in use"):
        local.start()
    assert not local.workdir.exists()
