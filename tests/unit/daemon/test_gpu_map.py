"""The GPU map's pure part (daemon/gpu_map: view, render) and its reading of a daemon
(collect, the pending reasons). The page in a real Chromium against a real daemon:
tests/integration/test_gpu_map_browser.py."""

from __future__ import annotations

import base64
import hashlib
import io
import math
import re
from html.parser import HTMLParser
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gpusched.config import default_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon.gpu_map import map_routes
from gpusched.daemon.gpu_map.collect import collect, thermal_lines
from gpusched.daemon.gpu_map.render import SCRIPT, SCRIPT_HASH, render_html, stamp, to_json_bytes
from gpusched.daemon.gpu_map.routes import CSP, GATED, PendingReasons
from gpusched.daemon.gpu_map.view import (
    COOL,
    FREE,
    HOT,
    NO_DATA,
    SHARED,
    WARM,
    WHOLE,
    CardView,
    GangView,
    MapData,
    NodeView,
    PendingView,
    QuotaRow,
    QuotaView,
    card_use,
    temperature_class,
)
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.framework.status import Code, Status
from gpusched.model import keys, quota
from gpusched.model.node import node_from_k8s
from gpusched.model.pod import pod_from_k8s
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry
from gpusched.plugins.thermal.args import ThermalArgs

EVIL = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>"


def test_the_red_line_is_the_thermal_plugins_82_degrees() -> None:
    red, cool = ThermalArgs().red_line_celsius, ThermalArgs().cool_celsius
    assert (red, cool) == (82.0, 75.0)
    assert temperature_class(81.9, red, cool) == WARM
    assert temperature_class(82.0, red, cool) == HOT
    assert temperature_class(95.0, red, cool) == HOT
    assert temperature_class(75.0, red, cool) == WARM
    assert temperature_class(74.9, red, cool) == COOL
    # Another red line moves the class with it.
    assert temperature_class(83.0, 85.0, cool) == WARM


@pytest.mark.parametrize("reading", [None, math.nan])
def test_no_reading_is_no_data_never_cool(reading: float | None) -> None:
    assert temperature_class(reading, 82.0, 75.0) == NO_DATA


def test_card_use_classes() -> None:
    assert card_use(0, whole=False) == FREE
    assert card_use(1, whole=False) == SHARED
    assert card_use(1000, whole=False) == SHARED  # four quarter shares fill it: still shared
    assert card_use(1000, whole=True) == WHOLE
    assert CardView(0, "A100M80", 250).use == SHARED
    assert CardView(0, "A100M80", 250).share == 0.25


def _data(**overrides: Any) -> MapData:
    cards = (
        CardView(0, "A100M80", 0, temp=40.0),
        CardView(1, "A100M80", 1000, whole=True, temp=83.0, pods=("ns/train-0",)),
        CardView(2, "A100M80", 250, temp=None, pods=("ns/infer-0",)),
        CardView(3, "A100M80", 0, healthy=False, temp=78.0),
    )
    base: dict[str, Any] = {
        "nodes": (NodeView("gpu-a", "rack-1", cards, temp=83.0),),
        "pending": (
            PendingView("ns/big", "unschedulable", "8 GPUs", "Unschedulable", "0/1 nodes"),
        ),
        "pending_total": 1,
        "pending_by_reason": {"Unschedulable": 1},
        "gangs": (GangView("ns/train", "scheduling.x-k8s.io/v1alpha1", 4, placed=2, running=1),),
        "quotas": (QuotaView("ns/q", "ns", (QuotaRow(quota.GPU, 2250, 1000, 4000),)),),
        "telemetry": True,
        "leading": True,
        "generated_at": 1.0,
        "nodes_total": 1,
    }
    base.update(overrides)
    return MapData(**base)


