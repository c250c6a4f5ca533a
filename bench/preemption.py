"""Preemption's PostFilter on a 1,000-node cluster full of pods: the plugin as the product
runs it (numba kernel), next to the same plugin with the kernel's NumPy twin, in one run.

Run: ``.venv/bin/python bench/preemption.py``. The cluster: 1,000 nodes x 8 cards, every card
held by a running pod (a mix of 1, 2, 4 and 8-card pods and quarter-card shares, random
start times and priorities 0-9); a priority-100 8-card pod arrives and no node fits it. Prints
the median and p90 PostFilter time over repeated calls for (a) a warm victim table (the
steady state: only rows whose resources changed are re-read), (b) the call that compares
every row's pods (once every 10 s), (c) a cold table (every row read afresh: start-up, a
node added or removed), and the node chosen (both flavours must choose the same).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import numpy as np

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.framework.cycle_state import CycleState
from gpusched.framework.disruption import Budget
from gpusched.framework.interfaces import Diagnosis
from gpusched.framework.status import Status
from gpusched.kernels import preemption_victims_nb, preemption_victims_np
from gpusched.model import keys
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest
from gpusched.plugins.preemption import plugin as preemption_plugin
from gpusched.plugins.preemption.plugin import Preemption
from gpusched.plugins.preemption.table import VictimTable

GiB = 2**30


class _Port:
    """Records nothing and deletes nothing: the bench times the choice, not the writes."""

    def budgets_of(self, pod: PodInfo) -> Sequence[Budget]:
        return ()

    async def evict(
        self, victim: PodInfo, *, preemptor: PodInfo, node: str, message: str
    ) -> Status:
        return Status()

    async def nominate(self, pod: PodInfo, node: str) -> Status:
        return Status()


class _Cluster:
    async def bind(self, pod: PodInfo, node: str, annotations: object = None) -> Status:
        return Status()


def build(n_nodes: int, seed: int, now: float) -> tuple[SchedulerHandle, int]:
    rng = np.random.default_rng(seed)
    cache = ClusterCache(Snapshot(8, capacity=n_nodes))
    pods = 0
    for i in range(n_nodes):
        name = f"n{i}"
        cache.upsert_node(
            NodeModel(
                name=name,
                cpu_milli=128_000,
                memory_bytes=1024 * GiB,
                pods=110,
                cards=tuple(Card(c, "A100", 81920, nvlink_island=c // 4) for c in range(8)),
            )
        )
        card = 0
        while card < 8:
            shape = int(rng.choice([1, 2, 4, 8, 0]))
            if shape == 0:  # four quarter-card shares on one card
                for _ in range(4):
                    pods += 1
                    cache.add_or_update_pod(_pod(f"p{pods}", name, (card,), 0, 250, rng, now))
                card += 1
                continue
            k = min(shape, 8 - card)
            pods += 1
            cache.add_or_update_pod(
                _pod(f"p{pods}", name, tuple(range(card, card + k)), k, 0, rng, now)
            )
            card += k
    handle = SchedulerHandle(cache, _Cluster(), lambda: now, disruption=_Port())
    return handle, pods


def _pod(
    name: str,
    node: str,
    cards: tuple[int, ...],
    k: int,
    milli: int,
    rng: np.random.Generator,
    now: float,
) -> PodInfo:
    ann = {keys.GPU_IDS: ",".join(map(str, cards))}
    if milli:
        ann[keys.GPU_MILLI] = str(milli)
    if rng.random() < 0.3:
        ann[keys.CHECKPOINT_INTERVAL] = "1800"
    return PodInfo(
        uid=name,
        namespace=f"team{int(rng.integers(0, 4))}",
        name=name,
        request=PodRequest(cpu_milli=4000, memory_bytes=16 * GiB, gpu_cards=k, gpu_milli=milli),
        node_name=node,
        priority=int(rng.integers(0, 10)),
        annotations=ann,
        gpu_ids=cards,
        phase="Running",
        start_time=now - float(rng.integers(60, 86400)),
    )


def time_calls(
    plugin: Preemption, pod: PodInfo, reps: int, cold: bool, scan: bool = False
) -> tuple[list[float], str]:
    times: list[float] = []
    node = ""
    for _ in range(reps):
        if cold:
            plugin.table = VictimTable()
        if scan:
            plugin._full_scan = -1e18  # the periodic comparison of every row's pods
        diag = Diagnosis(total_nodes=plugin.handle.snapshot.size)
        t0 = time.perf_counter()
        got, _st = plugin.post_filter(CycleState(), pod, diag)
        times.append(time.perf_counter() - t0)
        node = got or ""
        plugin.nominations.clear()
        plugin.evicting.clear()
    return times, node


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    now = 1_000_000.0
    handle, pods = build(args.nodes, args.seed, now)
    pod = PodInfo(
        uid="hp",
        namespace="team0",
        name="hp",
        request=PodRequest(cpu_milli=4000, memory_bytes=16 * GiB, gpu_cards=8),
        priority=100,
    )
    print(f"{args.nodes} nodes x 8 cards, {pods} running pods; preemptor: 8 cards, priority 100")
    rows = []
    for label, kernel in (
        ("numba kernel", preemption_victims_nb),
        ("NumPy twin", preemption_victims_np),
    ):
        preemption_plugin.victims_kernel = kernel
        plugin = Preemption(None, handle)
        plugin.post_filter(
            CycleState(), pod, Diagnosis(total_nodes=handle.snapshot.size)
        )  # warm-up, JIT
        plugin.nominations.clear()
        plugin.evicting.clear()
        warm, node = time_calls(plugin, pod, args.reps, cold=False)
        cold, _ = time_calls(plugin, pod, max(3, args.reps // 5), cold=True)
        scan, _ = time_calls(plugin, pod, max(3, args.reps // 5), cold=False, scan=True)
        lost = plugin.chosen_gpu_hours / max(plugin.preemptions, 1)
        rows.append((label, warm, scan, cold, node, lost))
    head = f"{'PostFilter':<14} {'warm median':>12} {'warm p90':>10} {'full scan':>10}"
    print(f"{head} {'cold':>10}  node  GPU-h lost")
    for label, warm, scan, cold, node, lost in rows:
        p90 = sorted(warm)[int(0.9 * (len(warm) - 1))]
        print(
            f"{label:<14} {statistics.median(warm) * 1e3:>10.2f}ms {p90 * 1e3:>8.2f}ms"
            f" {statistics.median(scan) * 1e3:>8.2f}ms {statistics.median(cold) * 1e3:>8.2f}ms"
            f"  {node:<5} {lost:.3f}"
        )
    assert rows[0][4] == rows[1][4], "the kernel and its twin chose different nodes"


if __name__ == "__main__":
    main()
