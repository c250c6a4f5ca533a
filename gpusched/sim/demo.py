"""`gpusched simulate` without a trace: the built-in fleet and workload through three
profiles, ai-scheduler against kube-scheduler-like spreading and packing.

Pods arrive `arrival_gap_s` apart on the virtual clock and never leave; the cards heat with
the work bound to them (sim/thermal.py) and the scheduler sees them through sampled, delayed
readings (sim/telemetry_feed.py). After the last arrival the clock runs `settle_s` more so
the last placements reach their temperature: the hottest card then is the model's true
temperature, which the scheduler's filter on readings can fail to keep under the red line.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpusched.config.profile import Profile
from gpusched.core.schedule_one import Decision, Result
from gpusched.framework.registry import Registry
from gpusched.model.pod import GpuKind, PodInfo
from gpusched.sim.engine import Simulation
from gpusched.sim.generator import Fleet


@dataclass(frozen=True, slots=True)
class DemoResult:
    profile: str
    pods: int
    gpu_allocation_pct: float
    unplaced: dict[str, int]  # by pod type: whole, shared, cpu
    submitted: dict[str, int]
    whole_node_jobs: int
    whole_node_jobs_ok: int
    same_rack_pct: float  # mean share of a multi-pod job's pods in its most common rack
    hottest_used_c: float  # the hottest card at the end (true temperature)
    red_line_node_h: float  # GPU node-hours with some card above the red line
    throttled_gpu_h: float  # cards' worth of allocation x hours held at max operating
    us_per_pod: float
    errors: int

    @property
    def whole_node_success_pct(self) -> float:
        return (
            100.0 * self.whole_node_jobs_ok / self.whole_node_jobs
            if self.whole_node_jobs
            else 100.0
        )


def _pod_type(pod: PodInfo) -> str:
    return {GpuKind.WHOLE: "whole", GpuKind.SHARED: "shared", GpuKind.NONE: "cpu"}[pod.request.kind]


def run_profile(
    fleet: Fleet,
    pods: Sequence[PodInfo],
    profile: Profile,
    registry: Registry,
    *,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    arrival_gap_s: float = 2.0,
    settle_s: float = 600.0,
) -> DemoResult:
    # Warm up on a throwaway copy: the first calls load the jitted kernels, which is start-up
    # cost, not the per-pod cost the table reports.
    warm = Simulation(fleet.nodes, profile, registry, seed=seed)
    for pod in pods[:32]:
        warm.arrive(pod)
    sim = Simulation(fleet.nodes, profile, registry, seed=seed, heat=fleet.heat)
    heat = sim.heat
    assert heat is not None
    unplaced: Counter[str] = Counter()
    submitted: Counter[str] = Counter()
    placed_rows: dict[str, list[int]] = defaultdict(list)
    job_sizes: Counter[str] = Counter()
    whole_node_jobs: set[str] = set()
    gang_bound: set[str] = set()
    errors = 0

    def bound(d: Decision) -> None:
        # A gang's members bind when its last pod arrives (generate_gang_workload), after
        # their own `arrive` returned: they are counted here.
        if d.pod.gang is not None and d.alloc is not None:
            gang_bound.add(d.pod.uid)
            if d.pod.job_id:
                placed_rows[d.pod.job_id].append(d.alloc.row)

    sim.on_bound(bound)
    t0 = time.perf_counter()
    for i, pod in enumerate(pods):
        kind = _pod_type(pod)
        submitted[kind] += 1
        if pod.job_id:
            job_sizes[pod.job_id] += 1
            if pod.request.gpu_cards == 8:
                whole_node_jobs.add(pod.job_id)
        sim.advance(i * arrival_gap_s)
        d = sim.arrive(pod)
        if pod.gang is not None or d is None:
            continue  # a gang member: placed with its gang or not at all (counted below)
        if d.result is Result.SCHEDULED and d.alloc is not None:
            if pod.job_id:
                placed_rows[pod.job_id].append(d.alloc.row)
        else:
            sim.withdraw(pod.uid)  # the demo counts it unplaced; no retry later
            unplaced[kind] += 1
            errors += d.result is Result.ERROR
        if progress is not None and i % 256 == 0:
            progress(i)
    for pod in pods:
        if pod.gang is not None and pod.uid not in gang_bound:
            unplaced[_pod_type(pod)] += 1
    sim.advance(len(pods) * arrival_gap_s + settle_s)
    errors = max(errors, sim.errors)
    # The scheduler's time: the simulated cards and their telemetry are not its cost.
    elapsed = time.perf_counter() - t0 - sim.telemetry_seconds
    snap = sim.snapshot
    cap = snap.gpu_milli_capacity()
    used = cap - snap.gpu_milli_free()
    ok_jobs = sum(1 for j in whole_node_jobs if len(placed_rows[j]) == job_sizes[j])
    rack_shares = []
    for job, rows in placed_rows.items():
        if job_sizes[job] > 1 and len(rows) == job_sizes[job]:
            racks = Counter(int(snap.node_rack[r]) for r in rows)
            rack_shares.append(max(racks.values()) / len(rows))
    return DemoResult(
        profile=profile.scheduler_name,
        pods=len(pods),
        gpu_allocation_pct=100.0 * used / cap if cap else 0.0,
        unplaced=dict(unplaced),
        submitted=dict(submitted),
        whole_node_jobs=len(whole_node_jobs),
        whole_node_jobs_ok=ok_jobs,
        same_rack_pct=100.0 * sum(rack_shares) / len(rack_shares) if rack_shares else 100.0,
        hottest_used_c=heat.hottest(),
        red_line_node_h=heat.totals.red_line_node_s / 3600.0,
        throttled_gpu_h=heat.totals.throttled_gpu_s / 3600.0,
        us_per_pod=elapsed / max(1, len(pods)) * 1e6,
        errors=errors,
    )


# The judged rows of `gpusched simulate`'s table: (label, value, True when higher is better).
# Temperatures, and the time per pod, are shown but not judged: the hottest card is one
# number of a simulated heat model, and the per-pod time is what the better placement costs.
JUDGED: tuple[tuple[str, Callable[[DemoResult], float], bool], ...] = (
    ("GPU allocation", lambda r: round(r.gpu_allocation_pct, 1), True),
    ("whole-card pods placed", lambda r: -r.unplaced.get("whole", 0), True),
    ("shared pods placed", lambda r: -r.unplaced.get("shared", 0), True),
    ("CPU-only pods placed", lambda r: -r.unplaced.get("cpu", 0), True),
    ("8-card jobs", lambda r: r.whole_node_jobs_ok, True),
    ("rack locality", lambda r: round(r.same_rack_pct, 1), True),
    ("red-line node-hours", lambda r: round(r.red_line_node_h, 2), False),
    ("throttled GPU-hours", lambda r: round(r.throttled_gpu_h, 2), False),
)

LEGEND = (
    "GPU allocation: GPU capacity held by placed pods at the end (higher: more of the fleet used).",
    "pods left unplaced: pods no node was found for, by kind (fewer is better).",
    "8-card whole-node job success: 8-card pods placed, of those submitted (they need a node"
    " with all 8 cards free: what fragmentation costs).",
    "multi-pod jobs: pods in top rack: a job's pods in its most common rack (higher: less"
    " cross-rack traffic).",
    "hottest card, red-line node-hours, throttled GPU-hours: from the simulator's heat model,"
    " which the scheduler does not know; it sees only sampled, delayed readings of it, as a"
    " live scheduler sees DCGM's (fewer hours is better).",
    "scheduling time per pod: the loop's time per pod in this process (not judged).",
)


def verdict(results: Sequence[DemoResult], ours: str = "ai-scheduler") -> list[str]:
    """One line per other profile: where `ours` is better, worse or equal on the JUDGED
    rows. Computed from the numbers, so it says "worse" when it is."""
    mine = next((r for r in results if r.profile == ours), None)
    if mine is None:
        return []
    lines = []
    for other in results:
        if other is mine:
            continue
        better, worse, equal = [], [], []
        for label, value, higher in JUDGED:
            a, b = value(mine), value(other)
            if a == b:
                equal.append(label)
            elif (a > b) == higher:
                better.append(label)
            else:
                worse.append(label)
        head = (
            "ahead"
            if better and not worse
            else "behind"
            if worse and not better
            else "mixed"
            if better
            else "no difference"
        )
        lines.append(
            f"{ours} vs {other.profile}: {head}: better on {len(better)} of {len(JUDGED)}"
            f" ({', '.join(better) or '-'}), worse on {len(worse)} ({', '.join(worse) or '-'}),"
            f" equal on {len(equal)}"
        )
    return lines