class _Elements(HTMLParser):
    """Every start tag as (tag, attributes), and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    return parser


def _cells(parsed: _Elements) -> dict[str, dict[str, str]]:
    return {a["data-card"]: a for tag, a in parsed.tags if tag == "span" and "data-card" in a}


def test_cells_are_coloured_by_use_share_and_temperature() -> None:
    cells = _cells(_parse(render_html(_data())))
    assert cells["0"]["class"].split() == ["card", FREE, "t-cool"]
    assert cells["1"]["class"].split() == ["card", WHOLE, "t-hot"]
    assert cells["2"]["class"].split() == ["card", SHARED, "t-nodata"]
    assert cells["2"]["style"] == "--u:25%"  # the fill is the share used
    assert cells["3"]["class"].split() == ["card", FREE, "t-warm", "sick"]
    assert "temperature no data" in cells["2"]["title"]
    assert "ns/infer-0" in cells["2"]["title"]


def test_every_cluster_string_is_escaped() -> None:
    card = CardView(0, EVIL, 500, temp=50.0, pods=(f"ns/{EVIL}",))
    data = _data(
        nodes=(NodeView(EVIL, EVIL, (card,)),),
        pending=(PendingView(f"ns/{EVIL}", "unschedulable", "1 GPU", EVIL, EVIL),),
        pending_by_reason={EVIL: 1},
        gangs=(GangView(f"ns/{EVIL}", EVIL, 2, reason=EVIL, message=EVIL, problem=EVIL),),
        quotas=(QuotaView(f"ns/{EVIL}", EVIL, (QuotaRow(quota.GPU, 1),), problem=EVIL),),
    )
    page = render_html(data)
    assert "<img" not in page
    assert "alert('x')</script>" not in page
    assert page.count("<script>") == 1  # ours, at the end
    assert page.rindex("<script>") > page.index("</main>")
    parsed = _parse(page)
    # The strings came through as text and attribute values, whole.
    assert any(EVIL in t for t in parsed.text)
    assert any(a.get("data-node") == EVIL for _, a in parsed.tags)
    assert all(tag != "img" for tag, _ in parsed.tags)


def test_the_csp_allows_exactly_the_inline_script() -> None:
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    assert f"sha256-{digest}" == SCRIPT_HASH
    assert f"script-src '{SCRIPT_HASH}'" in CSP
    assert "unsafe-inline" not in CSP.split("script-src")[1].split(";")[0]
    page = render_html(_data())
    assert re.findall(r"<script>(.*?)</script>", page, re.DOTALL) == [SCRIPT]


def test_sections_show_pending_reasons_gangs_and_quotas() -> None:
    parsed = _parse(render_html(_data()))
    text = " ".join(parsed.text)
    assert "ns/big" in text and "0/1 nodes" in text and "Unschedulable" in text
    assert "3 / 4" in text  # gang: bound (placed + running) / minMember
    assert "2.25" in text and "1" in text and "4" in text  # quota: used / min / max GPUs
    assert "No GPU telemetry" not in text
    no_telemetry = " ".join(_parse(render_html(_data(telemetry=False))).text)
    assert "No GPU telemetry is configured" in no_telemetry


def test_json_carries_the_data_without_nan_and_a_stamp_that_follows_changes() -> None:
    data = _data()
    doc = orjson.loads(to_json_bytes(data))
    cards = doc["nodes"][0]["cards"]
    assert [c["use"] for c in cards] == [FREE, WHOLE, SHARED, FREE]
    assert cards[2]["temp"] is None
    assert doc["red_line_celsius"] == 82.0
    assert doc["pending"]["shown"][0]["message"] == "0/1 nodes"
    assert doc["gangs"][0]["min_member"] == 4
    assert doc["quotas"][0]["rows"][0] == {
        "resource": quota.GPU,
        "used": 2250,
        "min": 1000,
        "max": 4000,
    }
    assert doc["stamp"] == stamp(data)
    # The clock alone does not change it (the page is not reloaded every poll) ...
    assert stamp(_data(generated_at=99.0)) == stamp(data)
    # ... a card's use does.
    busier = CardView(0, "A100M80", 500, temp=40.0)
    node = data.nodes[0]
    changed = _data(nodes=(NodeView(node.name, node.rack, (busier, *node.cards[1:]), 83.0),))
    assert stamp(changed) != stamp(data)


def test_unchanged_nodes_are_not_formatted_again() -> None:
    fragments: dict[Any, str] = {}
    first = render_html(_data(), fragments)
    assert len(fragments) == 1
    key = next(iter(fragments))
    fragments[key] = fragments[key].replace("gpu-a</span>", "CACHED</span>")
    assert "CACHED" in render_html(_data(), fragments)  # reused, not rebuilt
    other = _data(nodes=(NodeView("gpu-b", "rack-1", ()),))
    assert "CACHED" not in render_html(other, fragments)
    assert len(fragments) == 1  # holds the last render's nodes only
    assert "gpu-a" in first


def test_many_pending_pods_are_counted_and_the_first_ones_listed() -> None:
    shown = tuple(PendingView(f"ns/p{i}", "active", "1 GPU") for i in range(3))
    text = " ".join(_parse(render_html(_data(pending=shown, pending_total=500))).text)
    assert "Pending pods (500)" in text
    assert "497 more" in text


# -- reading a daemon ---------------------------------------------------------------------


def _pod(name: str, *, gpus: int = 0, milli: int = 0, node: str = "", ids: str = "") -> Any:
    limits = {keys.GPU_RESOURCE: str(gpus)} if gpus else {}
    annotations = {keys.GPU_MILLI: str(milli)} if milli else {}
    if ids:
        annotations[keys.GPU_IDS] = ids
        if milli:
            annotations[keys.GPU_MILLI_ASSIGNED] = str(milli)
    raw = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": keys.SCHEDULER_NAME,
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "100m"}, "limits": limits}}
            ],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    return pod_from_k8s(raw)


def _daemon() -> Daemon:
    registry = default_registry()
    return Daemon(
        None,  # type: ignore[arg-type]  # nothing here talks to an API server
        default_config(registry),
        registry,
        make_logger(io.StringIO()),
        options=DaemonOptions(warm_up=False, pod_groups=False),
    )


def test_collect_reads_cards_holders_and_pending_reasons_without_writing() -> None:
    d = _daemon()
    d.cache.upsert_node(
        node_from_k8s(node_object(NodeSpec("gpu-a", 4, "A100M80", 32000, 65536, "r1", "s1")))
    )
    d.cache.add_or_update_pod(_pod("train", gpus=2, node="gpu-a", ids="0,1"))
    d.cache.add_or_update_pod(_pod("infer", milli=250, node="gpu-a", ids="2"))
    waiting = _pod("big", gpus=8)
    d.queue.add(waiting)
    reasons = PendingReasons()
    reasons.listen(d)
    # The Reporter's hook carries the FailedScheduling message; the queue's the gate's.
    observer = d.schedule_one.observer
    observer.on_attempt(waiting, "Unschedulable", "0/1 nodes are available: too few GPUs")  # type: ignore[attr-defined]
    version = d.cache.snapshot.version
    data = collect(d, reasons.get, clock=lambda: 5.0)
    assert d.cache.snapshot.version == version
    (node,) = data.nodes
    assert (node.name, node.rack) == ("gpu-a", "r1")
    assert [c.use for c in node.cards] == [WHOLE, WHOLE, SHARED, FREE]
    assert [c.used_milli for c in node.cards] == [1000, 1000, 250, 0]
    assert node.cards[0].pods == ("ns/train",)
    assert node.cards[2].pods == ("ns/infer",)
    assert all(c.temp is None for c in node.cards)  # no telemetry: no data
    assert not data.telemetry
    (pending,) = data.pending
    assert (pending.pod, pending.request, pending.reason) == ("ns/big", "8 GPUs", "Unschedulable")
    assert pending.message == "0/1 nodes are available: too few GPUs"
    assert (data.red_line, data.cool) == thermal_lines(d) == (82.0, 75.0)
    # Placed: forgotten.
    observer.on_attempt(waiting, "", "")  # type: ignore[attr-defined]
    assert reasons.get(waiting.uid) is None


def test_pending_reasons_chain_the_callbacks_before_them_and_stay_bounded() -> None:
    d = _daemon()
    heard: list[tuple[str, str]] = []
    gated: list[str] = []
    d.schedule_one.observer.on_attempt = lambda pod, reason, message: heard.append(  # type: ignore[attr-defined]
        (reason, message)
    )
    d.queue.on_gated = lambda pod, status: gated.append(pod.key)
    reasons = PendingReasons(limit=2)
    reasons.listen(d)
    pods = [_pod(f"p{i}") for i in range(3)]
    for pod in pods:
        d.schedule_one.observer.on_attempt(pod, "Unschedulable", f"no {pod.name}")  # type: ignore[attr-defined]
    assert heard == [("Unschedulable", f"no p{i}") for i in range(3)]
    assert len(reasons) == 2 and reasons.get(pods[0].uid) is None  # the oldest forgotten
    assert d.queue.on_gated is not None
    d.queue.on_gated(
        pods[0], Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("gate open",), "SchedulingGates")
    )
    assert gated == ["ns/p0"]
    assert reasons.get(pods[0].uid) == (GATED, "SchedulingGates: gate open")
    reasons.keep_only(lambda uid: uid == pods[2].uid)
    assert len(reasons) == 1 and reasons.get(pods[2].uid) is not None


async def test_the_routes_serve_the_page_and_its_json_with_a_strict_policy() -> None:
    d = _daemon()
    d.cache.upsert_node(
        node_from_k8s(node_object(NodeSpec("gpu-a", 2, "A100M80", 32000, 65536, "r1", "s1")))
    )
    app = web.Application()
    app.add_routes(map_routes(d))
    async with TestClient(TestServer(app)) as client:
        page = await client.get("/map")
        assert page.status == 200
        assert page.headers["Content-Type"].startswith("text/html")
        assert page.headers["Content-Security-Policy"] == CSP
        text = await page.text()
        assert 'data-node="gpu-a"' in text
        doc = await client.get("/map.json?page=nonsense")
        assert doc.status == 200
        body = orjson.loads(await doc.read())
        assert [n["name"] for n in body["nodes"]] == ["gpu-a"]
        assert body["stamp"] in text  # the page and its JSON agree on what is shown


def test_node_views_are_rebuilt_only_when_their_row_or_readings_change() -> None:
    d = _daemon()
    for name in ("gpu-a", "gpu-b"):
        spec = NodeSpec(name, 2, "A100M80", 32000, 65536, "r1", "s1")
        d.cache.upsert_node(node_from_k8s(node_object(spec)))
    views: dict[Any, NodeView] = {}
    a1, b1 = collect(d, lambda _uid: None, views=views).nodes
    a2, b2 = collect(d, lambda _uid: None, views=views).nodes
    assert a2 is a1 and b2 is b1  # nothing changed: reused
    d.cache.add_or_update_pod(_pod("train", gpus=1, node="gpu-a", ids="1"))
    a3, b3 = collect(d, lambda _uid: None, views=views).nodes
    assert a3 is not a1 and [c.use for c in a3.cards] == [FREE, WHOLE]
    assert b3 is b1
    snap = d.cache.snapshot
    snap.set_card_reading(snap.rows["gpu-b"], 0, [84.0] + [math.nan] * 6, at=1.0)
    a4, b4 = collect(d, lambda _uid: None, views=views).nodes
    assert a4 is a3 and b4.cards[0].temp == 84.0
    assert len(views) == 2
