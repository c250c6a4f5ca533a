"""Configuration hot reload with `gpusched run --config FILE` as a real process: the file is
a ConfigMap volume updated the kubelet's way (tests/configmap_volume.py), and every wait is
on the daemon's log records or on the API's watch.

The pool is two KWOK nodes, an 8-card A100 and a 2-card T4, and the profile scores with two
plugins that disagree on them: GpuPackingScore prefers the untouched node with the fewest
cards (the T4) and then the used one; NodeResourcesFit (LeastAllocated over nvidia.com/gpu)
the node with the most free cards (the A100). Whichever weighs more decides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod
from gpusched.kube import JSON, Kube, pod_path
from tests.configmap_volume import ConfigMapVolume
from tests.integration.daemon_support import (
    SHAPES,
    first_event,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    until_bound,
)
from tests.integration.process_support import LEASE, DaemonProcess, Record

pytestmark = pytest.mark.integration
REFUSED = "configuration refused; keeping the running configuration"
POLL = "0.2"  # --config-poll-seconds: the kubelet's own delay is not under test


def config(
    fit: float,
    packing: float,
    extra: str = "",
    score_extra: str = "",
    election: str = "{leaderElect: false}",
) -> str:
    return (
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "clientConnection: {qps: 1000, burst: 1000}\n"
        f"leaderElection: {election}\n" + extra + "profiles:\n"
        "  - schedulerName: ai-scheduler\n"
        "    plugins:\n"
        "      score:\n"
        "        disabled: [{name: '*'}]\n"
        f"        enabled: [{{name: NodeResourcesFit, weight: {fit}}},"
        f" {{name: GpuPackingScore, weight: {packing}}}{score_extra}]\n"
        "    pluginConfig:\n"
        "      - name: NodeResourcesFit\n"
        "        args: {scoringStrategy: {type: LeastAllocated,"
        " resources: [{name: nvidia.com/gpu, weight: 1}]}}\n"
    )


PACKING_WINS = config(fit=1, packing=100)
FIT_WINS = config(fit=100, packing=1)


def _pool(pool: str) -> tuple[list[JSON], str, str]:
    specs = pool_specs(pool, 2, shapes=(SHAPES[0], SHAPES[2]))  # A100 x8, T4 x2
    return [pool_node(s, pool) for s in specs], specs[0].name, specs[1].name


async def _configmap(kube: Kube, namespace: str, text: str) -> JSON:
    """The ConfigMap the file stands for: the refusal's Event regards it."""
    body = {"metadata": {"name": "gpusched-config"}, "data": {"config.yaml": text}}
    return await kube.post(f"/api/v1/namespaces/{namespace}/configmaps", body)


async def _start(
    cluster: LocalCluster,
    volume: ConfigMapVolume,
    tmp_path: Path,
    namespace: str,
    log: str = "daemon.log",
) -> DaemonProcess:
    return await DaemonProcess.start(
        cluster.kubeconfig,
        volume.path,
        tmp_path / log,
        env={"GPUSCHED_CONFIG_MAP": f"{namespace}/gpusched-config"},
        extra=("--config-poll-seconds", POLL),
    )


async def _place(kube: Kube, daemon: DaemonProcess, namespace: str, name: str, pool: str) -> Record:
    """Create a one-GPU pod in the pool; its bound decision record."""
    await kube.post(pod_path(namespace), demo_pod(name, gpus=1, **placement(pool)))
    await until_bound(kube, namespace, [name], 1)
    key = f"{namespace}/{name}"
    return await daemon.wait_for(
        lambda r: r.get("event") == "decision" and r["pod"] == key and r["result"] == "bound",
        f"the bound decision of {key}",
    )


