"""`explain` from the daemon's state: the read-only endpoint and the offline run.

    GET /explain/{namespace}/{pod}     on the metrics port of `gpusched run --explain-endpoint`
      (off by default: it tells whoever reaches the port which pods exist, where they run
      and on which cards, and each search costs CPU the scheduling loop shares)
      the pod is looked up in the daemon's pod watch first (404, 409, 422 cost nothing);
      then facts_of(daemon) copies, on the event loop without an await (one instant, as a
      scheduling cycle sees it), everything the search reads: the nodes and pods of its
      watches, its assumed pods with their cards, namespace labels, telemetry readings,
      quotas, PodGroups, the volume, DRA and PodDisruptionBudget views (read-only frozen
      copies: the live views cache what their reads derive and must only be read on the
      event loop) and the history of the plugins that keep some (StatefulPlugin: Thermal's
      latch, GangScheduling's reservation). The Explainer then runs on that copy in a
      daemon thread: one search at a time (a second request gets 429 with Retry-After),
      cut short at SEARCH_SECONDS (the answer says so and lists what it verified by then),
      stopped when the request is cancelled or the daemon exits (nothing waits for it)
    explain_offline(...)              `gpusched explain NS/POD` without --endpoint
      the same Daemon object the scheduler runs, built from the same configuration, with
      only its watches started (no leader election, no scheduling loop, no writes): once
      they have listed the cluster (and telemetry was read once), facts_of and the same
      Explainer

Both answer the same JSON (gpusched/explain/engine.py Explanation.to_json), or an error
object {"error": ..., "reason": ...} with an HTTP status: 404 the pod does not exist, 409 it
is already bound (where, and its card assignment) or being bound, 422 it is not for this
scheduler; the endpoint also 503 before the watches synced, 429 while another search runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web

from gpusched.config import SchedulerConfig
from gpusched.daemon.daemon import Daemon, DaemonOptions
from gpusched.explain import Explainer, Facts, plugin_states, readings_of
from gpusched.framework.disruption import NO_DISRUPTION
from gpusched.framework.dra import NO_DRA
from gpusched.framework.gangs import PodGroupSpec, StaticGangs
from gpusched.framework.interfaces import Allocation
from gpusched.framework.registry import Registry
from gpusched.framework.tenancy import StaticTenancy
from gpusched.framework.volumes import NO_VOLUMES
from gpusched.kube.client import ApiError, Kube
from gpusched.kube.ops import pod_path
from gpusched.model import keys
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.observability.logging import make_logger

ROUTE = "/explain/{namespace}/{pod}"
# Wall-clock seconds a search may take from the copy on (the dry cycles' budget is
# Explainer.max_trials): a search past it stops and answers what it verified so far.
SEARCH_SECONDS = 20.0
Answer = tuple[int, dict[str, Any]]
T = TypeVar("T")


def facts_of(daemon: Daemon) -> Facts:
    """The daemon's state at this instant (no await inside: nothing changes under it).
    Everything the worker thread reads is a copy: the ports' live views are copied here
    (`frozen`), never read from the worker."""
    pods = [pod for _, pod in daemon.pod_watch.store.values()]
    namespaces = {ns: dict(labels) for ns, labels in daemon.cache.namespaces.items()}
    tenancy = daemon.handle.tenancy
    tenants = {ns: tenancy.tenant_of(ns) for ns in {*namespaces, *(p.namespace for p in pods)}}
    groups: list[PodGroupSpec] = []
    seen: set[tuple[Any, str]] = set()
    for pod in pods:
        g = pod.gang
        if g is not None and (g.api, g.name) not in seen:
            seen.add((g.api, g.name))
            spec = daemon.handle.gangs.pod_group(g.api, g.name)
            if spec is not None:
                groups.append(spec)
    return Facts(
        config=daemon.config,
        profiles={name: fw.profile for name, fw in daemon.frameworks.items()},
        nodes=list(daemon.events.nodes.values()),
        pods=pods,
        assumed=[
            (e.pod, e.alloc)
            for e in daemon.cache.allocations()
            if e.assumed and e.alloc is not None
        ],
        namespaces=namespaces,
        readings=readings_of(daemon.cache.snapshot),
        gangs=StaticGangs(groups),
        tenancy=StaticTenancy(tenancy.quotas(), tenants),
        volumes=daemon.volumes.frozen() if daemon.volumes is not None else NO_VOLUMES,
        dra=daemon.dra.frozen() if daemon.dra is not None else NO_DRA,
        disruption=daemon.disruption.frozen() if daemon.disruption is not None else NO_DISRUPTION,
        plugin_states=plugin_states(daemon.frameworks),
        now=daemon.clock(),
        wall=time.time(),
    )


def refuse(pod: PodInfo | None, key: str, profiles: Any) -> Answer | None:
    """The error answer for a pod explain cannot explain; None if it can."""
    if pod is None:
        return 404, {"error": f"pod {key} not found", "reason": "NotFound"}
    if pod.node_name:
        where = pod.node_name
        ann = pod.annotations
        cards = ann.get(keys.GPU_IDS)
        share = ann.get(keys.GPU_MILLI_ASSIGNED)
        how = ""
        if cards is not None:
            how = f" on cards {cards}" + (f" ({share} milli-GPU of the card)" if share else "")
        by = pod.scheduler_name
        return 409, {
            "error": f"pod {key} is not pending: it is bound to node {where}{how}"
            f" (schedulerName {by}; {keys.GPU_IDS}: {cards or 'none'})",
            "reason": "AlreadyBound",
            "node": where,
            "cards": cards,
        }
    if pod.scheduler_name not in profiles:
        return 422, {
            "error": f"pod {key} is for scheduler {pod.scheduler_name!r}, not this one"
            f" (profiles: {', '.join(sorted(profiles))}); set spec.schedulerName to one of them",
            "reason": "NotOurs",
        }
    if pod.deleting:
        return 409, {"error": f"pod {key} is being deleted", "reason": "Deleting"}
    return None


def being_bound(key: str, alloc: Allocation) -> Answer:
    """The answer for a pod the scheduler placed and is binding (or holding at Permit)."""
    cards = ",".join(map(str, alloc.cards))
    return 409, {
        "error": f"pod {key} is not pending: the scheduler placed it on node"
        f" {alloc.node}{f' (cards {cards})' if cards else ''} and is binding it"
        " (or waiting at Permit for its gang)",
        "reason": "BeingBound",
        "node": alloc.node,
        "cards": cards or None,
    }


def refuse_live(daemon: Daemon, namespace: str, name: str) -> Answer | None:
    """`refuse` and `being_bound` on the daemon's own state, before anything is copied."""
    key = f"{namespace}/{name}"
    pod = next(
        (
            p
            for _, p in daemon.pod_watch.store.values()
            if p.name == name and p.namespace == namespace
        ),
        None,
    )
    problem = refuse(pod, key, daemon.frameworks)
    if problem is not None or pod is None:
        return problem
    entry = daemon.cache.get(pod.uid)
    if entry is not None and entry.assumed and entry.alloc is not None:
        return being_bound(key, entry.alloc)
    return None


