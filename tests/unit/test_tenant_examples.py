"""manifests/examples/tenants/: every object parses with gpusched's own parsers without a
problem, and the tenancy they describe is what the docs say (tests/integration/
test_examples.py globs only the top level of manifests/examples/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpusched.framework.tenancy import tenant_from_labels
from gpusched.model import quota
from gpusched.model.elastic_quota import elastic_quota_from_k8s
from gpusched.model.pod import pod_from_k8s
from gpusched.model.selector import parse_label_selector

EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples" / "tenants"


def docs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return out


def test_the_namespaces_make_two_tenants_each_with_one_valid_quota() -> None:
    objs = docs()
    tenants = {
        d["metadata"]["name"]: tenant_from_labels(
            d["metadata"]["name"], d["metadata"].get("labels")
        )
        for d in objs
        if d["kind"] == "Namespace"
    }
    assert tenants == {"ml-research": "ml", "ml-prod": "ml", "vision": "vision"}
    quotas = [elastic_quota_from_k8s(d) for d in objs if d["kind"] == "ElasticQuota"]
    assert [(q.key, q.problem) for q in quotas] == [("ml-research/quota", ""), ("vision/quota", "")]
    assert {tenants[q.namespace] for q in quotas} == {"ml", "vision"}
    gpu = quota.INDEX[quota.GPU]
    assert all(q.min[gpu] == 16_000 for q in quotas)


def test_the_training_job_parses_with_its_checkpoint_interval_and_its_budget_selects_it() -> None:
    objs = docs()
    job = next(d for d in objs if d["kind"] == "Job")
    template = job["spec"]["template"]
    pod = pod_from_k8s(
        {
            "metadata": {
                "name": "w",
                "namespace": job["metadata"]["namespace"],
                "uid": "u",
                **template["metadata"],
            },
            "spec": template["spec"],
        }
    )
    assert pod.errors == ()
    assert pod.request.gpu_cards == 4 and pod.scheduler_name == "ai-scheduler"
    budget = next(d for d in objs if d["kind"] == "PodDisruptionBudget")
    errors: list[str] = []
    selector = parse_label_selector(budget["spec"]["selector"], "spec.selector", errors)
    assert errors == [] and selector.matches(pod.labels)
    classes = {d["metadata"]["name"]: d for d in objs if d["kind"] == "PriorityClass"}
    # Training may preempt (to reclaim its team's guarantee): no preemptionPolicy Never.
    assert "preemptionPolicy" not in classes["training"]
    assert classes["inference"]["value"] > classes["training"]["value"]