async def test_a_weight_change_applies_from_the_next_pod(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    pool = pool_name()
    nodes, a100, t4 = _pool(pool)
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(PACKING_WINS)
    await _configmap(kube, namespace, PACKING_WINS)
    async with node_pool(kube, nodes):
        daemon = await _start(cluster, volume, tmp_path, namespace)
        try:
            first = await _place(kube, daemon, namespace, "first", pool)
            assert first["node"] == t4 and first["config_generation"] == 1, first
            volume.write(FIT_WINS)
            reloaded = await daemon.wait_for(
                lambda r: r.get("event") == "configuration reloaded", "the reload's log line"
            )
            assert reloaded["generation"] == 2
            assert reloaded["file"] == str(volume.path)
            assert reloaded["changes"] == [
                "ai-scheduler: GpuPackingScore weight 100 -> 1",
                "ai-scheduler: NodeResourcesFit weight 1 -> 100",
            ]
            # Only weights changed: every plugin instance was kept.
            assert reloaded["new_plugin_instances"] == {"ai-scheduler": []}
            second = await _place(kube, daemon, namespace, "second", pool)
            assert second["node"] == a100 and second["config_generation"] == 2, second
        finally:
            rc = await daemon.terminate()
    assert rc == 0, daemon.tail()


async def test_an_invalid_config_is_refused_and_the_old_one_keeps_working(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    pool = pool_name()
    nodes, _, t4 = _pool(pool)
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(PACKING_WINS)
    configmap = await _configmap(kube, namespace, PACKING_WINS)
    bad = config(fit=100, packing=-1, score_extra=", {name: NoSuchPlugin, weight: 1}")
    async with node_pool(kube, nodes):
        daemon = await _start(cluster, volume, tmp_path, namespace)
        try:
            await daemon.wait_for(lambda r: r.get("event") == "started", "start-up")
            volume.write(bad)
            refused = await daemon.wait_for(lambda r: r.get("event") == REFUSED, "the refusal")
            assert refused["level"] == "error" and refused["reason"] == "InvalidConfiguration"
            assert refused["file"] == str(volume.path) and refused["generation"] == 1
            path = "profiles[0].plugins.score.enabled"
            assert refused["problems"] == [
                f"{path}[GpuPackingScore].weight: must be a positive finite number, got -1",
                f"{path}[NoSuchPlugin].name: unknown plugin 'NoSuchPlugin' (known: "
                + refused["problems"][1].split("(known: ")[1],
            ]
            event = await first_event(kube, namespace, "gpusched-config", "InvalidConfiguration")
            assert event["type"] == "Warning"
            assert event["involvedObject"]["kind"] == "ConfigMap"
            assert event["involvedObject"]["uid"] == configmap["metadata"]["uid"]
            assert "keeping configuration generation 1" in event["message"]
            assert "got -1" in event["message"] and "NoSuchPlugin" in event["message"]
            # Still the old weights: packing puts the pod on the T4.
            placed = await _place(kube, daemon, namespace, "after", pool)
            assert placed["node"] == t4 and placed["config_generation"] == 1, placed
        finally:
            rc = await daemon.terminate()
    assert rc == 0, daemon.tail()
    assert not daemon.events("configuration reloaded")


async def test_a_restart_only_change_is_refused_naming_it(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    pool = pool_name()
    nodes, _, t4 = _pool(pool)
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(PACKING_WINS)
    await _configmap(kube, namespace, PACKING_WINS)
    # A valid file, but it resizes the snapshot (and changes weights: not applied either).
    restart = config(fit=100, packing=1, extra="maxCardsPerNode: 16\n")
    async with node_pool(kube, nodes):
        daemon = await _start(cluster, volume, tmp_path, namespace)
        try:
            await daemon.wait_for(lambda r: r.get("event") == "started", "start-up")
            volume.write(restart)
            refused = await daemon.wait_for(lambda r: r.get("event") == REFUSED, "the refusal")
            assert refused["reason"] == "ConfigurationNeedsRestart"
            assert refused["problems"] == ["maxCardsPerNode: 8 -> 16: needs a restart"]
            event = await first_event(
                kube, namespace, "gpusched-config", "ConfigurationNeedsRestart"
            )
            assert "maxCardsPerNode: 8 -> 16: needs a restart" in event["message"]
            placed = await _place(kube, daemon, namespace, "after", pool)
            assert placed["node"] == t4 and placed["config_generation"] == 1, placed
        finally:
            rc = await daemon.terminate()
    assert rc == 0, daemon.tail()


async def test_a_standby_reloads_too_and_schedules_with_the_new_file_once_it_leads(
    cluster: LocalCluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Two replicas on one file and one Lease: both apply the new version (the standby's
    configuration stays current), and after a failover the new leader schedules with it."""
    pool = pool_name()
    nodes, a100, _ = _pool(pool)
    lease = ", ".join(f"{k}: {v}" for k, v in {**LEASE, "resourceName": f"reload-{pool}"}.items())
    election = f"{{{lease}}}"
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(config(fit=1, packing=100, election=election))
    await _configmap(kube, namespace, PACKING_WINS)
    async with node_pool(kube, nodes):
        leader = await _start(cluster, volume, tmp_path, namespace, "leader.log")
        standby: DaemonProcess | None = None
        try:
            await leader.wait_for(
                lambda r: r.get("event") == "leader elected", "leadership", timeout=300
            )
            standby = await _start(cluster, volume, tmp_path, namespace, "standby.log")
            await standby.wait_for(
                lambda r: r.get("event") == "leader observed", "the standby seeing the leader"
            )
            volume.write(config(fit=100, packing=1, election=election))
            for replica in (leader, standby):
                reloaded = await replica.wait_for(
                    lambda r: r.get("event") == "configuration reloaded", "the reload"
                )
                assert reloaded["generation"] == 2
            assert await leader.terminate() == 0, leader.tail()  # releases the Lease
            await standby.wait_for(
                lambda r: r.get("event") == "leader elected", "the standby taking over"
            )
            placed = await _place(kube, standby, namespace, "after-failover", pool)
            # The new weights: NodeResourcesFit now decides, the A100 has the most free cards.
            assert placed["node"] == a100 and placed["config_generation"] == 2, placed
        finally:
            await leader.kill()
            if standby is not None:
                assert await standby.terminate() == 0, standby.tail()
    assert not leader.decisions(), "the pod was placed by the new leader only"
