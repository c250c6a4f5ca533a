"""The GPU map (`gpusched run --gpu-map`, docs/gpu-map.md) in a real headless Chromium,
served by a real `gpusched run` process on the local control plane: whole-card, shared and
gang pods bound, one pod that cannot fit, an ElasticQuota, live telemetry from a real
Prometheus; the page's screenshot must show the colours of each kind of card and of the red
line, and its rendered DOM the node, the shared cards, the temperature classes, the pending
pod with its reason, the gang with its members and the quota.

Chromium is Debian's package (`make browser` installs it; `make test` depends on it): a
missing browser fails this test, never skips it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
import yaml
from PIL import Image  # matplotlib's dependency: the `plot` extra `make test` installs

from gpusched.config import API_VERSION, KIND
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.demo import demo_pod
from gpusched.devcluster.fake_dcgm import FakeDcgmExporter
from gpusched.devcluster.nodes import gpu_inventory
from gpusched.devcluster.prometheus import PrometheusServer
from gpusched.devcluster.testkit import pod_manifest
from gpusched.kube import ApiError, Kube
from gpusched.model import keys
from tests.integration.daemon_support import (
    create_pods,
    daemon_settings,
    node_pool,
    placement,
    pool_name,
    pool_node,
    pool_specs,
    until_bound,
)
from tests.integration.process_support import DaemonProcess
from tests.integration.test_quotas import elastic_quota, quotas_of

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
X_API = "/apis/scheduling.x-k8s.io/v1alpha1"
WINDOW = (1400, 1000)
# The page's solid colours (render.py's CSS): a whole card, a shared card's used fill, a
# free card.
WHOLE_RGB = (0x24, 0x56, 0xA6)
SHARED_RGB = (0xF0, 0x8C, 0x00)
FREE_RGB = (0xE6, 0xF4, 0xEA)
HOT_RGB = (0xD6, 0x28, 0x28)  # the top edge (and outline) of a card at the red line
MAP_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _chromium(*args: str, profile: Path) -> bytes:
    """Chromium headless with its own profile directory (no state shared with another
    run); its stdout. --no-sandbox only as root: Chromium refuses to start its sandbox as
    root (CI's container runs as root), and the page it loads is ours on loopback. Run
    without blocking the loop: the daemon's log pipe is read on it."""
    argv = [
        CHROMIUM,
        "--headless=new",
        f"--user-data-dir={profile}",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ]
    if os.geteuid() == 0:
        argv.append("--no-sandbox")
    proc = await asyncio.create_subprocess_exec(
        *argv, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"chromium {' '.join(args)} still runs after 120 s") from None
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}):\n{err[-3000:]!r}"
    return out


