"""The replay with tenants, priorities, checkpoints and preemption (docs/tenancy-simulation.md).

The openb trace's own arrivals and lifetimes (replay_workload.py: jobs inferred, multi-pod
jobs as gangs), with what the trace lacks derived from the seed, reproducibly:

* **Tenants.** Jobs in arrival order are cut into bursts (geometric, mean
  `mean_burst_jobs` jobs), each burst one tenant's (sim/tenants.py `burst_tenants`; every
  pod of a job is its tenant's). Each tenant has an ElasticQuota guaranteeing an equal
  share of the cluster's GPUs (`guarantee` of the cluster in all, split evenly; no max:
  a tenant may borrow whatever is idle).
* **Priority.** A pod alone in its job that asks for a share of a card, or for no GPU,
  is **inference** (priority `high_priority`); every other pod (whole cards, or a member
  of a multi-pod job) is **training** (priority 0).
* **Checkpoints.** Every training job checkpoints every 600, 1800 or 3600 s (drawn per
  job), annotated `gpusched.io/checkpoint-interval-seconds`; inference pods do not
  checkpoint (an evicted one loses everything since it started).

**Preemption.** What the policy's Preemption plugin evicts leaves the simulated cluster at
once (sim/engine.py). Its "controller" re-creates it at the same instant, as a new pod
(`<name>-r<k>`) that must redo the work lost since its last checkpoint: it runs for its
remaining lifetime plus that. A gang job loses every member when one is evicted (a
distributed job cannot go on without a worker): the members the scheduler did not evict
are deleted by the controller at that instant, their lost work is counted too
(`lost_killed`), and the whole gang is re-created. Lost work is GPUs x seconds since the
last checkpoint (model/lost_work.py, the same rule the plugin minimises).

**Figures** (per policy and seed): GPU-hours lost (evicted, killed with their gang), the
evictions, wait from first arrival to first start (p50/p90, per priority and per tenant),
each tenant's GPUs held over time as a share of its guarantee (time-weighted over the
window), and the share of time a tenant with GPU pods waiting held less than its
guarantee (what the guarantee is meant to prevent). A pod that never leaves in the trace
runs until the last arrival.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpusched.config.defaults import builtin_document
from gpusched.config.load import config_from_dict
from gpusched.config.profile import Profile
from gpusched.core.schedule_one import Decision
from gpusched.framework.registry import Registry
from gpusched.framework.tenancy import StaticTenancy, TenantQuota
from gpusched.model import keys
from gpusched.model.lost_work import lost_gpu_hours, lost_seconds
from gpusched.model.pod import Gang, GangAPI, PodInfo
from gpusched.sim.engine import Eviction, Simulation
from gpusched.sim.replay_workload import Layout, ReplayConfig, ReplayWorkload
from gpusched.sim.tenants import burst_tenants, tenant_name

INFERENCE = "inference"
TRAINING = "training"
CLASSES = (INFERENCE, TRAINING)

# ai-scheduler: the default profile (fair queue, TenantLoad, Preemption LeastLostWork).
# kube-default: kube-scheduler's defaults as far as they go here: LeastAllocated scoring,
# the queue blind to tenants, DefaultPreemption's victim choice (Preemption KubeDefault:
# priority and count, gang-blind). Both gang-schedule (kube 1.36 has GangScheduling).
TENANCY_POLICIES: tuple[str, ...] = ("ai-scheduler", "kube-default")


@dataclass(frozen=True, slots=True)
class TenancyConfig:
    tenants: int = 4
    guarantee: float = 1.0  # the tenants' GPU guarantees add up to this share of the cluster
    mean_burst_jobs: float = 8.0
    high_priority: int = 1000
    checkpoint_intervals: tuple[int, ...] = (600, 1800, 3600)

    def __post_init__(self) -> None:
        if self.tenants < 1:
            raise ValueError(f"tenants must be positive, got {self.tenants}")
        if not 0 <= self.guarantee <= 1:
            raise ValueError(f"guarantee must be in [0, 1], got {self.guarantee}")
        if not self.checkpoint_intervals or min(self.checkpoint_intervals) <= 0:
            raise ValueError("checkpoint_intervals must be positive seconds")


def policy_profile(name: str, registry: Registry) -> Profile:
    if name == "ai-scheduler":
        doc = builtin_document("ai-scheduler")
    elif name == "kube-default":
        doc = builtin_document("least-allocated")
        raw = doc["profiles"][0]
        raw["schedulerName"] = name
        raw.setdefault("pluginConfig", []).extend(
            [
                {"name": "GangScheduling", "args": {"tenantFairness": False}},
                {"name": "Preemption", "args": {"strategy": "KubeDefault"}},
            ]
        )
    else:
        raise KeyError(f"unknown policy {name!r} (known: {', '.join(TENANCY_POLICIES)})")
    return config_from_dict(doc, registry).profiles[0]


@dataclass(frozen=True, slots=True)
class TenantPod:
    index: int
    arrival: float
    lifetime: float  # seconds of work, first incarnation
    tenant: str
    klass: str  # INFERENCE | TRAINING
    job: str  # "" for a pod alone in its job
    gang_size: int  # 0: not a gang member
    info: PodInfo  # first incarnation


@dataclass(frozen=True, slots=True)
class TenantWorkload:
    pods: tuple[TenantPod, ...]
    quotas: tuple[TenantQuota, ...]
    window: tuple[float, float]

    @property
    def tenants(self) -> list[str]:
        return [q.tenant for q in self.quotas]


def tenant_workload(
    wl: ReplayWorkload, capacity_milli: int, tcfg: TenancyConfig, seed: int
) -> TenantWorkload:
    """The replay's pods with tenants, priorities and checkpoints (module docstring)."""
    first: dict[str, int] = {}
    for p in wl.pods:  # in arrival order: a job's first pod comes first
        first.setdefault(p.job or p.info.name, p.index)
    jobs = sorted(first, key=first.__getitem__)
    drawn = burst_tenants(len(jobs), tcfg.tenants, seed, tcfg.mean_burst_jobs)
    owner = dict(zip(jobs, drawn, strict=True))
    rng = np.random.Generator(np.random.PCG64([seed, 14, 1]))
    interval = {j: int(rng.choice(tcfg.checkpoint_intervals)) for j in jobs}
    sizes = {j: len(idx) for j, idx in wl.jobs.items()}
    end = wl.arrival_end
    out: list[TenantPod] = []
    for p in wl.pods:
        job = p.job or p.info.name
        tenant = owner[job]
        req = p.info.request
        alone = not p.job
        klass = INFERENCE if alone and not req.gpu_cards else TRAINING
        info = p.info
        annotations = dict(info.annotations)
        gang = None
        size = 0
        if info.gang is not None:
            size = sizes[p.job]
            gang = Gang(f"{tenant}/{p.job}", size, GangAPI.ANNOTATIONS)
        if klass == TRAINING:
            annotations[keys.CHECKPOINT_INTERVAL] = str(interval[job])
        info = dataclasses.replace(
            info,
            namespace=tenant,
            priority=tcfg.high_priority if klass == INFERENCE else 0,
            annotations=annotations,
            gang=gang,
        )
        life = p.lifetime if p.lifetime is not None else max(end - p.arrival, 1.0)
        out.append(TenantPod(p.index, p.arrival, life, tenant, klass, p.job, size, info))
    tenants = [tenant_name(k) for k in range(tcfg.tenants)]
    per = int(capacity_milli * tcfg.guarantee) // max(1, tcfg.tenants)
    quotas = tuple(TenantQuota(t, f"{t}/quota", min=(per, None, None, None, None)) for t in tenants)
    return TenantWorkload(tuple(out), quotas, wl.window)


