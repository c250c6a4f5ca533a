"""Shared by the daemon's integration tests: a private pool of KWOK GPU nodes (labelled
and tainted so no other test's pods land there), and the daemon run in-process."""

from __future__ import annotations

import asyncio
import io
import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gpusched.config import API_VERSION, KIND, load_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.devcluster import NodeSpec, node_object
from gpusched.devcluster.demo import wait_settled
from gpusched.kube import JSON, ApiError, Kube, create_nodes, pod_path
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry

POOL_KEY = "gpusched.io/test-pool"
# (gpus, model, cpu milli, memory MiB, NVLink island size): the generated fleet's shapes.
SHAPES = (
    (8, "A100M80", 96_000, 1_048_576, 8),
    (8, "V100M32", 64_000, 524_288, 8),
    (2, "T4", 32_000, 131_072, 0),
)
# Tests write fast: kube-scheduler's default qps (50) would make a 200-pod burst wait on
# the client-side limiter rather than on the scheduler.
FAST_CLIENT = {"clientConnection": {"qps": 1000, "burst": 1000}}
# Short leader-election timings, so a Lease a killed daemon leaves behind expires quickly.
SHORT_LEASE = {"leaseDurationSeconds": 3, "renewDeadlineSeconds": 2, "retryPeriodSeconds": 0.5}


def daemon_settings(lease: str = "") -> dict[str, Any]:
    """FAST_CLIENT plus leader election with SHORT_LEASE on the Lease kube-system/`lease`;
    by default a fresh name, so no other test's daemon contends for it."""
    name = lease or f"gpusched-test-{secrets.token_hex(4)}"
    return {**FAST_CLIENT, "leaderElection": {**SHORT_LEASE, "resourceName": name}}


def pool_specs(pool: str, count: int, shapes: Sequence[tuple[Any, ...]] = SHAPES) -> list[NodeSpec]:
    out = []
    for i in range(count):
        gpus, model, cpu, mem, island = shapes[i % len(shapes)]
        out.append(
            NodeSpec(
                name=f"{pool}-{i:03d}",
                gpus=gpus,
                model=model,
                cpu_milli=cpu,
                memory_mib=mem,
                rack=f"{pool}-rack-{i // 8}",
                spine=f"{pool}-spine-{i // 32}",
                nvlink_island_size=island,
            )
        )
    return out


def pool_node(spec: NodeSpec, pool: str) -> JSON:
    node = node_object(spec)
    node["metadata"]["labels"][POOL_KEY] = pool
    node.setdefault("spec", {})["taints"] = [
        {"key": POOL_KEY, "value": pool, "effect": "NoSchedule"}
    ]
    return node


def placement(pool: str) -> dict[str, Any]:
    """node_selector and tolerations that put a pod in the pool."""
    return {
        "node_selector": {POOL_KEY: pool},
        "tolerations": [
            {"key": POOL_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
        ],
    }


@asynccontextmanager
async def node_pool(kube: Kube, nodes: Sequence[JSON]) -> AsyncIterator[dict[str, int]]:
    """Create the nodes; yields name -> card count; deletes them afterwards."""
    await create_nodes(kube, nodes)
    try:
        yield {
            n["metadata"]["name"]: int(n["status"]["capacity"].get("nvidia.com/gpu", 0))
            for n in nodes
        }
    finally:
        for n in nodes:
            try:
                await kube.delete(f"/api/v1/nodes/{n['metadata']['name']}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


@asynccontextmanager
async def running_daemon(
    kubeconfig: Path,
    stream: io.StringIO,
    settings: dict[str, Any] | None = None,
    *,
    identity: str = "",
    lead: bool = True,
) -> AsyncIterator[Daemon]:
    """The daemon in-process; yields once it has synced and, with `lead`, holds the Lease
    (`settings` default: daemon_settings(), a private Lease)."""
    registry = default_registry()
    config = load_config(
        {"apiVersion": API_VERSION, "kind": KIND, **(settings or daemon_settings())}, registry
    )
    kube = await Kube.connect(kubeconfig)
    daemon = Daemon(
        kube,
        config,
        registry,
        make_logger(stream),
        options=DaemonOptions(bind_grace_seconds=10, identity=identity),
    )
    task = asyncio.create_task(daemon.run())
    try:
        await _until(daemon.ready, task, stream, "synced", 60)
        if lead:
            await _until(daemon.leading, task, stream, "leading", 30)
        yield daemon
    finally:
        daemon.stop()
        await asyncio.wait_for(task, 30)
        if settings is None:  # its private Lease: leave no litter in kube-system
            le = config.leader_election
            try:
                await kube.delete(
                    f"/apis/coordination.k8s.io/v1/namespaces/{le.resource_namespace}"
                    f"/leases/{le.resource_name}"
                )
            except ApiError as exc:
                if exc.status != 404:
                    raise
        await kube.close()


async def _until(
    event: asyncio.Event,
    task: asyncio.Task[None],
    stream: io.StringIO,
    what: str,
    timeout: float,  # noqa: ASYNC109
) -> None:
    """Wait for `event`; if the daemon stops or the time runs out first, fail with its log."""
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.wait({waiter, task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if not event.is_set():
        state = "stopped" if task.done() else f"not {what} after {timeout:.0f}s"
        raise AssertionError(f"the daemon is {state}; its log:\n{stream.getvalue()[-3000:]}")


async def events_for(kube: Kube, namespace: str, name: str, reason: str) -> list[JSON]:
    listing = await kube.get(
        f"/api/v1/namespaces/{namespace}/events",
        query=[("fieldSelector", f"involvedObject.name={name},reason={reason}")],
    )
    items: list[JSON] = listing.get("items", [])
    return items


def pool_name() -> str:
    """A fresh pool name (a label value and a node-name prefix)."""
    return f"p{secrets.token_hex(3)}"


async def create_pods(kube: Kube, namespace: str, pods: list[JSON]) -> None:
    """POST the pods, 16 at a time."""
    sem = asyncio.Semaphore(16)

    async def one(pod: JSON) -> None:
        async with sem:
            await kube.post(pod_path(namespace), pod)

    await asyncio.gather(*(one(p) for p in pods))


async def until_bound(kube: Kube, namespace: str, names: list[str], count: int) -> dict[str, JSON]:
    """Watch until `count` of the pods are bound."""
    return await wait_settled(
        kube,
        namespace,
        names,
        until=lambda pods: sum(bool(p["spec"].get("nodeName")) for p in pods.values()) >= count,
        timeout=60,
    )
