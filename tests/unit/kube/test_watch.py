"""The reflector: store and version from events, relist on 410, reconnect backoff and
malformed lines, read timeouts, progress for /healthz (Reflector.run against an in-memory
API server)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from gpusched.kube.client import ApiError
from gpusched.kube.watch import (
    READ_TIMEOUT_SECONDS,
    WATCH_TIMEOUT_SECONDS,
    Backoff,
    EventType,
    GoneError,
    Reflector,
)
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


def _reflector(
    kube: FakeKube,
    seen: list[tuple[EventType, Any]] | None = None,
    clock: Any = None,
) -> Reflector[Any]:
    def handler(kind: EventType, obj: Any) -> None:
        if seen is not None:
            seen.append((kind, obj))

    extra = {} if clock is None else {"clock": clock}
    return Reflector(
        kube,  # type: ignore[arg-type]
        "/api/v1/pods",
        lambda raw: raw["metadata"]["name"],
        handler,
        name="pods",
        backoff=Backoff(initial=0.5, maximum=30.0, rng=random.Random(0)),
        **extra,
    )


GONE = orjson.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410}}) + b"\n"
EVENT = orjson.dumps(
    {"type": "ADDED", "object": {"metadata": {"name": "a", "uid": "u-a", "resourceVersion": "9"}}}
)
BOOKMARK = orjson.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}})


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


@pytest.mark.parametrize(
    "body",
    [[GONE], [EVENT + b"\n", GONE]],
    ids=["410 at once", "an event, then 410"],
)
async def test_the_relist_after_410_gone_backs_off_exponentially(
    delays: list[float], body: list[bytes]
) -> None:
    # Without a backoff a compaction storm turns into a list of every pod per round trip;
    # a good event before the 410 must not reset it (it did: a healthy first line reset).
    kube = FakeKube(lambda: list(body), max_watches=6)
    reflector = _reflector(kube)
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert reflector.stats.gone == 6
    assert kube.lists == 7  # the first list and one per 410
    assert len(delays) == 6  # every re-list waited
    assert delays == sorted(delays)
    assert delays[-1] >= 4.0  # 0.5 * 2**4 = 8, jittered to [4, 8]


def test_the_backoff_resets_only_after_a_healthy_period() -> None:
    t = [0.0]
    b = Backoff(
        initial=1.0, maximum=8.0, reset_after=120.0, rng=random.Random(1), clock=lambda: t[0]
    )
    for now in (0.0, 10.0, 20.0):
        t[0] = now
        delay = b.next_delay()
    assert 2.0 <= delay <= 4.0  # third failure: ceiling 4
    t[0] = 130.0  # 110 s after the last failure: still the same trouble
    assert 4.0 <= b.next_delay() <= 8.0
    t[0] = 251.0  # 121 s without a failure: healthy, start again
    assert b.next_delay() <= 1.0


async def test_watch_reads_time_out_in_about_90s_with_bookmarks(delays: list[float]) -> None:
    kube = FakeKube(lambda: [BOOKMARK + b"\n"], max_watches=3)
    with pytest.raises(asyncio.CancelledError):
        await _reflector(kube).run()
    watches = [kw for kw in kube.sent if dict(kw["query"]).get("watch") == "true"]
    assert len(watches) == kube.watches == 4  # the fourth is the one the fake cancels
    assert (WATCH_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS) == (60, 90.0)
    for kw in watches:
        query = dict(kw["query"])
        assert query["allowWatchBookmarks"] == "true"
        # The server ends a healthy watch first (54-60 s); the client gives a dead one 90 s.
        assert 54 <= int(query["timeoutSeconds"]) <= 60
        assert kw["timeout"].sock_read == 90.0
        assert kw["timeout"].total is None
    assert delays == []  # a watch the server ends after a bookmark is no failure


def test_the_read_timeout_must_exceed_the_watch_timeout() -> None:
    with pytest.raises(ValueError, match="read_timeout"):
        Reflector(None, "/p", pod_from_k8s, lambda k, o: None, watch_timeout=90, read_timeout=90)  # type: ignore[arg-type]


async def test_progress_is_recorded_by_lists_events_and_bookmarks(delays: list[float]) -> None:
    t = [1000.0]

    def body() -> list[bytes]:
        t[0] += 50.0  # each watch starts 50 s after the one before
        return [EVENT + b"\n", BOOKMARK + b"\n"]

    kube = FakeKube(body, max_watches=2)
    reflector = _reflector(kube, clock=lambda: t[0])
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert reflector.progress_at == 1100.0  # the second watch's lines
    assert reflector.problem(180.0) is None
    t[0] = 1280.0
    assert reflector.problem(180.0) is None  # 180 s: not more than the limit
    t[0] = 1281.0
    assert reflector.problem(180.0) == "watch pods: no progress for 181s (limit 180s)"


async def test_a_watch_stuck_in_failing_relists_is_reported_with_its_error(
    delays: list[float],
) -> None:
    t = [1000.0]
    kube = FakeKube(list, list_status=500, max_lists=5)
    reflector = _reflector(kube, clock=lambda: t[0])
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert len(delays) == 5  # every failed list backed off
    assert delays[-1] >= 4.0
    assert reflector.problem(180.0) is None  # young: give it time
    t[0] += 181.0
    problem = reflector.problem(180.0)
    assert problem is not None
    assert problem.startswith("watch pods: no progress for 181s (limit 180s); last error: ")
    assert "HTTP 500" in problem
    assert not reflector.synced.is_set()


async def test_an_optional_api_not_served_stops_its_watch_without_a_stall(
    delays: list[float],
) -> None:
    # A CRD not installed or an alpha API turned off: one log line, no retries, synced
    # (the daemon must not wait for it) and never reported as stuck by /healthz.
    t = [1000.0]
    kube = FakeKube(list, list_status=404, max_lists=5)
    reflector = Reflector(
        kube,  # type: ignore[arg-type]
        "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
        lambda raw: raw["metadata"]["name"],
        lambda kind, obj: None,
        name="podgroups",
        clock=lambda: t[0],
        optional=True,
    )
    await reflector.run()  # returns instead of retrying
    assert kube.lists == 1
    assert delays == []
    assert reflector.unserved
    assert reflector.synced.is_set()
    t[0] += 10_000.0
    assert reflector.problem(180.0) is None


async def test_a_required_api_answering_404_keeps_retrying(delays: list[float]) -> None:
    kube = FakeKube(list, list_status=404, max_lists=3)
    reflector = _reflector(kube)
    with pytest.raises(asyncio.CancelledError):
        await reflector.run()
    assert len(delays) == 3
    assert not reflector.unserved
    assert not reflector.synced.is_set()
