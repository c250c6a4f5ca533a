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

from collections.abc import Mapping
from contextlib import aclosing

import pytest
import yaml

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.testkit import pod_manifest, wait_until_allowed
from gpusched.kube import JSON, ApiError, Kube, create_pod, pod_path
from gpusched.model import keys
from tests.integration.daemon_support import (
    BINDING_POLICY,
    IMMUTABLE,
    RBAC,
    annotate,
    apply_docs,
    binding_object,
    denied,
    enforced,
    grant_pod_rights,
    impersonating,
    sa_token,
)

pytestmark = pytest.mark.integration

SCHEDULER = "system:serviceaccount:kube-system:gpusched"
ADMIN = "gpusched-admin"  # the admin client's user (system:masters)
USER = "alice"
# Nothing serves this schedulerName and no node has this name: only the test binds these
# pods, and nothing runs them.
NOBODY = "admission-test-no-scheduler"
NODE = "admission-test-node"
ASSIGNMENT = {keys.GPU_IDS: "3", keys.GPU_MILLI_ASSIGNED: "250"}


def _binding(name: str, annotations: Mapping[str, str], uid: str = "") -> JSON:
    return binding_object(name, NODE, annotations, uid)


def _pod(name: str, annotations: Mapping[str, str] | None = None) -> JSON:
    return pod_manifest(name, scheduler_name=NOBODY, annotations=dict(annotations or {}))


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
    await grant_pod_rights(
        kube,
        namespace,
        {"kind": "User", "name": USER, "apiGroup": "rbac.authorization.k8s.io"},
        USER,
    )
    async with impersonating(cluster.kubeconfig, USER) as user:
        for name in ("before", "victim"):
            await create_pod(user, namespace, _pod(name))
        before, victim = pod_path(namespace, "before"), pod_path(namespace, "victim")

        # Without the policies the pod's owner writes the assignment, through pods and
        # through pods/status ...
        answer = await user.merge_patch(before, annotate({keys.GPU_IDS: "0"}))
        assert _assignment_of(answer) == {keys.GPU_IDS: "0"}
        answer = await user.merge_patch(
            f"{before}/status", annotate({keys.GPU_MILLI_ASSIGNED: "0"})
        )
        assert _assignment_of(answer) == {keys.GPU_IDS: "0", keys.GPU_MILLI_ASSIGNED: "0"}
        # ... but not through pods/ephemeralcontainers or pods/resize: their strategies put
        # the stored metadata back (accepted, annotation dropped), so the policy needs no
        # rule for them. If a future API server changes that, this fails.
        for subresource in ("ephemeralcontainers", "resize"):
            answer = await user.merge_patch(
                f"{before}/{subresource}", annotate({keys.GPU_IDS: subresource})
            )
            assert _assignment_of(answer)[keys.GPU_IDS] == "0", subresource

        async with enforced(kube, namespace):
            # The same patches, on a pod without an assignment: denied.
            await denied(user.merge_patch(victim, annotate({keys.GPU_IDS: "0"})), IMMUTABLE)
            await denied(
                user.merge_patch(f"{victim}/status", annotate({keys.GPU_MILLI_ASSIGNED: "0"})),
                IMMUTABLE,
            )
            # A pod created with either key: denied, and not created.
            for key in (keys.GPU_IDS, keys.GPU_MILLI_ASSIGNED):
                await denied(create_pod(user, namespace, _pod("forged", {key: "0"})), IMMUTABLE)
            with pytest.raises(ApiError) as missing:
                await kube.get(pod_path(namespace, "forged"))
            assert missing.value.status == 404
            # An assignment that is there cannot be changed or removed, by the owner or by
            # cluster admin, through pods or pods/status.
            for client in (user, kube):
                for path in (before, f"{before}/status"):
                    await denied(client.merge_patch(path, annotate({keys.GPU_IDS: "1"})), IMMUTABLE)
                    await denied(
                        client.merge_patch(path, annotate({keys.GPU_IDS: None})), IMMUTABLE
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
    await apply_docs(kube, list(yaml.safe_load_all(RBAC.read_text())))
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
    await grant_pod_rights(
        kube,
        namespace,
        {"kind": "ServiceAccount", "name": "gpusched", "namespace": namespace},
        impostor_name,
    )
    await grant_pod_rights(
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
    async with impersonating(cluster.kubeconfig, USER) as user:
        await user.post(
            f"{pod_path(namespace, 'unguarded')}/binding", _binding("unguarded", ASSIGNMENT)
        )
    assert _assignment_of(await kube.get(pod_path(namespace, "unguarded"))) == ASSIGNMENT

    scheduler_token = await sa_token(kube, "kube-system", "gpusched")
    impostor_token = await sa_token(kube, namespace, "gpusched")
    async with (
        enforced(kube, namespace),
        impersonating(cluster.kubeconfig, USER) as user,
        Kube.with_token(cluster.server, scheduler_token, cluster.ca_file) as scheduler,
        Kube.with_token(cluster.server, impostor_token, cluster.ca_file) as impostor,
    ):
        # Any other identity, cluster admin included: denied, the pod stays unbound.
        for client, name in ((user, USER), (impostor, impostor_name), (kube, ADMIN)):
            error = await denied(
                client.post(binding, _binding("forged", ASSIGNMENT)), BINDING_POLICY
            )
            assert f"not {name}" in error.message, error.message
            await denied(
                client.post(binding, _binding("forged", {keys.GPU_MILLI_ASSIGNED: "0"})),
                BINDING_POLICY,
            )
        # The legacy namespaced `bindings` resource copies annotations the same way.
        await denied(user.post(legacy_bindings, _binding("forged", ASSIGNMENT)), BINDING_POLICY)
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
