"""Replay mode: the openb trace's own arrival and departure times through a scheduler profile.

``docs/replay-results.md`` documents every rule; in short:

* **Events.** A pod arrives at its ``creation_time`` and leaves at its ``deletion_time``
  (shifted by however long it waited in our queue, so it keeps its trace lifetime). At equal
  times departures go first. A pod without a deletion time, or ``Running`` with the trace's
  last deletion time (still running when the trace was cut), stays to the end. Rows with a
  missing creation time or a deletion not after creation are skipped and counted.
  ``time_compression`` k > 1 divides arrival times by k (lifetimes kept): k times the
  offered load, since the literal trace keeps its 6,212 GPUs about 1 % busy.
* **Nodes and racks.** The trace's GPU nodes, grouped by SKU (model, GPU count), are racked
  ``nodes_per_rack`` to a rack, ``racks_per_spine`` racks to a spine; the seed shuffles the
  SKU order and the nodes within a SKU, and picks the hot racks (each with probability
  ``hot_rack_share``). Each rack's inlet air is 24 °C (hot: 32 °C) + N(0, 1 °C), each node
  has an offset N(0, 1.5 °C); the cards heat with the work bound to them through the
  simulator's heat model (sim/thermal.py), and the plugins see them only through sampled,
  delayed readings (sim/telemetry_feed.py; docs/telemetry-simheat.md).
* **Jobs.** The trace has no job ids. Pods of the same shape (cpu, memory, GPUs, milli, spec,
  qos) created within ``job_window_s`` of the previous such pod form one job (a distributed
  job submits its workers together); every other pod is a job of one pod. A multi-pod job's
  pods carry ``ai.training/job-id`` so NetworkLocality sees them. Pods are not gang-bound,
  unless ``gangs`` is set: then every multi-pod job is an annotation gang of its size
  (``scheduling.ai/gang-name``/``gang-total``), all its pods start together or none does.
* **Queue.** The daemon's: a pod no node takes waits in the scheduling queue as in a
  cluster (core/schedule_one.py, core/queue/), and a departure moves waiting pods back to
  be retried (AssignedPodDelete), honouring their backoff; the virtual clock stops at every
  arrival, departure, deadline and backoff expiry, where the daemon's ticker would act. A
  pod not started within ``timeout_s`` of its arrival gives up, or is withdrawn when its
  trace deletion time passes, whichever comes first (pods still waiting at the end
  included).
* **Figures.** Whole-card job success (all pods of a whole-card job started within the
  timeout); hottest node temperature (the model's true card temperatures, not the
  readings: max over time and nodes, and the time-weighted p99 of the hottest node at the
  events); node-hours with some card above the red line (82 °C) and their share of all GPU
  node-hours; throttled GPU-hours (cards' worth of allocation held at max operating
  temperature); same-rack share (multi-pod jobs whose pods all started: share in the
  most common rack); gang temperature spread (multi-pod jobs, while all their pods run: max -
  min of their distinct nodes' temperatures as % of those nodes' mean, time-averaged over the
  job's own run, not clipped to the window: the step-time jitter proxy, a synchronous step
  waits for its hottest, most throttled worker; a node's temperature is its hottest
  card's); GPU allocation (time-weighted mean).
* **Gang figures** (multi-pod jobs, gang-bound or not): jobs completed (every pod started)
  of those submitted; partial starts (some but not all pods ever started: 0 under a gang
  policy); gang wait (arrival of the last pod -> the last pod started, over completed
  jobs: mean and p90); idle GPU-hours held at Permit (cards assumed by members waiting for
  the rest, over virtual time: the engine's ``permit_idle_gpu_hours``) and held by partial
  jobs (cards of started pods while some pod of their job has not started: what a
  gang-blind scheduler wastes; over the whole run, drain included).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from gpusched.config import builtin_profile
from gpusched.config.defaults import builtin_document
from gpusched.config.load import config_from_dict
from gpusched.config.profile import Profile
from gpusched.core.schedule_one import Decision
from gpusched.framework.registry import Registry
from gpusched.sim.engine import Simulation
from gpusched.sim.openb import TraceNode, TracePod
from gpusched.sim.replay_workload import (
    Layout,
    ReplayConfig,
    ReplayWorkload,
    build_workload,
    rack_layout,
)
from gpusched.sim.telemetry_feed import Sampling

POLICIES: tuple[str, ...] = ("ai-scheduler", "least-allocated", "most-allocated")
# A built-in profile with GangScheduling disabled (PrioritySort sorts the queue): what
# kube-scheduler does with gang pods it does not understand. Run only when named.
NO_GANG = "-nogang"
# ai-scheduler with the Thermal plugin's filter and score disabled: what the thermal terms
# buy (the heat figures) and cost (GPU allocation). Run only when named.
NO_THERMAL = "-nothermal"
EXTRA_POLICIES: tuple[str, ...] = (
    *(p + NO_GANG for p in POLICIES),
    "ai-scheduler" + NO_THERMAL,
)


def policy_profile(name: str, registry: Registry) -> Profile:
    """A replay policy's profile: a built-in one, or a built-in one + `-nogang` or
    `-nothermal`."""
    for suffix in (NO_GANG, NO_THERMAL):
        if name.endswith(suffix):
            break
    else:
        return builtin_profile(name, registry)
    doc = builtin_document(name.removesuffix(suffix))
    raw = doc["profiles"][0]
    plugins = raw.setdefault("plugins", {})
    if suffix == NO_GANG:
        plugins["multiPoint"] = {"disabled": [{"name": "GangScheduling"}]}
        plugins["queueSort"] = {"enabled": [{"name": "PrioritySort"}]}
    else:
        plugins["multiPoint"] = {"disabled": [{"name": "Thermal"}]}
    raw["schedulerName"] = name
    return config_from_dict(doc, registry).profiles[0]


# -- replay --------------------------------------------------------------------------------


@dataclass(slots=True)
class ReplayRun:
    policy: str
    seed: int
    pods: int
    started: int
    gave_up: int  # not started within the timeout
    withdrawn: int  # deleted by the trace before it could start
    whole_jobs: int
    whole_jobs_ok: int
    multi_jobs: int
    same_rack_pct: float
    jitter_pct: float  # mean over measured multi-pod jobs of the time-averaged spread
    jitter_p90_pct: float
    jitter_jobs: int
    hottest_max_c: float
    hottest_p99_c: float
    red_line_node_h: float  # GPU node-hours with some card above the red line
    red_line_pct: float  # ... as % of all GPU node-hours
    throttled_gpu_h: float  # cards' worth of allocation x hours held at max operating
    gpu_alloc_mean_pct: float
    gpu_alloc_peak_pct: float
    mean_wait_s: float
    retries: int
    seconds: float
    # Gang figures over the multi-pod jobs (module docstring).
    jobs_completed: int = 0
    partial_jobs: int = 0
    gang_wait_s: float = math.nan
    gang_wait_p90_s: float = math.nan
    permit_idle_gpu_h: float = 0.0
    partial_idle_gpu_h: float = 0.0
    errors: int = 0
    starts: dict[str, float] = field(default_factory=dict)  # pod name -> start (virtual s)

    @property
    def whole_success_pct(self) -> float:
        return 100.0 * self.whole_jobs_ok / self.whole_jobs if self.whole_jobs else math.nan

    @property
    def jobs_completed_pct(self) -> float:
        return 100.0 * self.jobs_completed / self.multi_jobs if self.multi_jobs else math.nan

    @property
    def us_per_pod(self) -> float:
        return self.seconds / max(1, self.pods) * 1e6


def _weighted_quantile(
    values: NDArray[np.float64], weights: NDArray[np.float64], q: float
) -> float:
    if len(values) == 0 or weights.sum() <= 0:
        return math.nan
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1]))
    return float(values[order][min(i, len(values) - 1)])


def replay(
    wl: ReplayWorkload,
    layout: Layout,
    profile_name: str,
    registry: Registry,
    *,
    seed: int,
    cfg: ReplayConfig,
    keep_starts: bool = False,
    warm_up: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayRun:
    """One policy (a built-in profile, or one + `-nogang`: `policy_profile`) over the
    workload's events on the layout's cluster."""
    profile = policy_profile(profile_name, registry)
    if warm_up:
        # The first calls load the jitted kernels: start-up cost, not per-pod cost.
        warm = Simulation(layout.nodes, profile, registry, seed=seed)
        for p in wl.pods[:32]:
            warm.arrive(p.info)
    sampling = Sampling(scrape_interval_s=cfg.scrape_interval_s, delay_s=cfg.telemetry_delay_s)
    sim = Simulation(
        layout.nodes, profile, registry, seed=seed, heat=layout.heat, sampling=sampling
    )
    heat = sim.heat
    assert heat is not None
    rows_of_heat = {int(r): i for i, r in enumerate(heat.rows)}
    snap = sim.snapshot
    capacity = snap.gpu_milli_capacity()
    pods = wl.pods
    n = len(pods)
    index_of = {p.info.uid: p.index for p in pods}
    start = np.full(n, np.nan)
    row_of = np.full(n, -1, np.int64)
    held = np.zeros(n, np.int64)  # milli-GPU a started pod holds
    withdrawn = np.zeros(n, np.bool_)
    gave_up = np.zeros(n, np.bool_)
    # Multi-pod jobs: pods still to start / still running, and the spread accumulators.
    job_pods = {j: idx for j, idx in wl.jobs.items() if len(idx) > 1}
    to_start = {j: len(idx) for j, idx in job_pods.items()}
    running_jobs: dict[str, NDArray[np.int64]] = {}  # job -> its distinct node rows
    broken_jobs: set[str] = set()  # a pod has left: all its pods never run again at once
    spread_area: dict[str, float] = {}
    spread_time: dict[str, float] = {}
    # milli-GPU held by started pods of multi-pod jobs not yet wholly started, and its area.
    partial_held: dict[str, int] = {}
    partial_milli = 0
    partial_area = 0.0
    departures: list[tuple[float, int]] = []  # (time, pod index)
    deadlines: list[tuple[float, int]] = []  # (time, pod index) of pods still queued
    used = 0
    peak = 0
    alloc_area = 0.0
    hot_t: list[float] = []  # hottest node temperature on each segment
    hot_w: list[float] = []  # the segment's duration
    hottest_max = -math.inf
    now = 0.0
    t_start, t_end = wl.window

    def hottest() -> float:
        return heat.hottest()  # the cards' true temperatures, not the readings

    def started(d: Decision) -> None:
        """The loop bound a pod: at its arrival, or later, retried after an event."""
        nonlocal used, peak, partial_milli
        i = index_of[d.pod.uid]
        p = pods[i]
        assert d.alloc is not None
        start[i] = now
        row_of[i] = d.alloc.row
        held[i] = sum(d.alloc.milli)
        used += int(held[i])
        peak = max(peak, used)
        if p.lifetime is not None:
            # Keeps its trace lifetime: leaves at deletion_time + its wait here.
            heapq.heappush(departures, (now + p.lifetime, i))
        if p.job:
            to_start[p.job] -= 1
            if to_start[p.job] == 0:
                partial_milli -= partial_held.pop(p.job, 0)
            else:
                partial_held[p.job] = partial_held.get(p.job, 0) + int(held[i])
                partial_milli += int(held[i])
            if to_start[p.job] == 0 and p.job not in broken_jobs:
                rows = np.unique(row_of[np.asarray(job_pods[p.job])])
                running_jobs[p.job] = np.asarray(
                    [rows_of_heat.get(int(r), -1) for r in rows], np.int64
                )

    sim.on_bound(started)

    def withdrawn_first(i: int) -> bool:
        """The trace deletes the pod (at arrival + lifetime) before it gives up (once past
        arrival + timeout)."""
        life = pods[i].lifetime
        return life is not None and life <= cfg.timeout_s

    def account(t: float) -> None:
        nonlocal now, alloc_area, partial_area
        # Cluster-wide time-weighted figures cover the window, not the start nor the drain.
        dt = min(t, t_end) - max(now, t_start)
        if dt > 0:
            alloc_area += used * dt
            # Each card is monotone between events: the node's hottest over the segment is
            # at one of its ends.
            end, _ = heat.temps_after(t - heat.t)
            h = max(hottest(), float(heat.node_hottest(end).max()) if len(heat.names) else h0)
            hot_t.append(h)
            hot_w.append(dt)
        # The gang spread is per job, over the job's whole run (all its pods running).
        run_dt = t - now
        if run_dt > 0:
            partial_area += partial_milli * run_dt
            # The spread at the segment's midpoint stands for the segment.
            node_temps = (
                heat.node_hottest(heat.temps_after(now + run_dt / 2 - heat.t)[0])
                if running_jobs
                else None
            )
            for job, rows in running_jobs.items():
                if node_temps is None or (rows < 0).any():
                    continue  # a node without sensors: no spread to measure
                temps = node_temps[rows]
                mean = float(temps.mean())
                if mean > 0 and np.isfinite(mean):
                    spread = 100.0 * float(temps.max() - temps.min()) / mean
                    spread_area[job] = spread_area.get(job, 0.0) + spread * run_dt
                    spread_time[job] = spread_time.get(job, 0.0) + run_dt
        now = max(now, t)

    hottest_max = h0 = hottest()
    at_start = dataclasses.replace(heat.totals)
    at_end = dataclasses.replace(heat.totals)
    t0 = time.perf_counter()
    a = 0
    inf = math.inf
    while True:
        t_depart = departures[0][0] if departures else inf
        t_arrive = pods[a].arrival if a < n else inf
        t_deadline = deadlines[0][0] if deadlines else inf
        wakeup = sim.next_wakeup()
        t_wake = wakeup if wakeup is not None else inf
        t = min(t_depart, t_arrive, t_deadline, t_wake)
        if t == inf or (t == t_deadline and a >= n and not departures and wakeup is None):
            break  # only deadlines of pods nothing can start any more: counted below
        account(t)
        if t == t_depart:
            # Departures first at equal times; the capacity they free moves waiting pods.
            # Their cards worked until now.
            sim.advance_heat(t)
            while departures and departures[0][0] == t:
                _, i = heapq.heappop(departures)
                sim.delete(pods[i].info.uid)
                used -= int(held[i])
                job = pods[i].job
                if job:
                    running_jobs.pop(job, None)
                    broken_jobs.add(job)
                    if job in partial_held:
                        partial_held[job] -= int(held[i])
                        partial_milli -= int(held[i])
            sim.advance(t)
        elif t == t_arrive:
            p = pods[a]
            sim.advance(t)
            sim.arrive(p.info)
            if math.isnan(start[a]):
                life = p.lifetime or 0.0
                limit = p.arrival + (life if withdrawn_first(a) else cfg.timeout_s)
                heapq.heappush(deadlines, (limit, a))
            a += 1
            if progress is not None and a % 512 == 0:
                progress(a, n)
        elif t == t_deadline:
            sim.advance(t)
            while deadlines and deadlines[0][0] <= t:
                _, i = heapq.heappop(deadlines)
                if math.isnan(start[i]):
                    # Still queued: the trace deletes it, or it gives up.
                    sim.withdraw(pods[i].info.uid)
                    withdrawn[i] = withdrawn_first(i)
                    gave_up[i] = not withdrawn_first(i)
        else:
            # A backoff ends, a leftover check is due or a Permit wait times out: what the
            # daemon's ticker would do then.
            sim.advance(t)
            after = sim.next_wakeup()
            if after is not None and after <= t:
                raise RuntimeError(f"replay: the queue's wakeup at {t} did nothing; stopping")
        hottest_max = max(hottest_max, hottest())
        # The heat totals over the window (its ends are events: a departure, an arrival).
        if heat.t <= t_start:
            at_start = dataclasses.replace(heat.totals)
        if heat.t <= t_end:
            at_end = dataclasses.replace(heat.totals)
    seconds = time.perf_counter() - t0
    # Pods still waiting at the end never start (nothing changes after the last event):
    # each is counted by the deadline it reaches first, withdrawal or timeout.
    for _, i in deadlines:
        if math.isnan(start[i]):
            withdrawn[i] = withdrawn_first(i)
            gave_up[i] = not withdrawn_first(i)
    retries = sim.schedule_one.attempts - n
    errors = sim.errors
    span = t_end - t_start
    waits = (start - np.asarray([p.arrival for p in pods]))[np.isfinite(start)]
    # Figures.
    whole_jobs = whole_ok = 0
    rack_shares: list[float] = []
    for _job, idx in wl.jobs.items():
        ok = all(
            math.isfinite(start[i]) and start[i] - pods[i].arrival <= cfg.timeout_s for i in idx
        )
        if pods[idx[0]].info.request.gpu_cards > 0:
            whole_jobs += 1
            whole_ok += ok
        if len(idx) > 1 and all(row_of[i] >= 0 for i in idx):
            racks = Counter(int(snap.node_rack[row_of[i]]) for i in idx)
            rack_shares.append(max(racks.values()) / len(idx))
    completed = partial = 0
    gang_waits: list[float] = []
    for idx in job_pods.values():
        n_started = sum(1 for i in idx if math.isfinite(start[i]))
        if n_started == len(idx):
            completed += 1
            gang_waits.append(max(float(start[i]) for i in idx) - max(pods[i].arrival for i in idx))
        elif n_started > 0:
            partial += 1
    spreads = np.asarray(
        [spread_area[j] / spread_time[j] for j in spread_area if spread_time[j] > 0], np.float64
    )
    hot_arr = np.asarray(hot_t, np.float64)
    w_arr = np.asarray(hot_w, np.float64)
    ok_h = np.isfinite(hot_arr)
    return ReplayRun(
        policy=profile_name,
        seed=seed,
        pods=n,
        started=int(np.isfinite(start).sum()),
        gave_up=int(gave_up.sum()),
        withdrawn=int(withdrawn.sum()),
        whole_jobs=whole_jobs,
        whole_jobs_ok=whole_ok,
        multi_jobs=len(job_pods),
        same_rack_pct=100.0 * float(np.mean(rack_shares)) if rack_shares else math.nan,
        jitter_pct=float(spreads.mean()) if len(spreads) else math.nan,
        jitter_p90_pct=float(np.percentile(spreads, 90)) if len(spreads) else math.nan,
        jitter_jobs=len(spreads),
        hottest_max_c=hottest_max,
        hottest_p99_c=_weighted_quantile(hot_arr[ok_h], w_arr[ok_h], 0.99),
        red_line_node_h=(at_end.red_line_node_s - at_start.red_line_node_s) / 3600.0,
        red_line_pct=(
            100.0
            * (at_end.red_line_node_s - at_start.red_line_node_s)
            / (at_end.node_s - at_start.node_s)
            if at_end.node_s > at_start.node_s
            else 0.0
        ),
        throttled_gpu_h=(at_end.throttled_gpu_s - at_start.throttled_gpu_s) / 3600.0,
        gpu_alloc_mean_pct=100.0 * alloc_area / span / capacity if span > 0 and capacity else 0.0,
        gpu_alloc_peak_pct=100.0 * peak / capacity if capacity else 0.0,
        mean_wait_s=float(waits.mean()) if len(waits) else math.nan,
        retries=retries,
        seconds=seconds,
        jobs_completed=completed,
        partial_jobs=partial,
        gang_wait_s=float(np.mean(gang_waits)) if gang_waits else math.nan,
        gang_wait_p90_s=float(np.percentile(gang_waits, 90)) if gang_waits else math.nan,
        permit_idle_gpu_h=sim.permit_idle_gpu_hours,
        partial_idle_gpu_h=partial_area / 1000.0 / 3600.0,
        errors=errors,
        starts={pods[i].info.name: float(start[i]) for i in range(n)} if keep_starts else {},
    )


@dataclass(slots=True)
class ReplayPolicy:
    policy: str
    runs: list[ReplayRun]

    def values(self, attr: str) -> list[float]:
        return [float(getattr(r, attr)) for r in self.runs]


def run_policies(
    pods: Sequence[TracePod],
    nodes: Sequence[TraceNode],
    policies: Sequence[str],
    seeds: Sequence[int],
    registry: Registry,
    cfg: ReplayConfig,
    *,
    on_run: Callable[[ReplayRun], None] | None = None,
) -> tuple[ReplayWorkload, dict[int, Layout], list[ReplayPolicy]]:
    """Every policy on every seed's layout, over one workload (the seed racks the cluster
    and seeds the framework's tie-break; the trace's events are the same)."""
    wl = build_workload(pods, cfg)
    layouts = {s: rack_layout(nodes, s, cfg) for s in seeds}
    out: list[ReplayPolicy] = []
    for name in policies:
        runs = []
        for s in seeds:
            run = replay(wl, layouts[s], name, registry, seed=s, cfg=cfg)
            if on_run is not None:
                on_run(run)
            runs.append(run)
        out.append(ReplayPolicy(name, runs))
    return wl, layouts, out
