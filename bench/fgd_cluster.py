"""Live parity: the FGD protocol through the real daemon on the local control plane.

    .venv/bin/python bench/fgd_cluster.py [--seed 42] [--limit N] [--trace-dir DIR]
        [--pods openb_pod_list_default.csv] [--nodes trace|devcluster] [--out DIR]

(`make bench-fgd-cluster SEED=42 LIMIT=500`). The README claims a policy measured by
`gpusched simulate --protocol fgd` is the policy that runs in a cluster; this measures it.

1. The simulator, in-process: gpusched.sim.fgd_protocol.run_seed, policy ai-scheduler, on
   the seed's arrival sequence (build_workload; the first --limit arrivals).
2. The daemon: etcd + kube-apiserver + KWOK (gpusched.devcluster.LocalCluster, no
   kube-scheduler), the openb GPU nodes as KWOK nodes built so that the daemon parses each
   into exactly the simulator's NodeModel (gpusched/devcluster/fgd_objects.py; checked again
   here on the nodes read back from the API, after KWOK's status update), and `gpusched run`
   (default ai-scheduler profile) as a subprocess, its JSON log in --out.
3. The protocol, one arrival at a time: create pod i (whose parsed request is the
   simulator's pod i), watch until the daemon has decided it (bound: spec.nodeName; or
   PodScheduled=False), delete it if unschedulable (the protocol drops it), then pod i+1.
   A watch, never a sleep, decides when to go on.
4. Read every pod back from the API: spec.nodeName, gpusched.io/gpu-ids and
   gpusched.io/gpu-milli-assigned give the used milli-GPU after each arrival; the unallocated
   GPU % at 100 % arrived demand is fgd_protocol.discrete_curve over (arrived, used) exactly
   as the simulator's. Also: no card holds more than 1000 milli; per-pod agreement with the
   simulator's placements, and the first divergence with both sides' top candidates.

Both sides break score ties by the one rule (gpusched/core/runtime/tie_break.py) with the
seed as its seed: the simulator through run_seed, the daemon through `tieBreakSeed` in the
configuration file this writes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import aclosing
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gpusched.core.schedule_one import Result
from gpusched.devcluster import LocalCluster
from gpusched.devcluster.bootstrap import install_crds, wait_nodes_ready
from gpusched.devcluster.cluster import ClusterOptions
from gpusched.devcluster.demo import card_usage, cards_of, read_decisions, settled
from gpusched.devcluster.fgd_objects import (
    fleet_differences,
    trace_node_objects,
    trace_pod_object,
)
from gpusched.devcluster.nodes import node_objects, read_openb_csv
from gpusched.devcluster.testkit import daemon_argv
from gpusched.kube import JSON, ApiError, Kube, create_namespace, create_nodes, pod_path
from gpusched.model import node_from_k8s
from gpusched.model.pod import PodInfo
from gpusched.observability.logging import decision_record
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.fgd_protocol import (
    Placement,
    SeedRun,
    Trace,
    discrete_curve,
    load_trace,
    policy_profile,
    run_seed,
)
from gpusched.sim.fgd_workload import FgdWorkload, build_workload
from gpusched.sim.openb import DEFAULT_NODE_FILE
from gpusched.sim.trace_cluster import cluster_nodes, workload_pods

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "fgd"
POLICY = "ai-scheduler"
FIRST_POD_TIMEOUT = 600.0  # the daemon lists the fleet and compiles its kernels first
POD_TIMEOUT = 120.0


def _log(message: str) -> None:
    print(f"fgd-cluster: {message}", file=sys.stderr, flush=True)


# -- the simulator side ---------------------------------------------------------------------


def simulate(trace: Trace, wl: FgdWorkload, seed: int) -> SeedRun:
    """`gpusched simulate --protocol fgd` for one seed: the daemon's tie-break rule, seeded
    with `seed` (the daemon gets the same seed as tieBreakSeed)."""
    return run_seed(trace, POLICY, seed, default_registry(), workload=wl, keep_placements=True)


def simulator_record(trace: Trace, wl: FgdWorkload, seed: int, k: int) -> JSON:
    """The simulator's decision record for arrival k (arrivals 0..k-1 replayed first), in
    the daemon's log format, so the two sides' top candidates can be set side by side."""
    registry = default_registry()
    gpu_nodes = [n for n in trace.nodes if n.gpu > 0]
    profile = policy_profile(POLICY, trace, seed, registry)
    sim = Simulation(cluster_nodes(gpu_nodes), profile, registry, seed=seed)
    pods = workload_pods(wl.pods[: k + 1])
    for pod in pods[:k]:
        if sim.submit(pod).result is not Result.SCHEDULED:
            sim.withdraw(pod.uid)  # the protocol drops it
    d = sim.submit(pods[k], keep_scores=True)
    return decision_record(
        d,
        names=sim.snapshot.names,
        profile=POLICY,
        attempt=1,
        result="bound" if d.result is Result.SCHEDULED else d.result.name.lower(),
    )


# -- the live side --------------------------------------------------------------------------


class PodWatch:
    """The namespace's pods as the API last showed them, kept by one watch (re-listed on
    410 Gone, resumed from the last resourceVersion when the server ends the stream)."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pods: dict[str, JSON] = {}
        self.version = ""
        self.changed = asyncio.Event()

    async def run(self) -> None:
        path = pod_path(self.namespace)
        while True:
            if not self.version:
                listing = await self.kube.get(path)
                self.pods = {p["metadata"]["name"]: p for p in listing.get("items", [])}
                self.version = str(listing["metadata"]["resourceVersion"])
                self.changed.set()
            events = self.kube.watch(path, resource_version=self.version)
            async with aclosing(events):
                async for event in events:
                    if event.type == "ERROR":
                        self.version = ""  # 410 Gone: list again
                        break
                    meta = event.object.get("metadata") or {}
                    self.version = str(meta.get("resourceVersion") or self.version)
                    name = meta.get("name", "")
                    if event.type == "DELETED":
                        self.pods.pop(name, None)
                    elif event.type in ("ADDED", "MODIFIED"):
                        self.pods[name] = event.object
                    self.changed.set()

    async def wait(self, name: str, timeout: float) -> JSON:  # noqa: ASYNC109
        """The pod once the daemon has decided it (bound or reported unschedulable)."""
        deadline = time.monotonic() + timeout
        while True:
            pod = self.pods.get(name)
            if pod is not None and settled(pod):
                return pod
            # No await between the check and clear(): no event can slip in unseen.
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"pod {name} not decided after {timeout:.0f}s")
            await asyncio.wait_for(self.changed.wait(), left)


