"""The shipped admission policies (manifests/admission/gpusched-assignment.yaml) on the real
kube-apiserver.

The card assignment (gpusched.io/gpu-ids, gpusched.io/gpu-milli-assigned) reaches a pod
only through the scheduler's Binding: nobody may create a pod with it or change it
afterwards, and only the scheduler's ServiceAccount may put it in a Binding. Each test
first shows what the API server allows without the policies, then applies them verbatim
except for one change: every ValidatingAdmissionPolicyBinding gets a namespaceSelector for
the test's own namespace, since the session cluster runs other tests' daemons as cluster
admin and those write the annotations the old way. The policies are deleted at the end.

The other identities are real: a user impersonated by the admin client (Impersonate-User),
and ServiceAccount tokens from the TokenRequest API.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import aclosing, asynccontextmanager
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, create_or_replace, create_pod, pod_path
from gpusched.model import keys

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
POLICIES = ROOT / "manifests/admission/gpusched-assignment.yaml"
RBAC = ROOT / "manifests/rbac/gpusched.yaml"
IMMUTABLE = "gpusched-assignment-immutable"
BINDING_POLICY = "gpusched-binding-assignment"
SCHEDULER = "system:serviceaccount:kube-system:gpusched"
ADMIN = "gpusched-admin"  # the admin client's user (system:masters)
USER = "alice"
SCOPE_LABEL = "gpusched.io/admission-test"
# Nothing serves this schedulerName and no node has this name: only the test binds these
# pods, and nothing runs them.
NOBODY = "admission-test-no-scheduler"
NODE = "admission-test-node"
ASSIGNMENT = {keys.GPU_IDS: "3", keys.GPU_MILLI_ASSIGNED: "250"}

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


def _collection(doc: Mapping[str, object], namespace: str = "") -> str:
    meta = doc["metadata"]
    assert isinstance(meta, dict)
    return COLLECTIONS[str(doc["kind"])].format(namespace=meta.get("namespace", namespace))


async def _apply(kube: Kube, docs: list[JSON], namespace: str = "") -> None:
    for doc in docs:
        await create_or_replace(kube, _collection(doc, namespace), doc)


def _scoped_policies(namespace: str) -> list[JSON]:
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


def _binding(name: str, annotations: Mapping[str, str], uid: str = "") -> JSON:
    metadata: JSON = {"name": name, "annotations": dict(annotations)}
    if uid:
        metadata["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    }


def _annotate(annotations: Mapping[str, str | None]) -> JSON:
    return {"metadata": {"annotations": dict(annotations)}}


def _pod(name: str, annotations: Mapping[str, str] | None = None) -> JSON:
    return pod_manifest(name, scheduler_name=NOBODY, annotations=dict(annotations or {}))


async def _denied(call: Awaitable[object], policy: str) -> ApiError:
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


async def _wait_enforced(kube: Kube, namespace: str, timeout: float = 15.0) -> None:  # noqa: ASYNC109
    """Wait until both policies deny in `namespace`.

    The API server compiles a new policy and binding from its informers a moment after the
    POST returns, and nothing reports that; so this asks with requests that have no effect
    either way: a dry-run pod carrying a forged assignment (created only in dry run before
    the policy holds), and a Binding with one for a pod that does not exist (404 before).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = 0.02
    forged = _pod("probe", {keys.GPU_IDS: "0"})
    waiting = {IMMUTABLE, BINDING_POLICY}
    while True:
        if IMMUTABLE in waiting and await _is_denied_by(
            IMMUTABLE, kube.post(pod_path(namespace), forged, query=[("dryRun", "All")])
        ):
            waiting.discard(IMMUTABLE)
        if BINDING_POLICY in waiting and await _is_denied_by(
            BINDING_POLICY,
            kube.post(f"{pod_path(namespace, 'absent')}/binding", _binding("absent", ASSIGNMENT)),
        ):
            waiting.discard(BINDING_POLICY)
        if not waiting:
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"{sorted(waiting)} not enforced in {namespace} after {timeout}s")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


@asynccontextmanager
async def _enforced(kube: Kube, namespace: str) -> AsyncIterator[None]:
    """The shipped policies, bound to `namespace` only, active inside the block."""
    await kube.merge_patch(
        f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SCOPE_LABEL: namespace}}}
    )
    docs = _scoped_policies(namespace)
    try:
        await _apply(kube, docs)
        await _wait_enforced(kube, namespace)
        yield
    finally:
        for doc in reversed(docs):  # bindings before their policies
            try:
                await kube.delete(f"{_collection(doc)}/{doc['metadata']['name']}")
            except ApiError as exc:
                if exc.status != 404:
                    raise


