"""The writer: API failures mapped to statuses, the client-side rate limiters (binds and
reports apart)."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from gpusched.framework.status import ends_attempt as final
from gpusched.framework.status import outcome_unknown
from gpusched.kube import faults
from gpusched.kube.client import ApiError
from gpusched.kube.writer import (
    MAX_REPORTS_IN_FLIGHT,
    MAX_WRITES_IN_FLIGHT,
    ClusterWriter,
    ObjectRef,
    TokenBucket,
    WriteError,
    _failure,
)
from gpusched.model.pod import PodInfo, PodRequest
from tests.fakes import FakeKube


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
    net = _failure("bind", _pod(), OSError("connection reset"))
    assert not final(net) and "may have been applied" in net.message()
    # A 4xx was refused before it was applied; no answer or a 5xx may have landed.
    assert [outcome_unknown(s) for s in (gone, bound, denied, flaky, net)] == [
        False,
        False,
        False,
        True,
        True,
    ]
    throttled = _failure("bind", _pod(), ApiError("POST", "/x", 429, "{}"))
    assert not outcome_unknown(throttled) and "will retry" in throttled.message()


def test_a_bind_that_could_not_connect_was_not_sent() -> None:
    # The API server restarting refuses connections: nothing was sent, so the placement is
    # undone and retried at once instead of held for the request timeout.
    key = ConnectionKey("127.0.0.1", 6443, True, True, None, None, None)
    refused = ConnectionRefusedError(111, "Connect call failed")
    for exc in (
        aiohttp.ClientConnectorError(key, refused),
        aiohttp.ClientConnectorSSLError(key, ssl.SSLError("handshake")),
    ):
        status = _failure("bind", _pod(), exc)
        assert not outcome_unknown(status) and not final(status), exc
        assert "not sent, will retry" in status.message()
    # A connection that broke after the request went out may have landed.
    for exc in (aiohttp.ServerDisconnectedError(), aiohttp.ClientOSError(104, "reset")):
        assert outcome_unknown(_failure("bind", _pod(), exc)), exc


async def test_token_bucket_spends_the_burst_then_waits() -> None:
    t = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: t[0])
    for _ in range(3):
        await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)
    t[0] += 0.1  # one token refilled
    await bucket.acquire()
    assert bucket.tokens == pytest.approx(0)


async def test_the_card_assignment_travels_in_the_binding() -> None:
    kube = FakeKube(list)
    writer = ClusterWriter(kube)  # type: ignore[arg-type]
    ann = {"gpusched.io/gpu-ids": "3", "gpusched.io/gpu-milli-assigned": "250"}
    assert (await writer.bind(_pod(), "n1", ann)).is_success()
    # One write: the Binding, whose annotations the API server copies onto the pod with
    # spec.nodeName. No pod PATCH, so the scheduler needs no right to patch pods.
    assert kube.requests == [("POST", "/api/v1/namespaces/ns/pods/p/binding")]
    [body] = kube.bodies
    assert body["metadata"] == {"name": "p", "namespace": "ns", "uid": "u", "annotations": ann}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert not hasattr(writer, "annotate")


async def test_a_binding_that_waited_past_the_lease_is_not_sent() -> None:
    kube = FakeKube(list)
    writer = ClusterWriter(kube)  # type: ignore[arg-type]
    lost: list[str] = []
    writer.fence = lambda: lost[0] if lost else None
    assert (await writer.bind(_pod(), "n1")).is_success()
    lost.append("the Lease was not renewed within renewDeadline")
    st = await writer.bind(_pod(), "n1")
    assert not st.is_success() and not outcome_unknown(st) and not final(st)
    assert "not sent: the Lease was not renewed" in st.reasons[0]
    assert kube.requests == [("POST", "/api/v1/namespaces/ns/pods/p/binding")]


class _Refuses(FakeKube):
    async def post(self, path: str, body: object, **kw: object) -> dict[str, object]:
        raise ApiError("POST", path, 409, "{}")


async def test_bind_returned_is_reached_after_an_accepted_binding_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPUSCHED_FAULT=bind-returned: the kill comes once the Binding was answered 2xx,
    before bind() returns anything to record; a refused Binding does not count."""
    kube = FakeKube(list)
    seen: list[int] = []
    monkeypatch.setattr(faults, "_kill", lambda point: seen.append(len(kube.requests)))
    faults.arm(faults.Fault(faults.BIND_RETURNED, 2))
    try:
        assert not (await ClusterWriter(_Refuses(list)).bind(_pod(), "n1")).is_success()  # type: ignore[arg-type]
        writer = ClusterWriter(kube)  # type: ignore[arg-type]
        assert (await writer.bind(_pod(), "n1")).is_success()
        assert seen == []
        assert (await writer.bind(_pod(), "n1")).is_success()
        assert seen == [2]  # after the second POST's answer
    finally:
        faults.arm(None)


