"""The demo workload as Jobs and Deployments (manifests/examples/demo-workload.yaml)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpusched.devcluster import demo, demo_workload


def test_mixed_pods_become_jobs_and_deployments_with_the_same_pods() -> None:
    pods = demo.mixed_workload(60)
    docs = demo.as_controllers(pods)
    assert sum(demo.replicas(d) for d in docs) == 60
    assert len({d["metadata"]["name"] for d in docs}) == len(docs)
    by_kind = Counter(d["kind"] for d in docs)
    assert set(by_kind) == {"Job", "Deployment"}
    for doc in docs:
        template = doc["spec"]["template"]
        kind = template["metadata"]["labels"]["demo.gpusched.io/kind"]
        assert (doc["kind"] == "Job") == (kind in ("whole", "model")), doc["metadata"]["name"]
        assert template["spec"]["schedulerName"] == "ai-scheduler"
        if doc["kind"] == "Job":
            assert template["spec"]["restartPolicy"] == "Never"
            assert doc["spec"]["parallelism"] == doc["spec"]["completions"]
        else:
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= template["metadata"]["labels"].items()
    # Each pod's shape (spec and annotations) is some group's template, as often as it was.
    want = Counter(
        demo._group_name(p["metadata"]["labels"]["demo.gpusched.io/kind"], p) for p in pods
    )
    got: Counter[str] = Counter()
    for doc in docs:
        t = doc["spec"]["template"]
        got[demo._group_name(t["metadata"]["labels"]["demo.gpusched.io/kind"], t)] += demo.replicas(
            doc
        )
    assert got == want


def test_the_shipped_file_is_what_the_generator_writes(tmp_path: Path) -> None:
    out = tmp_path / "w.yaml"
    demo.write_workload(out)
    assert out.read_text() == (Path(__file__).parents[3] / demo.WORKLOAD).read_text()
    assert demo.load_workload(out) == demo_workload.manifests(demo_workload.GPUSCHED)


async def test_apply_refuses_kinds_it_cannot_place() -> None:
    with pytest.raises(ValueError, match="cannot apply kinds"):
        await demo.apply_docs(None, "ns", [{"kind": "ConfigMap"}])  # type: ignore[arg-type]
