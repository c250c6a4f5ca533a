"""Small typed operations on the API server: what the harness, the tests and the CLI need.

All objects are plain JSON dicts as the API server sends them. Waiting is always by watching
(list, then watch from the list's resourceVersion), never by polling or sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from gpusched.kube.client import JSON, ApiError, Kube

# wait_for & co. take a timeout (noqa ASYNC109) so the error can name what was awaited and
# the last state seen; an asyncio.timeout around the call would only say "timed out".
Predicate = Callable[[JSON], bool]


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


async def create_namespace(
    kube: Kube,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    wait_service_account: bool = True,
    timeout: float = 60.0,  # noqa: ASYNC109
) -> JSON:
    """Create the namespace; with ``wait_service_account``, return once its ``default``
    ServiceAccount exists (watched, not polled): kube-controller-manager's
    serviceaccount-controller creates it just after the namespace, and until then the
    ServiceAccount admission plugin refuses every pod created there. Pass False on a
    cluster without that controller (LocalCluster with ``controller_manager=False``)."""
    metadata: JSON = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    created = await kube.post("/api/v1/namespaces", body)
    if wait_service_account:
        await wait_for(
            kube,
            f"/api/v1/namespaces/{name}/serviceaccounts",
            "default",
            lambda _sa: True,
            timeout=timeout,
            what="the default ServiceAccount (does kube-controller-manager run?)",
        )
    return created


async def delete_namespace(kube: Kube, name: str) -> None:
    """Delete the namespace's pods, then the namespace itself, and finalize it.

    We delete the pods first (so they stop holding node capacity at once) and remove the
    namespace's ``kubernetes`` finalizer ourselves: with kube-controller-manager's
    namespace-controller that only makes the namespace go sooner (the controller tolerates
    it), and on a control plane without it nothing else would empty a Terminating
    namespace. Finalized this way, objects other than pods the namespace still holds
    (a Deployment, a Job) stay in etcd: delete them first where that matters.
    """
    try:
        await kube.delete(pod_path(name), query=[("gracePeriodSeconds", "0")])
        await kube.delete(f"/api/v1/namespaces/{name}")
        ns = await kube.get(f"/api/v1/namespaces/{name}")
        ns.setdefault("spec", {})["finalizers"] = []
        await kube.request("PUT", f"/api/v1/namespaces/{name}/finalize", body=ns)
    except ApiError as exc:
        if exc.status != 404:
            raise


async def create_pod(kube: Kube, namespace: str, pod: Mapping[str, Any]) -> JSON:
    return await kube.post(pod_path(namespace), dict(pod))


async def bind_pod(
    kube: Kube,
    namespace: str,
    name: str,
    node: str,
    *,
    uid: str | None = None,
    annotations: Mapping[str, str] | None = None,
) -> None:
    """POST pods/{name}/binding, as kube-scheduler does. With ``uid`` the server refuses the
    binding (409) if the pod was deleted and re-created under the same name meanwhile.
    ``annotations`` are copied onto the pod by the API server in the same write as
    spec.nodeName. Raises ApiError: 409 if the pod is already bound, 404 if it is gone, 403
    without rights (or denied by an admission policy).
    """
    metadata: JSON = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await kube.post(f"{pod_path(namespace, name)}/binding", body)


async def create_nodes(
    kube: Kube, nodes: Iterable[Mapping[str, Any]], *, concurrency: int = 16
) -> int:
    """Create nodes concurrently (bounded, so a large fleet does not trip the API server's
    max-in-flight limit); a node that already exists is left as it is. Returns how many
    were created."""
    semaphore = asyncio.Semaphore(concurrency)
    created = 0

    async def one(node: Mapping[str, Any]) -> None:
        nonlocal created
        async with semaphore:
            try:
                await kube.post("/api/v1/nodes", dict(node))
                created += 1
            except ApiError as exc:
                if exc.status != 409:
                    raise

    async with asyncio.TaskGroup() as group:
        for node in nodes:
            group.create_task(one(node))
    return created


async def create_or_replace(kube: Kube, collection: str, obj: Mapping[str, Any]) -> JSON:
    """POST to ``collection``; on 409 PUT over the existing object (keeping its
    resourceVersion), so installing manifests twice is harmless."""
    try:
        return await kube.post(collection, dict(obj))
    except ApiError as exc:
        if exc.status != 409:
            raise
    path = f"{collection}/{obj['metadata']['name']}"
    current = await kube.get(path)
    body = dict(obj)
    body["metadata"] = {
        **obj["metadata"],
        "resourceVersion": current["metadata"]["resourceVersion"],
    }
    return await kube.request("PUT", path, body=body)


def has_condition(obj: JSON, type_: str, status: str = "True") -> bool:
    conditions: Sequence[JSON] = obj.get("status", {}).get("conditions") or ()
    return any(c.get("type") == type_ and c.get("status") == status for c in conditions)


async def wait_for(
    kube: Kube,
    collection: str,
    name: str,
    predicate: Predicate,
    *,
    timeout: float = 60.0,  # noqa: ASYNC109
    what: str = "",
) -> JSON:
    """Wait until the object ``collection/name`` satisfies ``predicate`` and return it.

    Lists (with a field selector on the name) and then watches from the list's
    resourceVersion, so no change between the two is missed; re-lists when the watch ends
    or the version is too old (410 Gone). Raises TimeoutError naming ``what`` and the last
    state seen.
    """
    last: JSON | None = None

    async def run() -> JSON:
        nonlocal last
        selector = ("fieldSelector", f"metadata.name={name}")
        while True:
            listing = await kube.get(collection, query=[selector])
            items: list[JSON] = listing.get("items", [])
            for item in items:
                last = item
                if predicate(item):
                    return item
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch(collection, resource_version=version, query=[selector])
            async with aclosing(events):  # close the connection on early return
                async for event in events:
                    if event.type == "ERROR":
                        break  # 410 Gone and the like: list again
                    if event.type in ("ADDED", "MODIFIED"):
                        last = event.object
                        if predicate(event.object):
                            return event.object

    try:
        return await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        state = _brief(last) if last is not None else "the object never appeared"
        raise TimeoutError(
            f"timed out after {timeout:.0f}s waiting for {what or 'condition'} on "
            f"{collection}/{name}; last state seen: {state}"
        ) from None


async def wait_for_deletion(
    kube: Kube,
    collection: str,
    name: str,
    *,
    timeout: float = 60.0,  # noqa: ASYNC109
) -> None:
    """Wait until ``collection/name`` is gone (a DELETED event, or absent from the list)."""

    async def run() -> None:
        selector = ("fieldSelector", f"metadata.name={name}")
        while True:
            listing = await kube.get(collection, query=[selector])
            if not listing.get("items"):
                return
            version = str(listing["metadata"]["resourceVersion"])
            events = kube.watch(collection, resource_version=version, query=[selector])
            async with aclosing(events):  # close the connection on early return
                async for event in events:
                    if event.type == "ERROR":
                        break
                    if event.type == "DELETED":
                        return

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        raise TimeoutError(
            f"{collection}/{name} still exists after {timeout:.0f}s (a finalizer, or no "
            "kubelet/KWOK to finish a graceful deletion?)"
        ) from None


def _brief(obj: JSON) -> str:
    status = obj.get("status", {})
    spec = obj.get("spec", {})
    parts = {
        "phase": status.get("phase"),
        "nodeName": spec.get("nodeName"),
        "conditions": [
            f"{c.get('type')}={c.get('status')}"
            + (f" ({c.get('reason')}: {c.get('message')})" if c.get("reason") else "")
            for c in status.get("conditions") or ()
        ],
    }
    return ", ".join(f"{k}={v}" for k, v in parts.items() if v)