@dataclass(slots=True)
class TenantFigures:
    guarantee_gpus: float
    mean_share_pct: float  # GPUs held / guarantee, time-weighted over the window
    below_while_waiting_pct: float  # of the time it had GPU pods waiting
    wait_p50_s: float
    wait_p90_s: float


@dataclass(slots=True)
class TenancyRun:
    policy: str
    seed: int
    pods: int
    started: int
    never_started: int
    evictions: int
    lost_evicted_gpu_h: float
    lost_killed_gpu_h: float
    jobs_restarted: int
    waits: dict[str, tuple[float, float]]  # class -> (p50, p90) seconds
    tenants: dict[str, TenantFigures]
    gpu_alloc_mean_pct: float
    seconds: float
    errors: int = 0
    restarts: dict[str, int] = field(default_factory=dict)  # class -> pods re-created

    @property
    def lost_gpu_h(self) -> float:
        return self.lost_evicted_gpu_h + self.lost_killed_gpu_h


_PENDING, _RUNNING, _DONE, _STOPPED = 0, 1, 2, 3  # a pod's live incarnation


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def replay_tenancy(
    twl: TenantWorkload,
    layout: Layout,
    policy: str,
    registry: Registry,
    *,
    seed: int,
    cfg: ReplayConfig,
) -> TenancyRun:
    """One policy over the tenant workload on the layout's cluster (module docstring)."""
    profile = policy_profile(policy, registry)
    tenancy = StaticTenancy(twl.quotas)
    sim = Simulation(
        layout.nodes,
        profile,
        registry,
        seed=seed,
        heat=layout.heat,
        tenancy=tenancy,
    )
    capacity = sim.snapshot.gpu_milli_capacity()
    pods = twl.pods
    n = len(pods)
    remaining = np.asarray([p.lifetime for p in pods], np.float64)
    first_start = np.full(n, np.nan)
    state = np.full(n, _PENDING, np.int8)
    incarnation = np.zeros(n, np.int64)
    uid_of = [p.info.uid for p in pods]  # the live incarnation's uid
    index_of = {p.info.uid: p.index for p in pods}
    job_members: dict[str, list[int]] = defaultdict(list)
    for p in pods:
        if p.gang_size:
            job_members[p.job].append(p.index)
    start_of: dict[str, float] = {}
    milli_of: dict[str, int] = {}
    departures: list[tuple[float, str]] = []
    held = dict.fromkeys(twl.tenants, 0)
    waiting = dict.fromkeys(twl.tenants, 0)  # GPU pods queued (arrived, not started)
    mins = {q.tenant: q.min[0] or 0 for q in twl.quotas}
    share_area = dict.fromkeys(twl.tenants, 0.0)
    wait_time = dict.fromkeys(twl.tenants, 0.0)
    below_time = dict.fromkeys(twl.tenants, 0.0)
    alloc_area = 0.0
    evicted: list[Eviction] = []
    lost_evicted = lost_killed = 0.0
    evictions = jobs_restarted = 0
    restarts: dict[str, int] = defaultdict(int)
    t_start, t_end = twl.window
    now = 0.0

    def is_gpu(i: int) -> bool:
        return pods[i].info.request.gpu_milli_total > 0

    def started(d: Decision) -> None:
        uid = d.pod.uid
        i = index_of[uid]
        assert d.alloc is not None
        t = sim.clock()
        state[i] = _RUNNING
        start_of[uid] = t
        if math.isnan(first_start[i]):
            first_start[i] = t
        milli_of[uid] = sum(d.alloc.milli)
        held[pods[i].tenant] += milli_of[uid]
        if is_gpu(i):
            waiting[pods[i].tenant] -= 1
        heapq.heappush(departures, (t + float(remaining[i]), uid))

    def release(i: int, uid: str) -> float:
        """The running incarnation `uid` of pod i stops; returns when it started."""
        held[pods[i].tenant] -= milli_of.pop(uid)
        return start_of.pop(uid)

    def stop(i: int, uid: str, t: float, bound: PodInfo | None) -> None:
        """Pod i's incarnation ends early (evicted or killed): its progress is kept up to
        its last checkpoint, the rest is redone."""
        start = release(i, uid)
        lost = lost_seconds(bound, t) if bound is not None else t - start
        remaining[i] -= (t - start) - lost
        state[i] = _STOPPED

    def recreate(i: int, t: float, gang_size: int) -> None:
        """The controller re-creates pod i at `t` (a gang member: in a new gang of the
        members re-created together)."""
        incarnation[i] += 1
        k = int(incarnation[i])
        p = pods[i]
        info = p.info
        annotations = dict(info.annotations)
        gang = None
        if p.gang_size:
            gang = Gang(f"{p.tenant}/{p.job}-r{k}", gang_size, GangAPI.ANNOTATIONS)
            annotations[keys.GANG_NAME] = f"{p.job}-r{k}"
            annotations[keys.GANG_TOTAL] = str(gang_size)
        new = dataclasses.replace(
            info,
            uid=f"{info.uid}-r{k}",
            name=f"{info.name}-r{k}",
            created=t,
            gang=gang,
            annotations=annotations,
        )
        uid_of[i] = new.uid
        index_of[new.uid] = i
        state[i] = _PENDING
        restarts[p.klass] += 1
        if is_gpu(i):
            waiting[p.tenant] += 1
        sim.arrive(new)

    def settle(t: float) -> None:
        """The evictions of the last loop run: count them, end the rest of each victim's
        gang, re-create the victims (which may evict again, hence the loop)."""
        nonlocal lost_evicted, lost_killed, evictions, jobs_restarted
        while evicted:
            batch = list(evicted)
            evicted.clear()
            singles: list[int] = []
            gangs: set[str] = set()
            for e in batch:
                i = index_of[e.victim.uid]
                if state[i] != _RUNNING or uid_of[i] != e.victim.uid:
                    continue
                evictions += 1
                lost_evicted += e.lost_gpu_hours
                stop(i, e.victim.uid, t, e.victim)
                if pods[i].gang_size:
                    gangs.add(pods[i].job)
                else:
                    singles.append(i)
            for job in sorted(gangs):
                jobs_restarted += 1
                again: list[int] = []
                for i in job_members[job]:
                    uid = uid_of[i]
                    if state[i] == _RUNNING:
                        bound = sim.cluster.bound.get(uid)
                        if bound is not None:
                            lost_killed += lost_gpu_hours(bound, t)
                        stop(i, uid, t, bound)
                        sim.delete(uid)
                    elif state[i] == _PENDING:
                        sim.withdraw(uid)  # queued or waiting at Permit
                        if is_gpu(i):
                            waiting[pods[i].tenant] -= 1
                        state[i] = _STOPPED
                    if state[i] == _STOPPED:
                        again.append(i)
                for i in again:
                    recreate(i, t, len(again))
            for i in singles:
                recreate(i, t, 0)

    def account(t: float) -> None:
        nonlocal now, alloc_area
        dt = min(t, t_end) - max(now, t_start)
        if dt > 0:
            alloc_area += sum(held.values()) * dt
            for tenant in held:
                share_area[tenant] += held[tenant] * dt
                if waiting[tenant] > 0:
                    wait_time[tenant] += dt
                    if held[tenant] < mins[tenant]:
                        below_time[tenant] += dt
        now = max(now, t)

    sim.on_bound(started)
    sim.on_evicted(evicted.append)
    t0 = time.perf_counter()
    a = 0
    inf = math.inf
    while True:
        t_arrive = pods[a].arrival if a < n else inf
        t_depart = departures[0][0] if departures else inf
        wakeup = sim.next_wakeup()
        t_wake = wakeup if wakeup is not None else inf
        t = min(t_arrive, t_depart, t_wake)
        if t == inf:
            break
        account(t)
        if t == t_depart:
            sim.advance_heat(t)  # the leaving pods' cards worked until now
            while departures and departures[0][0] == t:
                _, uid = heapq.heappop(departures)
                i = index_of[uid]
                if uid_of[i] == uid and state[i] == _RUNNING:  # not evicted meanwhile
                    release(i, uid)
                    state[i] = _DONE
                    sim.delete(uid)
            sim.advance(t)
        elif t == t_arrive:
            sim.advance(t)
            if is_gpu(a):
                waiting[pods[a].tenant] += 1
            sim.arrive(pods[a].info)
            a += 1
        else:
            sim.advance(t)
            after = sim.next_wakeup()
            if after is not None and after <= t and not evicted:
                raise RuntimeError(f"tenancy replay: the wakeup at {t} did nothing; stopping")
        settle(t)
    seconds = time.perf_counter() - t0
    arrival = np.asarray([p.arrival for p in pods])
    waits = first_start - arrival
    ok = np.isfinite(first_start)
    klass = np.asarray([p.klass for p in pods])
    by_class = {
        c: (_pct(waits[ok & (klass == c)], 50), _pct(waits[ok & (klass == c)], 90)) for c in CLASSES
    }
    tenants_arr = np.asarray([p.tenant for p in pods])
    span = t_end - t_start
    figures: dict[str, TenantFigures] = {}
    for tenant in twl.tenants:
        sel = ok & (tenants_arr == tenant)
        g = mins[tenant]
        figures[tenant] = TenantFigures(
            guarantee_gpus=g / 1000.0,
            mean_share_pct=100.0 * share_area[tenant] / span / g if span > 0 and g else math.nan,
            below_while_waiting_pct=(
                100.0 * below_time[tenant] / wait_time[tenant] if wait_time[tenant] else 0.0
            ),
            wait_p50_s=_pct(waits[sel], 50),
            wait_p90_s=_pct(waits[sel], 90),
        )
    return TenancyRun(
        policy=policy,
        seed=seed,
        pods=n,
        started=int(ok.sum()),
        never_started=int((~ok).sum()),
        evictions=evictions,
        lost_evicted_gpu_h=lost_evicted,
        lost_killed_gpu_h=lost_killed,
        jobs_restarted=jobs_restarted,
        waits=by_class,
        tenants=figures,
        gpu_alloc_mean_pct=100.0 * alloc_area / span / capacity if span > 0 else 0.0,
        seconds=seconds,
        errors=sim.errors,
        restarts=dict(restarts),
    )
