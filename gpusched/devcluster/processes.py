"""Child processes of the local control plane: start, wait until ready, stop for sure.

Each child runs in its own process group (so stopping it also stops anything it forked) and,
when the starter stays attached (tests), with PR_SET_PDEATHSIG, so even a SIGKILLed pytest
leaves no orphan kube-apiserver holding ports. The kernel sends that signal when the *thread*
that started the child ends, so start an attached cluster from the main thread (or one that
outlives the cluster).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class StartError(RuntimeError):
    """A component failed to start; the message says what happened and what to do."""


def free_port() -> int:
    """A port free on 127.0.0.1 right now. Another process may take it before the child binds
    it; the starter then sees "address already in use" in the log and retries."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Process:
    name: str
    argv: Sequence[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else -1

    def start(self, *, attached: bool, env: dict[str, str] | None = None) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            try:
                self.popen = subprocess.Popen(
                    list(self.argv),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if attached else None,  # noqa: PLW1509
                    env=env,
                    close_fds=True,
                )
            except OSError as exc:
                raise StartError(f"cannot run {self.argv[0]} ({exc}); run `make bins`") from exc

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` seconds."""
        if self.popen is None:
            return
        stop_group(self.popen.pid, timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1)


def stop_group(pgid: int, timeout: float = 10.0) -> None:
    """Stop a process group by id, also one started by an earlier `cluster-up` run."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)  # reap our own child so it stops being a zombie
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def http_ok(url: str, *, ca_file: Path | None = None, token: str | None = None) -> bool:
    """True when ``url`` answers 200. TLS is verified against ``ca_file`` when given; without
    one (kube-scheduler's self-signed health port) it is not, which is fine on loopback."""
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if ca_file is None:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    else:
        context = None
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def wait_ready(
    process: Process, probe: Callable[[], bool], *, timeout: float, hint: str = ""
) -> None:
    """Wait until ``probe()`` is true, failing fast (with the log's tail) if the process
    exits first. Probing a health endpoint is the readiness signal these servers define;
    the short pause between probes is a poll interval, not synchronisation by sleeping."""
    deadline = time.monotonic() + timeout
    while True:
        code = process.exit_code()
        if code is not None:
            raise StartError(_exit_message(process, code, hint))
        if probe():
            return
        if time.monotonic() > deadline:
            raise StartError(
                f"{process.name} did not become ready within {timeout:.0f}s. "
                f"Log {process.log_path}, last lines:\n{process.log_tail()}"
            )
        time.sleep(0.1)


def _exit_message(process: Process, code: int, hint: str) -> str:
    tail = process.log_tail()
    advice = hint
    if "address already in use" in tail:
        advice = "a port it was given is in use by another process; start again (new ports)."
    elif code < 0:
        advice = f"it was killed by signal {-code}."
    return (
        f"{process.name} exited with code {code} at start. {advice}\n"
        f"Log {process.log_path}, last lines:\n{tail}"
    )


def port_in_use_error(error: StartError) -> bool:
    return "port it was given is in use" in str(error)
