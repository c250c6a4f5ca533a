"""The fault matrix, item 1: `gpusched run` killed with SIGKILL at the worst moments of a
burst (GPUSCHED_FAULT, gpusched/kube/faults.py), restarted without the fault, and the
invariant checker (gpusched/devcluster/invariants.py) run over what the API then holds.

For each kill point, repeated bursts on one private node pool: start the daemon with the
fault armed at the n-th time it reaches the point (n inside the burst), create a burst of
mixed pods (whole-card, shared, model-constrained, CPU-only), wait for the process to die
by SIGKILL, start it again without the fault (it takes the dead one's Lease over once it
expires, and waits a lease duration more before binding), wait until every pod of every
burst so far is bound, and check: each pod bound once (a pod watch for the whole test
feeds the BindingLog), no card over 1000 milli or held whole twice, well-formed
assignments, node capacity, every pod bound. The pool fits all bursts together.

GPUSCHED_SOAK=1 (`make soak-faults`) runs more and bigger bursts."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from gpusched.devcluster import LocalCluster
from gpusched.kube import Kube, faults
from tests.integration.daemon_support import (
    create_pods,
    node_pool,
    pool_name,
    pool_node,
    pool_specs,
)
from tests.integration.fault_support import assert_invariants, pod_watch, soak_sizes
from tests.integration.process_support import TOOK_OVER, DaemonProcess, burst_pods, process_config

pytestmark = pytest.mark.integration

BURSTS, BURST = soak_sizes(2, 24)


def _nodes_for(pods: int) -> int:
    # 30 nodes (180 cards, 80 of them A100) hold 80 mixed pods in any order
    # (test_daemon_process.py); the same ratio, with room to spare.
    return max(30, math.ceil(pods * 30 / 80 * 1.25))


@pytest.mark.parametrize("point", faults.POINTS)
async def test_kill_at_point_then_restart_keeps_every_invariant(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    tmp_path: Path,
    point: str,
    record_property: Any,
) -> None:
    t0 = time.monotonic()
    pool = pool_name()
    nodes = [pool_node(s, pool) for s in pool_specs(pool, _nodes_for(BURSTS * BURST))]
    node_names = [node["metadata"]["name"] for node in nodes]
    # A bounded client, so a burst's bindings take a moment and the kill lands in them.
    config = process_config(tmp_path / "config.yaml", f"gpusched-kill-{pool}", qps=100, burst=10)
    names: list[str] = []
    killed_bound = restarted_bound = 0
    async with node_pool(kube, nodes), pod_watch(kube, namespace) as watch:
        for k in range(BURSTS):
            # The kill lands inside the burst, a little later in each one.
            n = max(2, BURST * (k % 3 + 1) // 5)
            armed = await DaemonProcess.start(
                cluster.kubeconfig,
                config,
                tmp_path / f"burst{k}-killed.log",
                env={faults.ENV: f"{point}:{n}"},
            )
            try:
                pods = burst_pods(k, BURST, pool, seed=100 + k)
                batch = [p["metadata"]["name"] for p in pods]
                names += batch
                await create_pods(kube, namespace, pods)
                rc = await armed.exited(timeout=90)
            finally:
                await armed.kill()
            assert rc == -9, f"burst {k}: exit {rc}, not SIGKILL:\n{armed.tail()}"
            assert any(f"kill -9 at {point} (reached {n} " in line for line in armed.stderr)
            killed_bound += len(armed.decisions("bound"))
            # At most the pods before the n-th reached the point can have been recorded
            # bound: the kill came inside the burst, not after it.
            assert len(armed.decisions("bound")) < n, armed.tail()

            restarted = await DaemonProcess.start(
                cluster.kubeconfig, config, tmp_path / f"burst{k}-restarted.log"
            )
            try:
                await watch.until_bound(names)
                rc = await restarted.terminate()
            finally:
                await restarted.kill()
            assert rc == 0, restarted.tail()
            restarted_bound += len(restarted.decisions("bound"))
            # It placed the rest of the burst, after taking the dead one's Lease over.
            assert restarted.decisions("bound"), restarted.tail()
            assert restarted.events(TOOK_OVER)

            await assert_invariants(
                kube, namespace, node_names, watch, names, f"burst {k} ({point}:{n})"
            )
    seconds = time.monotonic() - t0
    record_property(
        "soak",
        f"kill at {point}: {BURSTS} bursts x {BURST} pods, all {len(names)} bound"
        f" ({killed_bound} recorded by the killed daemons, {restarted_bound} by the restarted"
        f" ones, the rest sent just before a kill), 0 violations, {seconds:.0f} s",
    )
