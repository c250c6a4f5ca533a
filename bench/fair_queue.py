"""The cost of activeQ's pop, blind to tenants vs fair across tenants (core/queue/active.py).

    .venv/bin/python bench/fair_queue.py [--pods 20000] [--nodes 1000] [--tenants 1,8,64]

A cache of `--nodes` 8-card nodes with 2 placed pods per node spread over the tenants
(so each tenant has usage, as in a busy cluster), each tenant an ElasticQuota guarantee;
`--pods` pending pods (a quarter of them in 4-pod gangs) over the tenants, pushed into an
activeQ ordered by GangScheduling's `less` (the default profile's QueueSort), then popped
to the end. Printed per tenant count: microseconds per pop without fairness and with it
(the share of every tenant whose head ties on priority is read at each pop:
plugins/helper/fair.py), and the push cost.
"""

from __future__ import annotations

import argparse
import time

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.handle import SchedulerHandle
from gpusched.core.queue.active import ActiveQueue
from gpusched.core.queue.info import QueuedPodInfo
from gpusched.framework.interfaces import Allocation
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.plugins.gang_scheduling import GangScheduling

GiB = 1024**3


class _NoBind:
    async def bind(self, pod: PodInfo, node: str, annotations: object = None) -> None:
        raise NotImplementedError


def _handle(nodes: int, tenants: int) -> SchedulerHandle:
    cache = ClusterCache(Snapshot(8, capacity=nodes))
    for i in range(nodes):
        cache.upsert_node(
            NodeModel(
                name=f"n{i:05d}",
                cpu_milli=64_000,
                memory_bytes=512 * GiB,
                pods=110,
                cards=tuple(Card(c, "A100", 81920) for c in range(8)),
            )
        )
    per = nodes * 8 * 1000 // tenants
    tenancy = StaticTenancy(
        [TenantQuota(f"t{k}", f"t{k}/q", min=(per, None, None, None, None)) for k in range(tenants)]
    )
    h = SchedulerHandle(cache, _NoBind(), lambda: 0.0, tenancy=tenancy)  # type: ignore[arg-type]
    for i in range(nodes):
        for c in range(2):
            t = (2 * i + c) % tenants
            pod = PodInfo(
                uid=f"placed-{i}-{c}",
                namespace=f"t{t}",
                name=f"placed-{i}-{c}",
                request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=1),
            )
            cache.assume(pod, Allocation(f"n{i:05d}", i, (c,), (1000,), (81920,)))
    return h


def _pending(n: int, tenants: int) -> list[QueuedPodInfo]:
    out = []
    for i in range(n):
        t = i % tenants
        gang = None
        if i % 4 == 0 and i < n // 4 * 4:
            gang = Gang(f"t{t}/g{i // 16}", 4, GangAPI.ANNOTATIONS)
        pod = PodInfo(
            uid=f"p{i}",
            namespace=f"t{t}",
            name=f"p{i}",
            request=PodRequest(cpu_milli=1000, gpu_cards=1),
            priority=100 if i % 10 == 0 else 0,
            created=float(i),
            gang=gang,
        )
        out.append(QueuedPodInfo(pod, added=0.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--tenants", default="1,8,64")
    args = ap.parse_args()
    for tenants in (int(t) for t in args.tenants.split(",")):
        h = _handle(args.nodes, tenants)
        plugin = GangScheduling(None, h)
        pending = _pending(args.pods, tenants)
        line = [f"tenants {tenants:3d}:"]
        for label, fair in (("blind", None), ("fair", plugin)):
            q = ActiveQueue(plugin.less, fair)
            t0 = time.perf_counter()
            for info in pending:
                q.push(info)
            t1 = time.perf_counter()
            popped = 0
            while q.pop() is not None:
                popped += 1
            t2 = time.perf_counter()
            assert popped == args.pods
            line.append(
                f"{label} push {1e6 * (t1 - t0) / args.pods:5.1f} µs"
                f" pop {1e6 * (t2 - t1) / args.pods:6.1f} µs"
            )
        print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()
