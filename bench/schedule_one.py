"""Per-pod cost of ScheduleOne, the attempt the daemon and the simulator run, at 1k-10k nodes.

    .venv/bin/python bench/schedule_one.py [--nodes 1000,5000,10000] [--pods 600]

For each fleet size: N nodes of 8 cards in the openb trace's mix of 8-card nodes (the rows
of openb_node_list_gpu_node.csv with 8 GPUs: G2, G3, V100M32, V100M16 with their cpu and
memory, in file order, repeated every 1,000 nodes; racks of 32 nodes, spines of 512), read
through --trace-dir. The fill is planned once on 1,000 nodes by scheduling the openb default
trace's pods through the same loop with the peer profile (below; it packs, as a long-running
cluster's history would) until --fill of the GPUs are allocated, then those bound pods are
delivered to every block of 1,000 nodes through the pod watch's event path (the cache
charges their cards), as the daemon starts up on a running cluster: placing the ~100,000
pods of a 10k-node fill one by one would take longer than the measurement. Then pods of
the same trace's shapes (no affinity or spread terms) arrive one at a time, alternating
between two profiles on the same cache:

* `ai-scheduler`, the default profile, every plugin on;
* `peer`: NodeResourcesFit (MostAllocated) + GPUFit only, the least a GPU scheduler does.

Each timed pod goes through the daemon's path as the simulator drives it: the watch's
event (ClusterEvents.pod_changed) and the queue's pop, the scheduling cycle
(ScheduleOne.attempt: PreFilter .. Permit, assume), one in-memory bind (ScheduleOne.bind:
PreBind, Bind, the bound pod's event confirming the cache entry). After each bind, random
bound pods are deleted until the fill is back at its level (churn at a steady fill).

Printed per size: the per-pod total and the scheduling cycle (median, p90) for both
profiles and their ratio; the default profile per extension point and per plugin (the
framework's own per-plugin timings, read around each pod); warm pods (a request shape the
profile has seen before) against first-seen shapes (a cpu and milli-GPU request no pod has
had). The binding path's own cost (the Binding body the writer builds, the daemon's
bookkeeping after a bind) is printed by bench/bind_path.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpusched.config import API_VERSION, KIND, builtin_profiles, config_from_dict
from gpusched.config.profile import Profile
from gpusched.core.runtime.framework import Framework, Timings
from gpusched.core.schedule_one import Result
from gpusched.framework.registry import Registry
from gpusched.model.node import NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation, run_sync
from gpusched.sim.openb import load_nodes, load_pods
from gpusched.sim.trace_cluster import node_model, pod_info

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = "ai-scheduler"
PEER = "peer"
POINTS = ("PreFilter", "Filter", "PreScore", "Score", "Reserve+Permit")


BLOCK = 1000  # the fill is planned on one block of nodes and repeated on every block


def fleet(trace_dir: str, n: int) -> list[NodeModel]:
    """`n` 8-card nodes in the trace's mix of 8-card models, in file order, repeated every
    BLOCK nodes (so every block of the fleet has the same nodes and takes the same fill)."""
    eight = [t for t in load_nodes(trace_dir) if t.gpu == 8]
    return [
        node_model(
            eight[(i % BLOCK) % len(eight)],
            name=f"gpu-{i:05d}",
            rack=f"rack-{i // 32:03d}",
            spine=f"spine-{i // 512:02d}",
        )
        for i in range(n)
    ]


def peer_profile(registry: Registry) -> Profile:
    """NodeResourcesFit (MostAllocated over cpu, memory, GPUs) and GPUFit, nothing else."""
    off = {"disabled": [{"name": "*"}]}
    only = [{"name": "NodeResourcesFit"}, {"name": "GPUFit"}]
    doc = builtin_profiles()["most-allocated"]
    doc["schedulerName"] = PEER
    doc["plugins"] = {
        "preEnqueue": off,
        "preFilter": {**off, "enabled": only},
        "filter": {**off, "enabled": only},
        "postFilter": off,
        "preScore": off,
        "score": {**off, "enabled": [{"name": "NodeResourcesFit", "weight": 1}]},
        "reserve": {**off, "enabled": [{"name": "GPUFit"}]},
        "permit": off,
        "preBind": {**off, "enabled": [{"name": "GPUFit"}]},
    }
    document = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [doc]}
    return config_from_dict(document, registry).profiles[0]


def shape(req: PodRequest) -> tuple[int, int, int, int]:
    return (req.cpu_milli, req.memory_bytes, req.gpu_cards, req.gpu_milli)


@dataclass
class Sample:
    total_ns: int
    cycle_ns: int
    points: dict[str, int]
    plugins: dict[str, int]


@dataclass
class Stats:
    warm: list[Sample] = field(default_factory=list)
    first: list[Sample] = field(default_factory=list)
    unplaced: int = 0


class Bench:
    def __init__(self, nodes: Sequence[NodeModel], seed: int) -> None:
        registry = default_registry()
        profile = config_from_dict(
            {"apiVersion": API_VERSION, "kind": KIND, "profiles": [builtin_profiles()[DEFAULT]]},
            registry,
        ).profiles[0]
        self.sim = Simulation(nodes, profile, registry, seed=seed)
        peer = Framework(
            peer_profile(registry),
            registry,
            self.sim.handle,
            seed=seed,
            waiting=self.sim.fw.waiting,
        )
        self.fws: dict[str, Framework] = {DEFAULT: self.sim.fw, PEER: peer}
        self.sim.schedule_one.frameworks[PEER] = peer
        self.sim.events.profiles = frozenset(self.fws)
        self.rng = np.random.default_rng(seed)
        self.capacity = self.sim.snapshot.gpu_milli_capacity()
        self.used = 0
        self.bound: list[tuple[str, int]] = []  # (uid, milli-GPU) of every bound pod
        self.seen: dict[str, set[tuple[int, int, int, int]]] = {n: set() for n in self.fws}
        self.n = 0

    def place(self, pod: PodInfo, profile: str) -> Sample | None:
        """One pod through the daemon's path; None if no node took it (withdrawn)."""
        self.n += 1
        pod = dataclasses.replace(pod, uid=f"p{self.n}", name=f"p{self.n}", scheduler_name=profile)
        fw = self.fws[profile]
        timings = fw.timings
        before = _totals(timings)
        s1 = self.sim.schedule_one
        clock = time.perf_counter_ns
        t0 = clock()
        self.sim.events.pod_changed(pod)
        info = self.sim.queue.pop_nowait()
        t1 = clock()
        assert info is not None and info.uid == pod.uid
        decision = s1.attempt(info)
        t2 = clock()
        if decision is None or decision.result is not Result.SCHEDULED:
            self.sim.withdraw(pod.uid)
            return None
        run_sync(s1.bind(info, decision))
        t3 = clock()
        after = _totals(timings)
        alloc = decision.alloc
        milli = sum(alloc.milli) if alloc is not None else 0
        self.used += milli
        self.bound.append((pod.uid, milli))
        keys = _keys(timings)
        plugins = {
            f"{p}/{n}": after[i] - before[i]
            for i, (p, n) in enumerate(keys)
            if i < len(before) and after[i] != before[i]
        }
        return Sample(t3 - t0, t2 - t1, dict(decision.point_ns), plugins)

    def churn(self, target: int) -> None:
        """Delete random bound pods until the fill is back at `target` milli-GPU."""
        while self.used > target and self.bound:
            i = int(self.rng.integers(len(self.bound)))
            self.bound[i], self.bound[-1] = self.bound[-1], self.bound[i]
            uid, milli = self.bound.pop()
            self.sim.delete(uid)
            self.used -= milli


