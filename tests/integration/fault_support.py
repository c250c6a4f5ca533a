"""The fault tests' tools: a TCP proxy that cuts or stalls the daemon's connections, a
pod watch feeding the invariant checker's BindingLog for a whole test, the invariant check
over a namespace and its pool, a clock to move, the soak sizes (`make soak-faults`).

A TCP proxy between the daemon and kube-apiserver:

The fault tests point a kubeconfig at the proxy (`kubeconfig_via`): TLS passes through
untouched, end to end between the client and kube-apiserver, and still verifies, since
the proxy listens on 127.0.0.1 like the API server and the serving certificate's SANs
name that address (gpusched/devcluster/pki.py; a port is not part of the check).

* `cut()`: every open connection is reset (RST) at once, as a restarted load balancer or a
  dropped NAT entry does: the client sees its stream end with an error and reconnects.
* `stall()`: every open connection is frozen: no byte is forwarded either way, but both
  sockets stay open and the kernel still acknowledges keepalive probes, as a half-open path
  behaves: the client's read just waits (until its read timeout). New connections pass.

It runs on the test's event loop, next to the in-process daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpusched.devcluster import LocalCluster, pki
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.invariants import BindingLog, check
from gpusched.kube import JSON, ApiError, Kube, pod_path

CHUNK = 1 << 16
# `make soak-faults`: the fault scenarios run longer (GPUSCHED_SOAK=1).
SOAK = os.environ.get("GPUSCHED_SOAK", "") not in ("", "0")


def soak_sizes(bursts: int, pods: int) -> tuple[int, int]:
    """(bursts, pods a burst): these, or under SOAK GPUSCHED_SOAK_BURSTS and
    GPUSCHED_SOAK_PODS (6 x 60 unless set)."""
    if not SOAK:
        return bursts, pods
    env = os.environ
    return int(env.get("GPUSCHED_SOAK_BURSTS", "6")), int(env.get("GPUSCHED_SOAK_PODS", "60"))


@dataclass(eq=False)
class _Connection:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for task in self.pumps:
            task.cancel()
        for writer in (self.client, self.upstream):
            transport = writer.transport
            # abort(): RST, no FIN, unsent data dropped: the connection is cut, not closed.
            transport.abort()


class TcpProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.connections: set[_Connection] = set()
        self.accepted = 0
        self.cuts = 0  # connections cut by cut()
        self._server: asyncio.Server | None = None
        self._accepting = asyncio.Condition()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def cut(self) -> int:
        """Reset every open connection (stalled ones included); returns how many."""
        conns = list(self.connections)
        for conn in conns:
            conn.abort()
        self.connections.clear()
        self.cuts += len(conns)
        return len(conns)

    def stall(self) -> int:
        """Freeze every open connection (new ones are not affected); returns how many."""
        for conn in self.connections:
            conn.flowing.clear()
        return len(self.connections)

    @property
    def stalled(self) -> int:
        return sum(not c.flowing.is_set() for c in self.connections)

    def flowing(self) -> int:
        return sum(c.flowing.is_set() for c in self.connections)

    async def until_flowing(self, count: int, timeout: float = 60) -> None:  # noqa: ASYNC109
        """Until `count` connections pass bytes (e.g. the daemon's two watches reconnected)."""

        async def wait() -> None:
            async with self._accepting:
                await self._accepting.wait_for(lambda: self.flowing() >= count)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"{self.flowing()} connection(s) through the proxy after {timeout:.0f}s,"
                f" not {count}"
            ) from None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # the API server is down: the client sees a reset
            return
        self.accepted += 1
        conn = _Connection(writer, up_writer)
        conn.flowing.set()
        self.connections.add(conn)
        conn.pumps = [
            asyncio.create_task(self._pump(conn, reader, up_writer)),
            asyncio.create_task(self._pump(conn, up_reader, writer)),
        ]
        async with self._accepting:
            self._accepting.notify_all()

    async def _pump(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                await conn.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        # One side ended (or failed): end the other, as a plain TCP relay does.
        if conn in self.connections:
            self.connections.discard(conn)
            for other in conn.pumps:
                if other is not asyncio.current_task():
                    other.cancel()
            for w in (conn.client, conn.upstream):
                w.close()


def kubeconfig_via(cluster: LocalCluster, proxy: TcpProxy, path: Path) -> Path:
    """The cluster's admin kubeconfig, with the proxy as the server."""
    write_kubeconfig(
        path,
        f"https://127.0.0.1:{proxy.port}",
        cluster.ca_file,
        cluster.token(pki.ADMIN.user),
        pki.ADMIN.user,
    )
    return path


class PodWatch:
    """Every version of the namespace's pods, from a list and a watch running for the whole
    test: each is shown to `log` (the invariant checker's BindingLog: a pod bound twice, or
    whose node or cards changed, is a violation); `pods` holds the latest by name; `until`
    and `until_bound` wait on them."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.log = BindingLog()
        self.pods: dict[str, JSON] = {}
        self._changed = asyncio.Condition()

    async def run(self, started: asyncio.Event) -> None:
        """List, then watch from the last version seen; across an API server restart or a
        dropped stream the watch resumes from there (a re-list only after 410 Gone), so no
        version is skipped unless the server no longer has it. An error that is not the
        API server restarting ends the task; `pod_watch` raises it."""
        version = ""
        while True:
            try:
                if not version:
                    listing = await self.kube.get(pod_path(self.namespace))
                    for item in listing.get("items", []):
                        self._see("ADDED", item)
                    version = str(listing["metadata"]["resourceVersion"])
                    started.set()
                    await self._notify()
                events = self.kube.watch(
                    pod_path(self.namespace), resource_version=version, timeout_seconds=3600
                )
                async with aclosing(events):
                    async for event in events:
                        if event.type == "ERROR":
                            version = ""  # 410 Gone: list again
                            break
                        version = str(event.object["metadata"].get("resourceVersion", version))
                        if event.type != "BOOKMARK":
                            self._see(event.type, event.object)
                            await self._notify()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The API server restarting: refused, reset, 5xx. Anything else is a bug.
                transient = isinstance(exc, (OSError, TimeoutError)) or (
                    "aiohttp" in type(exc).__module__
                )
                if isinstance(exc, ApiError):
                    transient = exc.status in (429, 500, 503)
                    if exc.status == 410:
                        transient, version = True, ""
                if not transient:
                    raise
                await asyncio.sleep(0.2)  # a pause before reconnecting, not a wait on state

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _see(self, kind: str, obj: JSON) -> None:
        self.log.see(obj)
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = obj

    def bound(self, names: Collection[str] | None = None) -> dict[str, str]:
        """name -> node of the bound pods (among `names`)."""
        return {
            n: str(p["spec"]["nodeName"])
            for n, p in self.pods.items()
            if p["spec"].get("nodeName") and (names is None or n in names)
        }

    async def until(
        self,
        predicate: Callable[[dict[str, JSON]], bool],
        what: str,
        timeout: float = 120.0,  # noqa: ASYNC109 - the failure names what was awaited
    ) -> dict[str, JSON]:
        """Until `predicate(pods)` holds; returns `pods`."""

        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.pods))

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            bound = sorted(self.bound())
            raise AssertionError(
                f"not {what} after {timeout:.0f}s; {len(bound)} bound: {bound}"
            ) from None
        return self.pods

    async def until_bound(
        self,
        names: Collection[str],
        count: int | None = None,
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> dict[str, JSON]:
        """Until `count` of `names` (all of them by default) are bound."""
        wanted = set(names)
        want = len(wanted) if count is None else count
        return await self.until(
            lambda _: len(self.bound(wanted)) >= want,
            f"{want} of {len(wanted)} pods bound",
            timeout,
        )


@asynccontextmanager
async def pod_watch(kube: Kube, namespace: str) -> AsyncIterator[PodWatch]:
    """A PodWatch of `namespace` running for the block, once it has listed the namespace."""
    watch = PodWatch(kube, namespace)
    started = asyncio.Event()
    task = asyncio.create_task(watch.run(started), name=f"pod watch {namespace}")
    try:
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait({waiter, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # raises what stopped it
        assert started.is_set(), f"the pod watch did not list {namespace} within 30 s"
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # raises what stopped it, if it ended on its own


async def invariant_violations(
    kube: Kube,
    namespace: str,
    nodes: Sequence[str],
    watch: PodWatch,
    must_bind: Collection[str],
    replace: dict[str, JSON] | None = None,
) -> list[str]:
    """gpusched.devcluster.invariants.check over the namespace's pods and the pool's nodes
    (by name) as the API has them now (the nodes still there), with the watch's BindingLog.
    `must_bind`: pod names. `replace`: pods (by name) to judge in another version."""
    pods = (await kube.get(pod_path(namespace))).get("items", [])
    pods = [(replace or {}).get(p["metadata"]["name"], p) for p in pods]
    found = []
    for name in nodes:
        try:
            found.append(await kube.get(f"/api/v1/nodes/{name}"))
        except ApiError as exc:
            if exc.status != 404:
                raise
    return check(pods, found, must_bind=[f"{namespace}/{n}" for n in must_bind], log=watch.log)


async def assert_invariants(
    kube: Kube,
    namespace: str,
    nodes: Sequence[str],
    watch: PodWatch,
    must_bind: Collection[str],
    what: str = "",
) -> None:
    """invariant_violations, none expected; `what` names the moment in the failure."""
    violations = await invariant_violations(kube, namespace, nodes, watch, must_bind)
    assert violations == [], f"{what}: {violations}" if what else violations


class OffsetClock:
    """time.monotonic plus an offset the test moves forward: the daemon's timers run on
    real time, but everything they compare with the clock sees the jump."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset
