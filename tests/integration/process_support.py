"""For the fault suite's process scenarios (test_faults_kill, test_faults_leader): `gpusched
run` as a child process whose log lines can be awaited, its configuration, and the bursts
of pods it binds. The pod watch and the invariant check are fault_support's."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from gpusched.devcluster.demo import mixed_workload
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import JSON
from tests.integration.daemon_support import placement

REPO = Path(__file__).resolve().parents[2]
Record = dict[str, Any]
# Lease timings: generous renewals (a loaded 2-core machine must not make a replica lose
# its Lease and exit 1 before its fault), short enough that each takeover (expiry, then one
# more lease duration before the first binding) costs a few seconds.
LEASE = {"leaseDurationSeconds": 3, "renewDeadlineSeconds": 2.5, "retryPeriodSeconds": 0.5}
# What a replica logs when it takes a Lease over that its holder never released.
TOOK_OVER = "took over the leader Lease; waiting before the first binding"


class DaemonProcess:
    """`gpusched run` as a child process. Its stdout (JSON lines) is kept as records and its
    stderr as lines, both copied to `log` as they come; `wait_for` waits on them."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.records: list[Record] = []
        self.stderr: list[str] = []
        self._changed = asyncio.Condition()
        self._readers = [
            asyncio.create_task(self._read(proc.stdout, json=True)),
            asyncio.create_task(self._read(proc.stderr, json=False)),
        ]

    @classmethod
    async def start(
        cls,
        kubeconfig: Path,
        config: Path,
        log: Path,
        env: Mapping[str, str] | None = None,
        extra: Sequence[str] = (),
    ) -> DaemonProcess:
        base = {k: v for k, v in os.environ.items() if k != "GPUSCHED_FAULT"}
        proc = await asyncio.create_subprocess_exec(
            *daemon_argv(kubeconfig, config, *extra),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO,
            env={**base, "PYTHONUNBUFFERED": "1", **(env or {})},
            limit=2**22,  # a decision record is one line of a few kB
        )
        return cls(proc, log)

    async def _read(self, stream: asyncio.StreamReader | None, *, json: bool) -> None:
        assert stream is not None
        with self.log.open("ab") as out:
            while line := await stream.readline():
                out.write(line)
                out.flush()
                text = line.decode(errors="replace").rstrip("\n")
                async with self._changed:
                    if json and text.startswith("{"):
                        try:
                            self.records.append(orjson.loads(text))
                        except orjson.JSONDecodeError:
                            self.stderr.append(text)
                    elif json:
                        self.stderr.append(text)  # not a record: kept with stderr's
                    else:
                        self.stderr.append(text)
                    self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    @property
    def done_reading(self) -> bool:
        return all(r.done() for r in self._readers)

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def events(self, event: str) -> list[Record]:
        return [r for r in self.records if r.get("event") == event]

    def decisions(self, result: str | None = None) -> list[Record]:
        return [r for r in self.events("decision") if result is None or r["result"] == result]

    async def wait_for(
        self,
        predicate: Callable[[Record], bool],
        what: str,
        timeout: float = 60.0,  # noqa: ASYNC109 - named in the failure with the log
    ) -> Record:
        """The first record satisfying `predicate`, waiting for it; fails with the log if
        the process ends or `timeout` passes first."""

        def found() -> Record | None:
            return next((r for r in self.records if predicate(r)), None)

        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: found() is not None or self.done_reading)
        except TimeoutError:
            pass
        record = found()
        if record is None:
            state = "ended" if self.done_reading else f"still running after {timeout:.0f}s"
            raise AssertionError(f"no {what} in the daemon's log ({state}):\n{self.tail()}")
        return record

    async def exited(self, timeout: float = 60.0) -> int:  # noqa: ASYNC109
        """The exit code (-9 for SIGKILL), once the process ended and its output was read."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"the daemon still runs after {timeout:.0f}s:\n{self.tail()}"
            ) from None
        await asyncio.gather(*self._readers)
        return code

    async def terminate(self, timeout: float = 40.0) -> int:  # noqa: ASYNC109
        """SIGTERM, then the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await self.exited(timeout)

    async def kill(self) -> None:
        """For cleanup: SIGKILL if still running."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


def process_config(path: Path, lease: str, qps: int, burst: int) -> Path:
    """A configuration for `gpusched run` replicas sharing the Lease `lease`, with LEASE's
    timings and a client bounded to `qps` / `burst`; written to `path`."""
    le = ", ".join(f"{k}: {v}" for k, v in {**LEASE, "resourceName": lease}.items())
    path.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        f"clientConnection: {{qps: {qps}, burst: {burst}}}\n"
        f"leaderElection: {{{le}}}\n"
    )
    return path


def burst_pods(k: int, size: int, pool: str, seed: int) -> list[JSON]:
    """Burst `k`: `size` mixed pods (whole-card, shared, model-constrained, CPU-only, none
    impossible) placed on `pool`, named `b<k>-...`."""
    pods = mixed_workload(size, seed=seed, impossible=False, **placement(pool))
    for pod in pods:
        pod["metadata"]["name"] = f"b{k}-{pod['metadata']['name']}"
    return pods
