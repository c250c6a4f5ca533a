"""Outputs of the FGD protocol: table beside the published numbers, JSON, curves CSV, PNG,
and per-run placement files anyone can audit."""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from gpusched.sim.fgd_protocol import (
    CURVE_POINTS,
    PUBLISHED,
    REPORT_AT,
    PolicyResult,
    SeedRun,
    Stat,
)

REFERENCE_FILE = "fgd_unallocated_gpu_pct_at_100pct_arrival.csv"


def load_published(reference_dir: str | Path | None, trace: str) -> dict[str, Stat]:
    """Published mean/std of unallocated GPU % at 100 % arrival, by published policy name."""
    if reference_dir is None:
        return {}
    path = Path(reference_dir) / REFERENCE_FILE
    if not path.is_file():
        return {}
    out: dict[str, Stat] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["trace"] == trace:
                out[row["policy"]] = Stat(float(row["mean_unallocated_pct"]), float(row["std"]))
    return out


def _fmt(s: Stat) -> str:
    return "-" if math.isnan(s.mean) else f"{s.mean:.2f} ± {s.std:.2f}"


def table(trace: str, results: Sequence[PolicyResult], published: Mapping[str, Stat]) -> Table:
    seeds = len(results[0].runs) if results else 0
    t = Table(
        title=f"FGD protocol on openb/{trace}: unallocated GPU % (milli-GPU), {seeds} seed(s)"
    )
    t.add_column("policy")
    for at in REPORT_AT:
        t.add_column(f"at {at}% arrived", justify="right")
    t.add_column("published at 100%", justify="right")
    t.add_column("Δ vs published", justify="right")
    t.add_column("µs/pod", justify="right")
    t.add_column("s/seed", justify="right")
    for r in results:
        at100 = r.unallocated(100)
        pub = published.get(PUBLISHED.get(r.policy, ""))
        t.add_row(
            r.policy,
            *[_fmt(r.unallocated(at)) for at in REPORT_AT],
            _fmt(pub) if pub else "-",
            f"{at100.mean - pub.mean:+.2f}" if pub else "-",
            f"{r.us_per_pod:.0f}",
            f"{r.seconds_per_seed:.2f}",
        )
    fgd = published.get("FGD")
    if fgd is not None:
        t.caption = (
            f"published FGD {fgd.mean:.2f}%: 15% fewer unallocated GPUs is <= "
            f"{0.85 * fgd.mean:.2f}%"
        )
    elif not published:
        # A workload variant (sim/variants.py) or a trace the paper did not run.
        t.caption = f"no published result for {trace}"
    return t


def to_json(
    trace: str, results: Sequence[PolicyResult], published: Mapping[str, Stat]
) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for r in results:
        entry: dict[str, Any] = {}
        for at in REPORT_AT:
            s = r.unallocated(at)
            entry[f"unallocated_pct_at_{at}"] = {"mean": s.mean, "std": s.std}
        entry["seeds"] = [run.seed for run in r.runs]
        entry["unallocated_pct_at_100_by_seed"] = [
            100.0 - float(run.curve()[100]) for run in r.runs
        ]
        entry["us_per_pod"] = r.us_per_pod
        entry["seconds_per_seed"] = r.seconds_per_seed
        entry["dropped_pods"] = [run.dropped for run in r.runs]
        pub = published.get(PUBLISHED.get(r.policy, ""))
        if pub is not None:
            entry["published_unallocated_pct_at_100"] = {"mean": pub.mean, "std": pub.std}
        policies[r.policy] = entry
    return {"trace": trace, "published": bool(published), "policies": policies}


def write_json(path: str | Path, data: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(data, indent=2, allow_nan=True) + "\n")


def write_curves(path: str | Path, trace: str, results: Sequence[PolicyResult]) -> None:
    """One row per policy and seed, allocation % at 0..130 % arrived (as the artifact's)."""
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["workload", "policy", "seed", *range(CURVE_POINTS)])
        for r in results:
            for run in r.runs:
                w.writerow([trace, r.policy, run.seed, *[f"{v:.2f}" for v in run.curve()]])


def write_plot(path: str | Path, trace: str, results: Sequence[PolicyResult]) -> None:
    # Lazy: matplotlib is the optional `plot` extra, and the Agg backend must be chosen
    # before pyplot is first imported.
    import matplotlib  # noqa: PLC0415 - optional extra, loaded only to plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - after matplotlib.use("Agg")

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    x = np.arange(CURVE_POINTS)
    for r in results:
        # A percent no arrival reached (a short run) is NaN in every seed: leave the gap in
        # the line rather than warn about the empty mean.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(r.curves(), axis=0)
        ax.plot(x, mean, label=f"{r.policy} ({r.unallocated(100).mean:.2f}% unalloc.)", lw=1.2)
    ax.plot(x, np.minimum(x, 100), color="grey", ls=":", lw=0.8, label="ideal")
    ax.set_xlim(60, 130)
    ax.set_ylim(60, 100)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPU allocation rate (%)")
    ax.set_title(f"openb/{trace}: allocation vs arrived demand (mean of seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_placements(directory: str | Path, run: SeedRun) -> Path:
    """DIR/<policy>-<seed>.csv: seq,pod,node,gpu_ids,gpu_milli in arrival order."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{run.policy}-{run.seed}.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["seq", "pod", "node", "gpu_ids", "gpu_milli"])
        for p in run.placements:
            w.writerow(
                [
                    p.seq,
                    p.pod,
                    p.node,
                    "|".join(str(c) for c in p.gpu_ids),
                    "|".join(str(m) for m in p.gpu_milli),
                ]
            )
    return path