def plan_fill(trace_dir: str, pods: Sequence[PodInfo], level: float) -> Plan:
    """Place trace pods with the peer profile on one BLOCK of nodes until `level` of its
    GPUs are allocated: the bound pods, as the API would list them."""
    bench = Bench(fleet(trace_dir, BLOCK), seed=1)
    target = level * bench.capacity
    t0 = time.perf_counter()
    misses = i = 0
    while bench.used < target and misses < 200:
        got = bench.place(pods[i % len(pods)], PEER)
        i += 1
        misses = misses + 1 if got is None else 0
    return Plan(list(bench.sim.cluster.bound.values()), time.perf_counter() - t0)


@dataclass
class Plan:
    bound: list[PodInfo]
    seconds: float


def _totals(timings: Timings) -> list[int]:
    # Timings.totals/keys are new; a tree from before them (the base of a before/after run,
    # --tree) keeps the same lists under private names.
    got = getattr(timings, "totals", None)
    return got() if got is not None else list(timings._ns)


def _keys(timings: Timings) -> list[tuple[str, str]]:
    got = getattr(timings, "keys", None)
    return got() if got is not None else list(timings._keys)


def fill(bench: Bench, plan: Plan) -> int:
    """Bind the plan's pods on every block of the fleet, through the event path the
    daemon's pod watch takes for pods already bound (the cache charges their cards)."""
    cluster = bench.sim.cluster
    blocks = bench.sim.snapshot.size // BLOCK
    n = 0
    for j in range(blocks):
        for pod in plan.bound:
            node = f"gpu-{j * BLOCK + int(pod.node_name[4:]):05d}"
            uid = f"f{j}-{pod.uid}"
            fresh = dataclasses.replace(pod, uid=uid, name=uid, node_name="", gpu_ids=())
            run_sync(cluster.bind(fresh, node))
            milli = pod.request.gpu_milli_total
            bench.used += milli
            bench.bound.append((uid, milli))
            n += 1
    return n


