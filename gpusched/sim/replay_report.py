"""Outputs of the replay mode: a table beside the seed article's figures, and JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import load_trace, parse_seeds
from gpusched.sim.replay import (
    EXTRA_POLICIES,
    NO_GANG,
    POLICIES,
    ReplayPolicy,
    ReplayRun,
    run_policies,
)
from gpusched.sim.replay_workload import ReplayConfig, ReplayWorkload, offered_load

# The seed article's production figures, kube-scheduler -> ai-scheduler. Quoted, never a
# target: the replay's model is not tuned towards them.
ARTICLE: Mapping[str, tuple[str, str]] = {
    "whole_success_pct": ("68.4%", "95.2%"),
    "hottest_max_c": ("83.5 °C", "69.8 °C"),
    "same_rack_pct": ("41.2%", "88.7%"),
    "jitter_pct": ("±18.4% (step time)", "±2.1% (step time)"),
}

# (attribute, label, unit format)
METRICS: tuple[tuple[str, str, str], ...] = (
    ("whole_success_pct", "whole-card job success", "{:.1f}%"),
    ("hottest_max_c", "hottest node, max over time", "{:.1f} °C"),
    ("hottest_p99_c", "hottest node, p99 over time", "{:.1f} °C"),
    ("red_line_node_h", "node-hours above the 82 °C red line", "{:.1f}"),
    ("red_line_pct", "share of GPU node-hours above the red line", "{:.2f}%"),
    ("throttled_gpu_h", "throttled GPU-hours (held at 87 °C)", "{:.1f}"),
    ("same_rack_pct", "multi-pod job: pods in its top rack", "{:.1f}%"),
    ("jitter_pct", "gang temp. spread (jitter proxy), mean", "{:.1f}%"),
    ("jitter_p90_pct", "gang temp. spread, p90 of jobs", "{:.1f}%"),
    ("gpu_alloc_mean_pct", "GPU allocation, mean over time", "{:.1f}%"),
    ("gpu_alloc_peak_pct", "GPU allocation, peak", "{:.1f}%"),
    ("mean_wait_s", "mean wait of started pods", "{:.1f} s"),
    ("gave_up", "pods given up (timeout)", "{:.0f}"),
    ("withdrawn", "pods withdrawn while waiting", "{:.0f}"),
    ("us_per_pod", "replay cost per pod", "{:.0f} µs"),
)
# Gang figures (gpusched/sim/replay.py), shown with --gangs or a -nogang policy.
GANG_METRICS: tuple[tuple[str, str, str], ...] = (
    ("jobs_completed_pct", "multi-pod jobs completed (all pods started)", "{:.1f}%"),
    ("partial_jobs", "multi-pod jobs partially started", "{:.1f}"),
    ("gang_wait_s", "gang wait (last arrival -> all started), mean", "{:.1f} s"),
    ("gang_wait_p90_s", "gang wait, p90 of jobs", "{:.1f} s"),
    ("permit_idle_gpu_h", "idle GPU-hours held at Permit", "{:.2f}"),
    ("partial_idle_gpu_h", "GPU-hours held by partially started jobs", "{:.1f}"),
)


def _stat(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray([v for v in values if not math.isnan(v)], np.float64)
    if len(arr) == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std())


def _cell(values: Sequence[float], fmt: str) -> str:
    mean, std = _stat(values)
    if math.isnan(mean):
        return "-"
    text = fmt.format(mean)
    if len(values) > 1 and std > 0:
        text += " ± " + fmt.format(std).split(" ")[0].rstrip("%")
    return text


def _metrics(
    cfg: ReplayConfig, results: Sequence[ReplayPolicy]
) -> tuple[tuple[str, str, str], ...]:
    if cfg.gangs or any(r.policy.endswith(NO_GANG) for r in results):
        return METRICS + GANG_METRICS
    return METRICS


def table(
    trace: str, wl: ReplayWorkload, results: Sequence[ReplayPolicy], cfg: ReplayConfig
) -> Table:
    seeds = len(results[0].runs) if results else 0
    t = Table(
        title=f"Replay of openb/{trace}: {len(wl.pods)} pods, {wl.multi_pod_jobs} multi-pod jobs,"
        f" time compression {cfg.time_compression:g}x, cluster fraction"
        f" {cfg.cluster_fraction:g}, {seeds} seed(s) (mean ± std)"
        + (", multi-pod jobs are gangs" if cfg.gangs else "")
    )
    t.add_column("metric", no_wrap=True)
    for r in results:
        t.add_column(r.policy, justify="right")
    t.add_column("seed article: kube → ai", justify="right")
    for attr, label, fmt in _metrics(cfg, results):
        art = ARTICLE.get(attr)
        t.add_row(
            label,
            *[_cell(r.values(attr), fmt) for r in results],
            f"{art[0]} → {art[1]}" if art else "",
        )
    t.caption = (
        "kube-scheduler-like spreading = least-allocated. The article's jitter is measured"
        " step time; ours is a temperature-spread proxy (docs/replay-results.md)."
    )
    return t


def to_json(
    trace: str,
    wl: ReplayWorkload,
    results: Sequence[ReplayPolicy],
    cfg: ReplayConfig,
    *,
    offered_load_pct: Callable[[int], float] | None = None,
) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for r in results:
        entry: dict[str, Any] = {"seeds": [run.seed for run in r.runs]}
        for attr, _label, _fmt in _metrics(cfg, results):
            values = r.values(attr)
            mean, std = _stat(values)
            entry[attr] = {"mean": mean, "std": std, "by_seed": values}
        entry["whole_jobs"] = [run.whole_jobs for run in r.runs]
        entry["whole_jobs_ok"] = [run.whole_jobs_ok for run in r.runs]
        entry["jitter_jobs"] = [run.jitter_jobs for run in r.runs]
        entry["multi_jobs"] = [run.multi_jobs for run in r.runs]
        entry["jobs_completed"] = [run.jobs_completed for run in r.runs]
        entry["errors"] = [run.errors for run in r.runs]
        policies[r.policy] = entry
    seeds = results[0].runs if results else []
    return {
        "trace": trace,
        "config": {
            "timeout_s": cfg.timeout_s,
            "job_window_s": cfg.job_window_s,
            "time_compression": cfg.time_compression,
            "cluster_fraction": cfg.cluster_fraction,
            "nodes_per_rack": cfg.nodes_per_rack,
            "racks_per_spine": cfg.racks_per_spine,
            "hot_rack_share": cfg.hot_rack_share,
            "gangs": cfg.gangs,
            "scrape_interval_s": cfg.scrape_interval_s,
            "telemetry_delay_s": cfg.telemetry_delay_s,
        },
        "workload": {
            "pods": len(wl.pods),
            "skipped": wl.skipped,
            "phases": wl.phases,
            "stays": wl.stays,
            "initial": wl.initial,
            "window_start_s": wl.window_start,
            "measured_window_s": list(wl.window),
            "jobs": len(wl.jobs),
            "multi_pod_jobs": wl.multi_pod_jobs,
        },
        "offered_load_pct": (
            {str(run.seed): offered_load_pct(run.seed) for run in seeds}
            if offered_load_pct is not None
            else None
        ),
        "article_kube_to_ai": {k: list(v) for k, v in ARTICLE.items()},
        "policies": policies,
    }


def write_json(path: str | Path, data: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=2, allow_nan=True) + "\n")


def replay_main(args: Any) -> int:
    """``gpusched simulate --protocol replay`` (arguments from gpusched/cli.py)."""

    console = Console(width=max(120, Console().width))
    if args.trace_dir is None:
        console.print("--protocol replay needs --trace-dir (e.g. ../shared/traces/openb)")
        return 2
    policies = [p.strip() for p in (args.policies or ",".join(POLICIES)).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES + EXTRA_POLICIES]
    if unknown:
        known = ", ".join(POLICIES + EXTRA_POLICIES)
        console.print(f"unknown replay policies {unknown} (known: {known})")
        return 2
    cfg = ReplayConfig(
        timeout_s=args.timeout,
        job_window_s=args.job_window,
        time_compression=args.time_compression,
        cluster_fraction=args.cluster_fraction,
        gangs=bool(getattr(args, "gangs", False)),
        scrape_interval_s=getattr(args, "scrape_interval", 15.0),
        telemetry_delay_s=getattr(args, "telemetry_delay", 10.0),
    )
    trace = load_trace(args.trace_dir, args.pods)
    seeds = parse_seeds(args.seeds or "1")

    def on_run(run: ReplayRun) -> None:
        console.print(
            f"  {run.policy:<16} seed {run.seed}: whole-card success {run.whole_success_pct:5.1f}%"
            f"  hottest {run.hottest_max_c:5.1f} °C  throttled {run.throttled_gpu_h:.1f} GPU-h"
            f"  {run.seconds:5.2f} s"
            f"  {run.us_per_pod:4.0f} µs/pod"
            f"  multi-pod jobs completed {run.jobs_completed}/{run.multi_jobs},"
            f" partial {run.partial_jobs}"
        )

    wl, layouts, results = run_policies(
        trace.pods, trace.nodes, policies, seeds, default_registry(), cfg, on_run=on_run
    )

    def load_pct(seed: int) -> float:
        lay = layouts[seed]
        return 100.0 * offered_load(wl, sum(n.gpu_count for n in lay.nodes) * 1000)

    lay = layouts[seeds[0]]
    console.print(
        f"trace {trace.name}: {len(wl.pods)} pods replayed ({wl.skipped or 'none'} skipped),"
        f" {wl.initial} present at t=0, {wl.stays} never leave; {len(wl.jobs)} jobs, "
        f"{wl.multi_pod_jobs} multi-pod; cluster {len(lay.nodes)} GPU nodes in {lay.racks} racks"
        f" ({len(lay.hot_racks)} hot, seed {seeds[0]}); offered GPU load"
        f" {load_pct(seeds[0]):.1f}% over the {(wl.window[1] - wl.window[0]) / 3600:.1f} h window"
    )
    console.print(table(trace.name, wl, results, cfg))
    if args.json_out:
        write_json(args.json_out, to_json(trace.name, wl, results, cfg, offered_load_pct=load_pct))
    return 0 if all(run.errors == 0 for r in results for run in r.runs) else 1
