"""The fault matrix, item 5: two `gpusched run` replicas, and leadership moved by an edit of
the Lease in the middle of a burst.

The Lease is PUT with holderIdentity naming the standby, or an identity no replica has,
while the leader is binding a burst. The old leader must notice at its next renewal, stop
binding (every PreBind/Bind is fenced on a fresh renewal) and exit 1; the standby takes the
Lease (at once when it is named, after the edited record expires otherwise) and, since the
old holder never released it, waits one lease duration before its first Binding. Then
every pod is bound, the invariant checker finds nothing (a pod watch for the whole test
feeds its BindingLog: no pod bound twice), and the decision records show the old leader's
Bindings all answered before the new leader's first binding cycle began.

GPUSCHED_SOAK=1 (`make soak-faults`) moves leadership more times, with bigger bursts."""

from __future__ import annotations

import math
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.kube import ApiError, Kube
from tests.integration.daemon_support import (
    create_pods,
    node_pool,
    pool_name,
    pool_node,
    pool_specs,
)
from tests.integration.fault_support import assert_invariants, pod_watch, soak_sizes
from tests.integration.process_support import (
    TOOK_OVER,
    DaemonProcess,
    Record,
    burst_pods,
    process_config,
)

pytestmark = pytest.mark.integration

ROUNDS, BURST = soak_sizes(1, 48)
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


def _at(record: Record) -> float:
    return datetime.fromisoformat(record["timestamp"]).timestamp()


def _binding_started(record: Record) -> float:
    """When a decision's binding cycle began: its record is written at the end."""
    return _at(record) - record["us"]["Binding"] / 1e6


async def _move_lease(kube: Kube, path: str, holder: str) -> None:
    """PUT the Lease naming `holder`, as `kubectl edit` would; the leader renews meanwhile,
    so a 409 (stale resourceVersion) is read again and retried."""
    for _ in range(20):
        lease = await kube.get(path)
        lease["spec"]["holderIdentity"] = holder
        try:
            await kube.request("PUT", path, body=lease)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"could not write the Lease {path} in 20 attempts")


@pytest.mark.parametrize("new_holder", ["standby", "unknown"])
async def test_leadership_moved_by_a_lease_edit_mid_burst(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    tmp_path: Path,
    new_holder: str,
    record_property: Any,
) -> None:
    t0 = time.monotonic()
    pool = pool_name()
    total = ROUNDS * BURST
    nodes = [pool_node(s, pool) for s in pool_specs(pool, max(30, math.ceil(total * 0.47)))]
    node_names = [node["metadata"]["name"] for node in nodes]
    lease_name = f"gpusched-move-{pool}"
    lease_path = f"{LEASES}/{lease_name}"
    # A slow client: the burst's bindings last a few seconds, so the edit lands in them.
    config = process_config(tmp_path / "config.yaml", lease_name, qps=15, burst=5)
    started: list[DaemonProcess] = []

    async def replica(name: str) -> DaemonProcess:
        proc = await DaemonProcess.start(
            cluster.kubeconfig, config, tmp_path / f"{name}.log", env={"POD_NAME": name}
        )
        started.append(proc)
        return proc

    names: list[str] = []
    deposed = 0
    try:
        async with node_pool(kube, nodes), pod_watch(kube, namespace) as watch:
            leader = await replica("r0")
            elected = await leader.wait_for(lambda r: r["event"] == "leader elected", "election")
            leader_id = elected["identity"]
            for k in range(ROUNDS):
                standby = await replica(f"r{k + 1}")
                seen = await standby.wait_for(
                    lambda r, held=leader_id: (
                        r["event"] == "leader observed" and r["holder"] == held
                    ),
                    "the standby seeing the leader",
                )
                standby_id = seen["identity"]
                target = (
                    standby_id if new_holder == "standby" else f"intruder_{secrets.token_hex(3)}"
                )

                pods = burst_pods(k, BURST, pool, seed=200 + k)
                batch = [p["metadata"]["name"] for p in pods]
                names += batch
                await create_pods(kube, namespace, pods)
                # Mid-burst: a quarter of it bound, then the edit.
                await watch.until_bound(batch, len(batch) // 4)
                await _move_lease(kube, lease_path, target)

                lost = await leader.wait_for(lambda r: r["event"] == "leader lost", "leader lost")
                assert target in lost["reason"], lost
                assert await leader.exited() == 1, leader.tail()
                # Before its first binding cycle, the new leader says it waits out the old one.
                took = await standby.wait_for(
                    lambda r: (
                        r["event"] == TOOK_OVER
                        or (r["event"] == "decision" and r["result"] == "bound")
                    ),
                    "a takeover wait or a binding by the new leader",
                )
                assert took["event"] == TOOK_OVER, took
                assert took["previous_holder"] == (
                    leader_id if new_holder == "standby" else target
                ), took
                await watch.until_bound(names)

                ours = {f"{namespace}/{n}" for n in batch}
                old = leader.decisions("bound")
                assert any(r["pod"] in ours for r in old), f"round {k}: no binding before the edit"
                # Fenced: no Binding started after the old leader saw the Lease taken.
                assert all(_binding_started(r) < _at(lost) for r in old), [
                    (r["pod"], r["timestamp"]) for r in old if _binding_started(r) >= _at(lost)
                ]
                # One writer at a time: every Binding of the old leader was answered before
                # the new leader began its first binding cycle.
                new = await standby.wait_for(
                    lambda r: r.get("event") == "decision" and r["result"] == "bound",
                    "a binding by the new leader",
                )
                assert max(_at(r) for r in old) < _binding_started(new), (old[-1], new)
                assert new["pod"] in ours  # the edit landed inside the burst
                assert not {r["uid"] for r in old} & {r["uid"] for r in standby.decisions("bound")}
                deposed += sum(r["pod"] in ours for r in old)

                await assert_invariants(
                    kube, namespace, node_names, watch, names, f"round {k} ({new_holder})"
                )
                leader, leader_id = standby, standby_id
            assert await leader.terminate() == 0, leader.tail()
    finally:
        for proc in started:
            await proc.kill()
        try:
            await kube.delete(lease_path)
        except ApiError as exc:
            if exc.status != 404:
                raise
    record_property(
        "soak",
        f"lease moved to the {new_holder} identity mid-burst: {ROUNDS} round(s) x {BURST} pods,"
        f" {deposed} recorded bound by the deposed leaders,"
        f" 0 double bindings, 0 violations, {time.monotonic() - t0:.0f} s",
    )
