"""`gpusched explain` against the real control plane and the daemon: a pending pod of each
kind (resources, fragmentation, gang, quota, thermal, affinity, topology) gets the right
binding constraint and a counterfactual; the counterfactual is then applied to the cluster
(a pod deleted, the red line raised and the daemon restarted with it, the quota raised, the
missing gang member created, the pod recreated without the term) and the pod is seen bound.

The explanation is taken from the daemon's state as its endpoint takes it (facts_of on
the event loop, then compute); the resources test also asks the HTTP endpoint, the offline
path (explain_offline: the daemon's watches only) and the `gpusched explain` command, and
checks that all of them say the same thing.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpusched.daemon import Daemon
from gpusched.daemon.explain import compute, explain_offline, facts_of
from gpusched.daemon.main import RunArgs, pages
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.fake_dcgm import FakeDcgmExporter
from gpusched.devcluster.prometheus import PrometheusServer
from gpusched.devcluster.testkit import wait_pod
from gpusched.kube import JSON, Kube, pod_path
from gpusched.model import keys
from gpusched.observability.metrics import Metrics, serve
from tests.integration.daemon_support import (
    first_event,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)
from tests.integration.test_quotas import elastic_quota, quotas_of
from tests.integration.test_telemetry import (
    daemon_sees,
    hot_a100,
    node_temp,
    telemetry_settings,
)

pytestmark = pytest.mark.integration

ONE_A100 = ((8, "A100M80", 96_000, 1_048_576, 8),)
ONE_T4 = ((2, "T4", 32_000, 131_072, 0),)
ROOT = Path(__file__).parents[2]


async def explain(daemon: Daemon, namespace: str, name: str) -> dict[str, Any]:
    """What GET /explain/{namespace}/{name} answers (the same two calls: the copy on the
    event loop, the search in a worker thread, so the daemon keeps renewing its Lease)."""
    facts = facts_of(daemon)
    status, body = await asyncio.to_thread(compute, facts, daemon.registry, namespace, name)
    assert status == 200, body
    return body


async def placed(kube: Kube, namespace: str, names: list[str], stream: io.StringIO) -> None:
    """Until the pods are bound; on a timeout, the daemon's log says why not."""
    try:
        await until_bound(kube, namespace, names, len(names))
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; the daemon's log:\n{stream.getvalue()[-4000:]}") from None


def gpu_pod(name: str, gpus: int, pool: str, **kw: Any) -> JSON:
    return demo_pod(name, gpus=gpus, cpu="100m", **placement(pool), **kw)


async def create(kube: Kube, namespace: str, *pods: JSON) -> None:
    for pod in pods:
        await kube.post(pod_path(namespace), pod)


async def pending_seen(kube: Kube, namespace: str, name: str) -> None:
    """The daemon attempted the pod and found no node (its FailedScheduling Event)."""
    await first_event(kube, namespace, name, "FailedScheduling")