@asynccontextmanager
async def _impersonating(cluster: LocalCluster, user: str) -> AsyncIterator[Kube]:
    async with await Kube.connect(cluster.kubeconfig) as client:
        client.api_client.set_default_header("Impersonate-User", user)
        yield client


async def _grant_pod_rights(kube: Kube, namespace: str, subject: JSON, user: str) -> None:
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
    await _apply(kube, [role, binding], namespace)
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


async def _token(kube: Kube, namespace: str, account: str) -> str:
    request = await kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(request["status"]["token"])


async def _first_change(kube: Kube, namespace: str, name: str, version: str) -> JSON:
    """The pod as the first write after `version` left it."""
    events = kube.watch(
        pod_path(namespace),
        resource_version=version,
        query=[("fieldSelector", f"metadata.name={name}")],
        timeout_seconds=30,
    )
    async with aclosing(events):
        async for event in events:
            if event.type == "MODIFIED":
                return event.object
    raise AssertionError(f"no change of {namespace}/{name} after resourceVersion {version}")


def _assignment_of(pod: JSON) -> dict[str, str]:
    annotations = pod["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in (keys.GPU_IDS, keys.GPU_MILLI_ASSIGNED)}


async def test_nobody_creates_or_edits_a_pods_assignment(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    await _grant_pod_rights(
        kube,
        namespace,
        {"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"},
        USER,
    )
    async with _impersonating(cluster, USER) as user:
        for name in ("before", "victim"):
            await create_pod(user, namespace, _pod(name))
        before, victim = pod_path(namespace, "before"), pod_path(namespace, "victim")

        # Without the policies the pod's owner writes the assignment, through pods and
        # through pods/status ...
        answer = await user.merge_patch(before, _annotate({keys.GPU_IDS: "0"}))
        assert _assignment_of(answer) == {keys.GPU_IDS: "0"}
        answer = await user.merge_patch(
            f"{before}/status", _annotate({keys.GPU_MILLI_ASSIGNED: "0"})
        )
        assert _assignment_of(answer) == {keys.GPU_IDS: "0", keys.GPU_MILLI_ASSIGNED: "0"}
        # ... but not through pods/ephemeralcontainers or pods/resize: their strategies put
        # the stored metadata back (accepted, annotation dropped), so the policy needs no
        # rule for them. If a future API server changes that, this fails.
        for subresource in ("ephemeralcontainers", "resize"):
            answer = await user.merge_patch(
                f"{before}/{subresource}", _annotate({keys.GPU_IDS: subresource})
            )
            assert _assignment_of(answer)[keys.GPU_IDS] == "0", subresource

        async with _enforced(kube, namespace):
            # The same patches, on a pod without an assignment: denied.
            await _denied(user.merge_patch(victim, _annotate({keys.GPU_IDS: "0"})), IMMUTABLE)
            await _denied(
                user.merge_patch(f"{victim}/status", _annotate({keys.GPU_MILLI_ASSIGNED: "0"})),
                IMMUTABLE,
            )
            # A pod created with either key: denied, and not created.
            for key in (keys.GPU_IDS, keys.GPU_MILLI_ASSIGNED):
                await _denied(create_pod(user, namespace, _pod("forged", {key: "0"})), IMMUTABLE)
            with pytest.raises(ApiError) as missing:
                await kube.get(pod_path(namespace, "forged"))
            assert missing.value.status == 404
            # An assignment that is there cannot be changed or removed, by the owner or by
            # cluster admin, through pods or pods/status.
            for client in (user, kube):
                for path in (before, f"{before}/status"):
                    await _denied(
                        client.merge_patch(path, _annotate({keys.GPU_IDS: "1"})), IMMUTABLE
                    )
                    await _denied(
                        client.merge_patch(path, _annotate({keys.GPU_IDS: None})), IMMUTABLE
                    )
            # Everything else still goes through: labels and other annotations, with or
            # without an assignment on the pod, and a PUT that leaves the assignment alone.
            for path in (before, victim):
                answer = await user.merge_patch(
                    path, {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}}
                )
                assert answer["metadata"]["labels"]["team"] == "a"
                assert answer["metadata"]["annotations"]["note"] == "x"
            current = await user.get(before)
            current["metadata"]["labels"]["team"] = "b"
            answer = await user.request("PUT", before, body=current)
            assert answer["metadata"]["labels"]["team"] == "b"

    final = {name: await kube.get(pod_path(namespace, name)) for name in ("before", "victim")}
    assert _assignment_of(final["before"]) == {keys.GPU_IDS: "0", keys.GPU_MILLI_ASSIGNED: "0"}
    assert _assignment_of(final["victim"]) == {}


async def test_only_the_scheduler_binds_with_an_assignment(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    # The scheduler: the shipped RBAC and a token for its ServiceAccount.
    await _apply(kube, list(yaml.safe_load_all(RBAC.read_text())))
    await wait_until_allowed(
        kube, SCHEDULER, "create", "pods", subresource="binding", namespace=namespace
    )
    # An impostor: a ServiceAccount of the same name in another namespace, with rights to
    # bind; and a user with the same rights.
    await kube.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpusched"}},
    )
    impostor_name = f"system:serviceaccount:{namespace}:gpusched"
    await _grant_pod_rights(
        kube,
        namespace,
        {"kind": "ServiceAccount", "name": "gpusched", "namespace": namespace},
        impostor_name,
    )
    await _grant_pod_rights(
        kube,
        namespace,
        {"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"},
        USER,
    )
    for name in ("unguarded", "forged", "by-scheduler", "plain", "legacy"):
        await create_pod(kube, namespace, _pod(name))
    binding = f"{pod_path(namespace, 'forged')}/binding"
    legacy_bindings = f"/api/v1/namespaces/{namespace}/bindings"

    # Without the policies anyone with the rights binds with an assignment of their choice.
    async with _impersonating(cluster, USER) as user:
        await user.post(
            f"{pod_path(namespace, 'unguarded')}/binding", _binding("unguarded", ASSIGNMENT)
        )
    assert _assignment_of(await kube.get(pod_path(namespace, "unguarded"))) == ASSIGNMENT

    scheduler_token = await _token(kube, "kube-system", "gpusched")
    impostor_token = await _token(kube, namespace, "gpusched")
    async with (
        _enforced(kube, namespace),
        _impersonating(cluster, USER) as user,
        Kube.with_token(cluster.server, scheduler_token, cluster.ca_file) as scheduler,
        Kube.with_token(cluster.server, impostor_token, cluster.ca_file) as impostor,
    ):
        # Any other identity, cluster admin included: denied, the pod stays unbound.
        for client, name in ((user, USER), (impostor, impostor_name), (kube, ADMIN)):
            error = await _denied(
                client.post(binding, _binding("forged", ASSIGNMENT)), BINDING_POLICY
            )
            assert f"not {name}" in error.message, error.message
            await _denied(
                client.post(binding, _binding("forged", {keys.GPU_MILLI_ASSIGNED: "0"})),
                BINDING_POLICY,
            )
        # The legacy namespaced `bindings` resource copies annotations the same way.
        await _denied(user.post(legacy_bindings, _binding("forged", ASSIGNMENT)), BINDING_POLICY)
        forged = await kube.get(pod_path(namespace, "forged"))
        assert not forged["spec"].get("nodeName")
        assert _assignment_of(forged) == {}

        # The scheduler's ServiceAccount: allowed, and the first write to the pod after the
        # Binding carries the node and the assignment together.
        pod = await kube.get(pod_path(namespace, "by-scheduler"))
        await scheduler.post(
            f"{pod_path(namespace, 'by-scheduler')}/binding",
            _binding("by-scheduler", ASSIGNMENT, uid=pod["metadata"]["uid"]),
        )
        changed = await _first_change(
            kube, namespace, "by-scheduler", pod["metadata"]["resourceVersion"]
        )
        assert changed["spec"]["nodeName"] == NODE
        assert _assignment_of(changed) == ASSIGNMENT

        # Bindings without an assignment pass for anyone with the rights (kube-scheduler and
        # other schedulers keep working), with other annotations too.
        await user.post(f"{pod_path(namespace, 'plain')}/binding", _binding("plain", {}))
        await user.post(legacy_bindings, _binding("legacy", {"example.com/note": "x"}))
        for name in ("plain", "legacy"):
            bound = await kube.get(pod_path(namespace, name))
            assert bound["spec"]["nodeName"] == NODE, name
            assert _assignment_of(bound) == {}, name
