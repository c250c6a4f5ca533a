"""The reflector's event logic without a server: decode, bookmarks, 410, reconcile."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gpusched.framework.status import ends_attempt as final
from gpusched.kube.client import ApiError
from gpusched.kube.watch import Backoff, EventType, GoneError, Reflector
from gpusched.kube.writer import TokenBucket, WriteError, _failure
from gpusched.model.pod import PodInfo, PodRequest, pod_from_k8s


def raw_pod(name: str, rv: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"schedulerName": "ai-scheduler", "nodeName": node, "containers": []},
    }


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": obj})


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
    reflector._line(line("ADDED", raw_pod("a", "10")))
    reflector._line(line("MODIFIED", raw_pod("a", "11", node="n1")))
    reflector._line(line("BOOKMARK", {"metadata": {"resourceVersion": "15"}}))
    assert reflector.resource_version == "15"
    reflector._line(line("DELETED", raw_pod("a", "16", node="n1")))
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
        reflector._line(line("ERROR", {"kind": "Status", "code": 410, "message": "too old"}))
    with pytest.raises(ApiError):
        reflector._line(line("ERROR", {"kind": "Status", "code": 500, "message": "boom"}))


def test_relist_reconciles_with_synthetic_events(
    reflector: Reflector[PodInfo], seen: list[tuple[EventType, str, str]]
) -> None:
    for name in ("keep", "change", "gone"):
        reflector._line(line("ADDED", raw_pod(name, "1")))
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
    r._line(line("ADDED", raw_pod("bad", "1")))
    r._line(line("ADDED", raw_pod("raises", "2")))
    r._line(line("ADDED", raw_pod("fine", "3")))
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


def _pod() -> PodInfo:
    return PodInfo(uid="u", namespace="ns", name="p", request=PodRequest())


def test_write_failures_map_to_statuses() -> None:
    gone = _failure("bind", _pod(), ApiError("POST", "/x", 404, "{}"))
    assert final(gone) and "no longer exists" in gone.message()
    bound = _failure("bind", _pod(), ApiError("POST", "/x", 409, "{}"))
    assert final(bound)
    denied = _failure("bind", _pod(), ApiError("POST", "/x", 403, "{}"))
    assert not final(denied) and "manifests/rbac" in denied.message()
    flaky = _failure("bind", _pod(), ApiError("POST", "/x", 503, "{}"))
    assert not final(flaky) and isinstance(flaky.error, WriteError)
    net = _failure("annotate", _pod(), OSError("connection reset"))
    assert not final(net) and "will retry" in net.message()


async def test_token_bucket_spends_the_burst_then_waits() -> None:
    t = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: t[0])
    for _ in range(3):
        await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)
    t[0] += 0.1  # one token refilled
    await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)
