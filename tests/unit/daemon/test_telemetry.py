"""The daemon's telemetry task over a scripted reader: what it logs (once per change), which
Events it writes (only while leading), the metrics, and which pods it wakes."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from gpusched.config.settings import Telemetry
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.queue import ClusterEvent, NodeChange, SchedulingQueue, may_help
from gpusched.daemon.telemetry import GPU_HEALTHY, GPU_UNHEALTHY, TelemetryTask
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.model.telemetry import CardReading
from gpusched.observability.logging import make_logger
from gpusched.observability.metrics import Metrics
from gpusched.plugins.priority_sort import PrioritySort
from gpusched.telemetry.prometheus import Problem, ReadResult
from tests.fakes import Clock

SETTINGS = Telemetry(prometheus_url="http://prometheus:9090", stale_after_seconds=60.0)


class ScriptedReader:
    """Stands in for PrometheusReader: each read() returns the next scripted result."""

    def __init__(self) -> None:
        self.next = ReadResult()
        self.queries = {"gpu_temp": "DCGM_FI_DEV_GPU_TEMP"}
        self.closed = False

    async def read(self) -> ReadResult:
        return self.next

    async def close(self) -> None:
        self.closed = True


class Harness:
    def __init__(self) -> None:
        self.snap = Snapshot(8)
        for name in ("gpu-a", "gpu-b"):
            cards = tuple(Card(i, "A100", 81920, uuid=f"GPU-{name}-{i}") for i in range(4))
            self.snap.upsert_node(
                NodeModel(name=name, cpu_milli=64_000, memory_bytes=2**38, pods=110, cards=cards)
            )
        self.clock = Clock()
        self.queue = SchedulingQueue(PrioritySort(None, None).less, self.clock)
        self.metrics = Metrics()
        self.stream = io.StringIO()
        self.events: list[tuple[str, str, str, str]] = []
        self.leading = False
        self.wall = 1000.0
        self.reader = ScriptedReader()
        self.applied = 0
        self.task = TelemetryTask(
            SETTINGS,
            self.snap,
            self.queue,
            self.metrics,
            make_logger(self.stream),
            node_event=lambda *e: self.events.append(e),
            leading=lambda: self.leading,
            reader=self.reader,  # type: ignore[arg-type]
            wall=lambda: self.wall,
            on_applied=self._applied,
        )

    def _applied(self) -> None:
        # Told after the pass, with the readings already in the snapshot.
        assert self.task.refreshes == self.applied + 1
        self.applied += 1

    def reading(self, node: str, gpu: int, temp: float, **kw: Any) -> CardReading:
        return CardReading(host=node, gpu=gpu, uuid="", at=self.wall, gpu_temp=temp, **kw)

    async def refresh(self, *readings: CardReading, problems: tuple[Problem, ...] = ()) -> None:
        self.reader.next = ReadResult(readings=list(readings), problems=list(problems))
        await self.task.refresh()

    def logged(self, event: str) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self.stream.getvalue().splitlines()]
        return [line for line in lines if line["event"] == event]

    def gauge(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        assert value is not None, name
        return value


@pytest.fixture
def h() -> Harness:
    return Harness()


async def test_each_node_state_change_is_logged_once(h: Harness) -> None:
    await h.refresh(h.reading("gpu-a", 0, 70.0))
    await h.refresh(h.reading("gpu-a", 0, 71.0))
    assert h.applied == 2
    fresh, missing = h.logged("telemetry fresh"), h.logged("telemetry missing")
    assert [(r["node"], r["hottest_celsius"]) for r in fresh] == [("gpu-a", 70.0)]
    assert [(r["node"], r["level"]) for r in missing] == [("gpu-b", "warning")]
    assert h.gauge("gpusched_telemetry_nodes", state="fresh") == 1
    assert h.gauge("gpusched_telemetry_nodes", state="missing") == 1

    h.wall += 61.0  # nothing new for longer than staleAfterSeconds
    await h.refresh()
    await h.refresh()
    (stale,) = h.logged("telemetry stale")
    assert stale["node"] == "gpu-a" and stale["last_sample_seconds_ago"] == 61.0
    assert "neutral" in stale["detail"]
    assert h.gauge("gpusched_telemetry_nodes", state="stale") == 1
    assert h.task.states["gpu-a"].value == "stale"


async def test_past_the_line_cap_a_known_node_going_stale_is_listed_before_new_nodes(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh that meets many new nodes summarises them; a node that was fresh and went
    stale in the same refresh keeps its own line (it is the news)."""
    monkeypatch.setattr("gpusched.daemon.telemetry.MAX_NODE_LINES", 1)
    await h.refresh(h.reading("gpu-a", 0, 70.0), h.reading("gpu-b", 0, 70.0))
    assert len(h.logged("telemetry fresh")) == 1
    (summary,) = h.logged("telemetry state changes not listed")
    assert summary["nodes"] == 1
    # A new node on a lower row than gpu-b (gpu-a's, freed): first in the ingestion's order.
    h.snap.remove_node("gpu-a")
    cards = tuple(Card(i, "A100", 81920) for i in range(4))
    assert h.snap.upsert_node(NodeModel("gpu-c", 64_000, 2**38, 110, cards=cards)) == 0
    h.wall += 61.0
    await h.refresh()
    (stale,) = h.logged("telemetry stale")
    assert stale["node"] == "gpu-b"  # listed; the new node summed up
    assert h.logged("telemetry missing") == []
    assert h.logged("telemetry state changes not listed")[-1]["states"] == {"missing": 1}


