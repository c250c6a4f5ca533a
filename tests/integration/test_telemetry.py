"""Live GPU telemetry end to end: a real Prometheus (Debian's package, from the binary cache:
`make prometheus`) scrapes a fake dcgm-exporter every second, and the daemon, on the real
control plane, reads it through the HTTP API into its snapshot.

- a node whose hottest card reached the red line (82 °C) takes no GPU pod until it reads
  below the red line minus the hysteresis margin (5 °C);
- stale telemetry excludes no node (the exporter stops; its last, hot values are not used);
- a card reporting XID 79 is not given out, and its Node gets a GPUUnhealthy Event.

One Prometheus for the module; each test serves its own exporter. Waits go through
Prometheus (the new value queried back), the exporter's scrapes, the daemon's refreshes
and the API's watches: never sleeps.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from gpusched.daemon import Daemon
from gpusched.devcluster import LocalCluster, NodeSpec
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.fake_dcgm import FakeDcgmExporter
from gpusched.devcluster.nodes import gpu_inventory
from gpusched.devcluster.prometheus import PrometheusServer
from gpusched.kube import Kube, pod_path
from gpusched.model import keys
from gpusched.telemetry.ingest import NodeState
from tests.integration.daemon_support import (
    daemon_settings,
    first_event,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    running_daemon,
    until_bound,
)

pytestmark = pytest.mark.integration

ONE_A100 = ((8, "A100M80", 96_000, 1_048_576, 8),)
RED_LINE = 82.0
WAIT = 60.0  # seconds any one wait may take on a loaded 2-core machine


def telemetry_settings(url: str, **thermal: float) -> dict[str, Any]:
    """The daemon reading `url` twice a second; readings stale after 4 s (4 scrapes)."""
    return {
        **daemon_settings(),
        "telemetry": {
            "prometheusUrl": url,
            "intervalSeconds": 0.5,
            "queryTimeoutSeconds": 0.5,
            "staleAfterSeconds": 4,
        },
        "profiles": [
            {
                "schedulerName": keys.SCHEDULER_NAME,
                # No projected rise: the test is about what the cards read.
                "pluginConfig": [
                    {
                        "name": "Thermal",
                        "args": {"redLineCelsius": RED_LINE, "fullLoadRiseCelsius": 0, **thermal},
                    }
                ],
            }
        ],
    }


async def prometheus_has(
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
    query: str,
    want: Callable[[list[float]], bool],
) -> None:
    """Until Prometheus answers `query` with values `want` accepts, asking again after each
    scrape of the exporter."""

    async def run() -> None:
        async with aiohttp.ClientSession() as http:
            while True:
                scraped = asyncio.ensure_future(exporter.next_scrape())
                async with http.get(
                    f"{prometheus.url}/api/v1/query", params={"query": query}
                ) as response:
                    doc = await response.json()
                values = [float(s["value"][1]) for s in doc["data"]["result"]]
                if want(values):
                    scraped.cancel()
                    return
                await scraped

    await asyncio.wait_for(run(), WAIT)


async def hot_a100(
    prometheus: PrometheusServer, exporter: FakeDcgmExporter
) -> tuple[str, NodeSpec]:
    """A pool of one 8-card A100 node whose exporter reads 60 °C but card 3 at 84 °C (above
    the 82 °C red line), once Prometheus answers the node's hottest card with 84."""
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    exporter.add_node(spec.name, 8, uuids=[c["uuid"] for c in gpu_inventory(spec)])
    exporter.set(spec.name, temp=60)
    exporter.set(spec.name, gpu=3, temp=84)
    await prometheus_has(prometheus, exporter, hottest(spec.name), lambda v: v == [84.0])
    return pool, spec


def hottest(node: str) -> str:
    """The PromQL of a node's hottest card."""
    return f'max(DCGM_FI_DEV_GPU_TEMP{{Hostname="{node}"}})'


async def daemon_sees(
    daemon: Daemon, check: Callable[[], bool], what: str, stream: io.StringIO | None = None
) -> None:
    """Until `check()` holds after one of the daemon's telemetry refreshes."""
    telemetry = daemon.telemetry
    assert telemetry is not None

    async def run() -> None:
        while not check():
            await telemetry.next_refresh()

    try:
        await asyncio.wait_for(run(), WAIT)
    except TimeoutError:
        lines = [
            line
            for line in (stream.getvalue() if stream else "").splitlines()
            if '"component":"telemetry"' in line
        ]
        tail = "\n".join(lines[-20:])
        raise AssertionError(
            f"the daemon never saw {what} ({telemetry.refreshes} refreshes); telemetry log:\n{tail}"
        ) from None


def logged(stream: io.StringIO, event: str, **match: object) -> list[dict[str, Any]]:
    out = []
    for line in stream.getvalue().splitlines():
        record = orjson.loads(line)
        if record.get("event") == event and all(record.get(k) == v for k, v in match.items()):
            out.append(record)
    return out


def node_temp(daemon: Daemon, node: str) -> float:
    snap = daemon.cache.snapshot
    return float(snap.node_temp[snap.row_of(node)])


async def bound_record(daemon: Daemon, stream: io.StringIO, pod: str) -> dict[str, Any]:
    """The pod's "bound" decision record. The API server shows the pod bound as soon as
    the Binding is stored; the daemon writes the record when its binding task finishes,
    which a watcher of the pod may see first: wait for it over the daemon's refreshes."""
    await daemon_sees(
        daemon, lambda: bool(logged(stream, "decision", pod=pod, result="bound")), pod, stream
    )
    (record,) = logged(stream, "decision", pod=pod, result="bound")
    return record


