"""Shared by the daemon's integration tests: a private pool of KWOK GPU nodes (labelled
and tainted so no other test's pods land there), and the daemon run in-process."""

from __future__ import annotations

import asyncio
import io
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.config import API_VERSION, KIND, load_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.devcluster import (
    BinaryNotFoundError,
    ClusterOptions,
    LocalCluster,
    NodeSpec,
    StartError,
    node_object,
)
from gpusched.devcluster.demo import wait_settled
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, create_nodes, create_or_replace, pod_path
from gpusched.model import keys
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
# A cold kernel compile before the first Lease attempt (daemon/warmup.py): ~40 s measured on
# a 2-core machine with an empty numba cache, with room for a loaded CI machine.
WARM_UP_TIMEOUT = 240.0
# Failover tests need a Lease that expires within seconds; every other test gets
# kube-scheduler's default timings, so a daemon does not lose its Lease (and exit, as it must)
# when the shared 2-core machine stalls it for 2 s (a full `make test` beside other work did).
SHORT_LEASE = {"leaseDurationSeconds": 3, "renewDeadlineSeconds": 2, "retryPeriodSeconds": 0.5}
STEADY_LEASE = {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2}


def daemon_settings(lease: str = "", timing: Mapping[str, float] = STEADY_LEASE) -> dict[str, Any]:
    """FAST_CLIENT plus leader election with `timing` (SHORT_LEASE for failover tests) on the
    Lease kube-system/`lease`; by default a fresh name, so no other test's daemon contends
    for it."""
    name = lease or f"gpusched-test-{secrets.token_hex(4)}"
    return {**FAST_CLIENT, "leaderElection": {**timing, "resourceName": name}}


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
    watch_kubeconfig: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    pod_groups: bool | None = None,
) -> AsyncIterator[Daemon]:
    """The daemon in-process; yields once it has synced and, with `lead`, holds the Lease
    (`settings` default: daemon_settings(), a private Lease). `watch_kubeconfig`: the node
    and pod watches connect with it (e.g. through a fault-injecting proxy), everything else
    with `kubeconfig`. `clock`: the daemon's monotonic clock. `pod_groups`:
    DaemonOptions.pod_groups (watch PodGroups and write their status without a profile
    naming GangScheduling)."""
    registry = default_registry()
    config = load_config(
        {"apiVersion": API_VERSION, "kind": KIND, **(settings or daemon_settings())}, registry
    )
    kube = await Kube.connect(kubeconfig)
    watch_kube = await Kube.connect(watch_kubeconfig) if watch_kubeconfig else None
    daemon = Daemon(
        kube,
        config,
        registry,
        make_logger(stream),
        options=DaemonOptions(bind_grace_seconds=10, identity=identity, pod_groups=pod_groups),
        clock=clock,
    )
    if watch_kube is not None:
        daemon.node_watch.kube = daemon.pod_watch.kube = watch_kube
    task = asyncio.create_task(daemon.run())
    try:
        await _until(daemon.ready, task, stream, "synced", 60)
        if lead:
            # The first daemon of a cold run compiles every kernel before it seeks the Lease
            # (about a minute on a 2-core machine with an empty numba cache).
            await _until(daemon.warmed, task, stream, "warmed up", WARM_UP_TIMEOUT)
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
        if watch_kube is not None:
            await watch_kube.close()


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


# -- the shipped admission policies and other identities (test_admission, test_faults_api) --

ROOT = Path(__file__).parents[2]
POLICIES = ROOT / "manifests/admission/gpusched-assignment.yaml"
RBAC = ROOT / "manifests/rbac/gpusched.yaml"
IMMUTABLE = "gpusched-assignment-immutable"
BINDING_POLICY = "gpusched-binding-assignment"
SCOPE_LABEL = "gpusched.io/admission-test"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
COLLECTIONS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": f"{RBAC_API}/clusterroles",
    "ClusterRoleBinding": f"{RBAC_API}/clusterrolebindings",
    "Role": f"{RBAC_API}/namespaces/{{namespace}}/roles",
    "RoleBinding": f"{RBAC_API}/namespaces/{{namespace}}/rolebindings",
    "ValidatingAdmissionPolicy": f"{ADMISSION_API}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION_API}/validatingadmissionpolicybindings",
}
# The probes of wait_enforced: nothing serves this schedulerName, no node has this name.
_PROBE_SCHEDULER = "admission-probe-no-scheduler"
_PROBE_NODE = "admission-probe-node"


def collection(doc: Mapping[str, object], namespace: str = "") -> str:
    meta = doc["metadata"]
    assert isinstance(meta, dict)
    return COLLECTIONS[str(doc["kind"])].format(namespace=meta.get("namespace", namespace))


async def apply_docs(kube: Kube, docs: list[JSON], namespace: str = "") -> None:
    for doc in docs:
        await create_or_replace(kube, collection(doc, namespace), doc)


def scoped_policies(namespace: str) -> list[JSON]:
    """The shipped documents, each binding limited to namespaces labelled for this test."""
    docs: list[JSON] = list(yaml.safe_load_all(POLICIES.read_text()))
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            assert "matchResources" not in doc["spec"], "the shipped binding changed: adapt"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {SCOPE_LABEL: namespace}}
            }
    assert {d["metadata"]["name"] for d in docs} == {IMMUTABLE, BINDING_POLICY}
    return docs


