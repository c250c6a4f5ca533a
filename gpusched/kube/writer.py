"""The daemon's ClusterPort: every write the scheduler makes to the API server.

* `bind`: POST pods/{name}/binding with the pod's uid as a precondition, carrying the card
  assignment (gpusched.io/gpu-ids) in the Binding's annotations;
* `event`: core/v1 Events as kube-scheduler's recorder writes them (reportingController
  gpusched), deduplicated by bumping `count` of the same (object, reason, message);
* `pod_condition`: the PodScheduled condition on pods/status (reason Unschedulable).

Nothing here raises for an API answer: bind maps the HTTP status to a Status whose `error`
is a `WriteError` carrying the HTTP status, so the daemon can tell "pod gone" (404) and
"already bound" (409) from errors worth a retry, and a definite refusal (any 4xx: the API
server did not apply it) from an unknown outcome (a timeout, a reset connection, a 5xx: it
may have been applied), which only a read of the pod can settle. Every request waits for a
token of a client-side bucket (clientConnection qps/burst), as client-go's rate limiter does,
and there are two buckets: one for the scheduling writes (the Binding), one for the reports
(Events, the PodScheduled condition), as kube-scheduler writes Events through a separate
client. A backlog of unschedulable pods writes an Event and a condition per attempt; on one
bucket that flood would make every Binding wait behind it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp

from gpusched.framework.status import ClusterWriteError, Code, Status
from gpusched.kube import faults
from gpusched.kube.client import JSON, ApiError, Kube
from gpusched.kube.ops import bind_pod, pod_path
from gpusched.model.pod import PodInfo

log = logging.getLogger(__name__)
COMPONENT = "gpusched"
_EVENT_CACHE = 4096  # deduplication memory, as client-go's event correlator's LRU
# Requests in flight at once: Bindings (and preemption's writes), and reports (Events,
# conditions). Each HTTP/1.1 request holds one of the connection pool's 100 connections
# (kubernetes_asyncio's pool size) for its whole round trip; unbounded, a backlog of
# hundreds of Bindings took every one, and the Lease renewal waited behind them past its
# renewDeadline (the daemon stopped, bench/throughput.py). Bounded, the watches (about a
# dozen) and the Lease always find a connection, and a Binding waits here, not in the pool.
MAX_WRITES_IN_FLIGHT = 48
MAX_REPORTS_IN_FLIGHT = 16


class TokenBucket:
    """qps tokens a second, at most `burst` saved up."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.sleep = sleep
        self.last = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now

    async def acquire(self) -> None:
        async with self._lock:  # first come, first served
            self._refill()
            if self.tokens < 1:
                await self.sleep((1 - self.tokens) / self.qps)
                self._refill()
            self.tokens -= 1


class WriteError(ClusterWriteError):
    """Why a write failed; `status` is the HTTP code, 0 for a connection error. `sent`:
    False when no connection was made, so nothing reached the API server."""

    def __init__(self, status: int, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.final = self.pod_gone or self.conflict
        # A 4xx is the API server refusing the request before applying it; no answer or a
        # 5xx may come after the write reached etcd (a timeout answered late, a reset).
        self.uncertain = sent and not 400 <= status < 500

    @property
    def pod_gone(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


def _failure(what: str, pod: PodInfo, exc: Exception) -> Status:
    if isinstance(exc, ApiError):
        code = exc.status
        if code == 404:
            reason = f"{what} {pod.key}: the pod no longer exists (404); dropping it"
            return Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,), "", WriteError(404, reason)
            )
        if code == 409:
            reason = (
                f"{what} {pod.key}: conflict (409: {exc.message}); the pod is already bound or"
                " was re-created, so this attempt ends"
            )
            return Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,), "", WriteError(409, reason)
            )
        if code in (401, 403):
            reason = (
                f"{what} {pod.key}: forbidden (HTTP {code}: {exc.message}); grant the scheduler's"
                " ServiceAccount the verbs in manifests/rbac/"
            )
            return Status(Code.ERROR, (reason,), "", WriteError(code, reason))
        if 400 <= code < 500:
            reason = f"{what} {pod.key}: HTTP {code} {exc.reason}: {exc.message}; will retry"
        else:
            reason = f"{what} {pod.key}: HTTP {code} {exc.reason}: {exc.message}; {_UNKNOWN}"
        return Status(Code.ERROR, (reason,), "", WriteError(code, reason))
    if isinstance(exc, aiohttp.ClientConnectorError):
        # No connection was made (refused, unreachable, a failed TLS handshake), so no
        # request was sent: a definite failure, retried at once. Read as unknown, every
        # Binding tried while the API server restarts would hold its cards for the whole
        # request timeout before being retried.
        reason = f"{what} {pod.key}: {type(exc).__name__}: {exc}; not sent, will retry"
        return Status(Code.ERROR, (reason,), "", WriteError(0, reason, sent=False))
    reason = f"{what} {pod.key}: {type(exc).__name__}: {exc}; {_UNKNOWN}"
    return Status(Code.ERROR, (reason,), "", WriteError(0, reason))


