"""Memory and per-pod cost under churn: a backlog of unschedulable pods plus node label
updates, through the scheduler's own loop (the simulator: core/events.py, the cache, the
queue, ScheduleOne and the ai-scheduler profile's plugins).

    .venv/bin/python bench/churn.py [--nodes 500] [--pods 20000] [--updates 10000]

(`make bench-churn`). What it does:

1. a fleet of GPU nodes labelled as GPU Feature Discovery labels them (hostname, product,
   zone, and `nvidia.com/gfd.timestamp`, which GFD rewrites every 60 s);
2. `--pods` pods that fit nowhere, each rejected by one plugin in turn (NodeResourcesFit: too
   much CPU; GPUFit: a GPU model no node has; NodeAffinity: a zone no node is in); each is
   attempted once and parked as unschedulable;
3. `--updates` node updates that only rewrite `gfd.timestamp` (one node after another), the
   virtual clock moving 60 s / nodes per update as a real fleet's GFD would, the loop run
   after each (as the daemon's loop would run between watch events);
4. every 1,000 updates one schedulable pod is submitted and timed.

Printed: RSS (VmRSS of /proc/self/status, and the peak from getrusage) after the backlog
and after the updates, the label sets interned, the snapshot generation, the pods the
updates moved and the attempts they caused, microseconds per node update, and the cost of
a schedulable pod's attempt at the start and at the end. Bounded means: RSS, label sets and
generation flat across the updates, no attempts caused by label churn, and the per-pod
attempt cost the same at the end as at the start.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

from gpusched.config.load import builtin_profile
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation

GiB = 1024**3
GFD_TIMESTAMP = "nvidia.com/gfd.timestamp"


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gpu_node(i: int, stamp: int) -> NodeModel:
    name = f"gpu-{i:05d}"
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        cards=tuple(Card(c, "A100", 81920, nvlink_island=c // 4) for c in range(8)),
        labels={
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.product": "A100",
            "topology.kubernetes.io/zone": f"zone-{i % 3}",
            GFD_TIMESTAMP: str(stamp),
        },
        gpu_source="gfd",
    )


def backlog_pod(i: int) -> PodInfo:
    kind = i % 3
    if kind == 0:  # NodeResourcesFit
        req = PodRequest(cpu_milli=1_000_000, memory_bytes=GiB)
        selector: dict[str, str] = {}
    elif kind == 1:  # GPUFit: a model nobody has
        req = PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=1, gpu_models=("H100",))
        selector = {}
    else:  # NodeAffinity
        req = PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=1)
        selector = {"topology.kubernetes.io/zone": "zone-none"}
    return PodInfo(
        uid=f"uid-backlog-{i}",
        namespace="bench",
        name=f"backlog-{i}",
        request=req,
        scheduler_name="ai-scheduler",
        node_selector=selector,
    )


def probe_pod(i: int) -> PodInfo:
    return PodInfo(
        uid=f"uid-probe-{i}",
        namespace="bench",
        name=f"probe-{i}",
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_milli=250),
        scheduler_name="ai-scheduler",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--updates", type=int, default=10_000)
    ap.add_argument("--probe-every", type=int, default=1_000)
    args = ap.parse_args()

    reg = default_registry()
    sim = Simulation(
        [gpu_node(i, 0) for i in range(args.nodes)],
        builtin_profile("ai-scheduler", reg),
        reg,
        seed=1,
    )
    snap = sim.snapshot
    attempts = 0
    pop = sim.queue.pop_nowait

    def counting_pop() -> object:
        nonlocal attempts
        info = pop()
        if info is not None:
            attempts += 1
        return info

    sim.queue.pop_nowait = counting_pop  # type: ignore[method-assign,assignment]

    print(f"fleet: {args.nodes} GPU nodes; backlog: {args.pods} unschedulable pods")
    # Compile the kernels first: their JIT time is not a per-pod cost.
    warm = probe_pod(-1)
    sim.submit(warm)
    sim.delete(warm.uid)
    attempts = 0
    rss0 = rss_mib()
    t0 = time.perf_counter()
    for i in range(args.pods):
        sim.submit(backlog_pod(i))
    backlog_s = time.perf_counter() - t0
    pending = sim.queue.pending()
    print(
        f"backlog: {backlog_s:.1f} s, {backlog_s / args.pods * 1e6:.0f} µs/pod attempt;"
        f" queue {pending}"
    )

    probes: list[tuple[int, float]] = []
    rss_series: list[float] = []

    def probe(k: int) -> None:
        # Left in place: deleting it would wake the backlog (capacity freed), which is not
        # what this measures.
        pod = probe_pod(k)
        t = time.perf_counter()
        decision = sim.submit(pod)
        probes.append((k, (time.perf_counter() - t) * 1e6))
        assert decision.result.name == "SCHEDULED", decision.status
        rss_series.append(rss_mib())

    probe(0)
    rss1, labelsets1, gen1 = rss_mib(), len(snap.labelsets), snap.generation
    attempts1 = attempts
    step = 60.0 / max(1, args.nodes)
    moved_total = 0
    t0 = time.perf_counter()
    update_s = 0.0
    for u in range(1, args.updates + 1):
        i = u % args.nodes
        node = gpu_node(i, u)
        before = len(sim.queue.unschedulable)
        tu = time.perf_counter()
        sim.events.node_changed(dataclasses.replace(node))
        update_s += time.perf_counter() - tu
        moved_total += before - len(sim.queue.unschedulable)
        sim.advance(sim.clock() + step)
        if u % args.probe_every == 0:
            probe(u)
    churn_s = time.perf_counter() - t0
    rss2 = rss_mib()
    churn_attempts = attempts - attempts1 - (len(probes) - 1)
    print(
        f"updates: {args.updates} gfd.timestamp rewrites in {churn_s:.1f} s"
        f" ({update_s / args.updates * 1e6:.1f} µs per node_changed,"
        f" {churn_s / args.updates * 1e6:.0f} µs per update with the loop);"
        f" pods the updates moved {moved_total}; attempts in the loop {churn_attempts}"
        f" ({churn_attempts / max(1, churn_s):.0f}/s; parked pods are also retried every"
        f" {sim.queue.max_unschedulable:.0f} s of virtual time without an event)"
    )
    print(
        f"label sets: {labelsets1} -> {len(snap.labelsets)};"
        f" generation: {gen1} -> {snap.generation}"
    )
    print(
        f"RSS: start {rss0:.0f} MiB, after backlog {rss1:.0f} MiB, after updates"
        f" {rss2:.0f} MiB (+{rss2 - rss1:.1f}); peak {peak_mib():.0f} MiB"
    )
    print(f"RSS every {args.probe_every} updates (MiB): {' '.join(f'{r:.0f}' for r in rss_series)}")
    first, last = probes[0][1], probes[-1][1]
    mid = sorted(t for _, t in probes)[len(probes) // 2]
    print(
        f"schedulable pod, submit to decision (the loop also runs whatever"
        f" else is ready): {first:.0f} µs before the updates, {last:.0f} µs after;"
        f" median {mid:.0f} µs over {len(probes)} probes"
    )


if __name__ == "__main__":
    main()
