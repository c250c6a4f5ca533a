"""Every workload example in manifests/examples/ applies cleanly, as written, on the local
control plane that `make cluster-up` starts (its 64 generated GPU nodes, untainted), and
the daemon schedules its pods; for demo-workload.yaml through the very code `make
demo-cluster` runs (which also prints the table). Waits by watching, never by sleeping."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
import yaml

from gpusched.devcluster import (
    ClusterOptions,
    LocalCluster,
    demo,
    generated_fleet,
    install_crds,
    load_nodes,
    wait_nodes_ready,
)
from gpusched.kube import JSON, Kube, create_namespace
from tests.integration.daemon_support import running_daemon, started_cluster

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples"
CLUSTER_UP_NODES = 64  # `make cluster-up`'s default


def _workloads(path: Path) -> list[JSON]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _impossible(pod: JSON) -> bool:
    """demo-workload.yaml's pods that no node can hold, on purpose."""
    return pod["metadata"].get("labels", {}).get("demo.gpusched.io/kind") == "impossible"


def test_every_example_applies_and_the_daemon_schedules_its_pods(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Every file here is a workload: the scheduler's configuration, not a Kubernetes object,
    # lives in config/.
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {
        "demo-workload.yaml",
        "inference-deployment.yaml",
        "training-job.yaml",
        "gang-podgroup.yaml",
    } <= {p.name for p in files}
    for path in files:
        kinds = {d["kind"] for d in _workloads(path)}
        # Users run controllers, not bare pods (and PodGroups for gangs).
        workloads = {"Deployment", "Job", "StatefulSet", "CronJob"}
        assert kinds & workloads and kinds <= {*workloads, "PodGroup"}, (path, kinds)
    options = ClusterOptions(attached=True, kube_scheduler=False)
    with started_cluster(options) as local:
        asyncio.run(_apply_all(local, files, tmp_path))
    out = capsys.readouterr()
    assert "bound. The cluster and the daemon keep running" in out.err
    assert "gpusched:" in out.out and "pending" in out.out  # the table, impossible pods too


async def _apply_all(local: LocalCluster, files: list[Path], tmp_path: Path) -> None:
    async with await Kube.connect(local.kubeconfig) as kube:
        await install_crds(kube, local.crd_dir)
        specs = generated_fleet(CLUSTER_UP_NODES)
        await load_nodes(kube, specs)
        await wait_nodes_ready(kube, [s.name for s in specs])
        stream = io.StringIO()
        async with running_daemon(local.kubeconfig, stream):
            for path in files:
                if path.name == demo.WORKLOAD.name:
                    await _demo(local, path, tmp_path)
                    namespace = demo.DEMO_NAMESPACE
                else:
                    await _example(kube, path)
                    namespace = path.stem
                # Each example starts on the empty cluster a user's `make cluster-up` gives:
                # the gang's 8 x 4-GPU workers need one rack's four 8-GPU nodes all free,
                # which the demo's random tie-breaks sometimes left nowhere.
                await demo.clear_workloads(kube, namespace)


async def _example(kube: Kube, path: Path) -> None:
    namespace = path.stem
    await create_namespace(kube, namespace)
    docs = _workloads(path)
    await demo.apply_docs(kube, namespace, docs)
    want = sum(demo.replicas(d) for d in docs)

    def all_bound(pods: dict[str, JSON]) -> bool:
        return len(pods) >= want and all(p["spec"].get("nodeName") for p in pods.values())

    pods = await demo.wait_settled(kube, namespace, (), timeout=90, until=all_bound)
    assert len(pods) == want, (path.name, sorted(pods))
    for pod in pods.values():
        assert pod["spec"]["schedulerName"] == "ai-scheduler"
        assert "gpusched.io/gpu-ids" in pod["metadata"]["annotations"], pod["metadata"]


async def _demo(local: LocalCluster, path: Path, tmp_path: Path) -> None:
    log = tmp_path / "gpusched.log"  # the decision records: in the test's stream instead
    log.write_text("")
    docs = demo.load_workload(path)
    assert await demo._apply(local.kubeconfig, docs, log) == 0
    async with await Kube.connect(local.kubeconfig) as kube:
        listing = await kube.get(f"/api/v1/namespaces/{demo.DEMO_NAMESPACE}/pods")
    pods = listing["items"]
    assert len(pods) == sum(demo.replicas(d) for d in docs)
    for pod in pods:
        bound = bool(pod["spec"].get("nodeName"))
        assert bound != _impossible(pod), (pod["metadata"]["name"], pod.get("status"))
    # KWOK completes Job pods once they run, and finished pods hold no cards.
    live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    assert demo.card_usage(live, {s.name: s.gpus for s in generated_fleet(CLUSTER_UP_NODES)}) == []
