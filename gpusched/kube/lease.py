"""Leader election over a coordination.k8s.io/v1 Lease, with client-go's semantics.

Several `gpusched run` replicas may run; only the one holding the Lease schedules, so two
instances never hand out the same cards. The algorithm is client-go's
tools/leaderelection (the one kube-scheduler uses):

* **acquire**: every retryPeriod (with jitter, so standbys do not stampede) read the Lease;
  take it when it is absent (create), released (holderIdentity ""), expired, or already
  ours. Expired is judged by *our* clock: the time we last saw the record change, plus its
  leaseDurationSeconds. The holder's renewTime is never compared with our clock, so clock
  skew between nodes does not matter (only the rate at which clocks run).
* **renew**: the leader writes renewTime every retryPeriod; if no write succeeds for
  renewDeadline, leadership is lost. renewDeadline < leaseDuration, so the old leader gives
  up before any standby can consider the Lease expired.
* **optimistic concurrency**: every write carries the resourceVersion last read; a 409
  means someone else wrote first, so the record is read again before deciding anything.
* **release** (client-go's ReleaseOnCancel): on a graceful stop the leader writes
  holderIdentity "" and leaseDurationSeconds 1, and a standby takes over at its next retry
  instead of waiting a whole leaseDuration.

All waits go through an injectable `sleep` and all judgements through an injectable
monotonic `clock`, so unit tests run the whole protocol without real time passing.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp
import structlog

from gpusched.kube.client import JSON, ApiError, Kube

Logger = structlog.typing.FilteringBoundLogger

# client-go's JitterFactor for the acquire loop: a standby waits retryPeriod * (1 + U[0,1.2)).
JITTER_FACTOR = 1.2
_NET_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
# took_over_from when the Lease named us before we ever wrote it and no other holder was seen.
UNKNOWN_HOLDER = "(unknown: the Lease named this instance before it wrote it)"


def default_identity() -> str:
    """The pod name plus a random suffix, as kube-scheduler does (hostname + "_" + uuid).

    The suffix keeps a restarted process from being mistaken for the previous one: a
    container restarted in the same pod must not believe it still holds the old Lease and
    schedule before it has acquired it again.
    """
    name = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{name}_{uuid.uuid4()}"


def micro_time(at: datetime) -> str:
    """metav1.MicroTime's wire format (RFC 3339 with microseconds, UTC)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseAPI(Protocol):
    """The three calls the elector makes. Errors are `ApiError` (409 Conflict on a stale
    resourceVersion or an existing object) or connection errors."""

    @property
    def describe(self) -> str: ...

    async def get(self) -> JSON | None:
        """The Lease, or None when it does not exist."""
        ...

    async def create(self, spec: JSON) -> JSON: ...

    async def update(self, lease: JSON, spec: JSON) -> JSON:
        """PUT `lease` (as last read, so its resourceVersion) with `spec` replaced."""
        ...


