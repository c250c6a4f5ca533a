"""Reflector.run against an in-memory API server: reconnect backoff and malformed lines."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gpusched.kube.watch import Backoff, EventType, Reflector


class FakeContent:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class FakeResponse:
    def __init__(self, status: int, chunks: list[bytes]) -> None:
        self.status = status
        self.content = FakeContent(chunks)

    async def __aenter__(self) -> FakeResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return b"".join(self.content.chunks)

    async def text(self) -> str:
        return (await self.read()).decode()


class FakeKube:
    """Lists are empty at version 5; each watch answers with `watch_body()`; the run is
    cancelled after `max_watches` watches."""

    def __init__(self, watch_body: Callable[[], list[bytes]], max_watches: int = 6) -> None:
        self.watch_body = watch_body
        self.max_watches = max_watches
        self.watches = 0

    async def _send(self, method: str, path: str, **kw: Any) -> FakeResponse:
        query = dict(kw.get("query") or ())
        if query.get("watch") != "true":
            page = {"metadata": {"resourceVersion": "5"}, "items": []}
            return FakeResponse(200, [orjson.dumps(page)])
        self.watches += 1
        if self.watches > self.max_watches:
            raise asyncio.CancelledError
        return FakeResponse(200, self.watch_body())


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
