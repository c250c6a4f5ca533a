"""The fault matrix of issue 10, items 2 to 4, against a real control plane.

Item 2 (the API server and its watches), item 3 (races with other writers) and item 4 (a
tenant editing a running pod's card assignment). Each test runs the daemon in-process,
keeps a pod watch of its namespace for the whole test (the BindingLog: a pod bound twice,
or whose node or cards changed, is a violation), and ends with the invariant checker
(gpusched/devcluster/invariants.py) over its pool's nodes and its pods as the API has them:
no violation, and every pod that fits bound.

The file starts its own control plane (etcd and kube-apiserver only: no KWOK, no
kube-scheduler, no kube-controller-manager; the daemon needs no Ready condition), since it
restarts kube-apiserver and changes its flags, which would disturb the session cluster's
other tests. Without the controller manager nothing creates a namespace's `default`
ServiceAccount, and the ServiceAccount admission plugin is off with it (ClusterOptions).
That is deliberate: after the restarts here, client-go's reflectors in the controller
manager back off up to 30 s with full jitter (up to 60 s) before they list again, so a new
namespace could wait a minute for its ServiceAccount (it did once on CI); the controllers
are not what these tests are about.

Faults are injected with real parts: the kube-apiserver process restarted on its port; a
TCP proxy (fault_support.TcpProxy) between the daemon's watches and the API server that
resets or freezes connections; etcd compaction through etcd's own API; Bindings and node
deletions by the API; a tenant's merge patch through impersonation. A hook on the daemon's
writer or framework holds a binding at a chosen point where a race needs a window.

`GPUSCHED_SOAK=1` runs the silent-watch scenario with a real silence of 45 s (beyond the
old 30 s expiry) instead of a moved clock; `make test` does not.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
import yaml

from gpusched.core.cache.cache import ClusterCache
from gpusched.daemon import Daemon
from gpusched.devcluster import (
    ClusterOptions,
    LocalCluster,
)
from gpusched.devcluster.cluster import write_kubeconfig
from gpusched.devcluster.demo import demo_pod, mixed_workload
from gpusched.devcluster.testkit import wait_until_allowed
from gpusched.framework.status import Status
from gpusched.kube import JSON, Kube, create_namespace, delete_namespace, pod_path
from gpusched.kube.watch import EventType, Reflector
from gpusched.model import keys
from gpusched.model.pod import PodInfo
from tests.integration.daemon_support import (
    IMMUTABLE,
    RBAC,
    SHORT_LEASE,
    annotate,
    apply_docs,
    create_pods,
    daemon_settings,
    denied,
    enforced,
    grant_pod_rights,
    impersonating,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    sa_token,
    started_cluster,
)
from tests.integration.fault_support import (
    SOAK,
    OffsetClock,
    PodWatch,
    TcpProxy,
    assert_invariants,
    invariant_violations,
    kubeconfig_via,
    pod_watch,
)

pytestmark = pytest.mark.integration

# The bursts of the restart and cut scenarios, and their pools (about half full).
BURST, POOL = (300, 80) if SOAK else (60, 16)
A100 = ((8, "A100M80", 96_000, 1_048_576, 8),)
# The private API server's --request-timeout: a Binding it has not applied by then never
# will be, so the daemon may call an unknown outcome "unbound" after it (settle_after; the
# default 60 s would only make the restart test wait longer).
REQUEST_TIMEOUT = 15
USER = "alice"


def _long_lease() -> dict[str, Any]:
    """daemon_settings with a renew deadline longer than a restart of kube-apiserver: with
    the default 10 s (or the tests' 2 s) the leader would give up the Lease and exit while
    the server is down, as kube-scheduler does; here it must ride the restart out."""
    settings = daemon_settings()
    settings["leaderElection"].update(
        leaseDurationSeconds=60, renewDeadlineSeconds=45, retryPeriodSeconds=1
    )
    return settings


# -- the private control plane -----------------------------------------------------------------


@pytest.fixture(scope="module")
def api_cluster() -> Iterator[LocalCluster]:
    options = ClusterOptions(
        kwok=False,
        kube_scheduler=False,
        controller_manager=False,
        apiserver_args=(f"--request-timeout={REQUEST_TIMEOUT}s",),
    )
    with started_cluster(options) as local:
        yield local


@pytest.fixture
async def api(api_cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with await Kube.connect(api_cluster.kubeconfig) as client:
        yield client


@pytest.fixture
async def ns(api: Kube, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    name = f"f-{pool_name()}"
    await create_namespace(api, name, wait_service_account=False)
    try:
        yield name
    finally:
        await delete_namespace(api, name)


# -- helpers -------------------------------------------------------------------------------------


def _decisions(stream: io.StringIO) -> list[JSON]:
    out = []
    for line in stream.getvalue().splitlines():
        rec = orjson.loads(line)
        if rec.get("event") == "decision":
            out.append(rec)
    return out


@asynccontextmanager
async def _behind_proxy(
    api_cluster: LocalCluster,
    api: Kube,
    ns: str,
    nodes: list[JSON],
    stream: io.StringIO,
    tmp_path: Path,
    settings: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[tuple[TcpProxy, PodWatch, Daemon]]:
    """The test's pod watch, its node pool, and a daemon whose watches (only) go through a
    TCP proxy the test can cut or stall; its writes go straight to the API server."""
    async with (
        TcpProxy(api_cluster.ports.apiserver) as proxy,
        pod_watch(api, ns) as watch,
        node_pool(api, nodes),
        running_daemon(
            api_cluster.kubeconfig,
            stream,
            settings,
            watch_kubeconfig=kubeconfig_via(api_cluster, proxy, tmp_path / "proxy.kubeconfig"),
            clock=clock,
        ) as daemon,
    ):
        yield proxy, watch, daemon


T = TypeVar("T")


def _on_event(watch: Reflector[T], want: Callable[[EventType, T], bool]) -> asyncio.Event:
    """Set once the daemon's watch (pods or nodes) has handed it an event matching `want`."""
    seen = asyncio.Event()
    inner = watch.handler

    def handler(kind: EventType, obj: T) -> None:
        inner(kind, obj)
        if want(kind, obj):
            seen.set()

    watch.handler = handler
    return seen


async def _within(event: asyncio.Event, what: str, timeout: float = 60) -> None:  # noqa: ASYNC109
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"not {what} within {timeout:.0f}s") from None


