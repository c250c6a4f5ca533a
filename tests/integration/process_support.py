"""For the fault suite: `gpusched run` as a child process whose log lines can be awaited,
and a pod watch that feeds the invariant checker's BindingLog for a whole test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from gpusched.devcluster.invariants import BindingLog
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import JSON, ApiError, Kube, pod_path

REPO = Path(__file__).resolve().parents[2]
Record = dict[str, Any]


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


class PodWatch:
    """Every version of the namespace's pods, from a list and a watch that runs until the
    context ends (re-listing after 410 Gone or a dropped stream): each one is shown to
    `bindings` (the invariant checker's BindingLog); `latest` holds the last by name."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.bindings = BindingLog()
        self.latest: dict[str, JSON] = {}
        self.relists = 0
        self._changed = asyncio.Condition()

    async def _see(self, obj: JSON, deleted: bool = False) -> None:
        self.bindings.see(obj)
        name = str(obj.get("metadata", {}).get("name", ""))
        async with self._changed:
            if deleted:
                self.latest.pop(name, None)
            else:
                self.latest[name] = obj
            self._changed.notify_all()

    async def run(self, synced: asyncio.Event) -> None:
        path = pod_path(self.namespace)
        version = ""
        while True:
            try:
                if not version:
                    listing = await self.kube.get(path)
                    for item in listing.get("items", []):
                        await self._see(item)
                    version = str(listing["metadata"]["resourceVersion"])
                    synced.set()
                events = self.kube.watch(path, resource_version=version, timeout_seconds=60)
                async with aclosing(events):
                    async for event in events:
                        meta = event.object.get("metadata", {})
                        if event.type == "ERROR":
                            version = ""  # 410 Gone: list again
                            self.relists += 1
                            break
                        version = str(meta.get("resourceVersion", version))
                        if event.type != "BOOKMARK":
                            await self._see(event.object, deleted=event.type == "DELETED")
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError):
                # The API server is still there in these tests; resume from `version`.
                await asyncio.sleep(0.2)

    def bound(self, names: Sequence[str]) -> int:
        return sum(1 for n in names if (self.latest.get(n) or {}).get("spec", {}).get("nodeName"))

    async def until(
        self,
        condition: Callable[[PodWatch], bool],
        what: str,
        timeout: float = 90.0,  # noqa: ASYNC109
    ) -> None:
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: condition(self))
        except TimeoutError:
            raise AssertionError(f"{what}: not after {timeout:.0f}s") from None

    async def until_bound(self, names: Sequence[str], count: int | None = None) -> None:
        want = len(names) if count is None else count
        await self.until(
            lambda w: w.bound(names) >= want, f"{want} of {len(names)} pods bound", timeout=120
        )


@asynccontextmanager
async def pod_watch(kube: Kube, namespace: str) -> AsyncIterator[PodWatch]:
    watch = PodWatch(kube, namespace)
    synced = asyncio.Event()
    task = asyncio.create_task(watch.run(synced))
    try:
        waiter = asyncio.ensure_future(synced.wait())
        await asyncio.wait({waiter, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # raises what ended it
        assert synced.is_set(), "the pod watch did not list the namespace within 30 s"
        yield watch
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def pool_nodes(kube: Kube, label: str, pool: str) -> list[JSON]:
    listing = await kube.get("/api/v1/nodes", query=[("labelSelector", f"{label}={pool}")])
    items: list[JSON] = listing.get("items", [])
    return items