async def test_resources_delete_the_named_pod_and_it_binds(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        await create(kube, namespace, gpu_pod("big", 5, pool), gpu_pod("small", 2, pool))
        await placed(kube, namespace, ["big", "small"], stream)
        await create(kube, namespace, gpu_pod("want", 3, pool))
        await pending_seen(kube, namespace, "want")

        body = await explain(daemon, namespace, "want")
        assert body["state"] == "pending" and body["binding"] == "resources", body
        # The session's cluster has other pools: their nodes are groups of their own.
        assert any(
            {"plugin": "GPUFit", "reason": "Insufficient nvidia.com/gpu", "nodes": 1}.items()
            <= g.items()
            for g in body["groups"]
        ), body["groups"]
        (change,) = body["changes"]
        # 1 card free, 3 wanted: "small" (2 cards) is the smallest pod whose leaving suffices.
        assert change["action"] == {"node": spec.name, "delete": [f"{namespace}/small"]}
        assert change["text"] == (
            f"fits on node {spec.name} if pod {namespace}/small (2 GPUs, priority 0) left"
        )

        # The same answer from the daemon's HTTP endpoint (the routes `gpusched run
        # --explain-endpoint` serves) ...
        served = pages(daemon, RunArgs(explain_endpoint=True))
        runner = await serve(Metrics(), 0, lambda: True, routes=served.routes, host="127.0.0.1")
        try:
            port = runner.addresses[0][1]
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/explain/{namespace}/want") as resp:
                    assert resp.status == 200
                    answer = await resp.json()
                async with http.get(f"http://127.0.0.1:{port}/explain/{namespace}/big") as resp:
                    assert resp.status == 409
                    refused = await resp.json()
                async with http.get(f"http://127.0.0.1:{port}/explain/{namespace}/nope") as resp:
                    assert resp.status == 404
        finally:
            served.close()
            await runner.cleanup()
        assert (answer["binding"], answer["changes"]) == (body["binding"], body["changes"])
        assert refused["reason"] == "AlreadyBound" and refused["node"] == spec.name
        assert "gpu-ids" in refused["error"] and refused["cards"]

        # ... from the API alone (the daemon's watches in a second Daemon object) ...
        status, offline = await explain_offline(
            kube, daemon.config, daemon.registry, namespace, "want"
        )
        assert status == 200
        assert (offline["binding"], offline["changes"]) == (body["binding"], body["changes"])

        # ... and from the command, offline, through kubectl's plugin mechanism: an
        # executable kubectl-gpusched on PATH, as pip writes the console script.
        shim = tmp_path / "kubectl-gpusched"
        shim.write_text(
            f"#!{sys.executable}\nimport sys\nfrom gpusched.cli import kubectl_main\n"
            "sys.exit(kubectl_main())\n"
        )
        shim.chmod(0o755)
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "gpusched",
            "explain",
            f"{namespace}/want",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-o",
            "json",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}",
            },
        )
        out, err = await asyncio.wait_for(proc.communicate(), 240)
        assert proc.returncode == 0, err.decode()
        cli = json.loads(out)
        assert (cli["binding"], cli["changes"]) == (body["binding"], body["changes"])

        await kube.delete(pod_path(namespace, "small"))
        assert (await bound(kube, namespace, "want")) == spec.name


async def test_fragmentation_delete_the_named_pod_and_it_binds(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    specs = pool_specs(pool, 2, shapes=ONE_A100)
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(s, pool) for s in specs]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        # Six cards taken on each node: 4 free in total, 2 on each.
        await create(kube, namespace, *(gpu_pod(f"six-{i}", 6, pool) for i in range(2)))
        await placed(kube, namespace, ["six-0", "six-1"], stream)
        await create(kube, namespace, gpu_pod("want", 4, pool))
        await pending_seen(kube, namespace, "want")

        body = await explain(daemon, namespace, "want")
        assert body["binding"] == "fragmentation", body
        assert "4 whole cards the pod could use are free in total" in body["detail"], body["detail"]
        assert "no node has 4 free together" in body["detail"]
        (change,) = body["changes"]
        (victim,) = change["action"]["delete"]
        assert change["kind"] == "fragmentation"

        await kube.delete(pod_path(namespace, victim.split("/")[1]))
        assert (await bound(kube, namespace, "want")) == change["action"]["node"]