_UNKNOWN = "it may have been applied: the pod is read to settle it"


def write_failure(what: str, pod: PodInfo, exc: Exception) -> Status:
    """The Status of a failed write about `pod` (`what` names it), as bind's: 404 and 409
    end the attempt, 401/403 name the RBAC manifests, a 4xx was not applied, a 5xx or a
    lost answer may have been."""
    return _failure(what, pod, exc)


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "v1"

    @classmethod
    def pod(cls, pod: PodInfo) -> ObjectRef:
        return cls("Pod", pod.namespace, pod.name, pod.uid)

    @classmethod
    def node(cls, name: str, uid: str = "") -> ObjectRef:
        # Events of cluster-scoped objects live in "default", as kubectl describe expects.
        return cls("Node", "", name, uid or name)


_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


def _reference(ref: ObjectRef) -> JSON:
    """A core/v1 ObjectReference."""
    out: JSON = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
    if ref.uid:
        out["uid"] = ref.uid
    if ref.namespace:
        out["namespace"] = ref.namespace
    return out


class ClusterWriter:
    def __init__(
        self,
        kube: Kube,
        *,
        qps: float = 50.0,
        burst: int = 100,
        instance: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        # Binds and annotations: the scheduling writes, never queued behind reports.
        self.bucket = TokenBucket(qps, burst, clock, sleep)
        # Events and PodScheduled conditions: kube-scheduler's event client has its own
        # limiter with the same clientConnection numbers; so does this bucket.
        self.report_bucket = TokenBucket(qps, burst, clock, sleep)
        self.instance = instance or COMPONENT
        # (object uid, reason, message) -> (event namespace, event name, count)
        self._events: OrderedDict[tuple[str, str, str], tuple[str, str, int]] = OrderedDict()
        self._conditions: dict[str, tuple[str, str]] = {}  # pod uid -> (reason, message)
        self.writes = 0
        self._write_slots = asyncio.Semaphore(MAX_WRITES_IN_FLIGHT)
        # The leader Lease's fence (the daemon sets it): a reason not to write, or None.
        self.fence: Callable[[], str | None] | None = None
        self._report_slots = asyncio.Semaphore(MAX_REPORTS_IN_FLIGHT)

    async def _report(self, method: str, path: str, body: object, content_type: str) -> JSON:
        """An Event or condition write: limited by the report bucket, not the binds'."""
        async with self._report_slots:
            await self.report_bucket.acquire()
            return await self._send(method, path, body, content_type)

    async def _send(self, method: str, path: str, body: object, content_type: str) -> JSON:
        self.writes += 1
        return await self.kube.request(
            method, path, body=body, content_type=content_type, timeout=30.0
        )

    # -- ClusterPort ------------------------------------------------------------------------

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        try:
            async with self._write_slots:
                await self.bucket.acquire()
                # ScheduleOne checked the fence before Bind, but a Binding may then wait
                # here for a slot and a token behind a backlog: check it again right before
                # the request, so a deposed leader sends nothing.
                if self.fence is not None and (reason := self.fence()) is not None:
                    why = f"bind {pod.key}: not sent: {reason}"
                    return Status(Code.ERROR, (why,), "", WriteError(0, why, sent=False))
                self.writes += 1
                await bind_pod(
                    self.kube, pod.namespace, pod.name, node, uid=pod.uid, annotations=annotations
                )
        except (ApiError, *_NET_ERRORS) as exc:
            return _failure("bind", pod, exc)
        faults.reached(faults.BIND_RETURNED)
        return Status()

    async def write(
        self,
        method: str,
        path: str,
        body: object,
        content_type: str = "application/json",
    ) -> JSON:
        """A scheduling write other than the Binding (preemption's: kube/disruption.py),
        limited by the binds' bucket, not queued behind reports. Raises what the client
        raises (ApiError, a network error): the caller maps it (`write_failure`)."""
        async with self._write_slots:
            await self.bucket.acquire()
            return await self._send(method, path, body, content_type)

    # -- status and events ------------------------------------------------------------------

    async def pod_condition(self, pod: PodInfo, reason: str, message: str) -> None:
        """PodScheduled=False with `reason`; skipped when it would not change anything."""
        if self._conditions.get(pod.uid) == (reason, message):
            return
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": _now_rfc3339(),
                    }
                ]
            }
        }
        try:
            # Strategic merge: conditions merge by `type`, the others are kept.
            await self._report(
                "PATCH",
                pod_path(pod.namespace, pod.name) + "/status",
                patch,
                "application/strategic-merge-patch+json",
            )
            self._conditions[pod.uid] = (reason, message)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot set PodScheduled on %s: %s", pod.key, exc)
        except _NET_ERRORS as exc:
            log.warning("cannot set PodScheduled on %s: %s", pod.key, exc)

    def forget(self, uid: str) -> None:
        self._conditions.pop(uid, None)

    async def event(
        self,
        ref: ObjectRef,
        type_: str,
        reason: str,
        message: str,
        action: str = "Scheduling",
        related: ObjectRef | None = None,
    ) -> None:
        """Record an Event; a repeat of the same one bumps its count instead. `related`: a
        second object the Event is about (a Preempted victim's preemptor, as
        kube-scheduler's Eventf(victim, preemptor, ...) records it)."""
        key = (ref.uid, reason, message)
        namespace = ref.namespace or "default"
        now = _now_rfc3339()
        seen = self._events.get(key)
        try:
            if seen is not None:
                ns, name, count = seen
                self._events[key] = (ns, name, count + 1)
                self._events.move_to_end(key)
                await self._report(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/events/{name}",
                    {"count": count + 1, "lastTimestamp": now},
                    "application/merge-patch+json",
                )
                return
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{ref.name}.", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": ref.api_version,
                    "kind": ref.kind,
                    "name": ref.name,
                    "uid": ref.uid,
                    **({"namespace": ref.namespace} if ref.namespace else {}),
                },
                **({"related": _reference(related)} if related is not None else {}),
                "reason": reason,
                "message": message[:1024],
                "type": type_,
                "action": action,
                "count": 1,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "eventTime": None,
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": self.instance,
            }
            created = await self._report(
                "POST", f"/api/v1/namespaces/{namespace}/events", body, "application/json"
            )
            name = str((created.get("metadata") or {}).get("name", ""))
            if name:
                self._events[key] = (namespace, name, 1)
                if len(self._events) > _EVENT_CACHE:
                    self._events.popitem(last=False)
        except ApiError as exc:
            if seen is not None and exc.status == 404:
                self._events.pop(key, None)  # expired (event TTL): the next one is created
            else:
                log.warning("cannot record %s Event for %s %s: %s", reason, ref.kind, ref.name, exc)
        except _NET_ERRORS as exc:
            log.warning("cannot record %s Event for %s %s: %s", reason, ref.kind, ref.name, exc)
