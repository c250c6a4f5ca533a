"""`explain` from the daemon's state: the read-only endpoint and the offline run.

    GET /explain/{namespace}/{pod}     on the metrics port of `gpusched run` (main.py)
      facts_of(daemon): the nodes and pods of its watches, its assumed pods with their
      cards, namespace labels, telemetry readings, quotas and PodGroups, copied on the
      event loop without an await (one instant, as a scheduling cycle sees it); then the
      Explainer runs in a worker thread on that private copy, so a long search neither
      blocks the scheduling loop nor sees the live snapshot change under it
    explain_offline(...)              `gpusched explain NS/POD` without --endpoint
      the same Daemon object the scheduler runs, built from the same configuration, with
      only its watches started (no leader election, no scheduling loop, no writes): once
      they have listed the cluster (and telemetry was read once), facts_of and the same
      Explainer

Both answer the same JSON (gpusched/explain/engine.py Explanation.to_json), or an error
object {"error": ..., "reason": ...} with an HTTP status: 404 the pod does not exist, 409 it
is already bound (where, and its card assignment) or being bound, 422 it is not for this
scheduler.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gpusched.config import SchedulerConfig
from gpusched.daemon.daemon import Daemon, DaemonOptions
from gpusched.explain import Explainer, Facts, readings_of
from gpusched.framework.gangs import PodGroupSpec, StaticGangs
from gpusched.framework.registry import Registry
from gpusched.framework.tenancy import StaticTenancy
from gpusched.kube.client import ApiError, Kube
from gpusched.kube.ops import pod_path
from gpusched.model import keys
from gpusched.model.pod import PodInfo, pod_from_k8s
from gpusched.observability.logging import make_logger

ROUTE = "/explain/{namespace}/{pod}"
Answer = tuple[int, dict[str, Any]]


def facts_of(daemon: Daemon) -> Facts:
    """The daemon's state at this instant (no await inside: nothing changes under it)."""
    pods = [pod for _, pod in daemon.pod_watch.store.values()]
    namespaces = {ns: dict(labels) for ns, labels in daemon.cache.namespaces.items()}
    tenancy = daemon.handle.tenancy
    # The ports are copied too: the explainer reads them from a worker thread.
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
        volumes=daemon.handle.volumes,
        dra=daemon.handle.dra,
        disruption=daemon.handle.disruption,
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


def _find(facts: Facts, namespace: str, name: str) -> PodInfo | None:
    for pod in facts.pods:
        if pod.namespace == namespace and pod.name == name:
            return pod
    return None


def compute(facts: Facts, registry: Registry, namespace: str, name: str) -> Answer:
    """The explanation of one pod against `facts` (CPU work: run it off the event loop)."""
    key = f"{namespace}/{name}"
    pod = _find(facts, namespace, name)
    problem = refuse(pod, key, facts.profiles)
    if problem is not None:
        return problem
    assert pod is not None
    for placed, alloc in facts.assumed:
        if placed.uid == pod.uid:
            cards = ",".join(map(str, alloc.cards))
            return 409, {
                "error": f"pod {key} is not pending: the scheduler placed it on node"
                f" {alloc.node}{f' (cards {cards})' if cards else ''} and is binding it"
                " (or waiting at Permit for its gang)",
                "reason": "BeingBound",
                "node": alloc.node,
                "cards": cards or None,
            }
    return 200, Explainer(facts, registry).explain(pod).to_json()


def route(daemon: Daemon) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The aiohttp handler of ROUTE for this daemon (one explanation at a time: each is a
    search of up to a few hundred dry cycles, and the metrics port is not a batch API)."""
    one_at_a_time = asyncio.Semaphore(1)

    async def handler(request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        name = request.match_info["pod"]
        if not daemon.is_ready:
            return web.json_response(
                {"error": "the scheduler has not synced its watches yet", "reason": "NotReady"},
                status=503,
            )
        async with one_at_a_time:
            facts = facts_of(daemon)
            status, body = await asyncio.to_thread(compute, facts, daemon.registry, namespace, name)
        return web.json_response(body, status=status)

    return handler


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