def _bound_count(count: int) -> Callable[[dict[str, JSON]], bool]:
    return lambda pods: sum(bool(p["spec"].get("nodeName")) for p in pods.values()) >= count


def _unschedulable(name: str) -> Callable[[dict[str, JSON]], bool]:
    def done(pods: dict[str, JSON]) -> bool:
        pod = pods.get(name)
        conditions = (pod or {}).get("status", {}).get("conditions") or []
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        )

    return done


def _cards(pod: JSON) -> set[int]:
    ids = (pod["metadata"].get("annotations") or {}).get(keys.GPU_IDS, "")
    return {int(c) for c in ids.split(",") if c}


def _charged_free(cache: ClusterCache, node: str) -> list[int]:
    """The cache's free milli per card of `node`."""
    snap = cache.snapshot
    row = snap.row_of(node)
    return [int(m) for m in snap.card_free_milli[row, : int(snap.node_card_count[row])]]


class _HeldBinds:
    """daemon.writer.bind wrapped: binds after the first `free` are held until `release`;
    every answer is recorded."""

    def __init__(self, daemon: Daemon, free: int = 0) -> None:
        self.inner = daemon.writer.bind
        self.free = free
        self.calls = 0
        self.entered = asyncio.Event()  # a bind is being held
        self.release = asyncio.Event()
        self.answers: list[tuple[str, str, Status]] = []  # (pod name, node, status)
        self.failed = asyncio.Event()  # a bind has failed
        daemon.writer.bind = self  # type: ignore[method-assign]

    async def __call__(
        self, pod: PodInfo, node: str, annotations: dict[str, str] | None = None
    ) -> Status:
        self.calls += 1
        if self.calls > self.free:
            self.entered.set()
            await self.release.wait()
        st = await self.inner(pod, node, annotations)
        self.answers.append((pod.name, node, st))
        if not st.is_success():
            self.failed.set()
        return st


