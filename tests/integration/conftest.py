"""Fixtures for tests against a real control plane (tools/build.sh builds it; `make test`
does that first).

One cluster per test run (session scope), a fresh namespace per test. Tests that need the
cluster FAIL when the binaries are missing: a skipped integration suite would look green
in CI while testing nothing.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from gpusched.devcluster import (
    BinaryNotFoundError,
    ClusterOptions,
    LocalCluster,
    NodeSpec,
    StartError,
    generated_fleet,
    install_crds,
    load_nodes,
    wait_nodes_ready,
)
from gpusched.devcluster.fake_dcgm import FakeDcgmExporter
from gpusched.devcluster.prometheus import PrometheusServer
from gpusched.kube import ApiError, Kube, create_namespace, delete_namespace
from tests.integration.daemon_support import started_cluster

FLEET_SIZE = 100
_timings: dict[str, float] = {}


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with started_cluster(ClusterOptions(attached=True)) as local:
        t0 = time.monotonic()
        asyncio.run(_install_crds(local))
        _timings.update({f"start {k}": v for k, v in local.timings.items()})
        _timings["install CRDs"] = time.monotonic() - t0
        yield local


async def _install_crds(local: LocalCluster) -> None:
    async with await Kube.connect(local.kubeconfig) as kube:
        await install_crds(kube, local.crd_dir)


@pytest.fixture(scope="session")
def gpu_fleet(cluster: LocalCluster) -> list[NodeSpec]:
    """The generated fleet of FLEET_SIZE KWOK GPU nodes, all Ready. Loading is idempotent,
    so it does not matter whether a test already created them."""
    specs = generated_fleet(FLEET_SIZE)

    async def load() -> None:
        async with await Kube.connect(cluster.kubeconfig) as kube:
            await load_nodes(kube, specs)
            await wait_nodes_ready(kube, [s.name for s in specs])

    asyncio.run(load())
    return specs


@pytest.fixture
async def kube(cluster: LocalCluster) -> AsyncIterator[Kube]:
    async with await Kube.connect(cluster.kubeconfig) as client:
        yield client


@pytest.fixture
async def namespace(kube: Kube, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{secrets.token_hex(3)}"
    await create_namespace(kube, name, labels={"gpusched.io/test": "true"})
    try:
        yield name
    finally:
        # delete_namespace finalizes the namespace itself, which leaves its custom objects
        # in etcd; an ElasticQuota left behind would still guarantee GPUs to a tenant
        # nobody runs, and change what later tests' tenants may do.
        try:
            await kube.delete(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{name}/elasticquotas")
        except ApiError as exc:
            if exc.status != 404:
                raise
        await delete_namespace(kube, name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _timings:
        terminalreporter.section("local control plane")
        for name, seconds in _timings.items():
            terminalreporter.write_line(f"{name:32} {seconds:6.2f} s")


@pytest.fixture(scope="module")
def prometheus(cluster: LocalCluster) -> Iterator[PrometheusServer]:
    """A real Prometheus (Debian's, `make prometheus`) for the telemetry tests; it fails,
    never skips, without its binary."""
    try:
        server = cluster.start_prometheus()
    except (BinaryNotFoundError, StartError) as exc:
        pytest.fail(f"prometheus unavailable: {exc}", pytrace=False)
    try:
        yield server
    finally:
        cluster.stop_prometheus(server)


@pytest.fixture
async def exporter(prometheus: PrometheusServer) -> AsyncIterator[FakeDcgmExporter]:
    """A fake dcgm-exporter that `prometheus` scrapes."""
    fake = await FakeDcgmExporter().start()
    prometheus.set_targets([fake.target])
    try:
        yield fake
    finally:
        prometheus.set_targets([])
        await fake.stop()
