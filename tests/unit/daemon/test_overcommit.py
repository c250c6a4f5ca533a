"""The daemon's wiring of the device-plugin over-commit detector (core/overcommit.py): the
Warning Event on the Node, the log lines and the gauges, once per change, written by the
leader only. In-memory ports, no API server (tests/integration/test_overcommit.py has the
real control plane)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import orjson
import pytest

from gpusched.config import LeaderElection, default_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon.daemon import OVERCOMMIT_RESOLVED, OVERCOMMITTED
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.kube.writer import ObjectRef
from gpusched.model import keys
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry
from tests.builders import watch_line
from tests.fakes import FakeWriter

GUARD = 10.0  # against a hang; every wait below is on an event


class MessageWriter(FakeWriter):
    """FakeWriter that also keeps each Event's (type, reason, message)."""

    def __init__(self) -> None:
        super().__init__(held=False)
        self.written: list[tuple[str, str, str, str]] = []

    async def event(self, ref: ObjectRef, *args: Any, **kw: Any) -> None:
        type_, reason, message = (str(a) for a in args[:3])
        self.written.append((ref.name, type_, reason, message))
        await super().event(ref, *args, **kw)


def _daemon(stream: io.StringIO) -> tuple[Daemon, MessageWriter]:
    """A daemon without leader election (it leads once synced), its writes kept in memory,
    with GPU node g (8 cards, allocatable nvidia.com/gpu 8)."""
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
        options=DaemonOptions(warm_up=False, pod_groups=False),
    )
    writer = MessageWriter()
    d.writer = writer  # type: ignore[assignment]
    d.handle._cluster = writer
    raw = node_object(NodeSpec("g", 8, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-g"
    d.node_watch._line(watch_line("ADDED", raw))
    return d, writer


def _bound(
    name: str,
    rv: str = "1",
    *,
    gpus: int = 0,
    card: int = 0,
    scheduler: str = keys.SCHEDULER_NAME,
) -> dict[str, Any]:
    """A running pod on node g: a gpusched shared pod on `card`, or (`gpus`) a pod asking
    that many nvidia.com/gpu of `scheduler`."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m"}}
    annotations = {}
    if gpus:
        resources["limits"] = {keys.GPU_RESOURCE: str(gpus)}
    else:
        annotations = {keys.GPU_MILLI: "166", keys.GPU_IDS: str(card)}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": "g",
            "containers": [{"name": "c", "resources": resources}],
        },
        "status": {"phase": "Running"},
    }


def _fill_card_0_and_bind_8_gpus_elsewhere(d: Daemon) -> None:
    for i in range(6):
        d.pod_watch._line(watch_line("ADDED", _bound(f"s{i}")))
    d.pod_watch._line(watch_line("ADDED", _bound("big", gpus=8, scheduler="default-scheduler")))


def _logged(stream: io.StringIO, event: str) -> list[dict[str, Any]]:
    lines = (orjson.loads(line) for line in stream.getvalue().splitlines())
    return [r for r in lines if r.get("event") == event]


def _gauge(d: Daemon, node: str | None = None) -> float | None:
    if node is None:
        return d.metrics.registry.get_sample_value("gpusched_gpu_overcommitted_nodes")
    return d.metrics.registry.get_sample_value("gpusched_gpu_overcommitted_cards", {"node": node})


async def test_the_leader_reports_an_overcommit_once_and_its_resolution() -> None:
    stream = io.StringIO()
    d, writer = _daemon(stream)
    d.leading.set()  # the Lease is held (run() sets it)
    _fill_card_0_and_bind_8_gpus_elsewhere(d)
    d._tick()
    await d.tasks.drain(GUARD, None)
    assert [(n, t, r) for n, t, r, _ in writer.written] == [("g", "Warning", OVERCOMMITTED)]
    message = writer.written[0][3]
    assert message.startswith("9 GPUs in use for 8 allocatable nvidia.com/gpu, 1 over")
    assert "ns/big (default-scheduler, 8)" in message
    assert _gauge(d) == 1 and _gauge(d, "g") == 1
    (logged,) = _logged(stream, "GPU over-commit")
    assert logged["node"] == "g" and logged["excess"] == 1
    assert logged["other_schedulers"] == ["ns/big"]

    # Pod events that leave the excess as it is: nothing more is reported.
    d.pod_watch._line(watch_line("MODIFIED", _bound("s0", "2")))
    d.pod_watch._line(watch_line("ADDED", _bound("s6")))
    d._tick()
    await d.tasks.drain(GUARD, None)
    assert len(writer.written) == 1 and len(_logged(stream, "GPU over-commit")) == 1

    # The other scheduler's pod goes: resolved, said once, the node's series removed.
    d.pod_watch._line(watch_line("DELETED", _bound("big", "3", gpus=8, scheduler="x")))
    d._tick()
    await d.tasks.drain(GUARD, None)
    assert [(n, t, r) for n, t, r, _ in writer.written[1:]] == [
        ("g", "Normal", OVERCOMMIT_RESOLVED)
    ]
    assert writer.written[1][3].startswith("GPU over-commit resolved: 1 GPUs in use for 8")
    assert _gauge(d) == 0 and _gauge(d, "g") is None
    (resolved,) = _logged(stream, "GPU over-commit resolved")
    assert resolved["node"] == "g"


async def test_a_standby_logs_it_and_writes_the_event_once_it_leads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = io.StringIO()
    d, writer = _daemon(stream)
    _fill_card_0_and_bind_8_gpus_elsewhere(d)
    d._check_overcommit()  # a tick before leading
    await d.tasks.drain(GUARD, None)
    assert writer.written == [] and len(_logged(stream, "GPU over-commit")) == 1
    assert _gauge(d) == 1

    async def synced(reflector: Any) -> None:
        reflector.synced.set()
        await asyncio.Event().wait()

    for reflector in (d.node_watch, d.pod_watch, d.namespace_watch):
        monkeypatch.setattr(reflector, "run", lambda r=reflector: synced(r))
    assert d.volumes is not None
    assert d.dra is not None
    for reflector in (*d.volumes.reflectors, *d.dra.reflectors, *d.quotas.reflectors):
        monkeypatch.setattr(reflector, "run", lambda r=reflector: synced(r))
    running = asyncio.create_task(d.run())
    await asyncio.wait_for(d.leading.wait(), GUARD)
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    d.stop()
    await asyncio.wait_for(running, GUARD)
    assert not d.failed
    assert [(n, r) for n, _, r, _ in writer.written] == [("g", OVERCOMMITTED)]


async def test_a_standby_that_saw_it_resolve_writes_nothing() -> None:
    stream = io.StringIO()
    d, writer = _daemon(stream)
    _fill_card_0_and_bind_8_gpus_elsewhere(d)
    d._check_overcommit()
    d.pod_watch._line(watch_line("DELETED", _bound("big", "2", gpus=8, scheduler="x")))
    d._check_overcommit()
    assert d._overcommit_unwritten == set()
    d.leading.set()
    d._check_overcommit()
    await d.tasks.drain(GUARD, None)
    assert writer.written == []
    assert len(_logged(stream, "GPU over-commit resolved")) == 1


async def test_a_deleted_node_clears_its_overcommit() -> None:
    stream = io.StringIO()
    d, writer = _daemon(stream)
    d.leading.set()
    _fill_card_0_and_bind_8_gpus_elsewhere(d)
    d._tick()
    raw = node_object(NodeSpec("g", 8, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-g"
    d.node_watch._line(watch_line("DELETED", raw))
    await d.tasks.drain(GUARD, None)
    # The Warning only: a Normal Event on a Node that no longer exists helps nobody.
    assert [r for _, _, r, _ in writer.written] == [OVERCOMMITTED]
    assert _gauge(d) == 0 and _gauge(d, "g") is None
    assert d.overcommit.over == {}
    assert len(_logged(stream, "GPU over-commit resolved")) == 1


async def test_cpu_pods_and_node_heartbeats_mark_nothing() -> None:
    """Only what the count reads marks a node for the next tick: CPU pods' churn and node
    updates that keep allocatable nvidia.com/gpu do not."""
    stream = io.StringIO()
    d, _ = _daemon(stream)
    d._tick()
    cpu = _bound("cpu", gpus=1)
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    d.pod_watch._line(watch_line("ADDED", cpu))
    raw = node_object(NodeSpec("g", 8, "A100M80", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-g"
    raw["metadata"]["labels"]["heartbeat"] = "1"
    d.node_watch._line(watch_line("MODIFIED", raw))
    assert d.overcommit.marked == frozenset()
    raw["status"]["allocatable"][keys.GPU_RESOURCE] = "4"
    d.node_watch._line(watch_line("MODIFIED", raw))
    assert d.overcommit.marked == {"g"}
    d._tick()
    d.pod_watch._line(watch_line("ADDED", _bound("s0")))
    assert d.overcommit.marked == {"g"}


async def test_a_bound_pod_whose_share_annotation_goes_marks_its_node() -> None:
    """A shared pod edited into a CPU pod (its gpu-milli annotation removed) leaves the
    count: its node is looked at again, though the new version asks for no GPU."""
    stream = io.StringIO()
    d, _ = _daemon(stream)
    d.pod_watch._line(watch_line("ADDED", _bound("s0")))
    d._tick()
    edited = _bound("s0", "2")
    edited["metadata"]["annotations"] = {}
    d.pod_watch._line(watch_line("MODIFIED", edited))
    assert d.overcommit.marked == {"g"}
