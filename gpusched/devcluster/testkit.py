"""Helpers for tests and benchmarks against the local control plane: pod and PodGroup
manifests, and waits that watch (never sleep)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from gpusched.kube import JSON, Kube, create_pod, has_condition, pod_path, wait_for
from gpusched.model import keys

# The waits take a timeout (noqa ASYNC109) so a failure names what was awaited and the
# last state seen, which asyncio.timeout around the call could not.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: KWOK runs no containers
PODGROUP_API = "/apis/scheduling.x-k8s.io/v1alpha1"


def pod_manifest(
    name: str,
    *,
    gpus: int = 0,
    scheduler_name: str | None = keys.SCHEDULER_NAME,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pod_group: str | None = None,
) -> JSON:
    """A one-container pod. ``scheduler_name=None`` leaves it to the default scheduler."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["limits"] = {keys.GPU_RESOURCE: str(gpus)}
    meta: JSON = {
        "name": name,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    if pod_group:
        meta["labels"][keys.POD_GROUP_LABEL] = pod_group
    spec: JSON = {
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
        "terminationGracePeriodSeconds": 1,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def make_pod(kube: Kube, namespace: str, name: str, **kwargs: Any) -> JSON:
    return await create_pod(kube, namespace, pod_manifest(name, **kwargs))


async def make_pod_group(
    kube: Kube, namespace: str, name: str, min_member: int, *, timeout_seconds: int = 60
) -> JSON:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout_seconds},
    }
    return await kube.post(f"{PODGROUP_API}/namespaces/{namespace}/podgroups", body)


async def wait_pod(
    kube: Kube,
    namespace: str,
    name: str,
    predicate: Any,
    *,
    what: str,
    timeout: float = 60.0,  # noqa: ASYNC109
) -> JSON:
    return await wait_for(kube, pod_path(namespace), name, predicate, timeout=timeout, what=what)


async def wait_pod_running(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> JSON:  # noqa: ASYNC109
    return await wait_pod(
        kube,
        namespace,
        name,
        lambda p: p.get("status", {}).get("phase") == "Running",
        what="phase Running",
        timeout=timeout,
    )


async def wait_pod_scheduled(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> JSON:  # noqa: ASYNC109
    return await wait_pod(
        kube,
        namespace,
        name,
        lambda p: bool(p.get("spec", {}).get("nodeName")) and has_condition(p, "PodScheduled"),
        what="PodScheduled=True",
        timeout=timeout,
    )


async def wait_until_allowed(
    kube: Kube,
    user: str,
    verb: str,
    resource: str,
    *,
    subresource: str = "",
    namespace: str = "",
    group: str = "",
    name: str = "",
    timeout: float = 15.0,  # noqa: ASYNC109
) -> None:
    """Wait until the API server's authorizer allows `user` to `verb` `resource`.

    RBAC objects take effect once the authorizer's informer has seen them, a moment after
    the POST returns, and nothing can be watched for that. So this asks the authorizer
    itself (a SubjectAccessReview) until it says yes, backing off between questions.
    """
    groups = ["system:authenticated"]
    if user.startswith("system:serviceaccount:"):
        groups.append("system:serviceaccounts")
        groups.append("system:serviceaccounts:" + user.split(":")[2])
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups,
            "resourceAttributes": {
                "verb": verb,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "group": group,
                "name": name,
            },
        },
    }
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = 0.02
    while True:
        answer = await kube.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        if answer.get("status", {}).get("allowed"):
            return
        if loop.time() >= deadline:
            raise TimeoutError(
                f"RBAC still denies {user} {verb} {resource}/{subresource} in"
                f" {namespace or 'the cluster'} after {timeout:.0f}s: {answer.get('status')}"
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


def daemon_argv(kubeconfig: Path, config: Path | None = None, *extra: str) -> list[str]:
    """`gpusched run` against a local cluster as a child process, with this interpreter:
    the metrics port left to the OS (several daemons may run at once), `extra` flags last."""
    argv = [sys.executable, "-m", "gpusched.cli", "run", "--kubeconfig", str(kubeconfig)]
    if config is not None:
        argv += ["--config", str(config)]
    return [*argv, "--metrics-port", "0", *extra]


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


async def watch_items(
    kube: Kube,
    path: str,
    until: Callable[[dict[str, JSON]], bool],
    *,
    query: Sequence[tuple[str, str]] = (),
    timeout: float = 120.0,  # noqa: ASYNC109 - the error names what was awaited
    what: str = "",
    explain: Callable[[dict[str, JSON]], str] = lambda _items: "",
) -> dict[str, JSON]:
    """The objects of the collection `path` by "namespace/name", once `until` holds for
    them (checked after the list and after every watch event); lists, then watches from the
    list's resourceVersion, re-listing when the watch ends. On timeout the error says
    `what` was awaited and `explain(the objects last seen)`."""
    items: dict[str, JSON] = {}

    async def run() -> dict[str, JSON]:
        while True:
            listing = await kube.get(path, query=list(query))
            items.clear()
            items.update({_key(o): o for o in listing.get("items", [])})
            if until(items):
                return items
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch(path, resource_version=version, query=list(query))
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        break
                    if event.type == "BOOKMARK":
                        continue
                    key = _key(event.object)
                    if event.type == "DELETED":
                        items.pop(key, None)
                    else:
                        items[key] = event.object
                    if until(items):
                        return items

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        raise TimeoutError(
            f"{what or path}: not reached after {timeout:.0f}s. {explain(items)}"
        ) from None