def binding_object(name: str, node: str, annotations: Mapping[str, str], uid: str = "") -> JSON:
    """A Binding of pod `name` to `node` carrying `annotations` (uid: a precondition)."""
    metadata: JSON = {"name": name, "annotations": dict(annotations)}
    if uid:
        metadata["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def annotate(annotations: Mapping[str, str | None]) -> JSON:
    """A merge patch setting (None: removing) pod annotations."""
    return {"metadata": {"annotations": dict(annotations)}}


async def denied(call: Awaitable[object], policy: str) -> ApiError:
    """The call fails with 403 Forbidden from `policy` (not from RBAC, which also says 403)."""
    with pytest.raises(ApiError) as caught:
        await call
    error = caught.value
    assert (error.status, error.reason) == (403, "Forbidden"), error
    assert f"ValidatingAdmissionPolicy '{policy}'" in error.message, error
    return error


async def _is_denied_by(policy: str, call: Awaitable[object]) -> bool:
    try:
        await call
    except ApiError as exc:
        if exc.status == 403 and f"ValidatingAdmissionPolicy '{policy}'" in exc.message:
            return True
        if exc.status != 404:
            raise
    return False


async def wait_enforced(kube: Kube, namespace: str, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait until both policies deny in `namespace`.

    The API server compiles a new policy and binding from its informers a moment after the
    POST returns, and nothing reports that; so this asks with requests that have no effect
    either way: a dry-run pod carrying a forged assignment (created only in dry run before
    the policy holds), and a Binding with one for a pod that does not exist (404 before).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = 0.02
    forged = pod_manifest("probe", scheduler_name=_PROBE_SCHEDULER, annotations={keys.GPU_IDS: "0"})
    assignment = {keys.GPU_IDS: "3", keys.GPU_MILLI_ASSIGNED: "250"}
    waiting = {IMMUTABLE, BINDING_POLICY}
    while True:
        if IMMUTABLE in waiting and await _is_denied_by(
            IMMUTABLE, kube.post(pod_path(namespace), forged, query=[("dryRun", "All")])
        ):
            waiting.discard(IMMUTABLE)
        if BINDING_POLICY in waiting and await _is_denied_by(
            BINDING_POLICY,
            kube.post(
                f"{pod_path(namespace, 'absent')}/binding",
                binding_object("absent", _PROBE_NODE, assignment),
            ),
        ):
            waiting.discard(BINDING_POLICY)
        if not waiting:
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"{sorted(waiting)} not enforced in {namespace} after {timeout}s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


@asynccontextmanager
async def enforced(kube: Kube, namespace: str) -> AsyncIterator[None]:
    """The shipped policies, bound to `namespace` only, active inside the block."""
    await kube.merge_patch(
        f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SCOPE_LABEL: namespace}}}
    )
    docs = scoped_policies(namespace)
    try:
        await apply_docs(kube, docs)
        await wait_enforced(kube, namespace)
        yield
    finally:
        for doc in reversed(docs):  # bindings before their policies
            try:
                await kube.delete(f"{collection(doc)}/{doc['metadata']['name']}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


@asynccontextmanager
async def impersonating(kubeconfig: Path, user: str) -> AsyncIterator[Kube]:
    """A client of the admin kubeconfig acting as `user` (Impersonate-User)."""
    async with await Kube.connect(kubeconfig) as client:
        client.api_client.set_default_header("Impersonate-User", user)
        yield client


async def grant_pod_rights(kube: Kube, namespace: str, subject: JSON, user: str) -> None:
    """Everything a pod owner (and a scheduler) could do with pods in `namespace`, so only
    the admission policies stand between `subject` and the assignment."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-rights"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods", "pods/status", "pods/ephemeralcontainers", "pods/resize"],
                "verbs": ["get", "create", "update", "patch"],
            },
            {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"pod-rights-{subject['name']}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-rights"},
        "subjects": [subject],
    }
    await apply_docs(kube, [role, binding], namespace)
    for resource, subresource, verb in (
        ("pods", "", "patch"),
        ("pods", "status", "patch"),
        ("pods", "resize", "patch"),
        ("pods", "ephemeralcontainers", "patch"),
        ("pods", "binding", "create"),
        ("bindings", "", "create"),
    ):
        await wait_until_allowed(
            kube, user, verb, resource, subresource=subresource, namespace=namespace
        )


async def sa_token(kube: Kube, namespace: str, account: str) -> str:
    """A token of the ServiceAccount (TokenRequest API)."""
    request = await kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(request["status"]["token"])


@contextmanager
def started_cluster(options: ClusterOptions) -> Iterator[LocalCluster]:
    """A local control plane for a fixture: the suite fails (never skips) when it cannot
    start; stopped at the end."""
    local = LocalCluster(options)
    problem = ""
    try:
        local.start()
    except (BinaryNotFoundError, StartError) as exc:
        problem = str(exc)
    if problem:
        pytest.fail(f"local control plane unavailable: {problem}", pytrace=False)
    try:
        yield local
    finally:
        local.stop()


async def first_event(
    kube: Kube,
    namespace: str,
    involved: str,
    reason: str,
    timeout: float = 60.0,  # noqa: ASYNC109 - a test's bound on the wait
) -> JSON:
    """The first Event `reason` on the object named `involved` (list, then watch)."""
    path = f"/api/v1/namespaces/{namespace}/events"
    selector = ("fieldSelector", f"involvedObject.name={involved},reason={reason}")

    async def run() -> JSON:
        while True:
            listing = await kube.get(path, query=[selector])
            if listing.get("items"):
                return dict(listing["items"][0])
            version = listing["metadata"]["resourceVersion"]
            async for event in kube.watch(path, resource_version=version, query=[selector]):
                if event.type == "ADDED":
                    return event.object
                if event.type == "ERROR":
                    break

    return await asyncio.wait_for(run(), timeout)
