"""Workloads as users write them: kube-controller-manager turns a Deployment and a Job with
`schedulerName: ai-scheduler` into pods, gpusched binds them, KWOK runs them; deleting the
Deployment garbage-collects its pods. Waits by watching, never by sleeping."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.testkit import PAUSE_IMAGE
from gpusched.kube import JSON, Kube, has_condition, pod_path, wait_for
from gpusched.model import keys
from tests.integration.daemon_support import (
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
)

pytestmark = pytest.mark.integration

APPS = "/apis/apps/v1/namespaces/{namespace}/deployments"
JOBS = "/apis/batch/v1/namespaces/{namespace}/jobs"
Pods = dict[str, JSON]


async def watch_pods(
    kube: Kube,
    namespace: str,
    selector: str,
    until: Callable[[Pods], bool],
    *,
    timeout: float = 60.0,  # noqa: ASYNC109
) -> Pods:
    """The namespace's pods matching the label selector, by name, once `until` holds for
    them (checked after the list and after every watch event)."""
    pods: Pods = {}

    async def run() -> Pods:
        query = [("labelSelector", selector)]
        while True:
            listing = await kube.get(pod_path(namespace), query=query)
            pods.clear()
            pods.update({p["metadata"]["name"]: p for p in listing.get("items", [])})
            if until(pods):
                return pods
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch(pod_path(namespace), resource_version=version, query=query)
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        break  # list again
                    if event.type == "BOOKMARK":
                        continue
                    name = event.object["metadata"]["name"]
                    if event.type == "DELETED":
                        pods.pop(name, None)
                    else:
                        pods[name] = event.object
                    if until(pods):
                        return pods

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        brief = {
            n: (p["spec"].get("nodeName"), p.get("status", {}).get("phase"))
            for n, p in pods.items()
        }
        raise TimeoutError(f"pods {selector} after {timeout:.0f}s: {brief}") from None


def placed_on(
    nodes: set[str], count: int, phases: tuple[str, ...] = ("Running",)
) -> Callable[[Pods], bool]:
    """`count` live pods, each bound to one of `nodes` and in one of `phases`."""

    def check(pods: Pods) -> bool:
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        return len(live) == count and all(
            p["spec"].get("nodeName") in nodes and p.get("status", {}).get("phase") in phases
            for p in live
        )

    return check


def pod_template(app: str, pool: str, gpus: int) -> JSON:
    where = placement(pool)
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "schedulerName": keys.SCHEDULER_NAME,
            "nodeSelector": where["node_selector"],
            "tolerations": where["tolerations"],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {keys.GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }


def deployment(name: str, pool: str, replicas: int) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, pool, gpus=2),
        },
    }


def job(name: str, pool: str, parallelism: int) -> JSON:
    template: dict[str, Any] = pod_template(name, pool, gpus=1)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": template,
        },
    }


async def test_deployment_and_job_pods_are_created_bound_and_collected(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 2)]
    names = {n["metadata"]["name"] for n in nodes}
    stream = io.StringIO()
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        await kube.post(APPS.format(namespace=namespace), deployment("infer", pool, 3))
        await kube.post(JOBS.format(namespace=namespace), job("train", pool, 2))

        serving = await watch_pods(kube, namespace, "app=infer", placed_on(names, 3))
        # KWOK completes a Job's pods once they run (configs.py, pod-complete): Running may
        # already be over when the watch sees them.
        training = await watch_pods(
            kube, namespace, "app=train", placed_on(names, 2, ("Running", "Succeeded"))
        )
        done = await wait_for(
            kube,
            JOBS.format(namespace=namespace),
            "train",
            lambda j: has_condition(j, "Complete"),
            what="the Job to complete",
        )
        assert done["status"]["succeeded"] == 2

        for pod in [*serving.values(), *training.values()]:
            owner = pod["metadata"]["ownerReferences"][0]
            assert owner["controller"] is True
            assert owner["kind"] == ("ReplicaSet" if pod in serving.values() else "Job")
            # gpusched placed it (its cards recorded), and it runs with the namespace's
            # default ServiceAccount the admission plugin filled in.
            assert keys.GPU_IDS in pod["metadata"]["annotations"], pod["metadata"]
            assert pod["spec"]["serviceAccountName"] == "default"

        # Deleting the Deployment (as kubectl does: background propagation) leaves the
        # garbage collector to delete its ReplicaSet and, through it, the pods.
        await kube.delete(
            f"{APPS.format(namespace=namespace)}/infer",
            query=[("propagationPolicy", "Background")],
        )
        await watch_pods(kube, namespace, "app=infer", lambda pods: not pods)
        replica_sets = await kube.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")
        assert replica_sets.get("items") == []
        # The Job's pods are untouched by that.
        left = await kube.get(pod_path(namespace), query=[("labelSelector", "app=train")])
        assert len(left["items"]) == 2
        # The Job too (delete_namespace finalizes the namespace itself, which would leave a
        # Job behind in etcd): its finished pods go with it.
        await kube.delete(
            f"{JOBS.format(namespace=namespace)}/train",
            query=[("propagationPolicy", "Background")],
        )
        await watch_pods(kube, namespace, "app=train", lambda pods: not pods)
