"""gpusched against kube-scheduler on the real control plane (issue 11's acceptance test).

One seeded workload (gpusched/devcluster/differential.py) goes to kube-scheduler on one
fresh local cluster, then to gpusched (the daemon in-process) on another with the same
nodes; the two run one after the other (CI has two cores). The independent checker
(gpusched/devcluster/diffcheck.py, no gpusched code) judges both outcomes.

What is asserted, for each scheduler:

1. no hard constraint violated (diffcheck.check over the API objects: resources within
   allocatable, host ports, node affinity, taints, cordon, gates, pod (anti-)affinity,
   spread, volumes' node affinity);
2. every feasible pod bound. The generator proves each one placeable whatever the order and
   the other pods' nodes (differential.unproven, empty for this seed: asserted here and in
   the unit tests), so the tolerance is zero: gpusched binds exactly as many pods as
   kube-scheduler, and both as many as the workload has feasible pods;
3. every impossible pod and every gated pod left unbound;
4. for each impossible pod, both FailedScheduling messages parse as "0/N nodes are
   available: <count> <reason>, ..." (or a pre-filter message) with the same N, the same
   reasons and the same count for each. kube-scheduler appends its PostFilter's verdict
   ("preemption: ..."); that part is reported, not compared (gpusched's preemption is a
   plugin of its own with its own words).

FEATURES picks the constraint features of the workload; GPUSCHED_DIFF_FEATURES=all (or a
comma-separated list) overrides it, e.g. to try a feature whose plugin is being written.
"""

from __future__ import annotations

import asyncio
import io
import os

import pytest

from gpusched.config import API_VERSION, KIND, load_config
from gpusched.daemon.warmup import warm_kernels
from gpusched.devcluster import ClusterOptions, install_crds
from gpusched.devcluster import differential as diff
from gpusched.devcluster.configs import BASELINE_SCHEDULER
from gpusched.devcluster.diffcheck import check, parse_fit_message
from gpusched.kube import Kube
from gpusched.model import keys
from gpusched.plugins import default_registry
from tests.integration.daemon_support import running_daemon, started_cluster

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("GPUSCHED_DIFF_SEED", "11"))
FEATURES = diff.ENFORCED


def _features() -> frozenset[str]:
    raw = os.environ.get("GPUSCHED_DIFF_FEATURES", "")
    if raw == "all":
        return diff.FEATURES
    if raw:
        return frozenset(f.strip() for f in raw.split(",") if f.strip())
    return FEATURES


async def _on_fresh_cluster(w: diff.Workload, scheduler: str) -> diff.Result:
    """A new cluster with the workload's nodes, volumes and anchors; then its pods for
    `scheduler` (kube-scheduler runs in that cluster; gpusched in this process)."""
    kube_scheduler = scheduler == BASELINE_SCHEDULER
    options = ClusterOptions(attached=True, kube_scheduler=kube_scheduler)
    with started_cluster(options) as local:
        async with await Kube.connect(local.kubeconfig) as kube:
            await install_crds(kube, local.crd_dir)
            await diff.prepare(kube, w)
            if kube_scheduler:
                return await diff.run_pods(kube, w, scheduler)
            stream = io.StringIO()
            async with running_daemon(local.kubeconfig, stream):
                return await diff.run_pods(kube, w, scheduler)


def _warm_kernels() -> None:
    """Compile the kernels before the daemon starts: its own warm-up does the same, but on
    a loaded machine (other suites on the two cores) it can outlast running_daemon's wait
    for the Lease; compiled once, the daemon's warm-up is quick."""
    registry = default_registry()
    warm_kernels(load_config({"apiVersion": API_VERSION, "kind": KIND}, registry), registry)


def _run(w: diff.Workload, scheduler: str) -> diff.Result:
    # Each cluster on its own event loop: the in-process daemon's tasks end with it.
    return asyncio.run(_on_fresh_cluster(w, scheduler))


def _verdict(w: diff.Workload, result: diff.Result) -> list[str]:
    problems = [f"violation: {v}" for v in check(result.outcome, diff.judged)]
    feasible = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in w.feasible}
    unbound = sorted(feasible - result.bound)
    if unbound:
        problems.append(f"{len(unbound)} feasible pod(s) left unbound: {unbound[:10]}")
    wrongly = sorted((set(w.impossible) | w.gated) & result.bound)
    if wrongly:
        problems.append(f"impossible or gated pod(s) bound: {wrongly}")
    for key in sorted(w.impossible):
        try:
            parse_fit_message(result.messages[key])
        except (KeyError, ValueError) as exc:
            problems.append(f"{key}: FailedScheduling message not in kube's form: {exc}")
    return problems


def test_gpusched_and_kube_scheduler_agree_on_a_mixed_workload() -> None:
    features = _features()
    w = diff.generate(SEED, features)
    assert diff.unproven(w) == [], "the generator no longer proves every feasible pod fits"
    assert len(w.pods) >= 200 and w.impossible and w.feasible

    kube = _run(w, BASELINE_SCHEDULER)
    _warm_kernels()
    ours = _run(w, keys.SCHEDULER_NAME)

    problems = [f"kube-scheduler: {p}" for p in _verdict(w, kube)]
    problems += [f"gpusched: {p}" for p in _verdict(w, ours)]
    assert not problems, "\n".join(problems)
    # Each bound exactly the feasible pods (and the anchors were created bound).
    assert ours.bound == kube.bound

    differ = []
    for key in sorted(w.impossible):
        theirs = parse_fit_message(kube.messages[key])
        mine = parse_fit_message(ours.messages[key])
        if theirs.shape != mine.shape:
            differ.append(
                f"{key} ({w.impossible[key]}):\n  kube-scheduler: {kube.messages[key]}\n"
                f"  gpusched:       {ours.messages[key]}"
            )
    assert not differ, "FailedScheduling reasons differ:\n" + "\n".join(differ)
    print(
        f"\ndifferential seed {SEED}, features {sorted(features)}: {len(w.pods)} pods"
        f" ({len(w.feasible)} feasible, {len(w.impossible)} impossible, {len(w.gated)} gated),"
        f" {len(w.anchors)} anchors on {len(w.nodes)} nodes; settled in"
        f" kube-scheduler {kube.seconds:.1f}s, gpusched {ours.seconds:.1f}s"
    )


def test_the_checker_finds_no_fault_in_kube_schedulers_outcome_with_every_feature() -> None:
    """kube-scheduler is the reference: on the workload with every feature (pod affinity,
    spread and volumes included, which gpusched's other plugins are joining), the checker
    must find its outcome clean and every impossible pod reported. A checker that misread
    a constraint would fail here first."""
    w = diff.generate(SEED, diff.FEATURES)
    assert diff.unproven(w) == []
    kube = _run(w, BASELINE_SCHEDULER)
    assert _verdict(w, kube) == []
    spread = parse_fit_message(kube.messages[next(k for k in w.impossible if "spread-nokey" in k)])
    assert spread.reasons.get(
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
