"""An in-memory Lease API and a fake clock for the leader elector's unit tests."""

from __future__ import annotations

import asyncio
import copy
import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from gpusched.kube.client import JSON, ApiError
from gpusched.kube.lease import LeaderElector, micro_time
from gpusched.observability.logging import make_logger

PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpusched"


class FakeClock:
    """Monotonic seconds; `sleep` advances it instead of waiting, then yields once so the
    other tasks run, as a real sleep would let them."""

    def __init__(self) -> None:
        self.t = 100.0
        self.sleeps: list[float] = []
        self.changed = asyncio.Event()  # set by every sleep

    def __call__(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        self.changed.set()
        await asyncio.sleep(0)


class FakeLeases:
    """One Lease with the API server's optimistic concurrency: create answers 409 when it
    exists, update answers 409 when the caller's resourceVersion is stale."""

    describe = "kube-system/gpusched"

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.rv = 0
        self.fail: Exception | None = None  # raised by every call while set
        self.before_update: Callable[[], None] | None = None  # a concurrent writer, once
        self.renewer: Callable[[], None] | None = None  # a live holder, before every read
        self.calls: list[str] = []
        self.changed = asyncio.Event()  # set by every call

    def put(self, spec: JSON) -> None:
        """Another candidate (or kubectl) writes the Lease."""
        self.rv += 1
        self.lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "gpusched",
                "namespace": "kube-system",
                "resourceVersion": str(self.rv),
            },
            "spec": copy.deepcopy(spec),
        }

    @property
    def spec(self) -> JSON:
        assert self.lease is not None
        spec: JSON = self.lease["spec"]
        return spec

    def _check(self, call: str) -> None:
        self.calls.append(call)
        self.changed.set()
        if self.fail is not None:
            raise self.fail

    async def get(self) -> JSON | None:
        self._check("get")
        if self.renewer is not None:
            self.renewer()
        return copy.deepcopy(self.lease)

    async def create(self, spec: JSON) -> JSON:
        self._check("create")
        if self.lease is not None:
            raise ApiError("POST", PATH, 409, '{"kind":"Status","reason":"AlreadyExists"}')
        self.put(spec)
        return copy.deepcopy(self.lease)  # type: ignore[return-value]

    async def update(self, lease: JSON, spec: JSON) -> JSON:
        self._check("update")
        if self.before_update is not None:
            hook, self.before_update = self.before_update, None
            hook()
        if self.lease is None:
            raise ApiError("PUT", PATH, 404, '{"kind":"Status","reason":"NotFound"}')
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ApiError("PUT", PATH, 409, '{"kind":"Status","reason":"Conflict"}')
        self.put(spec)
        return copy.deepcopy(self.lease)


async def until(predicate: Callable[[], bool], changed: asyncio.Event) -> None:
    """Wait, by `changed` (a FakeClock's or a FakeLeases'), until `predicate` holds."""
    while not predicate():
        changed.clear()
        await changed.wait()


def renew_as_holder(api: FakeLeases, clock: FakeClock) -> Callable[[], None]:
    """A `renewer`: the current holder writes a fresh renewTime (it is alive)."""

    def renew() -> None:
        api.put({**api.spec, "renewTime": micro_time(clock.wall())})

    return renew


def other_holder(clock: FakeClock, holder: str = "other_1", *, transitions: int = 3) -> JSON:
    stamp = micro_time(clock.wall())
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def elector(
    api: FakeLeases,
    clock: FakeClock,
    identity: str = "me_1",
    *,
    on_change: Callable[[bool], None] | None = None,
    log: io.StringIO | None = None,
) -> LeaderElector:
    return LeaderElector(
        api,
        identity,
        lease_duration=15,
        renew_deadline=10.0,
        retry_period=2.0,
        log=make_logger(log or io.StringIO()),
        clock=clock,
        sleep=clock.sleep,
        wall=clock.wall,
        jitter=lambda: 0.0,
        on_change=on_change,
    )
