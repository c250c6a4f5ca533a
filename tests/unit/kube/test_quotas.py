"""elastic_quota_from_k8s on ElasticQuotas shaped as the API server returns them, and
KubeQuotas: tenants from Namespace labels, one quota per tenant, change callbacks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpusched.kube.quotas import KubeQuotas
from gpusched.kube.watch import EventType
from gpusched.model import keys, quota
from gpusched.model.elastic_quota import elastic_quota_from_k8s
from tests.fakes import FakeKube

GiB = 2**30


def eq(
    name: str = "quota",
    namespace: str = "team-a",
    *,
    min: Any = None,
    max: Any = None,
    uid: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if min is not None:
        spec["min"] = min
    if max is not None:
        spec["max"] = max
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "resourceVersion": "12",
        },
        "spec": spec,
    }


def test_a_well_formed_quota_in_quota_units() -> None:
    spec = elastic_quota_from_k8s(
        eq(
            min={"nvidia.com/gpu": 4, "cpu": "8"},
            max={
                "nvidia.com/gpu": "8",
                "gpusched.io/gpu-memory": "640Gi",
                "memory": "512Gi",
                "pods": 100,
            },
        )
    )
    assert spec.problem == ""
    assert spec.key == "team-a/quota"
    assert spec.min == (4000, None, 8000, None, None)
    assert spec.max == (8000, 640 * 1024, None, 512 * GiB, 100)
    assert spec.named == ("nvidia.com/gpu", "gpusched.io/gpu-memory", "cpu", "memory", "pods")


def test_a_share_of_a_gpu_is_milli() -> None:
    spec = elastic_quota_from_k8s(eq(max={"nvidia.com/gpu": "2500m"}))
    assert spec.max[quota.INDEX[quota.GPU]] == 2500


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"max": {"nvidia.com/gpus": 8}}, "spec.max['nvidia.com/gpus'] is not a resource"),
        ({"min": {"requests.cpu": "4"}}, "spec.min['requests.cpu'] is not a resource"),
        ({"max": {"nvidia.com/gpu": "lots"}}, "spec.max['nvidia.com/gpu']"),
        ({"max": {"nvidia.com/gpu": "-1"}}, "is negative"),
        (
            {"min": {"nvidia.com/gpu": 10}, "max": {"nvidia.com/gpu": 8}},
            "spec.min['nvidia.com/gpu'] (10 GPUs) is above spec.max (8 GPUs)",
        ),
        ({"max": ["nvidia.com/gpu"]}, "spec.max must be a map"),
    ],
)
def test_a_malformed_quota_says_what_is_wrong(spec: dict[str, Any], fragment: str) -> None:
    raw = eq()
    raw["spec"] = spec
    got = elastic_quota_from_k8s(raw)
    assert fragment in got.problem, got.problem


def test_a_spec_that_is_not_an_object_is_a_problem_not_an_exception() -> None:
    raw = eq()
    raw["spec"] = "8 GPUs"
    assert "spec is not an object" in elastic_quota_from_k8s(raw).problem


def _port() -> tuple[KubeQuotas, list[int]]:
    changes: list[int] = []
    port = KubeQuotas(FakeKube(list), on_change=lambda: changes.append(1))  # type: ignore[arg-type]
    return port, changes


def test_a_namespace_is_its_own_tenant_unless_labelled() -> None:
    port, _ = _port()
    port.set_namespace("team-a", {})
    port.set_namespace("ml-1", {keys.TENANT_LABEL: "ml"})
    assert port.tenant_of("team-a") == "team-a"
    assert port.tenant_of("ml-1") == "ml"
    assert port.tenant_of("unknown") == "unknown"
    port.remove_namespace("ml-1")
    assert port.tenant_of("ml-1") == "ml-1"


def test_quotas_are_filed_under_their_namespaces_tenant() -> None:
    port, changes = _port()
    port.set_namespace("ml-1", {keys.TENANT_LABEL: "ml"})
    port.set_namespace("ml-2", {keys.TENANT_LABEL: "ml"})
    spec = elastic_quota_from_k8s(eq("q", "ml-2", min={"nvidia.com/gpu": 2}))
    port.watch.handler(EventType.ADDED, spec)
    got = port.quota("ml")
    assert got is not None and got.key == "ml-2/q" and got.problem == ""
    assert got.min[0] == 2000 and got.max[0] is None
    assert port.quota("ml-2") is None
    assert [q.tenant for q in port.quotas()] == ["ml"]
    # The namespace leaves the tenant: its quota goes with it.
    before = len(changes)
    port.set_namespace("ml-2", {})
    assert port.quota("ml") is None and port.quota("ml-2") is not None
    assert len(changes) == before + 1


def test_two_quotas_for_one_tenant_are_a_problem_naming_both() -> None:
    port, _ = _port()
    port.set_namespace("ml-1", {keys.TENANT_LABEL: "ml"})
    port.set_namespace("ml-2", {keys.TENANT_LABEL: "ml"})
    a = elastic_quota_from_k8s(eq("a", "ml-1", max={"nvidia.com/gpu": 8}))
    b = elastic_quota_from_k8s(eq("b", "ml-2", max={"nvidia.com/gpu": 4}))
    port.watch.handler(EventType.ADDED, a)
    port.watch.handler(EventType.ADDED, b)
    got = port.quota("ml")
    assert got is not None
    assert "ml-1/a" in got.problem and "ml-2/b" in got.problem
    assert got.max == quota.UNLIMITED  # neither is enforced silently
    port.watch.handler(EventType.DELETED, b)
    got = port.quota("ml")
    assert got is not None and got.problem == "" and got.max[0] == 8000


def test_an_unchanged_spec_and_a_stale_delete_change_nothing() -> None:
    port, changes = _port()
    spec = elastic_quota_from_k8s(eq(max={"nvidia.com/gpu": 8}))
    port.watch.handler(EventType.ADDED, spec)
    port.watch.handler(EventType.MODIFIED, spec)  # our own status.used write
    stale = elastic_quota_from_k8s(eq(max={"nvidia.com/gpu": 8}, uid="old"))
    port.watch.handler(EventType.DELETED, stale)
    assert port.quota("team-a") is not None
    assert len(changes) == 1


async def test_without_the_crd_the_port_is_synced_and_knows_no_quota() -> None:
    port = KubeQuotas(FakeKube(list, list_status=404))  # type: ignore[arg-type]
    task = asyncio.create_task(port.run())
    await asyncio.wait_for(port.wait_synced(), 5)
    assert not port.served
    assert tuple(port.quotas()) == ()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
