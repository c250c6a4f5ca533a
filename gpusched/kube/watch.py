"""A reflector: list, then watch from the list's resourceVersion, forever.

What client-go's reflector does, over raw JSON decoded with orjson (a full generated
client model costs an order of magnitude more per event, bench/watch_decode.py):

* list (paginated) and hand every object to the handler, then `synced` is set;
* watch from the list's resourceVersion with bookmarks, so a quiet collection still
  advances the version and a reconnect does not need a re-list;
* the server ends a watch after `timeoutSeconds`: watch again from the last version;
* 410 Gone (the version was compacted): re-list and reconcile against the store, emitting
  synthetic ADDED/MODIFIED/DELETED for what changed while we were not watching (an
  informer's Replace), so the handler never misses a deletion;
* every failure (410 Gone, a failed list or watch, a network or server error) waits before
  the next try: capped exponential backoff with jitter, reset once nothing has failed for a
  while (client-go's reflector backoff manager: 800 ms doubling to 30 s, reset after 2 min),
  so a 410 storm or a failing list does not hammer the API server;
* a read that sees nothing for `read_timeout` seconds ends the watch (a half-open
  connection); the server ends a healthy watch sooner (`timeoutSeconds`) and sends a
  bookmark about every minute, so only a dead stream reaches the read timeout.

An `optional` collection (a CRD or an alpha API the cluster may not serve): a 404 on the
list ends `run` with one log line, empties the store (DELETED for what it held), sets
`synced` and `unserved`, and never counts as a stall for /healthz.

`progress_at` is when the reflector last made progress (a list page, an event, a bookmark,
a watch the server ended normally); `problem` says the watch is stuck when that is too long
ago (the daemon's /healthz).

Objects are decoded once, by `decode`, into the caller's slim type; the store keeps the
decoded object and its resourceVersion per uid.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp
import orjson

from gpusched.kube.client import JSON, ApiError, Kube

T = TypeVar("T")
log = logging.getLogger(__name__)

LIST_PAGE = 500
# The server ends each watch after about this long (timeoutSeconds, jittered down by 10 %)
# and we watch again from the last version. Short enough that a healthy stream always sends
# something (an event, a bookmark or its end) well within READ_TIMEOUT_SECONDS.
WATCH_TIMEOUT_SECONDS = 60
# A watch read that waits longer than this for a byte gives up (aiohttp sock_read): a
# half-open connection (the server or a load balancer gone without a FIN) is noticed in
# about 90 s instead of never. A bit above WATCH_TIMEOUT_SECONDS, never below it.
READ_TIMEOUT_SECONDS = 90.0
LIST_TIMEOUT_SECONDS = 60.0  # one list page
# A watch the server ends this soon without a single event is a failure (client-go's
# "very short watch"): re-watching at once would hammer the API server in a loop.
MIN_WATCH_SECONDS = 1.0


class EventType(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class GoneError(Exception):
    """The watched resourceVersion is too old (HTTP 410 or an ERROR event with code 410)."""


class ShortWatchError(Exception):
    """The server ended a watch at once without sending anything."""


Handler = Callable[[EventType, T], None]


@dataclass
class Backoff:
    """Capped exponential backoff with jitter, reset after a healthy period: the delay
    doubles with every failure up to `maximum`, each drawn from [ceiling/2, ceiling]; once
    `reset_after` seconds pass without a failure, the next one starts again from `initial`
    (client-go's exponential backoff manager). A reset on the first good line would not do:
    a list that succeeds before every 410 would re-list at the initial delay forever."""

    initial: float = 0.8
    maximum: float = 30.0
    reset_after: float = 120.0
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    last_failure: float | None = None

    def next_delay(self) -> float:
        now = self.clock()
        if self.last_failure is not None and now - self.last_failure > self.reset_after:
            self.failures = 0
        self.last_failure = now
        self.failures += 1
        ceiling = min(self.maximum, self.initial * 2.0 ** min(self.failures - 1, 30))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0
        self.last_failure = None


@dataclass
class ReflectorStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    gone: int = 0
    errors: int = 0
    decode_errors: int = 0
    decode_ns: int = 0


class Reflector(Generic[T]):
    def __init__(
        self,
        kube: Kube,
        path: str,
        decode: Callable[[JSON], T],
        handler: Handler[T],
        *,
        name: str = "",
        query: Sequence[tuple[str, str | int]] = (),
        backoff: Backoff | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        read_timeout: float = READ_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        optional: bool = False,
    ) -> None:
        self.kube = kube
        self.path = path
        self.optional = optional
        self.unserved = False  # optional, and the API server answered 404: not watched
        self.decode = decode
        self.handler = handler
        self.name = name or path
        self.query = list(query)
        self.clock = clock
        self.backoff = backoff or Backoff(clock=clock)
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        if read_timeout <= watch_timeout:
            raise ValueError(
                f"{self.name}: read_timeout ({read_timeout}) must exceed watch_timeout"
                f" ({watch_timeout}), or every healthy quiet watch would time out"
            )
        self.store: dict[str, tuple[str, T]] = {}  # uid -> (resourceVersion, object)
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.stats = ReflectorStats()
        self.progress_at = clock()  # the last list page, event, bookmark or clean watch end
        self.last_error = ""  # why the last try failed; cleared by progress

    def get(self, uid: str) -> T | None:
        item = self.store.get(uid)
        return item[1] if item is not None else None

    def problem(self, stall_seconds: float) -> str | None:
        """Why this watch is unhealthy (no progress for more than `stall_seconds`), or None.
        A healthy watch progresses at least once per watch (the server ends it after
        `watch_timeout`, with bookmarks in between), so only a watch stuck in failures
        (re-lists refused, the server unreachable) or a dead stream gets here. An
        optional API the server does not serve is no problem: there is nothing to watch."""
        if self.unserved:
            return None
        idle = self.clock() - self.progress_at
        if idle <= stall_seconds:
            return None
        why = f"; last error: {self.last_error}" if self.last_error else ""
        return f"watch {self.name}: no progress for {idle:.0f}s (limit {stall_seconds:.0f}s){why}"

    def _progress(self) -> None:
        self.progress_at = self.clock()
        self.last_error = ""

    async def run(self) -> None:
        """List and watch until cancelled; never returns on errors, it retries (an optional
        API's 404 alone ends it)."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                started = self.clock()
                handled = await self._watch()
                # A clean end (the server's timeoutSeconds): watch on from where we are.
                if handled == 0 and self.clock() - started < MIN_WATCH_SECONDS:
                    raise ShortWatchError(f"{self.name}: the watch ended at once, empty")
                self._progress()
                continue
            except GoneError:
                self.stats.gone += 1
                need_list = True
                delay = self.backoff.next_delay()
                self.last_error = f"resourceVersion {self.resource_version} expired (410 Gone)"
                log.info(
                    "%s: resourceVersion %s expired, re-listing in %.1fs",
                    self.name,
                    self.resource_version,
                    delay,
                )
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if self.optional and exc.status == 404:
                    self._unserved(exc)
                    return
                delay = self._failed(exc)
            except (
                ShortWatchError,
                aiohttp.ClientError,
                TimeoutError,
                OSError,
                ValueError,
            ) as exc:
                delay = self._failed(exc)
            await asyncio.sleep(delay)

    def _unserved(self, exc: ApiError) -> None:
        """An optional API answered 404 (its CRD is not installed, or the alpha API is off):
        stop watching it and forget what it held; a restart looks again."""
        log.warning(
            "%s: the API server does not serve %s (HTTP 404: %s); not watched until restart",
            self.name,
            self.path,
            exc.message[:200],
        )
        self.unserved = True
        self._replace({})
        self.resource_version = ""
        self.synced.set()

    def _failed(self, exc: Exception) -> float:
        """Count and log a failed list or watch; the delay before the next try."""
        self.stats.errors += 1
        delay = self.backoff.next_delay()
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("%s: watch failed (%s); reconnecting in %.1fs", self.name, exc, delay)
        if isinstance(exc, ApiError) and exc.status in (401, 403):
            log.error(
                "%s: the API server refused us (HTTP %s): check the kubeconfig or"
                " the ServiceAccount's RBAC (manifests/rbac/)",
                self.name,
                exc.status,
            )
        return delay

    # -- list -------------------------------------------------------------------------------

    async def _list(self) -> None:
        self.stats.lists += 1
        seen: dict[str, tuple[str, T]] = {}
        cont = ""
        version = ""
        while True:
            query: list[tuple[str, str | int]] = [*self.query, ("limit", LIST_PAGE)]
            if cont:
                query.append(("continue", cont))
            page = await self._get_json(query)
            self._progress()
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion", ""))
            for raw in page.get("items") or ():
                decoded = self._decode(raw)
                if decoded is not None:
                    seen[decoded[0]] = decoded[1]
            cont = str(meta.get("continue") or "")
            if not cont:
                break
        self._replace(seen)
        self.resource_version = version
        self.synced.set()

    def _replace(self, seen: dict[str, tuple[str, T]]) -> None:
        """Reconcile the store with a fresh list (first list, or after 410 Gone)."""
        old = self.store
        self.store = {}
        for uid in [u for u in old if u not in seen]:
            self._emit(EventType.DELETED, old[uid][1])
        for uid, (rv, obj) in seen.items():
            self.store[uid] = (rv, obj)
            before = old.get(uid)
            if before is None:
                self._emit(EventType.ADDED, obj)
            elif before[0] != rv:
                self._emit(EventType.MODIFIED, obj)

    async def _get_json(self, query: Sequence[tuple[str, str | int]]) -> JSON:
        response = await self.kube._send(
            "GET", self.path, query=query, timeout=LIST_TIMEOUT_SECONDS
        )
        async with response:
            body = await response.read()
            if response.status == 410:
                raise GoneError(body.decode(errors="replace"))
            if not 200 <= response.status < 300:
                raise ApiError("LIST", self.path, response.status, body.decode(errors="replace"))
        page = orjson.loads(body)
        if not isinstance(page, dict):
            raise ValueError(f"LIST {self.path}: expected a JSON object")
        return page

    # -- watch ------------------------------------------------------------------------------

    async def _watch(self) -> int:
        """Watch until the server ends the stream; returns how many lines were handled."""
        self.stats.watches += 1
        handled = 0
        async for line in self._stream():
            self._line(line)
            self._progress()
            handled += 1
        return handled

    async def _stream(self) -> AsyncIterator[bytes]:
        params: list[tuple[str, str | int]] = [
            *self.query,
            ("watch", "true"),
            ("resourceVersion", self.resource_version),
            # Bookmarks: a quiet collection still advances our version (no re-list after a
            # reconnect) and the stream proves it is alive about every minute.
            ("allowWatchBookmarks", "true"),
            # Jittered so many watches do not all reconnect at once.
            ("timeoutSeconds", int(self.watch_timeout * random.uniform(0.9, 1.0))),
        ]
        response = await self.kube._send(
            "GET",
            self.path,
            query=params,
            # No total: the server ends the watch. sock_read: a stream silent for longer than
            # the server would keep it open is dead (see READ_TIMEOUT_SECONDS).
            timeout=aiohttp.ClientTimeout(total=None, sock_read=self.read_timeout),
        )
        async with response:
            if response.status == 410:
                raise GoneError(await response.text())
            if response.status != 200:
                raise ApiError("WATCH", self.path, response.status, await response.text())
            buffer = b""
            # Objects can exceed aiohttp's readline limit, so split lines ourselves.
            async for chunk in response.content.iter_any():
                buffer += chunk
                start = 0
                while (end := buffer.find(b"\n", start)) >= 0:
                    if end > start:
                        yield buffer[start:end]
                    start = end + 1
                buffer = buffer[start:]
            if buffer.strip():
                yield buffer

    def _line(self, line: bytes) -> None:
        event = orjson.loads(line)
        # A line of the wrong shape is a broken stream (ValueError: reconnect with backoff,
        # as for undecodable JSON), never an AttributeError that would end the reflector.
        if not isinstance(event, dict):
            raise ValueError(f"WATCH {self.path}: an event that is not a JSON object")
        kind = event.get("type")
        obj = event.get("object") or {}
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata") or {}, dict):
            raise ValueError(f"WATCH {self.path}: a {kind} event without an object")
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise GoneError(str(obj.get("message", "")))
            raise ApiError("WATCH", self.path, int(code or 500), orjson.dumps(obj).decode())
        meta = obj.get("metadata") or {}
        rv = str(meta.get("resourceVersion", ""))
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
            if rv:
                self.resource_version = rv
            return
        self.stats.events += 1
        uid = str(meta.get("uid", ""))
        if kind == "DELETED":
            previous = self.store.pop(uid, None)
            decoded = self._decode(obj)
            if decoded is not None:
                self._emit(EventType.DELETED, decoded[1][1])
            elif previous is not None:
                self._emit(EventType.DELETED, previous[1])
        elif kind in ("ADDED", "MODIFIED"):
            decoded = self._decode(obj)
            if decoded is not None:
                known = uid in self.store
                self.store[uid] = decoded[1]
                self._emit(EventType.MODIFIED if known else EventType.ADDED, decoded[1][1])
        if rv:
            self.resource_version = rv

    def _decode(self, raw: Any) -> tuple[str, tuple[str, T]] | None:
        """(uid, (resourceVersion, decoded)); None for an object we cannot read, which is
        logged and skipped rather than allowed to stop the watch."""
        t0 = time.perf_counter_ns()
        try:
            meta = raw.get("metadata") or {}
            uid = str(meta["uid"])
            rv = str(meta.get("resourceVersion", ""))
            obj = self.decode(raw)
        except Exception as exc:
            self.stats.decode_errors += 1
            log.warning("%s: cannot decode an object (%r); skipped", self.name, exc)
            return None
        finally:
            self.stats.decode_ns += time.perf_counter_ns() - t0
        return uid, (rv, obj)

    def _emit(self, kind: EventType, obj: T) -> None:
        try:
            self.handler(kind, obj)
        except Exception:
            # A handler bug must not stop the watch; the next event may succeed.
            log.exception("%s: the %s handler raised", self.name, kind.value)