# -- item 2: the API server and the watches ------------------------------------------------------


async def test_apiserver_restarted_mid_burst(api_cluster: LocalCluster, api: Kube, ns: str) -> None:
    """kube-apiserver stopped (SIGTERM) with bindings held in flight, which are then sent to
    the stopped server, and started again on its port while the burst goes on."""
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, POOL)]
    names_nodes = [n["metadata"]["name"] for n in nodes]
    pods = mixed_workload(BURST, seed=21, impossible=False, **placement(pool))
    names = [p["metadata"]["name"] for p in pods]
    stream = io.StringIO()
    async with (
        pod_watch(api, ns) as watch,
        node_pool(api, nodes),
        running_daemon(api_cluster.kubeconfig, stream, _long_lease()) as daemon,
    ):
        daemon.schedule_one.settle_after = REQUEST_TIMEOUT
        held = _HeldBinds(daemon, free=BURST // 3)
        watches_before = daemon.pod_watch.stats.watches + daemon.pod_watch.stats.lists
        await create_pods(api, ns, pods)
        await _within(held.entered, "a third of the binds done")
        await asyncio.to_thread(api_cluster.stop_apiserver)
        held.release.set()  # the held binds (and those after) meet a stopped API server
        assert not held.failed.is_set()
        # A Binding fails against the stopped server: the fault is mid-burst for sure.
        await _within(held.failed, "a bind failed against the stopped API server")
        api_cluster.start_apiserver(wait=False)  # on this thread: see restart_apiserver
        await asyncio.to_thread(api_cluster.wait_apiserver)
        await watch.until_bound(names, timeout=150 + BURST)
        assert daemon.pod_watch.stats.watches + daemon.pod_watch.stats.lists > watches_before
        failures = [st for _, _, st in held.answers if not st.is_success()]
        assert failures, "no Binding met the stopped API server"
        # Refused connections sent nothing: retried at once, not held as unknown outcomes.
        assert any("not sent, will retry" in st.message() for st in failures), failures[0]
        await assert_invariants(api, ns, names_nodes, watch, names)
        assert daemon.cache.stats.over_allocated == 0
    records = [r for r in _decisions(stream) if r["result"] == "bound"]
    assert {r["pod"] for r in records} == {f"{ns}/{n}" for n in names}


async def test_watch_streams_cut_mid_burst(
    api_cluster: LocalCluster, api: Kube, ns: str, tmp_path: Path
) -> None:
    """The daemon's node and pod watch connections reset (RST) twice in a burst; pods are
    created and deleted while the streams are down. The watches resume from their last
    version and miss nothing: every pod is placed once, deletions are seen."""
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, POOL)]
    pods = mixed_workload(BURST, seed=22, impossible=False, **placement(pool))
    third = BURST // 3
    waves = [pods[:third], pods[third : 2 * third], pods[2 * third :]]
    names = [p["metadata"]["name"] for p in pods]
    stream = io.StringIO()
    async with _behind_proxy(api_cluster, api, ns, nodes, stream, tmp_path) as (
        proxy,
        watch,
        daemon,
    ):
        await proxy.until_flowing(2)
        await create_pods(api, ns, waves[0])
        await watch.until(_bound_count(third // 2), "half the first wave bound")
        assert proxy.cut() >= 2  # both watch streams
        await create_pods(api, ns, waves[1])  # while the watches are down
        await proxy.until_flowing(2)
        await watch.until(_bound_count(third + third // 2), "half the second wave bound")
        assert proxy.cut() >= 2
        gone = sorted(watch.bound(names[:third]))[:5]
        gone_uids = {watch.pods[n]["metadata"]["uid"] for n in gone}
        for name in gone:
            await api.delete(pod_path(ns, name), query=[("gracePeriodSeconds", "0")])
        await create_pods(api, ns, waves[2])
        left = [n for n in names if n not in gone]
        await watch.until_bound(left, timeout=120 + BURST)
        assert daemon.pod_watch.stats.errors + daemon.pod_watch.stats.watches >= 3
        # The deletions made while the stream was down reached the cache (the watch
        # delivers them before the later pods' events, and every later pod is bound).
        assert not gone_uids & set(daemon.cache.pods)
        assert daemon.cache.stats.over_allocated == 0
        await assert_invariants(api, ns, [n["metadata"]["name"] for n in nodes], watch, left)
    bound = [r["pod"] for r in _decisions(stream) if r["result"] == "bound"]
    assert len(bound) == len(set(bound)) == len(names)  # each pod placed exactly once


async def _etcd(api_cluster: LocalCluster, call: str, body: JSON) -> JSON:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{api_cluster.etcd_url}/v3/kv/{call}", json=body) as response,
    ):
        response.raise_for_status()
        answer: JSON = await response.json()
        return answer


async def test_gone_after_etcd_compaction(
    api_cluster: LocalCluster, api: Kube, ns: str, tmp_path: Path
) -> None:
    """410 Gone, for real: the pod watch is frozen (a half-open stream) while pods are
    deleted and created, etcd is compacted past the daemon's resourceVersion, then the
    stream is reset. Resuming from that version is refused with 410; the daemon re-lists,
    sees the deletions it missed (synthetic DELETED: the cards come back) and the new pods.

    kube-apiserver serves watches from its watch cache, which keeps recent events whatever
    etcd compacts; for the pods of this test it runs with the cache off
    (--watch-cache-sizes=pods#0), so the watch reads etcd and meets the compaction."""
    no_cache = (f"--request-timeout={REQUEST_TIMEOUT}s", "--watch-cache-sizes=pods#0")
    await asyncio.to_thread(api_cluster.stop_apiserver)
    api_cluster.start_apiserver(no_cache, wait=False)
    await asyncio.to_thread(api_cluster.wait_apiserver)
    pool = pool_name()
    specs = pool_specs(pool, 4, shapes=A100)  # 32 cards
    nodes = [pool_node(s, pool) for s in specs]
    first = [demo_pod(f"first-{i}", gpus=2, **placement(pool)) for i in range(10)]
    second = [demo_pod(f"second-{i}", gpus=2, **placement(pool)) for i in range(10)]
    stream = io.StringIO()
    try:
        async with _behind_proxy(api_cluster, api, ns, nodes, stream, tmp_path) as (
            proxy,
            watch,
            daemon,
        ):
            await create_pods(api, ns, first)
            await watch.until(_bound_count(10), "the first 10 pods bound")

            # Every placement confirmed by the daemon's own watch before it is stalled
            # (judged after each event the watch hands over, so none is missed).
            def confirmed(*_: object) -> bool:
                return all(not e.assumed for e in daemon.cache.pods.values())

            seen = _on_event(daemon.pod_watch, confirmed)
            if not confirmed():
                await _within(seen, "the daemon saw its pods bound")
            await proxy.until_flowing(2)
            assert proxy.stall() >= 2
            version = daemon.pod_watch.resource_version
            gone_before = daemon.pod_watch.stats.gone
            # 20 cards are held; 12 free. Delete 5 pods (10 cards): 22 free, which the
            # second wave (20 cards) needs: it fits only if the daemon sees the deletions.
            deleted = [f"first-{i}" for i in range(5)]
            for name in deleted:
                await api.delete(pod_path(ns, name), query=[("gracePeriodSeconds", "0")])
            await create_pods(api, ns, second)
            revision = int(
                (await _etcd(api_cluster, "range", {"key": "AA=="}))["header"]["revision"]
            )
            assert revision > int(version)
            await _etcd(api_cluster, "compaction", {"revision": revision, "physical": True})
            assert proxy.cut() >= 2
            wanted = [f"first-{i}" for i in range(5, 10)] + [p["metadata"]["name"] for p in second]
            await watch.until_bound(wanted)
            assert daemon.pod_watch.stats.gone > gone_before, "no 410 Gone met"
            assert daemon.cache.stats.over_allocated == 0
            await assert_invariants(api, ns, [s.name for s in specs], watch, wanted)
    finally:
        await asyncio.to_thread(api_cluster.stop_apiserver)
        api_cluster.start_apiserver((f"--request-timeout={REQUEST_TIMEOUT}s",), wait=False)
        await asyncio.to_thread(api_cluster.wait_apiserver)


async def test_silent_watch_never_expires_a_bound_pod(
    api_cluster: LocalCluster, api: Kube, ns: str, tmp_path: Path
) -> None:
    """A pod watch that goes silent (frozen half-open stream) right as a Binding succeeds:
    the pod is bound in the API but the daemon's watch cannot confirm it. The pre-fix daemon
    freed its cards 30 s after the Binding and placed the stale unbound copy again,
    double-booking the cards. Now it keeps the pod assumed however long the silence.

    In CI the daemon's clock jumps 301 s (past the old 30 s expiry and the 300 s flush that
    retries the pod waiting for those cards); with GPUSCHED_SOAK=1 the silence is real: the
    watch read timeout is 45 s, so the stream stays frozen that long before it reconnects."""
    pool = pool_name()
    spec = pool_specs(pool, 1, shapes=A100)[0]
    clock = OffsetClock()
    settings = daemon_settings(timing=SHORT_LEASE)
    if SOAK:
        settings["watch"] = {"timeoutSeconds": 40, "readTimeoutSeconds": 45}
    stream = io.StringIO()
    where = placement(pool)
    nodes = [pool_node(spec, pool)]
    async with _behind_proxy(api_cluster, api, ns, nodes, stream, tmp_path, settings, clock) as (
        proxy,
        watch,
        daemon,
    ):
        held = _HeldBinds(daemon)
        await proxy.until_flowing(2)
        holder = await api.post(pod_path(ns), demo_pod("holder", gpus=8, **where))
        uid = holder["metadata"]["uid"]
        await _within(held.entered, "the holder's bind started")
        # A pod that wants the same 8 cards, seen and parked while the holder is assumed.
        await api.post(pod_path(ns), demo_pod("waiter", gpus=8, **where))
        await watch.until(_unschedulable("waiter"), "the waiter reported unschedulable")
        assert proxy.stall() >= 2  # the watches go silent...
        held.release.set()  # ...and the Binding lands
        await watch.until_bound(["holder"])
        confirmed = _on_event(
            daemon.pod_watch, lambda kind, pod: pod.uid == uid and bool(pod.node_name)
        )
        retried = asyncio.Event()
        reattempted = daemon.schedule_one.attempts
        if SOAK:
            # The silence ends only when the read timeout (45 s > 30 s) drops the stream.
            await _within(confirmed, "the holder confirmed after the read timeout", 120)
        else:
            tick = daemon._tick

            def ticked() -> None:
                tick()
                if daemon.schedule_one.attempts > reattempted:
                    retried.set()

            daemon._tick = ticked  # type: ignore[method-assign]
            clock.offset += 301.0
            # The 300 s flush retries the waiter; the holder still holds all 8 cards.
            await _within(retried, "the waiter retried after the clock jump")
            assert [r["result"] for r in _decisions(stream) if r["uid"] == uid] == ["bound"]
            assert not confirmed.is_set()
            entry = daemon.cache.get(uid)
            assert entry is not None and entry.assumed and entry.node == spec.name
            assert _charged_free(daemon.cache, spec.name) == [0] * 8
            proxy.cut()  # the silence ends: the watch resumes and confirms the holder
            await _within(confirmed, "the holder confirmed")
        entry = daemon.cache.get(uid)
        assert entry is not None and not entry.assumed and entry.node == spec.name
        # Placed once, never again; the waiter never got the holder's cards.
        assert [r["result"] for r in _decisions(stream) if r["uid"] == uid] == ["bound"]
        assert not watch.bound(["waiter"])
        # The cards come back with the holder's deletion, and the waiter takes them.
        await api.delete(pod_path(ns, "holder"), query=[("gracePeriodSeconds", "0")])
        await watch.until_bound(["waiter"])
        await assert_invariants(api, ns, [spec.name], watch, ["waiter"])


# -- item 3: other writers racing the daemon's binding ---------------------------------------


async def test_another_scheduler_binds_the_pod_first(
    api_cluster: LocalCluster, api: Kube, ns: str
) -> None:
    """While the daemon's Binding is held, another scheduler (the test, as cluster admin)
    binds the pod to the other node. The daemon's Binding gets 409; it forgets its
    placement, and the cache charges the pod where the API says: the chosen node's cards
    are free for the next pod, the other node's are not."""
    pool = pool_name()
    specs = pool_specs(pool, 2, shapes=A100)
    stream = io.StringIO()
    where = placement(pool)
    async with (
        pod_watch(api, ns) as watch,
        node_pool(api, [pool_node(s, pool) for s in specs]),
        running_daemon(api_cluster.kubeconfig, stream) as daemon,
    ):
        held = _HeldBinds(daemon)
        created = await api.post(pod_path(ns), demo_pod("contested", gpus=8, **where))
        uid = created["metadata"]["uid"]
        await _within(held.entered, "the daemon's bind started")
        chosen = daemon.cache.get(uid)
        assert chosen is not None and chosen.assumed
        other = next(s.name for s in specs if s.name != chosen.node)
        elsewhere = _on_event(
            daemon.pod_watch, lambda kind, pod: pod.uid == uid and pod.node_name == other
        )
        await api.post(
            f"{pod_path(ns, 'contested')}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "contested", "uid": uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": other},
            },
        )
        held.release.set()
        await _within(held.failed, "the daemon's Binding answered")
        ((name, node, status),) = held.answers
        assert (name, node) == ("contested", chosen.node)
        assert "conflict (409" in status.message(), status
        await _within(elsewhere, "the daemon saw the pod on the other node")
        entry = daemon.cache.get(uid)
        assert entry is not None and not entry.assumed and entry.node == other
        assert _charged_free(daemon.cache, chosen.node) == [1000] * 8
        assert _charged_free(daemon.cache, other) == [0] * 8  # inferred: all 8 cards
        await create_pods(api, ns, [demo_pod(n, gpus=8, **where) for n in ("next", "no-room")])
        await watch.until(
            lambda pods: (
                (bool(watch.bound(["next"])) and _unschedulable("no-room")(pods))
                or (bool(watch.bound(["no-room"])) and _unschedulable("next")(pods))
            ),
            "one of the next pods bound, the other unschedulable",
        )
        bound = watch.bound(["next", "no-room"])
        assert list(bound.values()) == [chosen.node], bound
        await assert_invariants(api, ns, [s.name for s in specs], watch, ["contested", *bound])
    records = [r for r in _decisions(stream) if r["uid"] == uid]
    assert [r["result"] for r in records] == ["dropped"]


async def test_node_deleted_mid_bind_reschedules_elsewhere(
    api_cluster: LocalCluster, api: Kube, ns: str
) -> None:
    """The chosen node is deleted while the pod's binding cycle is in PreBind. The daemon
    does not post a Binding to a node that is gone (the API server would accept it: a pod
    bound to no node, holding nothing, never running); it undoes the placement and places
    the pod on the other node. Nothing leaks: the gone node's row and charge are gone."""
    pool = pool_name()
    specs = pool_specs(pool, 2, shapes=A100)
    stream = io.StringIO()
    where = placement(pool)
    async with (
        pod_watch(api, ns) as watch,
        node_pool(api, [pool_node(s, pool) for s in specs]),
        running_daemon(api_cluster.kubeconfig, stream) as daemon,
    ):
        fw = daemon.frameworks[keys.SCHEDULER_NAME]
        pre_bind = fw.run_pre_bind
        entered, release = asyncio.Event(), asyncio.Event()

        async def held_pre_bind(state: Any, pod: PodInfo, node: str) -> Status:
            if not entered.is_set():
                entered.set()
                await release.wait()
            return await pre_bind(state, pod, node)

        fw.run_pre_bind = held_pre_bind  # type: ignore[method-assign]
        created = await api.post(pod_path(ns), demo_pod("orphan", gpus=8, **where))
        uid = created["metadata"]["uid"]
        await _within(entered, "the binding cycle in PreBind")
        entry = daemon.cache.get(uid)
        assert entry is not None
        doomed = entry.node
        other = next(s.name for s in specs if s.name != doomed)
        node_gone = _on_event(
            daemon.node_watch, lambda kind, node: kind is EventType.DELETED and node.name == doomed
        )
        await api.delete(f"/api/v1/nodes/{doomed}")
        await _within(node_gone, "the daemon saw the node deleted")
        release.set()
        await watch.until_bound(["orphan"])
        assert watch.pods["orphan"]["spec"]["nodeName"] == other
        assert daemon.cache.snapshot.row_of(doomed) < 0
        assert daemon.cache.stats.over_allocated == 0
        await assert_invariants(api, ns, [s.name for s in specs], watch, ["orphan"])
    results = [r["result"] for r in _decisions(stream) if r["uid"] == uid]
    assert results == ["bind_failed", "bound"], results
    failed = next(r for r in _decisions(stream) if r["uid"] == uid)
    assert doomed in failed["message"] and "no longer exists" in failed["message"]


# -- item 4: a tenant edits the card assignment of a running pod ------------------------------


async def _tenant(api: Kube, ns: str) -> None:
    await grant_pod_rights(
        api, ns, {"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"}, USER
    )


async def test_tenant_edits_the_assignment_without_the_policy(
    api_cluster: LocalCluster, api: Kube, ns: str
) -> None:
    """With no admission policy, the pod's owner moves its gpu-ids to other cards. The
    cards the pod really holds (the Binding's) stay charged, the cards it now names are
    charged too, each whole, and a Warning Event GPUAssignmentInvalid says so: the next
    pods get neither."""
    pool = pool_name()
    spec = pool_specs(pool, 1, shapes=A100)[0]
    stream = io.StringIO()
    where = placement(pool)
    await _tenant(api, ns)
    async with (
        pod_watch(api, ns) as watch,
        node_pool(api, [pool_node(spec, pool)]),
        running_daemon(api_cluster.kubeconfig, stream) as daemon,
        impersonating(api_cluster.kubeconfig, USER) as tenant,
    ):
        await tenant.post(pod_path(ns), demo_pod("victim", gpus=2, **where))
        await watch.until_bound(["victim"])
        bound = watch.pods["victim"]
        real = _cards(bound)
        assert len(real) == 2
        forged = sorted(set(range(8)) - real)[-2:]
        warned = asyncio.Event()
        inner = daemon.cache.pod_warning

        def pod_warning(pod: PodInfo, message: str) -> None:
            inner(pod, message)
            if pod.name == "victim":
                warned.set()

        daemon.cache.pod_warning = pod_warning
        await tenant.merge_patch(
            pod_path(ns, "victim"), annotate({keys.GPU_IDS: ",".join(map(str, forged))})
        )
        await _within(warned, "the daemon charged the edited pod conservatively")
        charged = set(real) | set(forged)
        free = _charged_free(daemon.cache, spec.name)
        assert {c for c in range(8) if free[c] == 0} == charged
        # The Warning Event on the pod, from the scheduler.
        await _watch_event(api, ns, "victim", "GPUAssignmentInvalid")
        # One after the other: created together, the 1-card pod may be placed first and
        # leave the 4-card pod no room, which says nothing about the forged cards.
        await create_pods(api, ns, [demo_pod("four", gpus=4, **where)])
        await watch.until_bound(["four"])
        await create_pods(api, ns, [demo_pod("more", gpus=1, **where)])
        await watch.until(
            _unschedulable("more"), "the 1-card pod left unschedulable (no card is free)"
        )
        four = _cards(watch.pods["four"])
        assert not four & charged, (four, charged)
        # The checker flags the tenant's edit (a bound pod's cards changed) and nothing else;
        # judged with the cards the pod really holds, every invariant holds.
        violations = await invariant_violations(
            api, ns, [spec.name], watch, ["victim", "four"], replace={"victim": bound}
        )
        assert len(violations) == 1 and "victim" in violations[0], violations
        assert "later shows" in violations[0]


async def _watch_event(api: Kube, ns: str, name: str, reason: str) -> JSON:
    """The Event of `reason` on pod `name`, waiting for it by watching."""
    path = f"/api/v1/namespaces/{ns}/events"
    query = [("fieldSelector", f"involvedObject.name={name},reason={reason}")]

    async def find() -> JSON:
        listing = await api.get(path, query=query)
        if listing.get("items"):
            return dict(listing["items"][0])
        events = api.watch(
            path, resource_version=listing["metadata"]["resourceVersion"], query=query
        )
        async with aclosing(events):
            async for event in events:
                if event.type in ("ADDED", "MODIFIED"):
                    return event.object
        raise AssertionError(f"the watch of {reason} Events on {name} ended")

    event = await asyncio.wait_for(find(), 60)
    assert event["type"] == "Warning" and event.get("reportingComponent") == "gpusched", event
    return event


async def test_tenant_edit_denied_by_the_policy(
    api_cluster: LocalCluster, api: Kube, ns: str, tmp_path: Path
) -> None:
    """The shipped admission policies on, the daemon as its ServiceAccount (the only
    identity whose Bindings may carry an assignment): the pod is placed, the tenant's edit
    is denied, the pod keeps its cards, no warning, and every invariant holds."""
    await apply_docs(api, list(yaml.safe_load_all(RBAC.read_text())))
    account = "system:serviceaccount:kube-system:gpusched"
    await wait_until_allowed(api, account, "create", "pods", subresource="binding", namespace=ns)
    for verb, name in (("create", ""), ("update", "gpusched")):
        await wait_until_allowed(
            api,
            account,
            verb,
            "leases",
            group="coordination.k8s.io",
            namespace="kube-system",
            name=name,
        )
    kubeconfig = tmp_path / "gpusched.kubeconfig"
    token = await sa_token(api, "kube-system", "gpusched")
    write_kubeconfig(kubeconfig, api_cluster.server, api_cluster.ca_file, token, "gpusched")
    await _tenant(api, ns)
    pool = pool_name()
    spec = pool_specs(pool, 1, shapes=A100)[0]
    stream = io.StringIO()
    where = placement(pool)
    async with (
        enforced(api, ns),
        pod_watch(api, ns) as watch,
        node_pool(api, [pool_node(spec, pool)]),
        running_daemon(kubeconfig, stream, daemon_settings("gpusched")) as daemon,
        impersonating(api_cluster.kubeconfig, USER) as tenant,
    ):
        warnings: list[str] = []
        inner = daemon.cache.pod_warning

        def pod_warning(pod: PodInfo, message: str) -> None:
            inner(pod, message)
            warnings.append(message)

        daemon.cache.pod_warning = pod_warning
        await tenant.post(pod_path(ns), demo_pod("victim", gpus=2, **where))
        await watch.until_bound(["victim"])
        before = watch.pods["victim"]
        real = _cards(before)
        forged = sorted(set(range(8)) - real)[-2:]
        await denied(
            tenant.merge_patch(
                pod_path(ns, "victim"), annotate({keys.GPU_IDS: ",".join(map(str, forged))})
            ),
            IMMUTABLE,
        )
        after = await api.get(pod_path(ns, "victim"))
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        await create_pods(api, ns, [demo_pod("six", gpus=6, **where)])
        await watch.until_bound(["six"])
        assert not _cards(watch.pods["six"]) & real
        assert warnings == []
        await assert_invariants(api, ns, [spec.name], watch, ["victim", "six"])
