"""Every workload example in manifests/examples/ applies cleanly, as written, on the local
control plane that `make cluster-up` starts (its 64 generated GPU nodes, untainted), and
the daemon schedules its pods. Then `make demo`'s pieces on the demo's own fleet: its
waves under the daemon and under kube-scheduler's default profile, measured and compared by
the very code `make demo` runs. Waits by watching, never by sleeping."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from gpusched.devcluster import (
    ClusterOptions,
    LocalCluster,
    demo,
    demo_compare,
    demo_run,
    demo_workload,
    generated_fleet,
    install_crds,
    load_nodes,
    wait_nodes_ready,
)
from gpusched.devcluster.nodes import NodeSpec
from gpusched.kube import JSON, Kube, create_namespace
from tests.integration.daemon_support import running_daemon, started_cluster

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "manifests" / "examples"
CLUSTER_UP_NODES = 64  # `make cluster-up`'s default


def _workloads(path: Path) -> list[JSON]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_every_example_applies_and_the_daemon_schedules_its_pods() -> None:
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
        asyncio.run(_apply_all(local, files))


async def _apply_all(local: LocalCluster, files: list[Path]) -> None:
    async with await Kube.connect(local.kubeconfig) as kube:
        await install_crds(kube, local.crd_dir)
        specs = generated_fleet(CLUSTER_UP_NODES)
        await load_nodes(kube, specs)
        await wait_nodes_ready(kube, [s.name for s in specs])
        stream = io.StringIO()
        async with running_daemon(local.kubeconfig, stream):
            for path in files:
                await _example(kube, path)
                # Each example starts on the empty cluster a user's `make cluster-up` gives:
                # the gang's 8 x 4-GPU workers need one rack's four 8-GPU nodes all free,
                # which another example's placements sometimes left nowhere.
                await demo.clear_workloads(kube, path.stem)


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
        ann = pod["metadata"].get("annotations") or {}
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        # GPU pods get their cards; CPU-only pods (the demo's api replicas) none.
        wants_gpu = "nvidia.com/gpu" in limits or "gpusched.io/gpu-milli" in ann
        assert ("gpusched.io/gpu-ids" in ann) == wants_gpu, pod["metadata"]


def test_the_demo_compares_the_daemon_with_kube_scheduler_on_the_same_waves(
    tmp_path: Path,
) -> None:
    """`make demo`'s pieces on one cluster with the demo's fleet and kube-scheduler's
    default profile: the waves under the daemon (in-process, its decision records in a
    file), cleared, then the same waves as kube-scheduler's users write them; every wave of
    both sides settles in time (else the demo would judge nothing), each outcome is checked
    against the pods, and the verdict against the outcomes."""
    fleet = demo_workload.demo_fleet()
    options = ClusterOptions(attached=True, kube_scheduler_stock=True)
    with started_cluster(options) as local:
        ours_waves, theirs_waves, log = asyncio.run(_both(local, fleet, tmp_path))
    # A wave that times out leaves pods still being placed: nothing measured, a failure here.
    assert ours_waves.unsettled == [], ours_waves.unsettled
    assert theirs_waves.unsettled == [], theirs_waves.unsettled
    capacity = {s.name: s.gpus for s in fleet}
    ours_pods, theirs_pods = ours_waves.final, theirs_waves.final
    total = sum(p.pods for p in demo_workload.PARTS)
    assert len(ours_pods) == len(theirs_pods) == total
    # The daemon placed everything; the cards it wrote are consistent and shares share.
    assert all(p["spec"].get("nodeName") for p in ours_pods.values())
    assert demo.card_usage(ours_pods.values(), capacity) == []
    inference = [
        p
        for p in ours_pods.values()
        if p["metadata"]["labels"]["demo.gpusched.io/group"] == "inference"
    ]
    held = demo_compare.held_cards(inference, capacity)
    assert sum(held.values()) < len(inference)  # 24 half-card replicas on fewer cards
    # kube-scheduler's pods ask for whole cards and carry no card ids.
    for pod in theirs_pods.values():
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert "gpusched.io/gpu-ids" not in pod["metadata"].get("annotations", {})
    ours, theirs = (
        demo_compare.outcome(w.final.values(), capacity, before_gang=w.after[-2].values())
        for w in (ours_waves, theirs_waves)
    )
    # Each outcome is what the pods show, counted here another way.
    for outcome, pods in ((ours, ours_pods), (theirs, theirs_pods)):
        bound_train = sum(
            1 for n, p in pods.items() if n.startswith("train-") and p["spec"].get("nodeName")
        )
        assert outcome.bound.get("train", 0) == bound_train
        assert bound_train in (0, 4)  # all or nothing, in both schedulers
        assert outcome.pending == sum(1 for p in pods.values() if not p["spec"].get("nodeName"))
    assert ours.bound["train"] == 4  # the daemon packs: the gang finds its four nodes
    assert ours.used_milli == sum(p.pods * p.milli for p in demo_workload.PARTS)
    rows = demo_compare.rows(ours, theirs)
    line = demo_compare.verdict(rows)
    gang = next(r for r in rows if r.short == "gang train")
    if theirs.bound.get("train", 0) == 0:
        assert gang.winner == "gpusched"
        # The gang's rows (work placed, gang, pending) count once, as one outcome.
        assert "work running: GPU work placed, gang train, pending;" in line, line
        assert "of 3 outcomes" in line, line
    else:
        assert gang.winner == "="
    # The per-pod table reads the daemon's decision records.
    decisions = {r["pod"]: r for r in demo.read_decisions(log)}
    table = demo_run.pod_table(ours_pods, decisions, "demo-gpusched")
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    assert "best of" in out.getvalue() and "train" in out.getvalue()
    # Its "why" quotes the raw scores of the record's chosen_scores, as the Event does.
    record = next(r for r in decisions.values() if r.get("result") == "bound")
    first = next(k for k, v in record["chosen_scores"].items() if v != "no data")
    assert f"{first} {record['chosen_scores'][first]:.1f}" in demo.why(record)


async def _both(
    local: LocalCluster, fleet: list[NodeSpec], tmp_path: Path
) -> tuple[demo_run.Waves, demo_run.Waves, Path]:
    log = tmp_path / "gpusched.log"
    async with await Kube.connect(local.kubeconfig) as kube:
        await install_crds(kube, local.crd_dir)
        await load_nodes(kube, fleet)
        await wait_nodes_ready(kube, [s.name for s in fleet])
        stream = io.StringIO()
        async with running_daemon(local.kubeconfig, stream):
            ours = await demo_run.run_waves(kube, "demo-gpusched", demo_workload.GPUSCHED)
        log.write_text(stream.getvalue())
        await demo.clear_workloads(kube, "demo-gpusched")
        theirs = await demo_run.run_waves(kube, "demo-kube", demo_workload.KUBE_SCHEDULER)
        await demo.clear_workloads(kube, "demo-kube")
    return ours, theirs, log
