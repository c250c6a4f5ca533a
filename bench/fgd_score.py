"""GPUFragmentation's Score at scale: a seen request shape (warm) against a first-seen one.

    .venv/bin/python bench/fgd_score.py [--nodes 10000] [--fill 3000] [--samples 200]

A cluster of --nodes nodes x 8 cards (64 CPUs each) is partly filled through the
simulator with the FGD trace's pods (openb default, seed 47: the protocol's shapes), then
for each of --samples further trace pods GPUFragmentation.score runs over every node:

* warm: the pod's shape was scored before and one pod was bound since (the steady state
  of a scheduler whose workload repeats a few shapes: only the changed rows are computed);
* first-seen: the plugin's per-shape caches emptied first, so every row is computed (a
  shape new since the target workload last changed).

It prints microseconds per call (median and p90) for both, and their ratio. Run it in two
trees (PYTHONPATH) to compare before and after; a tree without the caches measures the
same call both ways.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from gpusched.core.schedule_one import Result
from gpusched.framework.cycle_state import CycleState
from gpusched.model.node import Card, NodeModel
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from gpusched.sim.fgd_protocol import load_trace, policy_profile
from gpusched.sim.fgd_workload import build_workload
from gpusched.sim.trace_cluster import workload_pods

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


def fleet(n: int) -> list[NodeModel]:
    models = ("A100", "V100M32", "T4")  # the trace's common card models
    return [
        NodeModel(
            name=f"node-{i:05d}",
            cpu_milli=96_000,
            memory_bytes=768 * GIB,
            pods=110,
            cards=tuple(Card(c, models[i % len(models)], 32768) for c in range(8)),
        )
        for i in range(n)
    ]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--fill", type=int, default=3000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--trace-dir", default=str(ROOT.parent / "shared" / "traces" / "openb"))
    args = ap.parse_args()

    trace = load_trace(args.trace_dir, "openb_pod_list_default.csv")
    registry = default_registry()
    profile = policy_profile("ai-scheduler", trace, 47, registry)
    pods = workload_pods(build_workload(trace.pods, trace.nodes, 47).pods, profile.scheduler_name)
    sim = Simulation(fleet(args.nodes), profile, registry, seed=47)
    plugin = sim.fw.plugins["GPUFragmentation"]
    t0 = time.perf_counter()
    for pod in pods[: args.fill]:
        if sim.submit(pod).result is not Result.SCHEDULED:
            sim.withdraw(pod.uid)
    fill_s = time.perf_counter() - t0
    rows = np.flatnonzero(sim.snapshot.node_valid).astype(np.intp)
    warm: list[float] = []
    first: list[float] = []
    rest = pods[args.fill :]
    for i in range(min(args.samples, len(rest) // 2)):
        probe, bind = rest[2 * i], rest[2 * i + 1]
        plugin.score(CycleState(), probe, rows)  # learnt, and its shape scored once
        if sim.submit(bind).result is not Result.SCHEDULED:  # one pod bound since
            sim.withdraw(bind.uid)
        t = time.perf_counter_ns()
        plugin.score(CycleState(), probe, rows)
        warm.append((time.perf_counter_ns() - t) / 1000)
        for name in ("scores", "losses"):  # a first-seen shape: no row computed yet
            cache = getattr(plugin, name, None)
            if cache is not None:
                setattr(plugin, name, type(cache)(cache.max_shapes))
        t = time.perf_counter_ns()
        plugin.score(CycleState(), probe, rows)
        first.append((time.perf_counter_ns() - t) / 1000)
    print(
        f"{args.nodes} nodes x 8 cards, {args.fill} trace pods placed in {fill_s:.1f} s"
        f" ({fill_s / args.fill * 1e6:.0f} us/pod); GPUFragmentation.score over all"
        f" {len(rows)} rows, {len(warm)} trace pods:"
    )
    for label, xs in (("warm (seen shape, one bind since)", warm), ("first-seen shape", first)):
        print(f"  {label:<36}median {statistics.median(xs):8.0f} us   p90 {pct(xs, 90):8.0f} us")
    print(f"  first-seen / warm: {statistics.median(first) / statistics.median(warm):.1f}x")


if __name__ == "__main__":
    main()
