"""Replay mode's model of the trace: its pods as arrivals and departures with inferred jobs,
and the trace's GPU nodes racked, with their physical sites (inlet air, offsets) for the heat
model. The run over them is
gpusched/sim/replay.py; docs/replay-results.md gives every rule.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpusched.model import keys
from gpusched.model.node import NodeModel
from gpusched.model.pod import Gang, GangAPI, PodInfo
from gpusched.sim.openb import TraceNode, TracePod
from gpusched.sim.thermal import HeatEnvironment, Site, node_site, rack_inlet
from gpusched.sim.trace_cluster import node_model, pod_info


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    timeout_s: float = 600.0
    job_window_s: int = 1
    time_compression: float = 1.0
    nodes_per_rack: int = 16
    racks_per_spine: int = 8
    hot_rack_share: float = 0.2
    cluster_fraction: float = 1.0
    # Every multi-pod job becomes a gang (annotation API: scheduling.ai/gang-name = the job,
    # gang-total = its size, so minMember = the job's size): all its pods start or none.
    gangs: bool = False
    # Telemetry as the daemon sees it (sim/telemetry_feed.py): the exporter's scrape
    # interval and how long a scrape takes to become visible to the daemon's query.
    scrape_interval_s: float = 15.0
    telemetry_delay_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.scrape_interval_s > 0 or self.telemetry_delay_s < 0:
            raise ValueError("scrape_interval_s must be > 0 and telemetry_delay_s >= 0")
        if not 0 < self.cluster_fraction <= 1:
            raise ValueError("cluster_fraction must be in (0, 1]")
        if self.time_compression <= 0:
            raise ValueError("time_compression must be positive")
        if self.timeout_s < 0 or self.job_window_s < 0:
            raise ValueError("timeout_s and job_window_s must be non-negative")
        if self.nodes_per_rack < 1 or self.racks_per_spine < 1:
            raise ValueError("nodes_per_rack and racks_per_spine must be positive")


# -- workload ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayPod:
    index: int  # position in arrival order
    source: TracePod
    arrival: float  # virtual seconds
    lifetime: float | None  # seconds it runs once started; None: stays to the end
    job: str  # "" for a job of one pod
    info: PodInfo


@dataclass(frozen=True, slots=True)
class ReplayWorkload:
    pods: tuple[ReplayPod, ...]
    jobs: dict[str, tuple[int, ...]]  # job -> pod indexes (every job, one-pod ones too)
    skipped: dict[str, int]  # odd rows left out, by reason
    phases: dict[str, int]  # trace pod_phase of the replayed pods
    stays: int  # pods that never leave
    window_start: int  # trace second that is virtual time 0
    measure_from: float  # virtual time of the trace's first departure
    initial: int  # pods created before the trace's first departure

    @property
    def arrival_end(self) -> float:
        return max((p.arrival for p in self.pods), default=0.0)

    @property
    def window(self) -> tuple[float, float]:
        """Time-weighted figures cover [first trace departure, last arrival] (the whole
        arrival span when that is empty): the drain after the last arrival is left out."""
        end = self.arrival_end
        start = self.measure_from if self.measure_from < end else 0.0
        return start, end

    @property
    def multi_pod_jobs(self) -> int:
        return sum(1 for p in self.jobs.values() if len(p) > 1)


def _shape(p: TracePod) -> tuple[Any, ...]:
    return (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec, p.qos)


def build_workload(pods: Sequence[TracePod], cfg: ReplayConfig) -> ReplayWorkload:
    skipped: Counter[str] = Counter()
    kept: list[TracePod] = []
    for p in pods:
        if p.creation_time is None:
            skipped["no creation_time"] += 1
        elif p.deletion_time is not None and p.deletion_time <= p.creation_time:
            skipped["deletion_time not after creation_time"] += 1
        else:
            kept.append(p)
    ends = [p.deletion_time for p in kept if p.deletion_time is not None]
    trace_end = max(ends) if ends else None
    kept.sort(key=lambda p: (p.creation_time, p.name))
    # Jobs: same shape, each member within job_window_s of the previous one.
    job_of: list[int] = []
    members: list[list[int]] = []
    open_job: dict[tuple[Any, ...], int] = {}
    for i, p in enumerate(kept):
        key = _shape(p)
        j = open_job.get(key)
        assert p.creation_time is not None
        if j is not None:
            prev = kept[members[j][-1]].creation_time
            assert prev is not None
            if p.creation_time - prev > cfg.job_window_s:
                j = None
        if j is None:
            j = len(members)
            members.append([])
            open_job[key] = j
        members[j].append(i)
        job_of.append(j)
    # Virtual time 0 is the first creation. The trace holds only pods alive after its first
    # departure (a few long-lived ones were created months before it), so the time-weighted
    # figures start there: ``measure_start``.
    created = [p.creation_time for p in kept if p.creation_time is not None]
    t0 = min(created, default=0)
    first_end = min(ends, default=t0)
    out: list[ReplayPod] = []
    stays = 0
    for i, p in enumerate(kept):
        assert p.creation_time is not None
        j = job_of[i]
        job = f"job-{j:05d}" if len(members[j]) > 1 else ""
        lifetime: float | None
        if p.deletion_time is None or (p.deletion_time == trace_end and p.pod_phase == "Running"):
            lifetime = None
            stays += 1
        else:
            lifetime = float(p.deletion_time - p.creation_time)
        arrival = (p.creation_time - t0) / cfg.time_compression
        info = pod_info(p.name, p, job_id=job, created=arrival)
        if job and cfg.gangs:
            info = as_gang_member(info, job, len(members[j]))
        out.append(ReplayPod(i, p, arrival, lifetime, job, info))
    jobs = {
        (f"job-{j:05d}" if len(m) > 1 else kept[m[0]].name): tuple(m) for j, m in enumerate(members)
    }
    return ReplayWorkload(
        pods=tuple(out),
        jobs=jobs,
        skipped=dict(skipped),
        phases=dict(Counter(p.pod_phase or "?" for p in kept)),
        stays=stays,
        window_start=int(t0),
        measure_from=(first_end - t0) / cfg.time_compression,
        initial=sum(1 for p in kept if (p.creation_time or 0) < first_end),
    )


def as_gang_member(info: PodInfo, gang: str, size: int) -> PodInfo:
    """The pod as a member of the annotation gang `gang` of `size` pods (minMember = size),
    with the annotations a user would write (`scheduling.ai/gang-name`, `gang-total`)."""
    return dataclasses.replace(
        info,
        annotations={**info.annotations, keys.GANG_NAME: gang, keys.GANG_TOTAL: str(size)},
        gang=Gang(f"{info.namespace}/{gang}", size, GangAPI.ANNOTATIONS),
    )


def offered_load(wl: ReplayWorkload, capacity_milli: int) -> float:
    """Time-weighted mean GPU demand of the pods alive by the trace's (compressed) times,
    as a share of capacity, over the workload's window: the load the replay offers before any
    queueing."""
    start, end = wl.window
    events: list[tuple[float, int]] = []
    for p in wl.pods:
        d = p.info.request.gpu_milli_total
        events.append((p.arrival, d))
        if p.lifetime is not None:
            events.append((p.arrival + p.lifetime, -d))
    if end <= start or capacity_milli <= 0:
        return 0.0
    events.sort()
    area = cur = 0.0
    last = start
    for t, d in events:
        if t > end:
            break
        if t > start:
            area += cur * (t - last)
            last = t
        cur += d
    area += cur * (end - last)
    return area / (end - start) / capacity_milli


# -- cluster -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Layout:
    nodes: tuple[NodeModel, ...]
    heat: HeatEnvironment
    hot_racks: frozenset[str]

    @property
    def racks(self) -> int:
        return len({n.rack for n in self.nodes})


def rack_layout(nodes: Sequence[TraceNode], seed: int, cfg: ReplayConfig) -> Layout:
    """GPU nodes racked by SKU, the seed choosing the order, the hot racks, each rack's
    inlet air and each node's offset."""
    rng = np.random.default_rng(seed)
    # Inlets from their own stream: the racking draws stay those of the earlier model.
    inlet_rng = np.random.default_rng([seed, 0x1E7])
    skus: dict[tuple[str, int], list[TraceNode]] = {}
    for n in nodes:
        if n.gpu > 0:
            skus.setdefault((n.model, n.gpu), []).append(n)
    keys = sorted(skus)
    order = rng.permutation(len(keys))
    out: list[NodeModel] = []
    sites: dict[str, Site] = {}
    hot: set[str] = set()
    r = 0
    for k in order:
        group = skus[keys[int(k)]]
        # A smaller cluster keeps every SKU, each at the same share (rounded up).
        perm = rng.permutation(len(group))[: math.ceil(cfg.cluster_fraction * len(group))]
        for start in range(0, len(perm), cfg.nodes_per_rack):
            rack = f"rack-{r:03d}"
            spine = f"spine-{r // cfg.racks_per_spine:02d}"
            is_hot = bool(rng.random() < cfg.hot_rack_share)
            if is_hot:
                hot.add(rack)
            inlet = rack_inlet(is_hot, inlet_rng)
            for i in perm[start : start + cfg.nodes_per_rack]:
                n = group[int(i)]
                out.append(node_model(n, rack=rack, spine=spine))
                sites[n.sn] = node_site(inlet, rng)
            r += 1
    return Layout(tuple(out), HeatEnvironment(sites, seed), frozenset(hot))
