"""Two daemons in-process against the real API server, contending for one Lease: only the
leader places pods; stopping it releases the Lease and the standby takes over at once
(well inside a leaseDuration) and places the next pod. Waits are on the daemons' events
and on watches, never on sleeps."""

from __future__ import annotations

import asyncio
import io
import secrets

import orjson
import pytest

from gpusched.daemon import Daemon
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.testkit import wait_pod_scheduled
from gpusched.kube import JSON, Kube, pod_path
from tests.integration.daemon_support import (
    SHORT_LEASE,
    WARM_UP_TIMEOUT,
    daemon_settings,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
)

pytestmark = pytest.mark.integration
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


def _decided(stream: io.StringIO) -> list[str]:
    """The pods (namespace/name) of a daemon's decision records."""
    records = (orjson.loads(line) for line in stream.getvalue().splitlines())
    return [r["pod"] for r in records if r.get("event") == "decision"]


async def _bindings_done(daemon: Daemon) -> None:
    """The decision record follows the Binding POST's answer, which the watch may beat."""
    if daemon.bindings:
        await asyncio.wait(set(daemon.bindings), timeout=30)


def _leader_gauge(daemon: Daemon) -> float | None:
    return daemon.metrics.registry.get_sample_value("gpusched_leader")


async def _first_to_lead(a: Daemon, b: Daemon) -> tuple[Daemon, Daemon]:
    waiters = {asyncio.ensure_future(d.leading.wait()): d for d in (a, b)}
    done, pending = await asyncio.wait(waiters, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    for w in pending:
        w.cancel()
    assert done, "neither daemon acquired the Lease within 30 s"
    leader = waiters[next(iter(done))]
    return leader, (b if leader is a else a)


async def test_only_the_leader_schedules_and_a_released_lease_passes_at_once(
    cluster: LocalCluster, kube: Kube, namespace: str
) -> None:
    pool = pool_name()
    spec = pool_specs(pool, 1)[0]
    where = placement(pool)
    settings = daemon_settings(timing=SHORT_LEASE)  # one private Lease, both daemons
    lease_path = f"{LEASES}/{settings['leaderElection']['resourceName']}"
    streams = {"a": io.StringIO(), "b": io.StringIO()}
    ids = {name: f"{name}_{secrets.token_hex(3)}" for name in streams}
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(
            cluster.kubeconfig, streams["a"], settings, identity=ids["a"], lead=False
        ) as a,
        running_daemon(
            cluster.kubeconfig, streams["b"], settings, identity=ids["b"], lead=False
        ) as b,
    ):
        leader, standby = await _first_to_lead(a, b)
        assert leader.elector is not None and standby.elector is not None
        assert standby.is_ready and not standby.leading.is_set()  # warm, not scheduling
        held: JSON = await kube.get(lease_path)
        assert held["spec"]["holderIdentity"] == leader.elector.identity
        assert held["spec"]["leaseDurationSeconds"] == SHORT_LEASE["leaseDurationSeconds"]

        await kube.post(pod_path(namespace), demo_pod("first", gpus=1, **where))
        first = await wait_pod_scheduled(kube, namespace, "first")
        assert first["spec"]["nodeName"] == spec.name
        await _bindings_done(leader)
        leader_stream = streams["a" if leader is a else "b"]
        standby_stream = streams["b" if leader is a else "a"]
        assert f"{namespace}/first" in _decided(leader_stream)
        assert _decided(standby_stream) == []
        assert (_leader_gauge(leader), _leader_gauge(standby)) == (1, 0)

        # The standby seeks the Lease only once its kernels are compiled (daemon/warmup.py):
        # what is measured below is the hand-over, not a warm-up still running.
        await asyncio.wait_for(standby.warmed.wait(), WARM_UP_TIMEOUT)
        # SIGTERM to the leader: it releases the Lease on the way out, and the standby
        # takes it at its next retry instead of waiting for it to expire.
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        leader.stop()
        await asyncio.wait_for(leader.stopped.wait(), 30)
        assert not leader.failed
        assert "leader lease released" in leader_stream.getvalue()
        await asyncio.wait_for(standby.leading.wait(), 30)
        # Without the release the standby would wait a whole leaseDuration after the
        # leader's last renewal; with it, one retry period (0.5 s, jittered to <= 1.1 s).
        assert loop.time() - stopped_at < SHORT_LEASE["leaseDurationSeconds"]
        taken: JSON = await kube.get(lease_path)
        assert taken["spec"]["holderIdentity"] == standby.elector.identity
        assert taken["spec"]["leaseTransitions"] == held["spec"]["leaseTransitions"] + 1
        assert (_leader_gauge(leader), _leader_gauge(standby)) == (0, 1)

        await kube.post(pod_path(namespace), demo_pod("second", gpus=1, **where))
        second = await wait_pod_scheduled(kube, namespace, "second")
        assert second["spec"]["nodeName"] == spec.name
        await _bindings_done(standby)
        assert _decided(standby_stream) == [f"{namespace}/second"]
        assert f"{namespace}/second" not in _decided(leader_stream)

    elected = [
        orjson.loads(line)
        for line in standby_stream.getvalue().splitlines()
        if '"leader elected"' in line
    ]
    assert elected and elected[0]["identity"] == standby.elector.identity
    await kube.delete(lease_path)