async def test_gang_create_the_missing_member_and_it_binds(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    gang = {keys.GANG_NAME: "train", keys.GANG_TOTAL: "3"}
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        await create(
            kube, namespace, *(gpu_pod(f"w{i}", 2, pool, annotations=gang) for i in range(2))
        )
        await wait_pod(
            kube,
            namespace,
            "w0",
            lambda p: any(
                c.get("reason") == "NotReadyForScheduling"
                for c in p.get("status", {}).get("conditions", [])
            ),
            what="w0 held for its gang",
        )
        body = await explain(daemon, namespace, "w0")
        assert body["binding"] == "gang" and body["stage"] == "PreEnqueue", body
        (change,) = body["changes"]
        assert change["action"] == {"gang": f"{namespace}/train", "create": 1}
        assert "has 2 of its minimum 3 pods: needs 1 more created; then it fits" in change["text"]

        await create(kube, namespace, gpu_pod("w2", 2, pool, annotations=gang))
        for member in ("w0", "w1", "w2"):
            assert (await bound(kube, namespace, member)) == spec.name


async def test_quota_raise_it_as_said_and_the_pod_binds(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    stream = io.StringIO()
    await kube.post(quotas_of(namespace), elastic_quota("gpus", {}, {keys.GPU_RESOURCE: 2}))
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        await create(kube, namespace, gpu_pod("first", 2, pool))
        await placed(kube, namespace, ["first"], stream)
        await create(kube, namespace, gpu_pod("want", 2, pool))
        await pending_seen(kube, namespace, "want")

        body = await explain(daemon, namespace, "want")
        assert body["binding"] == "quota" and body["stage"] == "PreFilter", body
        raise_it, make_room = body["changes"]
        assert raise_it["action"] == {"quota": f"{namespace}/gpus", "max": {keys.GPU_RESOURCE: "4"}}
        assert "allowed 2 GPUs more" in raise_it["text"]
        assert make_room["action"] == {"delete": [f"{namespace}/first"]}

        await kube.merge_patch(
            f"{quotas_of(namespace)}/gpus", {"spec": {"max": raise_it["action"]["max"]}}
        )
        assert (await bound(kube, namespace, "want")) == spec.name


async def test_thermal_restart_with_the_red_line_said_and_the_pod_binds(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
) -> None:
    pool, spec = await hot_a100(prometheus, exporter)
    name = spec.name
    async with node_pool(kube, [pool_node(spec, pool)]):
        stream = io.StringIO()
        async with running_daemon(
            cluster.kubeconfig, stream, telemetry_settings(prometheus.url)
        ) as daemon:
            await daemon_sees(daemon, lambda: node_temp(daemon, name) == 84.0, "84 °C", stream)
            await create(kube, namespace, gpu_pod("train", 1, pool))
            await pending_seen(kube, namespace, "train")
            body = await explain(daemon, namespace, "train")
        assert body["binding"] == "thermal", body
        (change,) = body["changes"]
        # No projected rise in these settings: the card reads 84 °C, so the line must be 85.
        assert change["action"] == {"redLineCelsius": 85, "node": name}
        assert change["text"].startswith("fits if the red line were 85 °C")

        restart = telemetry_settings(prometheus.url)
        (thermal,) = restart["profiles"][0]["pluginConfig"]
        thermal["args"]["redLineCelsius"] = change["action"]["redLineCelsius"]
        stream = io.StringIO()
        async with running_daemon(cluster.kubeconfig, stream, restart):
            assert (await bound(kube, namespace, "train")) == name


async def test_affinity_recreate_without_the_term_and_it_binds(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        pod = gpu_pod("want", 1, pool)
        pod["spec"]["nodeSelector"]["zone"] = "nowhere"
        await create(kube, namespace, pod)
        await pending_seen(kube, namespace, "want")

        body = await explain(daemon, namespace, "want")
        assert body["binding"] == "affinity", body
        (change,) = body["changes"]
        assert change["action"] == {"remove": "nodeSelector.zone", "node": spec.name}
        assert change["text"].startswith("fits without the nodeSelector term zone=nowhere")

        await kube.delete(pod_path(namespace, "want"), query=[("gracePeriodSeconds", "0")])
        await wait_gone(kube, namespace, "want")
        del pod["spec"]["nodeSelector"]["zone"]
        await create(kube, namespace, pod)
        assert (await bound(kube, namespace, "want")) == spec.name


async def test_topology_recreate_with_nvlink_preferred_and_it_binds(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_T4)  # two cards, no NVLink
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream) as daemon,
    ):
        pod = gpu_pod("want", 2, pool, annotations={keys.NVLINK: "required"})
        await create(kube, namespace, pod)
        await pending_seen(kube, namespace, "want")

        body = await explain(daemon, namespace, "want")
        assert body["binding"] == "topology", body
        (change,) = body["changes"]
        assert change["action"] == {"annotations": {keys.NVLINK: "preferred"}, "node": spec.name}
        assert change["text"].startswith(f"fits with {keys.NVLINK}: preferred")

        await kube.delete(pod_path(namespace, "want"), query=[("gracePeriodSeconds", "0")])
        await wait_gone(kube, namespace, "want")
        pod["metadata"]["annotations"].update(change["action"]["annotations"])
        await create(kube, namespace, pod)
        assert (await bound(kube, namespace, "want")) == spec.name


async def bound(kube: Kube, namespace: str, name: str) -> str:
    """Until the pod is bound (watched); its node."""
    pod = await wait_pod(
        kube, namespace, name, lambda p: bool(p["spec"].get("nodeName")), what=f"{name} bound"
    )
    return str(pod["spec"]["nodeName"])


async def wait_gone(kube: Kube, namespace: str, name: str) -> None:
    """Until the pod is deleted (a watch from the list's version: no polling)."""
    listing = await kube.get(
        pod_path(namespace), query=[("fieldSelector", f"metadata.name={name}")]
    )
    if not listing.get("items"):
        return
    version = listing["metadata"]["resourceVersion"]

    async def run() -> None:
        async for event in kube.watch(
            pod_path(namespace),
            resource_version=version,
            query=[("fieldSelector", f"metadata.name={name}")],
        ):
            if event.type == "DELETED":
                return

    await asyncio.wait_for(run(), 60)
