"""``gpusched simulate --protocol replay --tenants N``: the tenancy replay's table and JSON
(sim/tenancy_replay.py; docs/tenancy-simulation.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import load_trace, parse_seeds
from gpusched.sim.replay_workload import ReplayConfig, build_workload, rack_layout
from gpusched.sim.tenancy_replay import (
    CLASSES,
    TENANCY_POLICIES,
    TenancyConfig,
    TenancyRun,
    replay_tenancy,
    tenant_workload,
)


def _cell(values: Sequence[float], fmt: str) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "-"
    mean = float(np.mean(vals))
    if len(vals) == 1:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ± {format(float(np.std(vals)), fmt)}"


def _attr(name: str) -> Callable[[TenancyRun], float]:
    return lambda r: float(getattr(r, name))


def _wait(klass: str, q: int) -> Callable[[TenancyRun], float]:
    return lambda r: r.waits[klass][q]


def _tenant(tenant: str, attr: str) -> Callable[[TenancyRun], float]:
    return lambda r: float(getattr(r.tenants[tenant], attr))


def rows(runs: Sequence[TenancyRun]) -> list[tuple[str, Callable[[TenancyRun], float], str]]:
    """The table's rows: label, figure of one run, format."""
    out: list[tuple[str, Callable[[TenancyRun], float], str]] = [
        ("GPU-hours lost to preemption", _attr("lost_gpu_h"), ".2f"),
        ("  of which evicted pods", _attr("lost_evicted_gpu_h"), ".2f"),
        ("  of which gang members killed with them", _attr("lost_killed_gpu_h"), ".2f"),
        ("pods evicted", _attr("evictions"), ".1f"),
        ("gang jobs restarted", _attr("jobs_restarted"), ".1f"),
    ]
    for c in CLASSES:
        out.append((f"{c} wait p50 (s)", _wait(c, 0), ".1f"))
        out.append((f"{c} wait p90 (s)", _wait(c, 1), ".1f"))
    tenants = sorted({t for r in runs for t in r.tenants}, key=lambda t: (len(t), t))
    for t in tenants:
        out.append((f"{t}: GPUs held, % of guarantee", _tenant(t, "mean_share_pct"), ".1f"))
        out.append(
            (
                f"{t}: below guarantee while waiting, % of time",
                _tenant(t, "below_while_waiting_pct"),
                ".1f",
            )
        )
        out.append((f"{t}: wait p90 (s)", _tenant(t, "wait_p90_s"), ".1f"))
    out.append(("GPU allocation, mean %", _attr("gpu_alloc_mean_pct"), ".1f"))
    out.append(("pods never started", _attr("never_started"), ".1f"))
    return out


def table(results: dict[str, list[TenancyRun]]) -> Table:
    every = [r for runs in results.values() for r in runs]
    seeds = sorted({r.seed for r in every})
    t = Table(title=f"Tenancy replay: mean ± std over seeds {', '.join(map(str, seeds))}")
    t.add_column("figure")
    for policy in results:
        t.add_column(policy, justify="right")
    for label, get, fmt in rows(every):
        t.add_row(label, *(_cell([get(r) for r in runs], fmt) for runs in results.values()))
    return t


def to_json(results: dict[str, list[TenancyRun]]) -> dict[str, Any]:
    every = [r for runs in results.values() for r in runs]
    return {
        policy: {label.strip(): [get(r) for r in runs] for label, get, _ in rows(every)}
        for policy, runs in results.items()
    }


def tenancy_main(args: Any) -> int:
    """``gpusched simulate --protocol replay --tenants N`` (arguments from gpusched/cli.py)."""
    console = Console(width=max(120, Console().width))
    if args.trace_dir is None:
        console.print("--protocol replay needs --trace-dir (e.g. ../shared/traces/openb)")
        return 2
    policies = [p.strip() for p in (args.policies or ",".join(TENANCY_POLICIES)).split(",")]
    unknown = [p for p in policies if p and p not in TENANCY_POLICIES]
    if unknown:
        console.print(
            f"unknown tenancy replay policies {unknown} (known: {', '.join(TENANCY_POLICIES)})"
        )
        return 2
    cfg = ReplayConfig(
        timeout_s=args.timeout,
        job_window_s=args.job_window,
        time_compression=args.time_compression,
        cluster_fraction=args.cluster_fraction,
        gangs=True,
    )
    tcfg = TenancyConfig(tenants=args.tenants)
    trace = load_trace(args.trace_dir, args.pods)
    seeds = parse_seeds(args.seeds or "1")
    registry = default_registry()
    wl = build_workload(trace.pods, cfg)
    results: dict[str, list[TenancyRun]] = {p: [] for p in policies if p}
    for s in seeds:
        layout = rack_layout(trace.nodes, s, cfg)
        capacity = sum(n.gpu_count for n in layout.nodes) * 1000
        twl = tenant_workload(wl, capacity, tcfg, s)
        for policy, runs in results.items():
            run = replay_tenancy(twl, layout, policy, registry, seed=s, cfg=cfg)
            console.print(
                f"  {policy:<14} seed {s}: lost {run.lost_gpu_h:7.2f} GPU-h"
                f" ({run.evictions} evicted, {run.jobs_restarted} gangs restarted)"
                f"  inference p90 {run.waits['inference'][1]:7.1f} s"
                f"  training p90 {run.waits['training'][1]:7.1f} s  {run.seconds:6.1f} s"
            )
            runs.append(run)
    console.print(
        f"trace {trace.name}: {len(wl.pods)} pods, {wl.multi_pod_jobs} multi-pod jobs (gangs);"
        f" {args.tenants} tenants; time compression {args.time_compression:g},"
        f" cluster fraction {args.cluster_fraction:g}"
    )
    console.print(table(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(to_json(results), indent=2) + "\n")
    return 0 if all(r.errors == 0 for runs in results.values() for r in runs) else 1