GUARD = 10.0  # against a hang; nothing below waits on time


async def test_a_flood_of_events_and_conditions_does_not_delay_a_bind() -> None:
    # A backlog of unschedulable pods writes an Event and a PodScheduled condition per
    # attempt. On one bucket with the binds, the Binding would queue behind all of them.
    kube = FakeKube(list)
    waits: list[float] = []
    report_waiting = asyncio.Event()
    never = asyncio.Event()

    async def sleep(seconds: float) -> None:  # a token refill that never comes
        waits.append(seconds)
        report_waiting.set()
        await never.wait()

    writer = ClusterWriter(kube, qps=5, burst=2, clock=lambda: 0.0, sleep=sleep)  # type: ignore[arg-type]
    backlog = [
        PodInfo(uid=f"u{i}", namespace="ns", name=f"p{i}", request=PodRequest()) for i in range(4)
    ]
    reports = [
        *(
            asyncio.create_task(
                writer.event(ObjectRef.pod(p), "Warning", "FailedScheduling", f"0/9 nodes {i}")
            )
            for i, p in enumerate(backlog)
        ),
        *(asyncio.create_task(writer.pod_condition(p, "Unschedulable", "0/9")) for p in backlog),
    ]
    try:
        await report_waiting.wait()  # the burst is spent: the next report waits for a token
        async with asyncio.timeout(GUARD):
            status = await writer.bind(_pod(), "n1")
        assert status.is_success()
        assert kube.requests[-1] == ("POST", "/api/v1/namespaces/ns/pods/p/binding")
        assert len(kube.requests) == 3  # two reports (the burst), then the Binding
        assert waits == [pytest.approx(0.2)]  # only a report waited, the bind did not
        assert not any(r.done() for r in reports[2:])
    finally:
        for r in reports:
            r.cancel()
        await asyncio.gather(*reports, return_exceptions=True)


class _Gated(FakeKube):
    """Every request (post goes through request) waits for `gate`; `started` counts the
    requests sent so far."""

    def __init__(self) -> None:
        super().__init__(list)
        self.gate = asyncio.Event()
        self.started = 0
        self.all_started = asyncio.Event()
        self.expect = 0

    async def _wait(self) -> None:
        self.started += 1
        if self.started >= self.expect:
            self.all_started.set()
        await self.gate.wait()

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        await self._wait()
        return await super().request(method, path, **kw)


async def test_writes_in_flight_are_bounded_so_the_pool_keeps_room_for_the_lease() -> None:
    """A backlog binds hundreds of pods at once: at most MAX_WRITES_IN_FLIGHT Bindings and
    MAX_REPORTS_IN_FLIGHT reports hold a connection each; the others wait in the writer
    (not in the connection pool, where the Lease renewal would wait behind them), and
    every one is sent once the first are answered."""
    kube = _Gated()
    kube.expect = MAX_WRITES_IN_FLIGHT + MAX_REPORTS_IN_FLIGHT
    writer = ClusterWriter(kube, qps=1e6, burst=10**6)  # type: ignore[arg-type]
    pods = [
        PodInfo(uid=f"u{i}", namespace="ns", name=f"p{i}", request=PodRequest())
        for i in range(MAX_WRITES_IN_FLIGHT + 20)
    ]
    binds = [asyncio.create_task(writer.bind(p, "n1")) for p in pods]
    events = [
        asyncio.create_task(writer.event(ObjectRef.pod(p), "Normal", "Scheduled", "bound"))
        for p in pods
    ]
    try:
        async with asyncio.timeout(GUARD):
            await kube.all_started.wait()
            # Let every task that could still start a request run: none may.
            for _ in range(5):
                await asyncio.sleep(0)
        assert kube.started == MAX_WRITES_IN_FLIGHT + MAX_REPORTS_IN_FLIGHT
        kube.gate.set()
        async with asyncio.timeout(GUARD):
            statuses = await asyncio.gather(*binds)
            await asyncio.gather(*events)
        assert all(s.is_success() for s in statuses)
        assert kube.started == 2 * len(pods)
    finally:
        for t in (*binds, *events):
            t.cancel()
        await asyncio.gather(*binds, *events, return_exceptions=True)
