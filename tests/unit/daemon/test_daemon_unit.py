"""The daemon's event handlers and binding failure paths, with in-memory ports (no server)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from gpusched.config import default_config
from gpusched.daemon import Daemon
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.framework.status import Code, Status
from gpusched.kube.writer import ObjectRef
from gpusched.model.pod import PodInfo
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeWriter:
    """ClusterPort + the reporting calls; `bind` waits for `release` and answers `answer`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.binding = asyncio.Event()
        self.answer = Status()
        self.binds: list[tuple[str, str]] = []

    async def annotate(self, pod: PodInfo, annotations: Mapping[str, str]) -> Status:
        return Status()

    async def bind(self, pod: PodInfo, node: str) -> Status:
        self.binds.append((pod.key, node))
        self.binding.set()
        await self.release.wait()
        return self.answer

    async def event(self, ref: ObjectRef, *args: Any, **kw: Any) -> None:
        return None

    async def pod_condition(self, pod: PodInfo, reason: str, message: str) -> None:
        return None

    def forget(self, uid: str) -> None:
        return None


def raw_pod(name: str, rv: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": "Pending"},
    }


def event_line(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def daemon(clock: Clock) -> tuple[Daemon, FakeWriter]:
    registry = default_registry()
    d = Daemon(
        None,  # type: ignore[arg-type]
        default_config(registry),
        registry,
        make_logger(io.StringIO()),
        clock=clock,
    )
    writer = FakeWriter()
    d.writer = writer  # type: ignore[assignment]
    d.handle._cluster = writer
    spec = NodeSpec("n1", 0, "none", 8000, 16384, "r", "s")
    raw = node_object(spec)
    raw["metadata"]["uid"] = "node-n1"
    d.node_watch._line(event_line("ADDED", raw))
    return d, writer


async def test_pod_updated_while_its_binding_is_in_flight_is_requeued_as_updated(
    daemon: tuple[Daemon, FakeWriter],
) -> None:
    """kube-scheduler requeues a pod whose binding failed with the informer's latest
    version; updates that arrive while the pod is assumed must not be lost."""
    d, writer = daemon
    d.pod_watch._line(event_line("ADDED", raw_pod("p", "1")))
    info = d.queue.pop_nowait()
    assert info is not None
    d._schedule_one(info)
    assert len(d.bindings) == 1
    await writer.binding.wait()
    # The user changes the pod while the Binding POST is in flight, which then fails.
    d.pod_watch._line(event_line("MODIFIED", raw_pod("p", "2", {"team": "b"})))
    writer.answer = Status(Code.ERROR, ("HTTP 500",))
    writer.release.set()
    await asyncio.gather(*d.bindings)
    assert d.queue.where("uid-p") == "backoff"
    queued = d.queue.backoff.get("uid-p")
    assert queued is not None
    assert queued.pod.annotations.get("team") == "b"
    assert d.cache.get("uid-p") is None


async def test_a_scheduling_attempt_that_raises_after_assume_does_not_strand_the_pod(
    daemon: tuple[Daemon, FakeWriter], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'A bug must cost one attempt, not the daemon': a plugin raising after the pod was
    assumed must not leave the pod assumed forever (capacity leaked, the pod never tried
    again)."""
    d, writer = daemon
    d.pod_watch._line(event_line("ADDED", raw_pod("p", "1")))
    fw = d.frameworks["ai-scheduler"]
    calls = 0

    def boom(*args: Any) -> Status:
        nonlocal calls
        calls += 1
        raise RuntimeError("permit plugin bug")

    monkeypatch.setattr(fw, "run_permit", boom)
    info = d.queue.pop_nowait()
    assert info is not None
    d._attempt(info)  # the loop's body
    assert calls == 1
    assert d.cache.get("uid-p") is None, "the failed attempt left the pod assumed"
    assert d.queue.where("uid-p") == "backoff"
    # The next attempt schedules it (it is not skipped as 'already assumed').
    monkeypatch.undo()
    clock.t += 60
    d.queue.flush()
    again = d.queue.pop_nowait()
    assert again is not None
    d._attempt(again)
    assert len(d.bindings) == 1
    writer.release.set()
    await asyncio.gather(*d.bindings)
    assert d.bound == 1


async def test_a_watch_that_dies_stops_the_daemon_with_failure(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead watch means a frozen cache: the daemon must stop (exit 1), not keep placing
    pods on stale state."""
    d, _ = daemon
    crash = asyncio.Event()

    async def node_watch() -> None:
        d.node_watch.synced.set()
        await crash.wait()
        raise RuntimeError("watch bug")

    async def pod_watch() -> None:
        d.pod_watch.synced.set()
        await asyncio.Event().wait()  # runs until cancelled

    monkeypatch.setattr(d.node_watch, "run", node_watch)
    monkeypatch.setattr(d.pod_watch, "run", pod_watch)
    running = asyncio.create_task(d.run())
    await d.ready.wait()
    assert not d.failed
    crash.set()
    await asyncio.wait_for(running, 10)
    assert d.failed


async def test_stop_is_not_a_failure(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, _ = daemon

    async def watch(reflector: Any) -> None:
        reflector.synced.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(d.node_watch, "run", lambda: watch(d.node_watch))
    monkeypatch.setattr(d.pod_watch, "run", lambda: watch(d.pod_watch))
    running = asyncio.create_task(d.run())
    await d.ready.wait()
    d.stop()
    await asyncio.wait_for(running, 10)
    assert not d.failed