class KubeLeases:
    """`LeaseAPI` over the API server: one Lease, namespace/name."""

    def __init__(self, kube: Kube, namespace: str, name: str, *, timeout: float = 10.0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        # Per request: a renewal that hangs must fail in time for the renew deadline.
        self.timeout = timeout
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    @property
    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def get(self) -> JSON | None:
        try:
            return await self.kube.request(
                "GET", f"{self.collection}/{self.name}", timeout=self.timeout
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, spec: JSON) -> JSON:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        return await self.kube.request("POST", self.collection, body=body, timeout=self.timeout)

    async def update(self, lease: JSON, spec: JSON) -> JSON:
        # The metadata as read, resourceVersion included: the server answers 409 if the
        # Lease changed since, which is what makes two candidates unable to both win.
        body = {**lease, "spec": spec}
        return await self.kube.request(
            "PUT", f"{self.collection}/{self.name}", body=body, timeout=self.timeout
        )


class LeaderElector:
    """Run `run()` as a task: `leading` is set once this instance holds the Lease; `run()`
    returns when `stop()` was called (after releasing the Lease) or when leadership is lost
    (`lost` set). Leadership once lost is not sought again: the caller exits and a restart
    starts from a clean state, as kube-scheduler does."""

    def __init__(
        self,
        api: LeaseAPI,
        identity: str,
        *,
        lease_duration: int,
        renew_deadline: float,
        retry_period: float,
        log: Logger,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        jitter: Callable[[], float] = random.random,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "need 0 < retryPeriod < renewDeadline < leaseDuration, got"
                f" {retry_period} / {renew_deadline} / {lease_duration}"
            )
        self.api = api
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.log = log.bind(identity=identity, lease=api.describe)
        self.clock = clock
        self._sleep = sleep
        self._wall = wall
        self._jitter = jitter
        self._on_change = on_change
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._stopping = asyncio.Event()
        # What we last read or wrote: the Lease object (for its resourceVersion), its spec,
        # and when (by our clock) we saw that spec change.
        self._lease: JSON | None = None
        self._observed: JSON = {}
        self._observed_at = -float("inf")
        self._reported_holder: str | None = None
        self.last_renew = -float("inf")
        # The holder whose unexpired-by-release Lease we took over ("" if it was free or
        # released): its last writes may still be in flight when we start.
        self.took_over_from = ""
        # The record as last seen was written by us (naming us is not enough: someone else
        # can write our identity into it), and the last holder other than us we saw.
        self._held = False
        self._last_other = ""
        self.acquired_at = -float("inf")

    # -- state ------------------------------------------------------------------------------

    @property
    def holder(self) -> str:
        """The holder of the record last observed ("" when released or unknown)."""
        return str(self._observed.get("holderIdentity") or "")

    @property
    def is_leader(self) -> bool:
        return self.holder == self.identity

    async def hold_off(self) -> None:
        """Return one lease duration after we acquired the Lease (or when stopped), in steps
        of retryPeriod on the elector's clock, while the renewals go on."""
        while not self._stopping.is_set():
            left = self.acquired_at + self.lease_duration - self.clock()
            if left <= 0:
                return
            await self.pause(min(left, self.retry_period))

    def fence(self) -> str | None:
        """Why this instance must not write to the cluster now, or None. Asked right before
        each PreBind and Bind: leading is not enough, the last renewal must be younger than
        renewDeadline, after which a standby may take over without hearing from us."""
        if self.lost.is_set() or not self.leading.is_set():
            return "this instance does not hold the leader Lease"
        age = self.clock() - self.last_renew
        if age >= self.renew_deadline:
            return (
                f"the leader Lease was last renewed {age:.1f}s ago"
                f" (renewDeadline {self.renew_deadline}s)"
            )
        return None

    def _valid(self, now: float) -> bool:
        duration = self._observed.get("leaseDurationSeconds") or 0
        return bool(self._observed_at + float(duration) > now)

    def _observe(self, lease: JSON, now: float) -> None:
        self._lease = lease
        spec: JSON = lease.get("spec") or {}
        if spec != self._observed:
            self._observed = spec
            self._observed_at = now
        holder = self.holder
        if holder != self.identity:
            self._held = False
            if holder:
                self._last_other = holder
        if holder not in (self._reported_holder, self.identity):
            self._reported_holder = holder
            # A standby's log says who schedules (OnNewLeader in client-go).
            self.log.info("leader observed", holder=holder or "(released)")

    # -- one attempt (client-go's tryAcquireOrRenew) -----------------------------------------

    def _spec(self, now: datetime) -> JSON:
        stamp = micro_time(now)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards. API errors are raised."""
        now = self.clock()
        desired = self._spec(self._wall())
        # Fast path: the leader updates the Lease it last wrote, saving a GET per renewal.
        if self._held and self.is_leader and self._valid(now) and self._lease is not None:
            spec = {
                **desired,
                "acquireTime": self._observed.get("acquireTime") or desired["acquireTime"],
                "leaseTransitions": self._observed.get("leaseTransitions") or 0,
            }
            try:
                self._observe(await self.api.update(self._lease, spec), now)
                return True
            except ApiError as exc:
                # 409: someone wrote the Lease since; read it again below before deciding.
                self.log.debug("lease update failed, re-reading", error=str(exc))
        lease = await self.api.get()
        if lease is None:
            try:
                self._observe(await self.api.create(desired), now)
            except ApiError as exc:
                if exc.status == 409:  # another candidate created it first
                    return False
                raise
            self._held = True
            return True
        self._observe(lease, now)
        holder = self.holder
        if holder and holder != self.identity and self._valid(now):
            return False  # held by a live leader
        spec = dict(desired)
        if holder == self.identity:
            spec["acquireTime"] = self._observed.get("acquireTime") or desired["acquireTime"]
            spec["leaseTransitions"] = self._observed.get("leaseTransitions") or 0
        else:
            spec["leaseTransitions"] = int(self._observed.get("leaseTransitions") or 0) + 1
        try:
            self._observe(await self.api.update(lease, spec), now)
        except ApiError as exc:
            if exc.status == 409:  # lost the race; the next attempt reads the winner
                return False
            raise
        # An expired Lease still naming a holder: that holder did not release it, so it
        # may have died or hung mid-write (a released Lease has no holder). A Lease naming
        # us that we did not write was edited by someone else (kubectl, a script) while
        # its holder may still be leading: a takeover from that holder just the same.
        if holder != self.identity:
            self.took_over_from = holder
        elif not self._held:
            self.took_over_from = self._last_other or UNKNOWN_HOLDER
        self._held = True
        return True

    # -- the loop ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask `run()` to end; it releases the Lease first if we hold it."""
        self._stopping.set()

    async def run(self) -> None:
        self.log.info("attempting to acquire leader lease")
        try:
            if not await self._acquire():
                return
            self._set_leading(True)
            self.log.info("leader elected")
            await self._renew()
        finally:
            if self.leading.is_set() and not self.lost.is_set():
                await self.release()
            self._set_leading(False)

    async def _attempt(self, budget: float) -> bool:
        """`try_acquire_or_renew`, with errors logged and counted as a failed attempt, and
        bounded by `budget` seconds so a hung request cannot outlive the renew deadline."""
        try:
            async with asyncio.timeout(max(budget, 0.001)):
                return await self.try_acquire_or_renew()
        except (ApiError, *_NET_ERRORS) as exc:
            hint = ""
            if isinstance(exc, ApiError) and exc.status in (401, 403):
                hint = "; grant leases get/create/update (manifests/rbac/gpusched.yaml)"
            self.log.warning("lease request failed", error=f"{exc}{hint}")
        return False

    async def _acquire(self) -> bool:
        while not self._stopping.is_set():
            started = self.clock()
            if await self._attempt(self.renew_deadline):
                self.last_renew = started  # as for a renewal: from the request's start
                self.acquired_at = started
                return True
            await self.pause(self.retry_period * (1 + JITTER_FACTOR * self._jitter()))
        return False

    async def _renew(self) -> None:
        while not self._stopping.is_set():
            await self.pause(self.retry_period)
            if self._stopping.is_set():
                return
            # Counted from the start of the request: the server may have stored the write
            # as early as that, and standbys measure expiry from when they saw it.
            started = self.clock()
            left = self.renew_deadline - (started - self.last_renew)
            if left > 0 and await self._attempt(left):
                self.last_renew = started
                continue
            if self.holder and not self.is_leader:
                self._lose(f"the lease is now held by {self.holder}")
                return
            if self.clock() - self.last_renew >= self.renew_deadline:
                self._lose(f"no renewal succeeded for renewDeadline ({self.renew_deadline}s)")
                return

    def _lose(self, reason: str) -> None:
        self.lost.set()
        self._set_leading(False)
        self.log.error("leader lost", reason=reason)

    async def release(self) -> bool:
        """Give the Lease up (holderIdentity "", leaseDurationSeconds 1) if we hold it."""
        if not self.is_leader or self._lease is None:
            return True
        stamp = micro_time(self._wall())
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": self._observed.get("leaseTransitions") or 0,
        }
        lease = self._lease
        self._reported_holder = ""  # our own release is not news for our log
        for _ in range(2):
            try:
                async with asyncio.timeout(self.renew_deadline):
                    self._observe(await self.api.update(lease, spec), self.clock())
                self.log.info("leader lease released")
                return True
            except ApiError as exc:
                if exc.status != 409:
                    self.log.warning("cannot release the leader lease", error=str(exc))
                    return False
                # A stale resourceVersion: release what is there if it is still ours.
                try:
                    current = await self.api.get()
                except (ApiError, *_NET_ERRORS):
                    return False
                if (
                    current is None
                    or (current.get("spec") or {}).get("holderIdentity") != self.identity
                ):
                    return True
                lease = current
            except _NET_ERRORS as exc:
                self.log.warning("cannot release the leader lease", error=repr(exc))
                return False
        return False

    def _set_leading(self, value: bool) -> None:
        if value == self.leading.is_set():
            return
        if value:
            self.leading.set()
        else:
            self.leading.clear()
        if self._on_change is not None:
            self._on_change(value)

    async def pause(self, seconds: float) -> None:
        """Sleep `seconds` (through the injected sleep), or less if `stop()` is called."""
        if self._stopping.is_set():
            return
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            stopper.cancel()
