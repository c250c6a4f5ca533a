"""In-memory fakes of the ports the code under test talks to: the cluster writer and the
framework handle (plugins, runtime), the Lease API and a clock (leader election, daemon).
See tests/README.md for what goes here and what goes in tests/builders.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import io
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.runtime.waiting import WaitingPod, WaitingPods
from gpusched.framework import Rows, Status
from gpusched.framework.gangs import GangPort, StaticGangs
from gpusched.framework.interfaces import PodMatcher, UsedPorts
from gpusched.framework.status import Code
from gpusched.framework.volumes import NO_VOLUMES, VolumePort
from gpusched.kube.client import JSON, ApiError
from gpusched.kube.lease import LeaderElector, micro_time
from gpusched.kube.writer import ObjectRef
from gpusched.model.pod import PodInfo
from gpusched.model.volume import Claim, CSINode, PersistentVolume, StorageClass
from gpusched.observability.logging import make_logger

# --- the cluster writer and the handle ---------------------------------------------------


@dataclass
class FakeCluster:
    """Records writes; `answer` is what every bind returns."""

    binds: list[tuple[str, str]] = field(default_factory=list)
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    answer: Status = field(default_factory=Status)

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        self.binds.append((pod.key, node))
        if annotations:
            self.annotations.setdefault(pod.uid, {}).update(annotations)
        return self.answer


@dataclass
class FakeHandle:
    snapshot: Snapshot
    cluster: FakeCluster = field(default_factory=FakeCluster)
    t: float = 0.0
    ports: dict[str, UsedPorts] = field(default_factory=dict)
    volumes: VolumePort = NO_VOLUMES
    pods: dict[str, list[PodInfo]] = field(default_factory=dict)
    gangs: GangPort = field(default_factory=StaticGangs)
    # gang key -> [(pod, node or "" while pending)]
    members: dict[str, list[tuple[PodInfo, str]]] = field(default_factory=dict)
    waiting: WaitingPods = field(default_factory=WaitingPods)

    def now(self) -> float:
        return self.t

    def wall_now(self) -> float:
        return self.t

    def gang_members(self, key: str) -> Sequence[tuple[PodInfo, str]]:
        return self.members.get(key, [])

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self.waiting.get(uid)

    def waiting_pods(self) -> Iterable[WaitingPod]:
        return iter(self.waiting)

    def pods_on_node(self, node: str) -> Iterable[PodInfo]:
        return self.pods.get(node, ())

    def job_rows(self, job_key: str) -> Rows:
        return np.empty(0, np.intp)

    def assumed_pods(self) -> Iterable[tuple[PodInfo, str]]:
        return ()

    def count_matching_pods(self, matcher: PodMatcher) -> NDArray[np.int64]:
        out = np.zeros(len(self.snapshot.node_valid), np.int64)
        for node, pods in self.pods.items():
            row = self.snapshot.row_of(node)
            if row >= 0:
                out[row] = sum(1 for p in pods if matcher.matches(p))
        return out

    def pods_with_affinity(
        self, *, required_anti_only: bool = False
    ) -> Sequence[tuple[PodInfo, int]]:
        return ()

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {}

    def used_host_ports(self) -> Mapping[str, UsedPorts]:
        return self.ports


# --- the Lease API and a clock (leader election) -----------------------------------------

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


# --- a settable monotonic clock ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# --- the cluster writer of the daemon and the simulator (ClusterPort) ---------------------


class FakeWriter:
    """ClusterPort + the reporting calls; `bind` waits for `release` (`held=False`: answers
    at once, like the API) and answers `answer`. Records the annotations written, the
    binds in order and where each pod was bound."""

    def __init__(self, *, held: bool = True) -> None:
        self.release = asyncio.Event()
        if not held:
            self.release.set()
        self.binding = asyncio.Event()
        self.answer = Status()
        self.binds: list[tuple[str, str]] = []
        self.bound: dict[str, str] = {}  # uid -> node, for binds answered with success
        self.annotations: dict[str, dict[str, str]] = {}
        self.events: list[tuple[str, str]] = []  # (object name, reason)
        self.event_written = asyncio.Event()
        self.conditions: list[tuple[str, str, str]] = []  # (pod name, reason, message)
        self.condition_written = asyncio.Event()

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        self.binds.append((pod.key, node))
        if annotations:
            self.annotations.setdefault(pod.uid, {}).update(annotations)
        self.binding.set()
        await self.release.wait()
        if self.answer.is_success():
            self.bound[pod.uid] = node
        return self.answer

    async def event(self, ref: ObjectRef, *args: Any, **kw: Any) -> None:
        self.events.append((ref.name, str(args[1]) if len(args) > 1 else ""))
        self.event_written.set()

    async def pod_condition(self, pod: PodInfo, reason: str, message: str) -> None:
        self.conditions.append((pod.name, reason, message))
        self.condition_written.set()

    def forget(self, uid: str) -> None:
        return None


# --- an in-memory API server for Reflector.run ----------------------------------------------


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
    """Lists are empty at version 5 (or answer `list_status`); each watch answers with
    `watch_body()`; the run is cancelled after `max_watches` watches or `max_lists` lists.
    `sent` holds every streamed request's keyword arguments (query, timeout). `request` and
    `post` (the ClusterWriter's calls) answer at once and are recorded in `requests` and
    `bodies`."""

    def __init__(
        self,
        watch_body: Callable[[], list[bytes]],
        max_watches: int = 6,
        *,
        list_status: int = 200,
        max_lists: int = 100,
    ) -> None:
        self.watch_body = watch_body
        self.max_watches = max_watches
        self.watches = 0
        self.list_status = list_status
        self.max_lists = max_lists
        self.lists = 0
        self.sent: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.bodies: list[Any] = []  # the body of each of `requests`

    async def _send(self, method: str, path: str, **kw: Any) -> FakeResponse:
        self.sent.append(kw)
        query = dict(kw.get("query") or ())
        if query.get("watch") != "true":
            self.lists += 1
            if self.lists > self.max_lists:
                raise asyncio.CancelledError
            if self.list_status != 200:
                status = {"kind": "Status", "code": self.list_status, "message": "refused"}
                return FakeResponse(self.list_status, [orjson.dumps(status)])
            page = {"metadata": {"resourceVersion": "5"}, "items": []}
            return FakeResponse(200, [orjson.dumps(page)])
        self.watches += 1
        if self.watches > self.max_watches:
            raise asyncio.CancelledError
        return FakeResponse(200, self.watch_body())

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        self.requests.append((method, path))
        self.bodies.append(kw.get("body"))
        return {"metadata": {"name": f"obj-{len(self.requests)}"}}

    async def post(self, path: str, body: object, **kw: Any) -> JSON:
        return await self.request("POST", path, body=body, **kw)


# --- storage (the volume plugins' port) --------------------------------------------------


@dataclass
class FakeVolumes:
    """An in-memory VolumePort: objects by key, writes recorded and applied (bumping the
    resourceVersion, as the API server does), `refuse` makes every write fail."""

    claims: dict[tuple[str, str], Claim] = field(default_factory=dict)
    pvs: dict[str, PersistentVolume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    csi: dict[str, CSINode] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    refuse: str = ""
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def add(self, *objs: Claim | PersistentVolume | StorageClass | CSINode) -> None:
        for o in objs:
            if isinstance(o, Claim):
                self.claims[(o.namespace, o.name)] = o
            elif isinstance(o, PersistentVolume):
                self.pvs[o.name] = o
            elif isinstance(o, StorageClass):
                self.classes[o.name] = o
            else:
                self.csi[o.name] = o
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    def claim(self, namespace: str, name: str) -> Claim | None:
        return self.claims.get((namespace, name))

    def volume(self, name: str) -> PersistentVolume | None:
        return self.pvs.get(name)

    def volumes_of_class(self, storage_class: str) -> Iterable[PersistentVolume]:
        return [pv for pv in self.pvs.values() if pv.storage_class == storage_class]

    def storage_class(self, name: str) -> StorageClass | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINode | None:
        return self.csi.get(name)

    async def bind_volume(
        self, pv: PersistentVolume, claim: Claim
    ) -> tuple[PersistentVolume | None, Status]:
        self.writes.append(f"pv {pv.name} -> {claim.key}")
        if self.refuse:
            return None, Status(Code.ERROR, (self.refuse,))
        written = dataclasses.replace(pv, resource_version=str(int(pv.resource_version) + 1))
        self.add(written)
        return written, Status()

    async def select_node(self, claim: Claim, node: str) -> tuple[Claim | None, Status]:
        self.writes.append(f"pvc {claim.key} selected-node {node}")
        if self.refuse:
            return None, Status(Code.ERROR, (self.refuse,))
        written = dataclasses.replace(claim, resource_version=str(int(claim.resource_version) + 1))
        self.add(written)
        return written, Status()

    async def changed(self, timeout: float) -> bool:  # noqa: ASYNC109
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return False
        return True
