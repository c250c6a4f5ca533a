"""How long the GPU map (gpusched/daemon/gpu_map) takes at 1,000 nodes x 8 cards: the HTML
and JSON rendering in Python (on the daemon's event loop, once per second at most) of a
synthetic busy cluster, the collection of the data from a daemon's cache holding such a
cluster (a Daemon object with no API server: nodes and bound pods put in its cache), and,
with --chromium, Chromium's load and screenshot of the page (docs/gpu-map.md).

    python bench/gpu_map_render.py [--nodes 1000] [--cards 8] [--chromium] [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from gpusched.config import default_config
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon.gpu_map.collect import NodeViews, collect
from gpusched.daemon.gpu_map.render import Fragments, render_html, stamp, to_json_bytes
from gpusched.daemon.gpu_map.view import (
    CardView,
    GangView,
    MapData,
    NodeView,
    PendingView,
    QuotaRow,
    QuotaView,
    by_reason,
)
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.model import keys, quota
from gpusched.model.node import node_from_k8s
from gpusched.model.pod import pod_from_k8s
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry


def synthetic(nodes: int, cards: int, seed: int = 1) -> MapData:
    """A busy cluster: per card free, whole, or shared, and a temperature (or none)."""
    rng = random.Random(seed)
    views = []
    for n in range(nodes):
        row = []
        for c in range(cards):
            kind = rng.random()
            used = 0 if kind < 0.3 else 1000 if kind < 0.7 else rng.choice((250, 500, 750))
            temp = None if rng.random() < 0.1 else rng.uniform(40, 90)
            row.append(
                CardView(
                    index=c,
                    model="A100M80",
                    used_milli=used,
                    whole=0.3 <= kind < 0.7,
                    healthy=rng.random() > 0.005,
                    temp=temp,
                    pods=(f"team-{n % 7}/pod-{n}-{c}",) if used else (),
                )
            )
        temps = [c.temp for c in row if c.temp is not None]
        views.append(
            NodeView(
                name=f"gpu-node-{n:04d}",
                rack=f"rack-{n // 16:03d}",
                cards=tuple(row),
                temp=max(temps) if temps else None,
            )
        )
    pending = tuple(
        PendingView(
            pod=f"team-{i % 7}/job-{i}",
            queue="unschedulable",
            request="8 GPUs",
            reason="Unschedulable",
            message=f"0/{nodes} nodes are available: {nodes} Insufficient nvidia.com/gpu.",
            attempts=3,
        )
        for i in range(200)
    )
    return MapData(
        nodes=tuple(views),
        pending=pending,
        pending_total=len(pending),
        pending_by_reason=by_reason(pending),
        gangs=tuple(
            GangView(f"team-{i}/train", "scheduling.x-k8s.io/v1alpha1", 8) for i in range(20)
        ),
        quotas=tuple(
            QuotaView(f"team-{i}/quota", f"team-{i}", (QuotaRow(quota.GPU, 6500, 4000, 8000),))
            for i in range(7)
        ),
        telemetry=True,
        leading=True,
        generated_at=time.time(),
        nodes_total=nodes,
    )


def busy_daemon(nodes: int, cards: int, seed: int = 1) -> Daemon:
    """A Daemon (never started, no API server) whose cache holds `nodes` x `cards` with
    about 40 % of the cards held whole and 30 % by a 500m share."""
    registry = default_registry()
    d = Daemon(
        None,  # type: ignore[arg-type]  # only its cache is read
        default_config(registry),
        registry,
        make_logger(io.StringIO()),
        options=DaemonOptions(warm_up=False, pod_groups=False),
    )
    rng = random.Random(seed)
    for n in range(nodes):
        name = f"gpu-node-{n:04d}"
        spec = NodeSpec(name, cards, "A100M80", 96_000, 1_048_576, f"rack-{n // 16:03d}", "s")
        d.cache.upsert_node(node_from_k8s(node_object(spec)))
        for c in range(cards):
            kind = rng.random()
            if kind >= 0.7:
                continue
            shared = kind >= 0.4
            annotations = {keys.GPU_IDS: str(c)}
            if shared:
                annotations |= {keys.GPU_MILLI: "500", keys.GPU_MILLI_ASSIGNED: "500"}
            limits = {} if shared else {keys.GPU_RESOURCE: "1"}
            raw = {
                "metadata": {
                    "name": f"pod-{n}-{c}",
                    "namespace": f"team-{n % 7}",
                    "uid": f"uid-{n}-{c}",
                    "annotations": annotations,
                },
                "spec": {
                    "schedulerName": keys.SCHEDULER_NAME,
                    "nodeName": name,
                    "containers": [{"name": "c", "resources": {"limits": limits}}],
                },
                "status": {"phase": "Running"},
            }
            d.cache.add_or_update_pod(pod_from_k8s(raw))
    return d


def _best(fn: object, repeat: int = 5) -> float:
    assert callable(fn)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--cards", type=int, default=8)
    ap.add_argument("--chromium", action="store_true", help="also time Chromium's screenshot")
    ap.add_argument("--out", type=Path, help="keep map.html (and map.png) here")
    args = ap.parse_args()
    data = synthetic(args.nodes, args.cards)
    html = render_html(data)
    print(
        f"{args.nodes} nodes x {args.cards} cards: HTML {len(html) / 1e6:.2f} MB,"
        f" JSON {len(to_json_bytes(data)) / 1e6:.2f} MB"
    )
    print(f"  render_html   {_best(lambda: render_html(data)) * 1e3:7.1f} ms (best of 5, cold)")
    fragments: Fragments = {}
    render_html(data, fragments)
    warm = _best(lambda: render_html(data, fragments))
    print(f"  render_html   {warm * 1e3:7.1f} ms (best of 5, no node changed since the last)")
    print(f"  stamp         {_best(lambda: stamp(data)) * 1e3:7.1f} ms (best of 5)")
    print(f"  to_json_bytes {_best(lambda: to_json_bytes(data)) * 1e3:7.1f} ms (best of 5)")
    d = busy_daemon(args.nodes, args.cards)
    cold = _best(lambda: collect(d, lambda _uid: None))
    views: NodeViews = {}
    collect(d, lambda _uid: None, views=views)
    warm = _best(lambda: collect(d, lambda _uid: None, views=views))
    print(f"  collect       {cold * 1e3:7.1f} ms (best of 5, {len(d.cache.pods)} pods, cold)")
    print(f"  collect       {warm * 1e3:7.1f} ms (best of 5, no node changed since the last)")
    if not args.chromium:
        return
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("chromium is not installed (`make browser`)")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        page = out / "map.html"
        page.write_text(html)
        t0 = time.perf_counter()
        subprocess.run(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",
                f"--user-data-dir={tmp}/profile",
                "--disable-gpu",
                f"--screenshot={out / 'map.png'}",
                "--window-size=1600,1200",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
        print(f"  chromium load + screenshot {time.perf_counter() - t0:6.2f} s (includes start)")


if __name__ == "__main__":
    main()
