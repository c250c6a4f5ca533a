"""DynamicResources: a pod with DRA claims is refused with a reason, never bound."""

from __future__ import annotations

from typing import Any

from gpusched.core.queue import ClusterEvent
from gpusched.core.queue.hints import may_help
from gpusched.core.schedule_one import Result
from gpusched.framework import Code, CycleState
from gpusched.model.pod import pod_from_k8s
from gpusched.plugins.dynamic_resources import DynamicResources
from tests.builders import ai_pod, ai_sim, gpu_node, snapshot
from tests.fakes import FakeHandle


def _raw(claims: list[dict[str, Any]] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "ai-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    if claims is not None:
        spec["resourceClaims"] = claims
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-p"}, "spec": spec}


def test_claims_are_parsed_by_name() -> None:
    raw = _raw([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, {"name": "nic"}])
    assert pod_from_k8s(raw).resource_claims == ("gpu", "nic")
    assert pod_from_k8s(_raw(None)).resource_claims == ()
    assert pod_from_k8s(_raw("junk")).resource_claims == ()  # type: ignore[arg-type]


def test_a_pod_with_claims_is_unresolvable_with_a_reason_and_others_skip() -> None:
    plugin = DynamicResources(None, FakeHandle(snapshot(gpu_node("a"))))
    _, st = plugin.pre_filter(CycleState(), pod_from_k8s(_raw([{"name": "gpu"}])))
    assert st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.plugin == "DynamicResources"
    assert "pod has resourceClaims (gpu): gpusched does not allocate" in st.message()
    _, st = plugin.pre_filter(CycleState(), pod_from_k8s(_raw(None)))
    assert st.code is Code.SKIP


def test_the_default_profile_never_binds_a_pod_with_claims() -> None:
    sim = ai_sim(gpu_node("a"))
    claimed = pod_from_k8s(_raw([{"name": "gpu"}]))
    decision = sim.submit(claimed)
    assert decision.result is Result.UNSCHEDULABLE
    assert "resourceClaims (gpu)" in decision.message
    assert sim.submit(ai_pod("plain")).result is Result.SCHEDULED


def test_no_cluster_event_wakes_it_only_the_flush() -> None:
    rejected = frozenset({"DynamicResources"})
    for event in (ClusterEvent.NODE_ADD, ClusterEvent.ASSIGNED_POD_DELETE):
        assert not may_help(rejected, event)
    assert may_help(rejected, ClusterEvent.FLUSH)
