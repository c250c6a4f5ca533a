"""The daemon's event handlers and binding failure paths, with in-memory ports (no server)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
from typing import Any

import orjson
import pytest

from gpusched.config import API_VERSION, KIND, LeaderElection, default_config, load_config
from gpusched.config.settings import Watch
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon.daemon import MAX_WARNED
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.framework.status import Code, Status
from gpusched.kube import faults
from gpusched.kube.client import ApiError
from gpusched.model.node import node_from_k8s
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry
from tests.builders import watch_line
from tests.fakes import (
    PATH,
    Clock,
    FakeClock,
    FakeLeases,
    FakeWriter,
    elector,
    other_holder,
    renew_as_holder,
    until,
)

GUARD = 10.0  # against a hang; every wait below is on an event


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


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def leases() -> FakeLeases:
    return FakeLeases()


@pytest.fixture
def lease_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def daemon(
    clock: Clock, stream: io.StringIO, leases: FakeLeases, lease_clock: FakeClock
) -> tuple[Daemon, FakeWriter]:
    registry = default_registry()
    d = Daemon(
        None,  # type: ignore[arg-type]
        default_config(registry),
        registry,
        make_logger(stream),
        clock=clock,
        # No PodGroup watches nor status operator: no API server here (integration covers them).
        options=DaemonOptions(warm_up=False, pod_groups=False),  # warm-up: test_kernel_warm_up
    )
    # The elector over an in-memory Lease, waiting on a fake clock: no API server, no time.
    assert d.elector is not None
    d.elector = elector(
        leases,
        lease_clock,
        on_change=lambda leading: d.metrics.leader.set(1 if leading else 0),
        log=stream,
    )
    writer = FakeWriter()
    d.writer = writer  # type: ignore[assignment]
    d.handle._cluster = writer
    spec = NodeSpec("n1", 0, "none", 8000, 16384, "r", "s")
    raw = node_object(spec)
    raw["metadata"]["uid"] = "node-n1"
    d.node_watch._line(watch_line("ADDED", raw))
    _quiet_storage(d)
    return d, writer


def _quiet_storage(d: Daemon) -> None:
    """The storage watches (the default profile's volume plugins) are not under test here:
    they report synced at once and then wait to be cancelled."""
    assert d.volumes is not None
    # Nor the PodGroup watches (the default profile's GangScheduling), where there are any,
    # nor the DRA ones (DynamicResources), nor the ElasticQuota one (always).
    groups = d.pod_groups.reflectors if d.pod_groups is not None else ()
    dra = d.dra.reflectors if d.dra is not None else ()
    for reflector in (*d.volumes.reflectors, *groups, *dra, *d.quotas.reflectors):
        reflector.synced.set()
        reflector.run = _idle  # type: ignore[method-assign]


async def _idle() -> None:
    await asyncio.Event().wait()


async def test_pod_updated_while_its_binding_is_in_flight_is_requeued_as_updated(
    daemon: tuple[Daemon, FakeWriter],
) -> None:
    """kube-scheduler requeues a pod whose binding failed with the informer's latest
    version; updates that arrive while the pod is assumed must not be lost."""
    d, writer = daemon
    d.schedule_one.fence = None  # the loop body driven by hand, with no Lease to hold
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    info = d.queue.pop_nowait()
    assert info is not None
    d._attempt(info)
    assert len(d.bindings) == 1
    await writer.binding.wait()
    # The user changes the pod while the Binding POST is in flight, which then fails.
    d.pod_watch._line(watch_line("MODIFIED", raw_pod("p", "2", {"team": "b"})))
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
    d.schedule_one.fence = None  # the loop body driven by hand, with no Lease to hold
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
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


async def test_after_assume_is_reached_with_the_pod_assumed_and_no_binding_started(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPUSCHED_FAULT=after-assume: the kill comes after the scheduling cycle assumed the
    pod, before its binding task exists (nothing of it has reached the API server)."""
    d, writer = daemon
    d.schedule_one.fence = None  # the loop body driven by hand, with no Lease to hold
    seen: list[tuple[bool, int]] = []

    def kill(point: str) -> None:
        entry = d.cache.get("uid-p")
        seen.append((entry is not None and entry.assumed, len(d.bindings)))

    monkeypatch.setattr(faults, "_kill", kill)
    faults.arm(faults.Fault(faults.AFTER_ASSUME, 1))
    try:
        d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
        info = d.queue.pop_nowait()
        assert info is not None
        d._attempt(info)
    finally:
        faults.arm(None)
    assert seen == [(True, 0)]
    writer.release.set()
    await asyncio.gather(*d.bindings)


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

    async def namespace_watch() -> None:
        d.namespace_watch.synced.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(d.node_watch, "run", node_watch)
    monkeypatch.setattr(d.pod_watch, "run", pod_watch)
    monkeypatch.setattr(d.namespace_watch, "run", namespace_watch)
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
    monkeypatch.setattr(d.namespace_watch, "run", lambda: watch(d.namespace_watch))
    running = asyncio.create_task(d.run())
    await d.ready.wait()
    d.stop()
    await asyncio.wait_for(running, 10)
    assert not d.failed


def _quiet_watches(d: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Watches that report synced at once and then wait to be cancelled."""

    async def watch(reflector: Any) -> None:
        reflector.synced.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(d.node_watch, "run", lambda: watch(d.node_watch))
    monkeypatch.setattr(d.pod_watch, "run", lambda: watch(d.pod_watch))
    _quiet_storage(d)
    monkeypatch.setattr(d.namespace_watch, "run", lambda: watch(d.namespace_watch))


def _events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def _leader_gauge(d: Daemon) -> float | None:
    return d.metrics.registry.get_sample_value("gpusched_leader")


def _another_leader_lives(leases: FakeLeases, lease_clock: FakeClock) -> None:
    leases.put(other_holder(lease_clock))
    leases.renewer = renew_as_holder(leases, lease_clock)  # it renews at every look


def _the_leader_steps_down(leases: FakeLeases) -> None:
    leases.renewer = None
    leases.put({**leases.spec, "holderIdentity": "", "leaseDurationSeconds": 1})  # released


async def test_a_standby_keeps_its_cache_but_schedules_only_once_it_leads(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    lease_clock: FakeClock,
    stream: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d, writer = daemon
    _another_leader_lives(leases, lease_clock)
    _quiet_watches(d, monkeypatch)
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.ready.wait(), GUARD)  # /readyz: ready as a standby too
    # Many retries, well past a leaseDuration of fake time: a live leader is never replaced.
    await asyncio.wait_for(until(lambda: len(lease_clock.sleeps) >= 10, lease_clock.changed), GUARD)
    assert not d.leading.is_set()
    assert d.attempts == 0 and len(d.queue) == 1  # queued (warm), not attempted
    assert _leader_gauge(d) == 0
    # The leader steps down (releases): we take over and schedule what is queued.
    _the_leader_steps_down(leases)
    await asyncio.wait_for(d.leading.wait(), GUARD)
    assert _leader_gauge(d) == 1
    await asyncio.wait_for(writer.binding.wait(), GUARD)
    assert d.attempts == 1
    writer.release.set()
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed and d.bound == 1
    assert _leader_gauge(d) == 0
    elected = [e for e in _events(stream) if e["event"] == "leader elected"]
    assert elected and elected[0]["identity"] == "me_1"


async def test_a_standby_writes_no_events_until_it_leads(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    lease_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the leader writes to the API: a standby that sees bad node data logs it, and
    writes the Warning Event once it leads (not once per replica)."""
    d, writer = daemon
    _another_leader_lives(leases, lease_clock)
    _quiet_watches(d, monkeypatch)
    raw = node_object(NodeSpec("big", 16, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-big"
    d.node_watch._line(watch_line("ADDED", raw))
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.ready.wait(), GUARD)
    await asyncio.wait_for(until(lambda: len(lease_clock.sleeps) >= 5, lease_clock.changed), GUARD)
    assert not d.leading.is_set()
    assert writer.events == []
    _the_leader_steps_down(leases)
    await asyncio.wait_for(d.leading.wait(), GUARD)
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    assert writer.events == [("big", "GPUInventory")]
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed


async def test_a_gated_pod_is_logged_at_once_and_its_condition_written_once_leading(
    daemon: tuple[Daemon, FakeWriter],
    stream: io.StringIO,
    leases: FakeLeases,
    lease_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d, writer = daemon
    _another_leader_lives(leases, lease_clock)
    _quiet_watches(d, monkeypatch)
    raw = raw_pod("gated", "5")
    raw["spec"]["schedulingGates"] = [{"name": "x.io/hold"}]
    d.pod_watch._line(watch_line("ADDED", raw))
    # A gang member whose sibling does not exist yet is held by GangScheduling.
    member = raw_pod(
        "member", "6", {"scheduling.ai/gang-name": "train", "scheduling.ai/gang-total": "2"}
    )
    d.pod_watch._line(watch_line("ADDED", member))
    assert d.queue.where("uid-gated") == "gated"
    assert d.queue.where("uid-member") == "gated"
    gated = [e for e in _events(stream) if e.get("result") == "gated"]
    assert gated[0]["message"] == "waiting for scheduling gates: [x.io/hold]"
    assert gated[0]["plugin"] == "SchedulingGates"
    waiting = (
        "waiting for the pods of gang (scheduling.ai/gang-name) ns/train: 1 of its minimum 2 exist"
    )
    assert (gated[1]["plugin"], gated[1]["message"]) == ("GangScheduling", waiting)
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.ready.wait(), GUARD)
    await asyncio.wait_for(until(lambda: len(lease_clock.sleeps) >= 5, lease_clock.changed), GUARD)
    assert writer.conditions == []  # a standby writes nothing
    _the_leader_steps_down(leases)
    await asyncio.wait_for(
        until(lambda: len(writer.conditions) >= 2, writer.condition_written), GUARD
    )
    assert sorted(writer.conditions) == [
        ("gated", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"),
        ("member", "NotReadyForScheduling", waiting),
    ]
    assert d.queue.where("uid-gated") == "gated" and writer.binds == []
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed


async def test_taking_over_an_unreleased_lease_waits_a_lease_duration_before_binding(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    lease_clock: FakeClock,
    stream: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old leader died or hung holding the Lease: a Binding it sent just before its
    renew deadline may still reach the API server, so the first binding waits."""
    d, writer = daemon
    leases.put(other_holder(lease_clock))  # never renewed, never released
    _quiet_watches(d, monkeypatch)
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    fence, asked = d.schedule_one.fence, []
    assert fence is not None

    def recording_fence() -> str | None:
        asked.append(lease_clock.t)
        return fence()

    d.schedule_one.fence = recording_fence
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(writer.binding.wait(), GUARD)
    took = next(e for e in _events(stream) if e["event"].startswith("took over"))
    assert took["previous_holder"] == "other_1" and took["seconds"] == 15
    # The wait is on the elector's clock, while it renews: the first binding cycle came a
    # lease duration after the acquisition, and found the Lease freshly renewed.
    assert d.elector is not None
    assert asked[0] - d.elector.acquired_at >= 15
    writer.release.set()
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed and d.bound == 1


async def test_a_new_leader_learns_the_shapes_of_the_pods_already_bound(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    d, _ = daemon
    _quiet_watches(d, monkeypatch)
    for i in range(3):
        raw = raw_pod(f"b{i}", "1")
        raw["spec"]["nodeName"] = "n1"
        raw["status"]["phase"] = "Running"
        d.pod_watch._line(watch_line("ADDED", raw))
    learner = d.frameworks["ai-scheduler"].plugins["GPUFragmentation"].learner
    assert learner.seen == 0
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.leading.wait(), GUARD)
    assert learner.seen == 3 and learner.counts == {(100, 0, 0, ""): pytest.approx(3.0, 0.01)}
    d.stop()
    await asyncio.wait_for(running, GUARD)


async def test_losing_the_lease_stops_the_daemon_and_cuts_bindings_short(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    stream: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another instance may take over once the Lease expires: our bindings in flight are
    cancelled at once (not drained for bind_grace_seconds) and the daemon exits 1."""
    d, writer = daemon
    _quiet_watches(d, monkeypatch)
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.leading.wait(), GUARD)
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    await asyncio.wait_for(writer.binding.wait(), GUARD)
    assert d.cache.is_assumed("uid-p")
    leases.fail = ApiError("PUT", PATH, 500, "etcdserver: request timed out")
    await asyncio.wait_for(running, GUARD)
    assert d.failed
    assert d.bound == 0
    assert d.cache.get("uid-p") is None, "the cut binding left its placement assumed"
    assert _leader_gauge(d) == 0
    events = [e["event"] for e in _events(stream)]
    assert "leader lost" in events
    assert "stopping: leadership lost; exiting so that a restart re-syncs" in events
    cut = next(e for e in _events(stream) if e["event"] == "bindings cut short")
    assert cut["reason"] == "leader lease lost"


async def test_stop_releases_the_lease_only_after_the_bindings_in_flight(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d, writer = daemon
    _quiet_watches(d, monkeypatch)
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.leading.wait(), GUARD)
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    await asyncio.wait_for(writer.binding.wait(), GUARD)
    d.stop()  # SIGTERM
    # While the binding is in flight the Lease is still renewed, so no standby takes over.
    renewals = leases.rv
    await asyncio.wait_for(until(lambda: leases.rv >= renewals + 3, leases.changed), GUARD)
    assert leases.spec["holderIdentity"] == "me_1"
    writer.release.set()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed and d.bound == 1
    assert leases.spec["holderIdentity"] == ""
    assert leases.spec["leaseDurationSeconds"] == 1
    assert d.stopped.is_set()


async def test_without_leader_election_it_schedules_after_the_sync(
    clock: Clock, stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = default_registry()
    config = default_config(registry)
    config = type(config)(
        profiles=config.profiles, leader_election=LeaderElection(leader_elect=False)
    )
    d = Daemon(
        None,  # type: ignore[arg-type]
        config,
        registry,
        make_logger(stream),
        clock=clock,
        options=DaemonOptions(pod_groups=False),  # no API server for the status operator
    )
    assert d.elector is None
    _quiet_watches(d, monkeypatch)
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.leading.wait(), GUARD)
    assert _leader_gauge(d) == 1
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed


async def test_stop_before_the_first_sync_leaves_no_unretrieved_exception(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the watches still retry (an unreachable server) must stop quietly: no
    "_GatheringFuture exception was never retrieved" traceback on stderr."""

    d, _ = daemon

    async def never_synced() -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(d.node_watch, "run", never_synced)
    monkeypatch.setattr(d.pod_watch, "run", never_synced)
    monkeypatch.setattr(d.namespace_watch, "run", never_synced)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        d.stop()  # before the sync: run() takes the same path as a SIGTERM while waiting
        await asyncio.wait_for(d.run(), GUARD)
        gc.collect()  # an unretrieved exception is reported when its future is collected
    finally:
        loop.set_exception_handler(None)
    assert not d.failed
    assert [c.get("message") for c in reported] == []


async def test_a_node_with_more_cards_than_max_cards_per_node_is_reported_with_the_setting(
    daemon: tuple[Daemon, FakeWriter], stream: io.StringIO
) -> None:
    """The warning names the configuration field a user can raise, not an internal name."""
    d, _ = daemon
    raw = node_object(NodeSpec("big", 16, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-big"
    d.node_watch._line(watch_line("ADDED", raw))
    warnings = [e for e in _events(stream) if e.get("node") == "big"]
    assert len(warnings) == 1, warnings
    text = warnings[0]["warning"]
    assert "node ignored" in text and "16 cards" in text
    assert "maxCardsPerNode" in text and "(8)" in text and "63" in text
    assert "big" not in d.cache.snapshot.rows


async def test_a_node_that_grows_past_max_cards_per_node_is_no_longer_used(
    daemon: tuple[Daemon, FakeWriter], stream: io.StringIO
) -> None:
    """ "node ignored" must hold for a node already known too: its old 8-card row would
    otherwise keep taking pods on cards that no longer match the node."""
    d, _ = daemon
    raw = node_object(NodeSpec("grown", 8, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-grown"
    d.node_watch._line(watch_line("ADDED", raw))
    assert "grown" in d.cache.snapshot.rows
    raw = node_object(NodeSpec("grown", 16, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-grown"
    d.node_watch._line(watch_line("MODIFIED", raw))
    assert "grown" not in d.cache.snapshot.rows
    assert any("node ignored" in e.get("warning", "") for e in _events(stream))


def test_the_watch_settings_reach_the_reflectors() -> None:
    registry = default_registry()
    config = dataclasses.replace(default_config(registry), watch=Watch(30, 45.0, 2.0, 8.0, 50.0))
    d = Daemon(None, config, registry, make_logger(io.StringIO()))  # type: ignore[arg-type]
    assert d.volumes is not None
    for watch in (d.node_watch, d.pod_watch, d.namespace_watch, *d.volumes.reflectors):
        assert (watch.watch_timeout, watch.read_timeout) == (30, 45.0)
        assert (watch.backoff.initial, watch.backoff.maximum) == (2.0, 8.0)
        assert watch.backoff.reset_after == 50.0
    assert d.node_watch.backoff is not d.pod_watch.backoff  # each watch backs off alone


async def test_healthz_sees_the_watches_and_a_wedged_loop(
    daemon: tuple[Daemon, FakeWriter], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, _ = daemon
    assert d.volumes is not None
    assert d.dra is not None
    assert d.liveness.watches == [
        d.node_watch,
        d.pod_watch,
        d.namespace_watch,
        *d.volumes.reflectors,
        *d.dra.reflectors,
        *d.quotas.reflectors,
    ]
    clock.t += 3600
    assert d.liveness.problems() == []  # no loop yet (a standby): only the watches count
    seen: list[str] = []

    def wedged(info: Any) -> None:  # an attempt that takes 61 s
        clock.t += 61
        seen.extend(d.liveness.problems())
        d.queue.close()

    monkeypatch.setattr(d, "_attempt", wedged)
    d.pod_watch._line(watch_line("ADDED", raw_pod("p", "1")))
    d.pod_watch._line(watch_line("ADDED", raw_pod("q", "2")))
    async with asyncio.timeout(GUARD):
        await d._loop()
    assert seen == [
        "scheduling loop: no progress for 61s (limit 60s), in an attempt with 1 pods active"
    ]
    assert d.liveness.problems() == []  # the loop ended: nothing to check


def _forged(name: str, rv: str, milli: str = "0", cpu: str = "100m") -> dict[str, Any]:
    """A shared pod bound to node g whose gpu-milli-assigned says it is free."""
    raw = raw_pod(
        name,
        rv,
        {"gpusched.io/gpu-milli": "500", "gpusched.io/gpu-ids": "1"}
        | {"gpusched.io/gpu-milli-assigned": milli},
    )
    raw["spec"]["nodeName"] = "g"
    raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    raw["status"]["phase"] = "Running"
    return raw


def _gpu_node(d: Daemon) -> None:
    raw = node_object(NodeSpec("g", 8, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-g"
    d.node_watch._line(watch_line("ADDED", raw))


async def test_a_forged_assignment_gets_one_warning_event_from_the_leader(
    daemon: tuple[Daemon, FakeWriter], stream: io.StringIO
) -> None:
    d, writer = daemon
    _gpu_node(d)
    d.leading.set()  # the Lease is held (run() sets it)
    d.pod_watch._line(watch_line("ADDED", _forged("p", "1")))
    # Resized: charged again, reported again by the cache with the same message.
    d.pod_watch._line(watch_line("MODIFIED", _forged("p", "2", cpu="2")))
    assert sum(1 for w in d.cache.stats.warnings if "ns/p" in w) == 2
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    await d.tasks.drain(GUARD, None)
    assert writer.events == [("p", "GPUAssignmentInvalid")]
    logged = [e for e in _events(stream) if e["event"] == "pod GPU assignment"]
    assert len(logged) == 1 and logged[0]["pod"] == "ns/p"
    assert "gpu-milli-assigned='0' is outside 500-1000" in logged[0]["warning"]
    snap = d.cache.snapshot
    assert snap.card_free_milli[snap.row_of("g"), 1] == 0


async def test_a_standby_writes_pod_warnings_once_it_leads(
    daemon: tuple[Daemon, FakeWriter],
    leases: FakeLeases,
    lease_clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d, writer = daemon
    _another_leader_lives(leases, lease_clock)
    _quiet_watches(d, monkeypatch)
    _gpu_node(d)
    d.pod_watch._line(watch_line("ADDED", _forged("p", "1")))
    d.pod_watch._line(watch_line("ADDED", _forged("gone", "1")))
    d.pod_watch._line(watch_line("DELETED", _forged("gone", "2")))  # no Event for it later
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.ready.wait(), GUARD)
    await asyncio.wait_for(until(lambda: len(lease_clock.sleeps) >= 5, lease_clock.changed), GUARD)
    assert writer.events == []
    _the_leader_steps_down(leases)
    await asyncio.wait_for(d.leading.wait(), GUARD)
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert writer.events == [("p", "GPUAssignmentInvalid")]
    assert not d.failed


async def test_pod_warnings_remembered_are_bounded(
    daemon: tuple[Daemon, FakeWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpusched.daemon.daemon.MAX_POD_WARNINGS", 3)
    d, _ = daemon
    _gpu_node(d)
    for i in range(10):
        d.pod_watch._line(watch_line("ADDED", _forged(f"p{i}", "1", milli=str(i))))
    assert len(d._pod_warned) == 3
    assert [uid for uid, _ in d._pod_warned] == ["uid-p7", "uid-p8", "uid-p9"]


async def test_node_warnings_remembered_are_bounded(
    daemon: tuple[Daemon, FakeWriter], stream: io.StringIO
) -> None:
    """A warning's text carries node data, which may differ on every update: the set of
    warnings already reported (and kept for a standby) is an LRU, not a growing set."""
    d, _ = daemon
    node = node_from_k8s(node_object(NodeSpec("n", 8, "A100M80", 8000, 16384, "r", "s")))
    for i in range(MAX_WARNED * 3):
        d._node_warning(node, f"status.allocatable['x']: bad value {i}")
    assert len(d._warned) == MAX_WARNED and len(d._unwritten) == MAX_WARNED
    logged = len(_events(stream))
    d._node_warning(node, f"status.allocatable['x']: bad value {MAX_WARNED * 3 - 1}")
    assert len(_events(stream)) == logged  # a recent warning is still reported only once
    d._node_warning(node, "status.allocatable['x']: bad value 0")  # long evicted
    assert len(_events(stream)) == logged + 1


def test_storage_is_watched_only_when_a_profile_has_a_volume_plugin() -> None:
    registry = default_registry()
    assert Daemon(None, default_config(registry), registry, make_logger(io.StringIO())).volumes  # type: ignore[arg-type]
    volume_plugins = ["VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"]
    config = load_config(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "profiles": [
                {
                    "schedulerName": "ai-scheduler",
                    "plugins": {"multiPoint": {"disabled": [{"name": n} for n in volume_plugins]}},
                }
            ],
        },
        registry,
    )
    d = Daemon(None, config, registry, make_logger(io.StringIO()))  # type: ignore[arg-type]
    assert d.volumes is None
    assert d.pod_groups is not None  # the profile keeps GangScheduling
    assert d.dra is not None  # and DynamicResources
    assert d.liveness.watches == [
        d.node_watch,
        d.pod_watch,
        d.namespace_watch,
        *d.pod_groups.reflectors,
        *d.dra.reflectors,
        *d.quotas.reflectors,
    ]


def test_namespace_labels_reach_the_cache(daemon: tuple[Daemon, FakeWriter]) -> None:
    """The namespace watch keeps every namespace's labels (InterPodAffinity's
    namespaceSelector) and forgets a deleted namespace."""
    d, _ = daemon
    raw = {"metadata": {"name": "team-a", "uid": "ns-a", "labels": {"team": "a"}}}
    d.namespace_watch._line(watch_line("ADDED", raw))
    assert d.handle.namespace_labels() == {"team-a": {"team": "a"}}
    raw["metadata"]["labels"] = {"team": "b"}
    d.namespace_watch._line(watch_line("MODIFIED", raw))
    assert d.handle.namespace_labels() == {"team-a": {"team": "b"}}
    d.namespace_watch._line(watch_line("DELETED", raw))
    assert d.handle.namespace_labels() == {}