def novel(pod: PodInfo, j: int) -> PodInfo:
    """A request shape no pod has had: cpu off by an odd amount, a milli share never used."""
    req = pod.request
    milli = req.gpu_milli and 101 + (j * 37) % 797
    return dataclasses.replace(
        pod, request=dataclasses.replace(req, cpu_milli=req.cpu_milli + 7 + j, gpu_milli=milli)
    )


def run(bench: Bench, pods: Sequence[PodInfo], n: int, warmup: int, every: int) -> dict[str, Stats]:
    target = int(bench.used)
    stats = {p: Stats() for p in bench.fws}
    order = bench.rng.permutation(len(pods))
    k = 0
    for i in range(warmup + n):
        for profile in (DEFAULT, PEER) if i % 2 == 0 else (PEER, DEFAULT):
            base = pods[order[k % len(order)]]
            k += 1
            first = i >= warmup and i % every == every - 1
            pod = novel(base, i) if first else base
            seen = shape(pod.request) in bench.seen[profile]
            bench.seen[profile].add(shape(pod.request))
            sample = bench.place(pod, profile)
            bench.churn(target)
            if i < warmup:
                continue
            st = stats[profile]
            if sample is None:
                st.unplaced += 1
            elif first:
                st.first.append(sample)
            elif seen:
                st.warm.append(sample)
    return stats