async def test_health_events_only_from_the_leader_and_a_standby_catches_up(h: Harness) -> None:
    await h.refresh(h.reading("gpu-a", 2, 60.0, xid=79), h.reading("gpu-b", 1, 60.0, xid=48))
    assert [r["card"] for r in h.logged("GPU unhealthy")] == [2, 1]
    assert h.events == []  # a standby writes nothing
    assert h.gauge("gpusched_gpu_unhealthy_cards") == 2

    h.wall += 1.0
    await h.refresh(h.reading("gpu-b", 1, 60.0, xid=0))  # healed while standby: no Warning
    h.leading = True
    h.task.now_leading()
    assert [(e[0], e[1], e[2]) for e in h.events] == [("gpu-a", "Warning", GPU_UNHEALTHY)]
    assert "GPU 2 (GPU-gpu-a-2)" in h.events[0][3] and "XID 79" in h.events[0][3]

    h.wall += 1.0
    await h.refresh(h.reading("gpu-a", 2, 60.0, xid=0))
    assert [(e[0], e[1], e[2]) for e in h.events[1:]] == [("gpu-a", "Normal", GPU_HEALTHY)]
    assert h.gauge("gpusched_gpu_unhealthy_cards") == 0


async def test_a_problem_is_logged_once_for_all_queries_and_counted_each_time(h: Harness) -> None:
    refused = tuple(
        Problem(q, "connection", "cannot connect to prometheus:9090") for q in ("gpuTemp", "fbFree")
    )
    await h.refresh(problems=refused)
    await h.refresh(problems=refused)
    (line,) = h.logged("telemetry query failed")
    assert line["queries"] == ["gpuTemp", "fbFree"] and line["reason"] == "connection"
    assert h.gauge("gpusched_telemetry_errors_total", reason="connection") == 4
    await h.refresh(h.reading("gpu-a", 0, 50.0))
    assert len(h.logged("telemetry queries answer again")) == 1


def _rejected(h: Harness, name: str, plugin: str) -> None:
    h.queue.add(PodInfo(uid=name, namespace="ns", name=name, request=PodRequest(cpu_milli=1)))
    info = h.queue.pop_nowait()
    assert info is not None
    h.queue.requeue(info, unschedulable=True, rejected_by=[plugin])


async def test_a_cooler_or_stale_node_wakes_pods_thermal_rejected(h: Harness) -> None:
    await h.refresh(h.reading("gpu-a", 0, 85.0))
    _rejected(h, "hot", "Thermal")
    _rejected(h, "full", "GPUFit")
    h.wall += 1.0
    await h.refresh(h.reading("gpu-a", 0, 86.0))  # warmer: nobody moves
    assert h.queue.where("hot") == "unschedulable"
    h.wall += 1.0
    await h.refresh(h.reading("gpu-a", 0, 80.0))
    assert h.queue.where("hot") != "unschedulable"
    assert h.queue.where("full") == "unschedulable"


async def test_a_healed_card_wakes_pods_waiting_for_cards(h: Harness) -> None:
    await h.refresh(h.reading("gpu-a", 0, 60.0, xid=79))
    _rejected(h, "full", "GPUFit")
    h.wall += 1.0
    await h.refresh(h.reading("gpu-a", 0, 60.0, xid=0))
    assert h.queue.where("full") != "unschedulable"


async def test_the_decision_record_gets_the_node_telemetry_the_attempt_saw(h: Harness) -> None:
    await h.refresh(h.reading("gpu-a", 0, 74.5), h.reading("gpu-a", 1, 77.0))
    h.task.note("uid-1", "gpu-a")
    h.task.note("uid-2", "gpu-b")
    await h.refresh(h.reading("gpu-a", 0, 90.0))  # later readings do not rewrite it
    assert h.task.taken("uid-1") == {"state": "fresh", "tempC": 77.0}
    assert h.task.taken("uid-2") == {"state": "missing", "tempC": None}
    assert h.task.taken("uid-1") is None


def test_only_thermal_rejections_wake_on_telemetry() -> None:
    assert may_help(frozenset({"Thermal"}), ClusterEvent.TELEMETRY)
    assert may_help(frozenset(), ClusterEvent.TELEMETRY)
    assert not may_help(frozenset({"GPUFit"}), ClusterEvent.TELEMETRY)
    assert may_help(frozenset({"GPUFit"}), ClusterEvent.NODE_UPDATE, NodeChange.CARDS)
