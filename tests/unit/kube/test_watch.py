"""The reflector: store and version from events, relist on 410, reconnect backoff and
malformed lines (Reflector.run against an in-memory API server)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from gpusched.kube.client import ApiError
from gpusched.kube.watch import Backoff, EventType, GoneError, Reflector
from gpusched.model.pod import PodInfo, pod_from_k8s
from tests.builders import watch_line
from tests.fakes import FakeKube


def raw_pod(name: str, rv: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"schedulerName": "ai-scheduler", "nodeName": node, "containers": []},
    }


@pytest.fixture
def seen() -> list[tuple[EventType, str, str]]:
    return []


@pytest.fixture
def reflector(seen: list[tuple[EventType, str, str]]) -> Reflector[PodInfo]:
    def handler(kind: EventType, pod: PodInfo) -> None:
        seen.append((kind, pod.name, pod.node_name))

    return Reflector(None, "/api/v1/pods", pod_from_k8s, handler)  # type: ignore[arg-type]


def test_events_update_store_and_version(
    reflector: Reflector[PodInfo], seen: list[tuple[EventType, str, str]]
) -> None:
    reflector._line(watch_line("ADDED", raw_pod("a", "10")))
    reflector._line(watch_line("MODIFIED", raw_pod("a", "11", node="n1")))
    reflector._line(watch_line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}))
    assert reflector.resource_version == "15"
    reflector._line(watch_line("DELETED", raw_pod("a", "16", node="n1")))
    assert seen == [
        (EventType.ADDED, "a", ""),
        (EventType.MODIFIED, "a", "n1"),
        (EventType.DELETED, "a", "n1"),
    ]
    assert reflector.store == {}
    assert reflector.resource_version == "16"
    assert reflector.stats.bookmarks == 1


def test_410_in_the_stream_asks_for_a_relist(reflector: Reflector[PodInfo]) -> None:
    with pytest.raises(GoneError):
        reflector._line(watch_line("ERROR", {"kind": "Status", "code": 410, "message": "too old"}))
    with pytest.raises(ApiError):
        reflector._line(watch_line("ERROR", {"kind": "Status", "code": 500, "message": "boom"}))


def test_relist_reconciles_with_synthetic_events(
    reflector: Reflector[PodInfo], seen: list[tuple[EventType, str, str]]
) -> None:
    for name in ("keep", "change", "gone"):
        reflector._line(watch_line("ADDED", raw_pod(name, "1")))
    seen.clear()
    fresh = {}
    for raw in (raw_pod("keep", "1"), raw_pod("change", "7", node="n2"), raw_pod("new", "8")):
        decoded = reflector._decode(raw)
        assert decoded is not None
        fresh[decoded[0]] = decoded[1]
    reflector._replace(fresh)
    assert sorted(seen, key=str) == sorted(
        [
            (EventType.DELETED, "gone", ""),
            (EventType.MODIFIED, "change", "n2"),
            (EventType.ADDED, "new", ""),
        ],
        key=str,
    )
    assert set(reflector.store) == {"uid-keep", "uid-change", "uid-new"}


def test_undecodable_objects_and_handler_bugs_do_not_stop_the_watch(
    seen: list[tuple[EventType, str, str]],
) -> None:
    def boom(raw: Any) -> PodInfo:
        if raw["metadata"]["name"] == "bad":
            raise ValueError("cannot read")
        return pod_from_k8s(raw)

    calls = []

    def handler(kind: EventType, pod: PodInfo) -> None:
        calls.append(pod.name)
        if pod.name == "raises":
            raise RuntimeError("handler bug")

    r: Reflector[PodInfo] = Reflector(None, "/p", boom, handler)  # type: ignore[arg-type]
    r._line(watch_line("ADDED", raw_pod("bad", "1")))
    r._line(watch_line("ADDED", raw_pod("raises", "2")))
    r._line(watch_line("ADDED", raw_pod("fine", "3")))
    assert calls == ["raises", "fine"]
    assert r.stats.decode_errors == 1
    assert r.resource_version == "3"


def test_backoff_is_capped_and_jittered() -> None:
    b = Backoff(initial=0.5, maximum=4.0)
    delays = [b.next_delay() for _ in range(10)]
    assert all(0.25 <= d <= 4.0 for d in delays)
    assert max(delays[5:]) >= 2.0
    b.reset()
    assert b.next_delay() <= 0.5


@pytest.fixture
def delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the reconnect delays instead of sleeping them."""
    out: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay: float) -> None:
        out.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)  # the module watch.py sleeps through
    return out


def _reflector(kube: FakeKube, seen: list[tuple[EventType, Any]] | None = None) -> Reflector[Any]:
    def handler(kind: EventType, obj: Any) -> None:
        if seen is not None:
            seen.append((kind, obj))

    return Reflector(
        kube,  # type: ignore[arg-type]
        "/api/v1/pods",
        lambda raw: raw["metadata"]["name"],
        handler,
        backoff=Backoff(initial=0.5, maximum=30.0, rng=random.Random(0)),
    )


async def test_a_watch_the_server_closes_at_once_backs_off(delays: list[float]) -> None:
    # client-go's reflector calls this a "very short watch" and backs off; without that the
    # reflector re-watches in a hot loop against the API server.
    kube = FakeKube(list, max_watches=6)
    with pytest.raises(asyncio.CancelledError):
        await _reflector(kube).run()
    assert len(delays) == 6  # every watch failed
    assert delays == sorted(delays)
    assert delays[-1] >= 4.0  # 0.5 * 2**4 = 8, jittered to [4, 8]


async def test_a_watch_that_fails_right_after_200_still_backs_off_exponentially(
    delays: list[float],
) -> None:
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "boom"}}
    kube = FakeKube(lambda: [orjson.dumps(error) + b"\n"], max_watches=6)
    with pytest.raises(asyncio.CancelledError):
        await _reflector(kube).run()
    assert len(delays) == 6
    assert delays[-1] >= 4.0


async def test_a_malformed_watch_line_does_not_kill_the_reflector(delays: list[float]) -> None:
    good = {
        "type": "ADDED",
        "object": {"metadata": {"name": "a", "uid": "u-a", "resourceVersion": "9"}},
    }
    bodies = iter(
        [
            [b"[1, 2]\n"],
            [b'{"type": "ADDED", "object": "not an object"}\n'],
            [b'{"type": "ADDED", "object": {"metadata": []}}\n'],
            [orjson.dumps(good) + b"\n"],
        ]
    )
    seen: list[tuple[EventType, Any]] = []
    kube = FakeKube(lambda: next(bodies, []), max_watches=4)
    reflector = _reflector(kube, seen)
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert seen == [(EventType.ADDED, "a")]
    assert reflector.resource_version == "9"
