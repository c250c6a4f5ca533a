"""DynamicResources: how a pod names its claims."""

from __future__ import annotations

from typing import Any

from gpusched.model.pod import pod_from_k8s


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