def _find(facts: Facts, namespace: str, name: str) -> PodInfo | None:
    for pod in facts.pods:
        if pod.namespace == namespace and pod.name == name:
            return pod
    return None


def compute(
    facts: Facts,
    registry: Registry,
    namespace: str,
    name: str,
    *,
    deadline: float | None = None,
    stop: Callable[[], bool] | None = None,
) -> Answer:
    """The explanation of one pod against `facts` (CPU work: run it off the event loop).
    `deadline` (time.monotonic) and `stop` cut the search short (Explainer)."""
    key = f"{namespace}/{name}"
    pod = _find(facts, namespace, name)
    problem = refuse(pod, key, facts.profiles)
    if problem is not None:
        return problem
    assert pod is not None
    for placed, alloc in facts.assumed:
        if placed.uid == pod.uid:
            return being_bound(key, alloc)
    ex = Explainer(facts, registry, deadline=deadline, stop=stop)
    return 200, ex.explain(pod).to_json()


async def in_daemon_thread(
    work: Callable[[Callable[[], bool]], T],
    *,
    name: str,
    done: Callable[[], None] = lambda: None,
) -> T:
    """`work(stopped)` in a daemon thread; its result (or exception) awaited here.

    Not asyncio.to_thread: the default executor's threads are joined when the loop
    closes, so a daemon that lost its Lease would wait for a long search before exiting.
    Cancelling the await (the client went away, the server shuts down) makes `stopped()`
    true, which the search checks between dry cycles. `done` runs on the loop when the
    thread ends, however it ends (returned, raised, stopped)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()
    cancelled = threading.Event()

    def finish(ok: bool, value: Any) -> None:
        done()
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def run() -> None:
        outcome: tuple[bool, Any]
        try:
            outcome = (True, work(cancelled.is_set))
        except Exception as exc:  # handed to the awaiting coroutine
            outcome = (False, exc)
        # RuntimeError: the loop is closed (the daemon exited): nobody waits for the answer.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(finish, *outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        return await fut
    finally:
        cancelled.set()  # a no-op once the thread is done


class ExplainEndpoint:
    """GET ROUTE for one daemon (the module docstring): the handler, and `close` for the
    daemon's exit (a running search stops at its next dry cycle)."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        search_seconds: float = SEARCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.daemon = daemon
        self.search_seconds = search_seconds
        self.clock = clock
        # When the search in progress started (None: none runs). Set and read only on the
        # event loop; cleared when its thread ends, not when its request does.
        self.busy_since: float | None = None
        self.closing = threading.Event()

    def routes(self) -> list[web.RouteDef]:
        return [web.get(ROUTE, self.handle)]

    def close(self) -> None:
        self.closing.set()

    async def handle(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["pod"]
        daemon = self.daemon
        if not daemon.is_ready:
            return _json(
                503,
                {"error": "the scheduler has not synced its watches yet", "reason": "NotReady"},
            )
        if self.busy_since is not None:
            # One search at a time, and no queue: each is up to SEARCH_SECONDS of CPU the
            # scheduling loop shares (the GIL), and the metrics port is not a batch API.
            left = self.busy_since + self.search_seconds - self.clock()
            retry = max(1, math.ceil(left))
            return _json(
                429,
                {
                    "error": "another explanation is being computed (one at a time);"
                    f" retry in {retry} s",
                    "reason": "Busy",
                },
                {"Retry-After": str(retry)},
            )
        problem = refuse_live(daemon, namespace, name)
        if problem is not None:
            return _json(*problem)
        self.busy_since = self.clock()
        started = False
        try:
            facts = facts_of(daemon)
            deadline = self.clock() + self.search_seconds
            closing = self.closing

            def work(cancelled: Callable[[], bool]) -> Answer:
                return compute(
                    facts,
                    daemon.registry,
                    namespace,
                    name,
                    deadline=deadline,
                    stop=lambda: cancelled() or closing.is_set(),
                )

            started = True
            status, body = await in_daemon_thread(
                work, name=f"explain {namespace}/{name}", done=self._done
            )
        finally:
            if not started:
                self.busy_since = None
        return _json(status, body)

    def _done(self) -> None:
        self.busy_since = None


def _json(
    status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


async def explain_offline(
    kube: Kube, config: SchedulerConfig, registry: Registry, namespace: str, name: str
) -> Answer:
    """The daemon's watches only (see the module docstring), then compute."""
    key = f"{namespace}/{name}"
    try:
        raw = await kube.get(pod_path(namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return 404, {"error": f"pod {key} not found", "reason": "NotFound"}
        raise
    pod = pod_from_k8s(raw)
    profiles = {p.scheduler_name for p in config.profiles}
    if pod.terminal:
        return 409, {"error": f"pod {key} has finished ({pod.phase})", "reason": "Finished"}
    problem = refuse(pod, key, profiles)
    if problem is not None:
        return problem
    daemon = Daemon(
        kube,
        config,
        registry,
        make_logger(io.StringIO(), "error"),
        options=DaemonOptions(warm_up=False, leader_elect=False),
    )
    watches: list[Awaitable[None]] = [
        daemon.node_watch.run(),
        daemon.pod_watch.run(),
        daemon.namespace_watch.run(),
        daemon.quotas.run(),
    ]
    synced: list[Awaitable[Any]] = [
        daemon.node_watch.synced.wait(),
        daemon.pod_watch.synced.wait(),
        daemon.namespace_watch.synced.wait(),
        daemon.quotas.wait_synced(),
    ]
    if daemon.pod_groups is not None:
        watches.append(daemon.pod_groups.run())
        synced.append(daemon.pod_groups.wait_synced())
    if daemon.volumes is not None:
        watches += [r.run() for r in daemon.volumes.reflectors]
        synced.append(daemon.volumes.wait_synced())
    if daemon.dra is not None:
        watches.append(daemon.dra.run())
        synced.append(daemon.dra.wait_synced())
    if daemon.disruption is not None:
        watches.append(daemon.disruption.run())
        synced.append(daemon.disruption.wait_synced())
    tasks = [asyncio.ensure_future(w) for w in watches]
    try:
        await asyncio.wait_for(asyncio.gather(*synced), timeout=60)
        if daemon.telemetry is not None:
            await daemon.telemetry.refresh()  # the readings the daemon would hold
        facts = facts_of(daemon)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return await asyncio.to_thread(compute, facts, registry, namespace, name)