class _Dom(HTMLParser):
    """Start tags with their attributes, and the text inside each element carrying one of
    the data-* keys the page marks its rows and cells with."""

    KEYS = ("data-node", "data-pod", "data-gang", "data-quota", "id")

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.rows: dict[tuple[str, str], list[str]] = {}
        # data-node value -> the tags inside that node's box (its card cells).
        self.nodes: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self._open: list[tuple[str, tuple[str, str] | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        for _, open_mark in self._open:
            if open_mark is not None and open_mark[0] == "data-node":
                self.nodes.setdefault(open_mark[1], []).append((tag, a))
        mark = next(((k, a[k]) for k in self.KEYS if k in a), None)
        if mark is not None:
            self.rows.setdefault(mark, [])
        if tag not in ("img", "input", "meta", "br"):
            self._open.append((tag, mark))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            open_tag, _ = self._open.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, mark in self._open:
            if mark is not None:
                self.rows[mark].append(data)

    def text(self, key: str, value: str) -> str:
        assert (key, value) in self.rows, f"no element with {key}={value!r} in the DOM"
        return " ".join(" ".join(self.rows[(key, value)]).split())


async def _map_json(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with session.get(f"{base}/map.json") as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("application/json")
        doc: dict[str, Any] = orjson.loads(await response.read())
        return doc


async def _until_map(
    base: str,
    ready: Any,
    what: str,
    timeout: float = MAP_TIMEOUT,  # noqa: ASYNC109
) -> dict[str, Any]:
    """map.json once `ready(doc)` holds: the daemon's watch sees the binds a moment after
    the API does, and the page serves one render per second."""
    last: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    pause = 0.1
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            last = await _map_json(session, base)
            if ready(last):
                return last
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
    raise AssertionError(f"the map never showed {what}; last map.json:\n{last}")


def _pixels(png: Path) -> np.ndarray:
    """The screenshot as an (height, width, 3) uint8 array."""
    with Image.open(png) as image:
        return np.asarray(image.convert("RGB"))


def _colour_pixels(pixels: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 6) -> int:
    distance = np.abs(pixels.astype(np.int16) - np.array(rgb, np.int16)).max(axis=2)
    return int((distance <= tolerance).sum())


def _distinct_colours(pixels: np.ndarray) -> int:
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


async def test_the_gpu_map_renders_in_headless_chromium(
    cluster: LocalCluster,
    kube: Kube,
    namespace: str,
    tmp_path: Path,
    prometheus: PrometheusServer,
    exporter: FakeDcgmExporter,
) -> None:
    t0 = time.monotonic()
    assert shutil.which(CHROMIUM), (
        f"{CHROMIUM} is missing: run `make browser` (as root it installs Debian's chromium;"
        " otherwise: sudo apt-get install -y --no-install-recommends chromium)"
    )
    pool = pool_name()
    specs = pool_specs(pool, 3)  # 8 x A100, 8 x V100, 2 x T4
    where = placement(pool)
    config = tmp_path / "config.yaml"
    # Leader election on, with a private Lease (deleted at the end): the daemon compiles
    # its kernels before it seeks the Lease, so the pods below are not held up by a cold
    # compile inside their first attempt.
    # Telemetry through a real Prometheus scraping a fake dcgm-exporter: the A100 node's
    # cards read 60 °C but one at 78 (warm); the T4 node's 85 (at the 82 °C red line,
    # so Thermal keeps the GPU pods off it); the V100 node is not exported (no data).
    a100, v100, t4 = specs
    for spec, temp in ((a100, 60), (t4, 85)):
        exporter.add_node(spec.name, spec.gpus, uuids=[c["uuid"] for c in gpu_inventory(spec)])
        exporter.set(spec.name, temp=temp)
    exporter.set(a100.name, gpu=7, temp=78)
    settings = {
        **daemon_settings(),
        "telemetry": {
            "prometheusUrl": prometheus.url,
            "intervalSeconds": 0.5,
            "queryTimeoutSeconds": 0.5,
            "staleAfterSeconds": 30,
        },
        # No projected warming: the cards are judged by what they read (78 °C is not
        # pushed over the line by the pods placed on it).
        "profiles": [
            {
                "schedulerName": keys.SCHEDULER_NAME,
                "pluginConfig": [{"name": "Thermal", "args": {"fullLoadRiseCelsius": 0}}],
            }
        ],
    }
    config.write_text(yaml.safe_dump({"apiVersion": API_VERSION, "kind": KIND, **settings}))
    le = settings["leaderElection"]
    lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{le['resourceName']}"
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    await kube.post(
        quotas_of(namespace),
        elastic_quota("team-quota", {keys.GPU_RESOURCE: "4"}, {keys.GPU_RESOURCE: "12"}),
    )
    await kube.post(
        f"{X_API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "trainers"},
            "spec": {"minMember": 2},
        },
    )

    def gang_member(name: str) -> dict[str, Any]:
        pod = pod_manifest(name, gpus=1, pod_group="trainers")
        pod["spec"].update(nodeSelector=where["node_selector"], tolerations=where["tolerations"])
        return pod

    bound_pods = [
        demo_pod("whole-a", gpus=2, **where),
        demo_pod("whole-b", gpus=4, **where),
        demo_pod("shared-a", annotations={keys.GPU_MILLI: "250"}, **where),
        demo_pod("shared-b", annotations={keys.GPU_MILLI: "500"}, **where),
        gang_member("trainer-0"),
        gang_member("trainer-1"),
    ]
    # No node of the pool has 16 cards: it stays pending with a FailedScheduling message.
    too_big = demo_pod("too-big", gpus=16, **where)
    nodes = [pool_node(s, pool) for s in specs]
    log = tmp_path / "gpusched.log"
    async with node_pool(kube, nodes):
        daemon = await DaemonProcess.start(
            cluster.kubeconfig,
            config,
            log,
            extra=["--metrics-port", str(port), "--gpu-map"],
        )
        try:
            await daemon.wait_for(
                lambda r: r.get("event") == "learners warm-started", "leading", timeout=240
            )
            await create_pods(kube, namespace, [*bound_pods, too_big])
            names = [p["metadata"]["name"] for p in bound_pods]
            await until_bound(kube, namespace, names, len(names))
            refused = f"{namespace}/too-big"
            await daemon.wait_for(
                lambda r: (
                    r.get("event") == "decision"
                    and r.get("pod") == refused
                    and r.get("result") == "unschedulable"
                ),
                "the 16-GPU pod's refusal",
            )

            def complete(doc: dict[str, Any]) -> bool:
                ours = [n for n in doc["nodes"] if n["name"].startswith(pool)]
                cards = [c for n in ours for c in n["cards"]]
                pending = {p["pod"]: p for p in doc["pending"]["shown"]}
                gangs = {g["key"]: g for g in doc["gangs"]}
                gang = gangs.get(f"{namespace}/trainers")
                quotas = {q["key"]: q for q in doc["quotas"]}
                return (
                    sum(c["used_milli"] for c in cards) == 2000 + 4000 + 250 + 500 + 2000
                    and refused in pending
                    and bool(pending[refused]["message"])
                    and gang is not None
                    and gang["placed"] + gang["running"] == 2
                    and f"{namespace}/team-quota" in quotas
                    and temps(doc, t4.name) == [85.0, 85.0]
                    and temps(doc, a100.name) == [60.0] * 7 + [78.0]
                )

            def temps(doc: dict[str, Any], node: str) -> list[float | None]:
                (found,) = [n for n in doc["nodes"] if n["name"] == node]
                return [c["temp"] for c in found["cards"]]

            doc = await _until_map(base, complete, "every pod placed, refused, grouped")
            pending = next(p for p in doc["pending"]["shown"] if p["pod"] == refused)
            assert pending["reason"] == "Unschedulable"
            assert pending["request"] == "16 GPUs"
            message = pending["message"]
            uses = {
                c["use"] for n in doc["nodes"] if n["name"].startswith(pool) for c in n["cards"]
            }
            assert uses == {"free", "whole", "shared"}

            shot = tmp_path / "gpu-map.png"
            profile = tmp_path / "chromium-profile"
            await _chromium(f"--screenshot={shot}", f"{base}/map", profile=profile)
            # The DOM after the page's script polled map.json once (virtual time runs its
            # 5 s timer at once): it ran under the page's Content-Security-Policy.
            dumped = await _chromium(
                "--dump-dom", "--virtual-time-budget=8000", f"{base}/map", profile=profile
            )
            stopped = await daemon.terminate()
        finally:
            await daemon.kill()
            try:
                await kube.delete(lease)
            except ApiError as exc:
                if exc.status != 404:
                    raise
    assert stopped == 0, daemon.tail()

    # The screenshot: a real image of the page, with each kind of card drawn.
    assert shot.stat().st_size > 10_000
    pixels = _pixels(shot)
    assert pixels.shape == (WINDOW[1], WINDOW[0], 3)
    assert _distinct_colours(pixels) > 20
    assert _colour_pixels(pixels, WHOLE_RGB) > 100, "no whole-card blue in the screenshot"
    assert _colour_pixels(pixels, SHARED_RGB) > 20, "no shared-card orange in the screenshot"
    assert _colour_pixels(pixels, FREE_RGB) > 100, "no free-card green in the screenshot"
    assert _colour_pixels(pixels, HOT_RGB) > 20, "no red-line red in the screenshot"

    # The DOM as Chromium rendered it.
    dom = _Dom()
    dom.feed(dumped.decode())
    assert a100.name in dom.text("data-node", a100.name)
    # The server writes "… UTC"; the script, after its poll, the browser's local time.
    asof = "".join(dom.rows.get(("id", "asof"), []))
    assert asof and not asof.endswith("UTC"), f"the page's script did not run: {asof!r}"
    shared = [
        a
        for tag, a in dom.tags
        if tag == "span" and "shared" in a.get("class", "").split() and "data-card" in a
    ]
    # 250m and 500m, on one card or two.
    assert sum(int(a["data-milli"]) for a in shared) == 750, shared
    cells = {
        (node, a["data-card"]): a["class"].split()
        for node in (a100.name, v100.name, t4.name)
        for tag, a in dom.nodes[node]
        if tag == "span" and "data-card" in a
    }
    assert "t-hot" in cells[(t4.name, "0")] and "t-hot" in cells[(t4.name, "1")]
    assert "t-warm" in cells[(a100.name, "7")] and "t-cool" in cells[(a100.name, "0")]
    assert all("t-nodata" in cells[(v100.name, str(i))] for i in range(8))  # not exported
    assert not any(a.get("id") == "no-telemetry" for _, a in dom.tags)
    row = dom.text("data-pod", refused)
    assert "Unschedulable" in row and " ".join(message.split()) in row, row
    gang = dom.text("data-gang", f"{namespace}/trainers")
    assert "2 / 2" in gang, gang
    quota = dom.text("data-quota", f"{namespace}/team-quota")
    # used 2 + 4 + 0.25 + 0.5 + 2 GPUs, min 4, max 12
    assert "nvidia.com/gpu 8.75 4 12" in quota, quota
    keep = os.environ.get("GPUSCHED_GPU_MAP_SCREENSHOT")
    if keep:  # where to leave a copy for people to look at
        shutil.copyfile(shot, keep)
    print(f"gpu map browser test: {time.monotonic() - t0:.1f} s, screenshot {shot}")