def q(values: Sequence[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else float("nan")


def us(ns: Sequence[int]) -> list[float]:
    return [v / 1e3 for v in ns]


def report(n_nodes: int, stats: dict[str, Stats], fill_info: tuple[int, float, float]) -> None:
    placed, seconds, level = fill_info
    d, p = stats[DEFAULT], stats[PEER]
    print(
        f"\n== {n_nodes} nodes x 8 cards: filled to {level:.1%} of GPUs with {placed} pods"
        f" ({seconds:.1f} s); {len(d.warm)} warm + {len(d.first)} first-seen pods per profile"
    )
    print(f"{'us per pod':<34}{'median':>10}{'p90':>10}{'peer med':>10}{'ratio':>8}")
    for label, get in (
        ("total (event, pop, cycle, bind)", lambda s: s.total_ns),
        ("scheduling cycle (attempt)", lambda s: s.cycle_ns),
    ):
        dv, pv = us([get(s) for s in d.warm]), us([get(s) for s in p.warm])
        print(
            f"{label:<34}{statistics.median(dv):>10.1f}{q(dv, 90):>10.1f}"
            f"{statistics.median(pv):>10.1f}{statistics.median(dv) / statistics.median(pv):>8.2f}"
        )
        fv, fp = us([get(s) for s in d.first]), us([get(s) for s in p.first])
        if fv:
            fm, pm = statistics.median(fv), statistics.median(fp)
            print(
                f"{'  first-seen shape':<34}{fm:>10.1f}{q(fv, 90):>10.1f}{pm:>10.1f}{fm / pm:>8.2f}"
            )
    print(f"\n{DEFAULT}, warm, per extension point / plugin{'median':>14}{'mean':>10}{'first':>10}")
    rows: dict[str, list[float]] = defaultdict(list)
    first_rows: dict[str, list[float]] = defaultdict(list)
    for samples, into in ((d.warm, rows), (d.first, first_rows)):
        for s in samples:
            for key in POINTS:
                into[key].append(s.points.get(key, 0) / 1e3)
            for key, v in s.plugins.items():
                into[key].append(v / 1e3)
    nw = len(d.warm)
    for key in POINTS:
        vals = rows[key]
        print(
            f"  {key:<48}{statistics.median(vals):>8.1f}{statistics.mean(vals):>10.1f}"
            f"{statistics.median(first_rows[key]) if first_rows[key] else float('nan'):>10.1f}"
        )
        prefix = key.split("+")[0] + "/"
        plugs = sorted(
            (
                k
                for k in rows
                if k.startswith(prefix) or (key == "Reserve+Permit" and k.startswith("Permit/"))
            ),
            key=lambda k: -sum(rows[k]),
        )
        for k in plugs:
            vals = rows[k] + [0.0] * (nw - len(rows[k]))  # pods the plugin skipped cost 0
            fv = first_rows.get(k, [])
            print(
                f"    {k:<46}{statistics.median(vals):>8.1f}{statistics.mean(vals):>10.1f}"
                f"{statistics.median(fv) if fv else float('nan'):>10.1f}"
            )
    if d.unplaced or p.unplaced:
        print(f"  unplaced timed pods: {DEFAULT} {d.unplaced}, {PEER} {p.unplaced}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace-dir", default=str(ROOT.parent / "shared" / "traces" / "openb"))
    ap.add_argument("--nodes", default="1000,5000,10000")
    ap.add_argument("--pods", type=int, default=600, help="timed pods per profile and size")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--first-every", type=int, default=10, help="1 in N timed pods is a new shape")
    ap.add_argument("--fill", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    trace = [pod_info(p.name, p) for p in load_pods(args.trace_dir, "openb_pod_list_default.csv")]
    pods = [p for p in trace if not (p.affinity or p.topology_spread_constraints)]
    order = np.random.default_rng(args.seed).permutation(len(pods))
    pods = [pods[i] for i in order]
    plan = plan_fill(args.trace_dir, pods, args.fill)
    for n in (int(x) for x in args.nodes.split(",")):
        if n % BLOCK:
            ap.error(f"--nodes: {n} is not a multiple of {BLOCK}")
        bench = Bench(fleet(args.trace_dir, n), args.seed)
        placed, seconds = fill(bench, plan), plan.seconds
        level = bench.used / bench.capacity
        gc.collect()
        gc.freeze()  # the fill's objects stay: keep the collector off them while timing
        stats = run(bench, pods, args.pods, args.warmup, args.first_every)
        report(n, stats, (placed, seconds, level))
        gc.unfreeze()
        del bench
        gc.collect()


if __name__ == "__main__":
    main()
