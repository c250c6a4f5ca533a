"""Workloads as users write them: kube-controller-manager turns a Deployment and a Job with
`schedulerName: ai-scheduler` into pods, gpusched binds them, KWOK runs them; deleting the
Deployment garbage-collects its pods. A CronJob makes Jobs, a finished Job with a TTL is
deleted, a PodGroup is protected while a pod names it. Waits by watching, never by
sleeping."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.cluster import WORKLOAD_API
from gpusched.devcluster.testkit import PAUSE_IMAGE, pod_manifest, watch_items
from gpusched.kube import (
    JSON,
    Kube,
    has_condition,
    pod_path,
    wait_for,
    wait_for_deletion,
)
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


CRONJOBS = "/apis/batch/v1/namespaces/{namespace}/cronjobs"


def _key(obj: JSON) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


async def test_a_cronjob_makes_jobs_and_a_finished_job_with_a_ttl_is_deleted(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    """cronjob-controller: a CronJob due every minute creates a Job (owned by it) whose pod
    gpusched binds. ttl-after-finished-controller: a Job with ttlSecondsAfterFinished 0 is
    deleted once it completes (nothing else here deletes Jobs)."""
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 1)]
    names = {n["metadata"]["name"] for n in nodes}
    stream = io.StringIO()
    async with node_pool(kube, nodes), running_daemon(cluster.kubeconfig, stream):
        done = job("done", pool, 1)
        done["spec"]["ttlSecondsAfterFinished"] = 0
        await kube.post(JOBS.format(namespace=namespace), done)
        nightly = job("nightly", pool, 1)
        cron = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly"},
            "spec": {
                # Every minute: the first run comes at the next minute boundary, within 60 s.
                "schedule": "* * * * *",
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": nightly["spec"]},
            },
        }
        await kube.post(CRONJOBS.format(namespace=namespace), cron)

        completed: set[str] = set()
        done_key = f"{namespace}/done"

        def ttl_job_gone(jobs: dict[str, JSON]) -> bool:
            completed.update(k for k, j in jobs.items() if has_condition(j, "Complete"))
            return done_key in completed and done_key not in jobs

        # The watch delivers a Job's changes in order: Complete is seen before DELETED.
        await watch_items(kube, JOBS.format(namespace=namespace), ttl_job_gone, timeout=60)

        def cron_job(jobs: dict[str, JSON]) -> bool:
            return any(
                (j["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "CronJob"
                for j in jobs.values()
            )

        jobs = await watch_items(kube, JOBS.format(namespace=namespace), cron_job, timeout=90)
        made = next(j for j in jobs.values() if cron_job({_key(j): j}))
        assert made["metadata"]["name"].startswith("nightly-")
        assert made["metadata"]["ownerReferences"][0]["name"] == "nightly"
        # The Job's pod: bound by gpusched to the pool, run (and completed) by KWOK.
        selector = f"batch.kubernetes.io/job-name={made['metadata']['name']}"
        pods = await watch_pods(
            kube, namespace, selector, placed_on(names, 1, ("Running", "Succeeded"))
        )
        assert all(keys.GPU_IDS in p["metadata"]["annotations"] for p in pods.values())
        cronjob = await kube.get(f"{CRONJOBS.format(namespace=namespace)}/nightly")
        assert cronjob["status"].get("lastScheduleTime")
        # Stop it before the namespace goes (the next run would race the deletion).
        await kube.delete(
            f"{CRONJOBS.format(namespace=namespace)}/nightly",
            query=[("propagationPolicy", "Background")],
        )
        await watch_pods(kube, namespace, "app=nightly", lambda pods: not pods)


PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups"


async def test_podgroup_protection_keeps_a_podgroup_while_a_pod_names_it(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    """podgroup-protection-controller, on the session cluster (the workload API and its gates
    are on in every component): a PodGroup deleted while a pod names it stays (Terminating)
    until the pod is gone, then the controller lets it go."""
    groups = PODGROUPS.format(namespace=namespace)
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
    }
    await kube.post(groups, group)
    member = pod_manifest("member", scheduler_name="nobody-schedules-this")
    member["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    await kube.post(pod_path(namespace), member)
    await kube.delete(f"{groups}/g")
    held = await wait_for(
        kube,
        groups,
        "g",
        lambda g: bool(g["metadata"].get("deletionTimestamp")),
        what="the PodGroup Terminating",
    )
    assert held["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    await kube.delete(pod_path(namespace, "member"))
    await wait_for_deletion(kube, groups, "g")


async def test_indexed_job_gets_a_workload_and_pod_group_from_the_job_controller(
    kube: Kube, namespace: str
) -> None:
    """WorkloadWithJob: the job controller creates an Indexed Job's Workload and PodGroup
    itself and names the group in each pod's spec.schedulingGroup, so a gang scheduler needs
    no manual objects. No scheduler here: the pods stay pending, which is all this needs."""
    spec = job("gang", "no-pool", parallelism=3)
    spec["spec"]["completionMode"] = "Indexed"
    spec["spec"]["template"]["spec"]["schedulerName"] = "nobody-schedules-this"
    await kube.post(JOBS.format(namespace=namespace), spec)
    pods = await watch_pods(kube, namespace, "app=gang", lambda pods: len(pods) == 3)
    groups = {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods.values()}
    assert len(groups) == 1, groups
    (group_name,) = groups
    assert group_name
    group = await kube.get(f"{PODGROUPS.format(namespace=namespace)}/{group_name}")
    # All-or-nothing over the Job's parallelism.
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}, group["spec"]
    workloads = (await kube.get(f"/apis/{WORKLOAD_API}/namespaces/{namespace}/workloads"))["items"]
    assert len(workloads) == 1, workloads
    workload = workloads[0]
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "gang"}
    owners = {(o["kind"], o["name"]) for o in group["metadata"]["ownerReferences"]}
    assert ("Workload", workload["metadata"]["name"]) in owners, owners
    ref = group["spec"]["podGroupTemplateRef"]["workload"]
    assert ref["workloadName"] == workload["metadata"]["name"]
    await kube.delete(
        f"{JOBS.format(namespace=namespace)}/gang", query=[("propagationPolicy", "Background")]
    )