@dataclasses.dataclass
class Live:
    pods: dict[str, JSON]  # name -> the pod as read back at the end (bound pods only)
    dropped: list[str]
    node_problems: list[str]
    seconds: float
    log: Path
    card_counts: dict[str, int]


async def _live(
    cluster: LocalCluster,
    nodes_csv: Path,
    trace: Trace,
    wl: FgdWorkload,
    pods: list[PodInfo],
    out: Path,
    seed: int,
    node_kind: str,
) -> Live:
    specs = [s for s in read_openb_csv(nodes_csv) if s.gpus > 0]
    sim_nodes = cluster_nodes([n for n in trace.nodes if n.gpu > 0])
    async with await Kube.connect(cluster.kubeconfig) as kube:
        t0 = time.monotonic()
        # The daemon watches PodGroups and ElasticQuotas, as on any cluster it runs on.
        await install_crds(kube, cluster.crd_dir)
        # "devcluster": the nodes `make cluster-up NODE_LIST=...` loads, which differ from the
        # simulator's (docs/fgd-results.md); kept to measure what those differences cost.
        objects = trace_node_objects(specs) if node_kind == "trace" else node_objects(specs)
        await create_nodes(kube, objects, concurrency=8)
        await wait_nodes_ready(kube, [s.name for s in specs], timeout=600)
        _log(f"{len(specs)} KWOK nodes Ready in {time.monotonic() - t0:.0f}s")
        listing = await kube.get("/api/v1/nodes")
        live_nodes = [node_from_k8s(o) for o in listing.get("items", [])]
        problems = fleet_differences(sim_nodes, live_nodes)
        card_counts = {n.name: n.gpu_count for n in live_nodes}
        await create_namespace(kube, NAMESPACE)

        config = out / "scheduler-config.yaml"
        # The simulator's seed orders the daemon's ties too. Otherwise only the API client's
        # rate limits differ from the defaults: at 50 qps the patch + bind + event +
        # condition writes of each pod would throttle the benchmark.
        config.write_text(
            "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
            f"tieBreakSeed: {seed}\n"
            "clientConnection:\n  qps: 2000\n  burst: 4000\n"
        )
        log = out / "gpusched.log"
        with log.open("wb") as handle:
            daemon = await asyncio.create_subprocess_exec(
                *daemon_argv(
                    cluster.kubeconfig, config, "--leader-elect=false", "--log-level", "info"
                ),
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        _log(f"daemon pid {daemon.pid}, log {log}")
        watch = PodWatch(kube, NAMESPACE)
        watcher = asyncio.create_task(watch.run())
        dropped: list[str] = []
        t0 = time.monotonic()
        try:
            for i, pod in enumerate(pods):
                name = f"p{i:05d}"
                await kube.post(pod_path(NAMESPACE), trace_pod_object(pod, name, i))
                if watcher.done():
                    watcher.result()  # the watch failed: raise its error
                if daemon.returncode is not None:
                    raise RuntimeError(f"the daemon exited ({daemon.returncode}); see {log}")
                decided = await watch.wait(name, FIRST_POD_TIMEOUT if i == 0 else POD_TIMEOUT)
                if i == 0:
                    t0 = time.monotonic()  # wall time from the first decision on
                if not (decided.get("spec") or {}).get("nodeName"):
                    # The protocol drops a pod no node can take: delete it before the next
                    # arrival, so the daemon never retries it against a later cluster.
                    dropped.append(name)
                    try:
                        await kube.delete(
                            pod_path(NAMESPACE, name), query=[("gracePeriodSeconds", "0")]
                        )
                    except ApiError as exc:
                        if exc.status != 404:
                            raise
                if (i > 0 and i % 500 == 0) or i == len(pods) - 1:
                    # From the first decision on: the daemon's start-up is not throughput.
                    rate = i / max(time.monotonic() - t0, 1e-9)
                    _log(f"{i + 1}/{len(pods)} decided, {len(dropped)} dropped, {rate:.0f} pods/s")
            seconds = time.monotonic() - t0
        finally:
            watcher.cancel()
            if daemon.returncode is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(daemon.wait(), 60)
                except TimeoutError:
                    daemon.kill()
                    await daemon.wait()
        final = await kube.get(pod_path(NAMESPACE))
    bound = {p["metadata"]["name"]: p for p in final.get("items", [])}
    return Live(bound, dropped, problems, seconds, log, card_counts)


# -- comparison -----------------------------------------------------------------------------


def _at(curve: np.ndarray[Any, Any], at: int) -> float:
    return 100.0 - float(curve[at])


def _last(arrived: np.ndarray[Any, Any], curve: np.ndarray[Any, Any], capacity: int) -> int:
    return min(int(np.round(arrived[-1] * 100.0 / capacity)), len(curve) - 1)


def _live_placement(i: int, pod: PodInfo, obj: JSON | None) -> tuple[Placement, int]:
    if obj is None:
        return Placement(i, pod.name, ""), 0
    cards, milli = cards_of(obj)
    if pod.request.gpu_cards:
        per = tuple(1000 for _ in cards)  # the simulator's Allocation.milli of whole cards
        return Placement(i, pod.name, obj["spec"]["nodeName"], tuple(cards), per), sum(per)
    if pod.request.gpu_milli:
        per = tuple(milli for _ in cards)
        return Placement(i, pod.name, obj["spec"]["nodeName"], tuple(cards), per), sum(per)
    return Placement(i, pod.name, obj["spec"]["nodeName"]), 0


def _top(rec: JSON, k: int = 3) -> str:
    parts = []
    for t in (rec.get("top") or [])[:k]:
        terms = ", ".join(
            f"{n} {s['weight'] * s['normalized']:.2f}" for n, s in (t.get("scores") or {}).items()
        )
        parts.append(f"{t['node']} {t['total']:.3f} ({terms})")
    return "; ".join(parts) or "-"


def report(
    args: argparse.Namespace,
    trace: Trace,
    wl: FgdWorkload,
    pods: list[PodInfo],
    sim: SeedRun,
    live: Live,
) -> int:
    n = len(pods)
    arrived = np.cumsum([p.request.gpu_milli_total for p in pods]).astype(np.int64)
    placements: list[Placement] = []
    used_each = np.zeros(n, np.int64)
    for i, pod in enumerate(pods):
        place, milli = _live_placement(i, pod, live.pods.get(f"p{i:05d}"))
        placements.append(place)
        used_each[i] = milli
    live_curve = discrete_curve(arrived, np.cumsum(used_each), sim.capacity)
    sim_curve = sim.curve()
    over = card_usage(live.pods.values(), live.card_counts)

    same_node = same_cards = 0
    first = -1
    for s, d in zip(sim.placements, placements, strict=True):
        if s.node == d.node:
            same_node += 1
            if s.gpu_ids == d.gpu_ids and s.gpu_milli == d.gpu_milli:
                same_cards += 1
                continue
        if first < 0:
            first = s.seq

    last = _last(arrived, live_curve, sim.capacity)
    print()
    print(
        f"FGD protocol through the live daemon: openb {trace.name}, seed {args.seed},"
        f" {n} arrivals{f' (--limit {args.limit})' if args.limit else ''},"
        f" {len(live.card_counts)} KWOK nodes ({args.nodes}), tie-break seed {args.seed}"
    )
    print(
        f"{'':24}{'unalloc@100%':>14}{f'unalloc@{last}%':>14}"
        f"{'bound':>8}{'dropped':>9}{'seconds':>9}"
    )
    rows = (
        ("simulator (in-process)", sim_curve, n - sim.dropped, sim.dropped, sim.seconds),
        (
            "daemon (live cluster)",
            live_curve,
            n - len(live.dropped),
            len(live.dropped),
            live.seconds,
        ),
    )
    for label, curve, bound, dropped, seconds in rows:
        at100 = _at(curve, 100) if len(curve) > 100 else float("nan")
        print(
            f"{label:24}{at100:>13.2f}%{_at(curve, last):>13.2f}%{bound:>8}{dropped:>9}"
            f"{seconds:>9.1f}"
        )
    gap = _at(live_curve, 100) - _at(sim_curve, 100)
    print(f"daemon - simulator at 100 % arrived: {gap:+.2f} points (target: within 0.15)")
    print(f"placement agreement: {same_cards}/{n} same node and cards, {same_node}/{n} same node")
    print(f"over-allocated cards in the read-back placements: {len(over) or 'none'}")
    for problem in over[:10]:
        print(f"  {problem}")
    print(f"node parity (API nodes vs simulator nodes): {len(live.node_problems) or 'identical'}")
    for problem in live.node_problems[:10]:
        print(f"  {problem}")

    decisions = read_decisions(live.log)
    attempts = Counter(str(r["pod"]) for r in decisions)
    retried = {p: c for p, c in attempts.items() if c > 1}
    foreign = [p for p in attempts if not p.startswith(f"{NAMESPACE}/")]
    print(
        f"daemon decision records: {len(decisions)} for {len(attempts)} pods;"
        f" {len(retried)} pods decided more than once; {len(foreign)} pods outside the run"
    )
    for pod_key, count in sorted(retried.items())[:5]:
        print(f"  {pod_key}: {count} attempts")

    if first >= 0:
        s, d = sim.placements[first], placements[first]
        name = f"p{first:05d}"
        print(
            f"first divergence: arrival {first} ({name}, trace pod {s.pod},"
            f" request {pods[first].request})"
        )
        print(f"  simulator: {s.node or 'dropped'} cards {list(s.gpu_ids)} {list(s.gpu_milli)}")
        print(f"  daemon:    {d.node or 'dropped'} cards {list(d.gpu_ids)} {list(d.gpu_milli)}")
        rec = next((r for r in reversed(decisions) if r["pod"] == f"{NAMESPACE}/{name}"), {})
        srec = simulator_record(trace, wl, args.seed, first)
        print(f"  simulator top: {_top(srec)} (feasible {srec.get('feasible')})")
        print(f"  daemon top:    {_top(rec)} (feasible {rec.get('feasible')})")
        (Path(args.out) / "first-divergence.json").write_bytes(
            orjson.dumps({"simulator": srec, "daemon": rec}, option=orjson.OPT_INDENT_2)
        )
    else:
        print("first divergence: none")
    summary = {
        "seed": args.seed,
        "arrivals": n,
        "tie_break_seed": args.seed,
        "nodes": args.nodes,
        "sim_unallocated_100": _at(sim_curve, 100),
        "live_unallocated_100": _at(live_curve, 100),
        "same_node_and_cards": same_cards,
        "same_node": same_node,
        "first_divergence": first,
        "over_allocated": len(over),
        "live_seconds": live.seconds,
        "sim_seconds": sim.seconds,
    }
    (Path(args.out) / "summary.json").write_text(json.dumps(summary, indent=2))
    with (Path(args.out) / "placements.jsonl").open("w") as handle:
        for s, d in zip(sim.placements, placements, strict=True):
            row = {"seq": s.seq, "pod": s.pod, "sim": [s.node, s.gpu_ids, s.gpu_milli]}
            handle.write(json.dumps(row | {"daemon": [d.node, d.gpu_ids, d.gpu_milli]}) + "\n")
    return 1 if over or live.node_problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--limit", type=int, default=0, help="only the first N arrivals")
    parser.add_argument("--trace-dir", type=Path, default=ROOT.parent / "shared/traces/openb")
    parser.add_argument("--pods", default="openb_pod_list_default.csv")
    parser.add_argument(
        "--nodes",
        choices=("trace", "devcluster"),
        default="trace",
        help="trace: the simulator's nodes (fgd_objects); devcluster: `cluster-up`'s own",
    )
    parser.add_argument("--out", default="", help="daemon log and results (default: a temp dir)")
    args = parser.parse_args(argv)
    args.out = args.out or tempfile.mkdtemp(prefix="fgd-cluster-")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    trace = load_trace(args.trace_dir, args.pods)
    wl = build_workload(trace.pods, trace.nodes, args.seed, 1.3)
    if args.limit:
        wl = dataclasses.replace(wl, pods=wl.pods[: args.limit])
    pods = workload_pods(wl.pods)
    _log(f"simulating seed {args.seed}: {len(pods)} arrivals")
    sim = simulate(trace, wl, args.seed)
    _log(f"simulator done in {sim.seconds:.1f}s; starting the control plane (out: {out})")
    options = ClusterOptions(kube_scheduler=False, log=_log, workdir=None)
    with LocalCluster(options) as cluster:
        live = asyncio.run(
            _live(
                cluster,
                args.trace_dir / DEFAULT_NODE_FILE,
                trace,
                wl,
                pods,
                out,
                args.seed,
                args.nodes,
            )
        )
    return report(args, trace, wl, pods, sim, live)


if __name__ == "__main__":
    sys.exit(main())