async def test_a_hot_node_takes_no_gpu_pod_until_it_cools_below_the_margin(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
) -> None:
    pool, spec = await hot_a100(prometheus, exporter)
    name = spec.name
    stream = io.StringIO()
    settings = telemetry_settings(prometheus.url, hysteresisCelsius=5)
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream, settings) as daemon,
    ):
        await daemon_sees(daemon, lambda: node_temp(daemon, name) == 84.0, "84 °C", stream)
        assert daemon.telemetry is not None
        assert daemon.telemetry.states[name] is NodeState.FRESH
        # Its own line, or counted in the summary when the session's other GPU nodes
        # filled the first refresh's lines (MAX_NODE_LINES).
        assert logged(stream, "telemetry fresh", node=name) or logged(
            stream, "telemetry state changes not listed"
        )

        await kube.post(pod_path(namespace), demo_pod("train", gpus=1, **placement(pool)))
        refused = await first_event(kube, namespace, "train", "FailedScheduling")
        assert "thermal red line" in refused["message"], refused["message"]

        # Below the red line, not below the margin: still no new work.
        exporter.set(name, gpu=3, temp=79)
        await prometheus_has(prometheus, exporter, hottest(name), lambda v: v == [79.0])
        await daemon_sees(daemon, lambda: node_temp(daemon, name) == 79.0, "79 °C", stream)
        # The cooling woke the pod (ClusterEvent.TELEMETRY): its next attempt's record.
        await daemon_sees(
            daemon,
            lambda: any(
                r["attempt"] >= 2 for r in logged(stream, "decision", pod=f"{namespace}/train")
            ),
            "a second attempt of the pod",
        )
        again = [
            r for r in logged(stream, "decision", pod=f"{namespace}/train") if r["attempt"] >= 2
        ]
        assert again[0]["result"] == "unschedulable", again[0]
        assert "cooling after reaching the thermal red line" in again[0]["message"]
        pod = await kube.get(pod_path(namespace, "train"))
        assert not pod["spec"].get("nodeName")

        exporter.set(name, gpu=3, temp=70)
        await prometheus_has(prometheus, exporter, hottest(name), lambda v: v == [70.0])
        bound = await until_bound(kube, namespace, ["train"], 1)
        assert bound["train"]["spec"]["nodeName"] == name
        placed = await bound_record(daemon, stream, f"{namespace}/train")
        assert placed["telemetry"] == {"state": "fresh", "tempC": 70.0}


async def test_stale_telemetry_excludes_no_node(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    name = spec.name
    exporter.add_node(name, 8, uuids=[c["uuid"] for c in gpu_inventory(spec)])
    exporter.set(name, temp=88)  # hot, and about to go silent
    await prometheus_has(
        prometheus, exporter, f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{name}"}}', lambda v: len(v) == 8
    )
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream, telemetry_settings(prometheus.url)) as daemon,
    ):
        await daemon_sees(daemon, lambda: node_temp(daemon, name) == 88.0, "88 °C", stream)
        await exporter.stop()  # scrapes fail; Prometheus marks the series stale
        await daemon_sees(
            daemon,
            lambda: bool(logged(stream, "telemetry stale", node=name)),
            "the node stale",
            stream,
        )
        (stale,) = logged(stream, "telemetry stale", node=name)
        assert stale["level"] == "warning"
        assert stale["last_sample_seconds_ago"] >= 4.0

        await kube.post(pod_path(namespace), demo_pod("after", gpus=1, **placement(pool)))
        bound = await until_bound(kube, namespace, ["after"], 1)
        assert bound["after"]["spec"]["nodeName"] == name
        placed = await bound_record(daemon, stream, f"{namespace}/after")
        assert placed["telemetry"] == {"state": "stale", "tempC": None}


async def test_a_card_reporting_xid_79_is_not_given_out(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
) -> None:
    pool = pool_name()
    (spec,) = pool_specs(pool, 1, shapes=ONE_A100)
    name = spec.name
    uuids = [c["uuid"] for c in gpu_inventory(spec)]
    exporter.add_node(name, 8, uuids=uuids)
    exporter.set(name, gpu=2, xid=79)
    await prometheus_has(
        prometheus,
        exporter,
        f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{name}",gpu="2"}}',
        lambda v: v == [79.0],
    )
    stream = io.StringIO()
    async with (
        node_pool(kube, [pool_node(spec, pool)]),
        running_daemon(cluster.kubeconfig, stream, telemetry_settings(prometheus.url)) as daemon,
    ):
        snap = daemon.cache.snapshot
        await daemon_sees(
            daemon, lambda: not snap.card_healthy[snap.row_of(name), 2], "card 2 unhealthy", stream
        )
        (line,) = logged(stream, "GPU unhealthy", node=name)
        assert (line["card"], line["uuid"], line["reason"]) == (2, uuids[2], "XID 79")

        await kube.post(pod_path(namespace), demo_pod("seven", gpus=7, **placement(pool)))
        bound = await until_bound(kube, namespace, ["seven"], 1)
        ids = bound["seven"]["metadata"]["annotations"][keys.GPU_IDS]
        assert ids == "0,1,3,4,5,6,7"

        event = await first_event(kube, "default", name, "GPUUnhealthy")
        assert event["type"] == "Warning"
        assert f"GPU 2 ({uuids[2]})" in event["message"] and "XID 79" in event["message"]
