"""`gpusched run` as a real process: killed (SIGKILL) in the middle of a burst and started
again, stopped with SIGTERM (exit 0), refused a bad configuration (exit 2, field named)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
from pathlib import Path

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import card_usage, cards_of, demo_pod, mixed_workload, read_decisions
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import Kube, pod_path
from tests.integration.daemon_support import (
    create_pods,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


async def _start(kubeconfig: Path, config: Path, log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *daemon_argv(kubeconfig, config),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


async def test_restart_in_the_middle_of_a_burst(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    pool = pool_name()
    # 30 nodes (180 cards, 80 of them A100) for about 82 whole cards and 28 shares: all 80
    # pods must fit whatever order the two daemons place them in. With 20 (124 cards, 56
    # A100) unconstrained pods placed first could take every A100 card an A100-only pod
    # needs, which no event ever frees (no preemption yet): the pod then waited for the
    # 5-minute unschedulable flush and the test timed out (seen once in five runs).
    nodes = [pool_node(s, pool) for s in pool_specs(pool, 30)]
    config = tmp_path / "config.yaml"
    # A slow client makes the burst last long enough to kill the daemon in its middle.
    # Leader election stays on, with a private Lease and short timings: the killed daemon
    # cannot release it, so the second one takes over when it expires (leaseDuration 2 s
    # after it first sees it), which is what a replica does after a crash.
    config.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "clientConnection: {qps: 40, burst: 5}\n"
        f"leaderElection: {{resourceName: gpusched-restart-{pool}, leaseDurationSeconds: 2,"
        " renewDeadlineSeconds: 1.5, retryPeriodSeconds: 0.5}\n"
    )
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    pods = mixed_workload(80, seed=3, impossible=False, **placement(pool))
    names = [p["metadata"]["name"] for p in pods]
    async with node_pool(kube, nodes) as cards:
        first = await _start(cluster.kubeconfig, config, logs[0])
        try:
            await create_pods(kube, namespace, pods)
            await until_bound(kube, namespace, names, 20)
        finally:
            first.kill()  # SIGKILL: no chance to finish anything
            await first.wait()
        second = await _start(cluster.kubeconfig, config, logs[1])
        try:
            final = await until_bound(kube, namespace, names, len(names))
        finally:
            second.send_signal(signal.SIGTERM)
            rc = await asyncio.wait_for(second.wait(), 40)
    assert rc == 0, logs[1].read_text()[-2000:]
    assert card_usage(final.values(), cards) == []
    by_uid = {p["metadata"]["uid"]: p for p in final.values()}
    bound_by = [{r["uid"] for r in read_decisions(log) if r["result"] == "bound"} for log in logs]
    assert bound_by[0], "the first daemon bound nothing before it was killed"
    assert bound_by[1], "the second daemon bound nothing"
    # Bound exactly once: no pod's binding is claimed by both daemons.
    assert not bound_by[0] & bound_by[1]
    # The restarted daemon recovered the cards from the API: its placements agree with
    # the annotations, and (above) no card is over-allocated.
    for rec in read_decisions(logs[1]):
        if rec["result"] == "bound":
            pod = by_uid[rec["uid"]]
            assert rec["node"] == pod["spec"]["nodeName"]
            assert rec["cards"] == cards_of(pod)[0]
    second_log = logs[1].read_text()
    assert "stopped" in second_log
    assert '"leader elected"' in second_log and '"leader lease released"' in second_log


async def test_bad_config_stops_start_up_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "podMaxBackoffSeconds: 0.5\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpusched.cli",
        "run",
        "--config",
        str(config),
        "--kubeconfig",
        str(tmp_path / "unused"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert b"podMaxBackoffSeconds" in err, err
    assert not out


async def test_pod_is_not_bound_twice_after_restart_even_if_annotated(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    """A daemon killed between PreBind and Bind leaves gpu-ids on an unbound pod; the next
    one must place it afresh (the stale annotation is overwritten, not trusted)."""
    pool = pool_name()
    spec = pool_specs(pool, 1)[0]
    where = placement(pool)
    stale = demo_pod("stale", gpus=2, annotations={"gpusched.io/gpu-ids": "6,7"}, **where)
    async with node_pool(kube, [pool_node(spec, pool)]):
        await kube.post(pod_path(namespace), stale)
        await kube.post(pod_path(namespace), demo_pod("fresh", gpus=6, **where))

        async with running_daemon(cluster.kubeconfig, io.StringIO()):
            final = await until_bound(kube, namespace, ["stale", "fresh"], 2)
    assert card_usage(final.values(), {spec.name: 8}) == []
