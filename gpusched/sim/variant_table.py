"""The placement table across traces and workload variants: FGD, ai-scheduler, the bound.

    python -m gpusched.sim.variant_table --trace-dir ../shared/traces/openb --seeds 47-51 \
        [--cases default,gpuspec10+spec33,...] [--jobs 2] [--out results.json]

A case is a dev pod list's name (``default`` for openb_pod_list_default.csv), optionally
with a workload variant (``gpuspec10+spec33``, sim/variants.py, variant seed 0). For each
case and arrival seed it runs the FGD protocol (sim/fgd_protocol.py) with our FGD policy
and the default ai-scheduler profile, and computes the seed's bounds (sim/packing_bound.py
``trace_bound``: the shared-pod LP and the fleet bound that sees models and CPU). Printed
per case (means over seeds of unallocated GPU % at 100 % arrived demand): FGD, ai-scheduler,
ai-scheduler's change against FGD, the bound, and the share of FGD's gap to the bound that
ai-scheduler closes (``gap_closed``). Every (case, policy, seed) result is kept in
``--out`` as it finishes, so an interrupted run resumes where it stopped.

Report on seeds the defaults were not tuned on (47-51; tuning used 42-46) and on variants
not tuned on: docs/workload-variants.md says which.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import Trace, load_trace, parse_seeds, run_seed, variant_trace
from gpusched.sim.packing_bound import gap_closed, trace_bound

DEV_TRACES = ("default", "gpushare40", "multigpu20", "gpuspec10", "cpu050")
VARIANT_CASES = (
    "gpuspec10+spec20",
    "gpuspec10+spec33",
    "gpuspec10+spec50",
    "default+cpu150",
    "default+cpu250",
    "default+share20",
    "default+share60",
    "gpuspec10+scarce-T4",
    "gpuspec10+drop-V100M32",
)
POLICIES = ("FGD", "ai-scheduler")
BOUND = "bound"  # the pseudo-policy whose value is the fleet bound (models and CPU)
REPORT_AT = 100


def case_trace(trace_dir: str, case: str) -> Trace:
    base, _, variant = case.partition("+")
    trace = load_trace(trace_dir, f"openb_pod_list_{base}.csv")
    return variant_trace(trace, variant, trace_dir=trace_dir) if variant else trace


def run_job(trace_dir: str, case: str, policy: str, seed: int) -> float:
    """Unallocated GPU % at 100 % arrived demand, or the bound for `policy` == BOUND."""
    trace = case_trace(trace_dir, case)
    if policy == BOUND:
        b = trace_bound(trace, seed)
        # The bound that assumes the shared pods are placed may not hold (NaN): the one
        # without assumption then.
        return b.models_cpu_pct if not math.isnan(b.models_cpu_pct) else b.any_pct
    run = run_seed(trace, policy, seed, default_registry())
    return 100.0 - float(run.curve()[REPORT_AT])


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    fgd: list[float]
    ai: list[float]
    bound: list[float]

    @staticmethod
    def _mean(v: Sequence[float]) -> float:
        return statistics.fmean(v) if v else math.nan

    def line(self) -> str:
        f, a, b = self._mean(self.fgd), self._mean(self.ai), self._mean(self.bound)
        sd = statistics.pstdev(self.ai) if len(self.ai) > 1 else 0.0
        change = (a - f) / f * 100 if f else math.nan
        closed = gap_closed(f, a, b)
        worse = sum(x > y for x, y in zip(self.ai, self.fgd, strict=False))
        return (
            f"| {self.case} | {f:.2f} | {a:.2f} ± {sd:.2f} | {change:+.0f} % | {b:.2f} |"
            f" {closed * 100:.0f} % | {worse}/{len(self.ai)} |"
        )


HEADER = (
    "| trace | FGD | ai-scheduler | ai vs FGD | bound (models, CPU) | FGD's gap closed |"
    " seeds ai > FGD |\n|---|---:|---:|---:|---:|---:|---:|"
)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--seeds", default="47-51")
    ap.add_argument("--cases", default=",".join(DEV_TRACES + VARIANT_CASES))
    ap.add_argument("--jobs", type=int, default=2, help="processes (one job: a case, policy, seed)")
    ap.add_argument("--runs", default=",".join((*POLICIES, BOUND)), help="what to run")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every result; resumed from")
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:  # fail before any long run on a bad name or file
        case_trace(args.trace_dir, c)
    done: dict[str, float] = {}
    if args.out is not None and args.out.is_file():
        done = json.loads(args.out.read_text())
    jobs = [
        (c, p, s)
        for c in cases
        for p in args.runs.split(",")
        for s in seeds
        if f"{c}|{p}|{s}" not in done
    ]
    print(f"{len(jobs)} runs to do ({len(done)} kept from {args.out})", file=sys.stderr)
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures: dict[Future[float], str] = {
            pool.submit(run_job, args.trace_dir, c, p, s): f"{c}|{p}|{s}" for c, p, s in jobs
        }
        for fut in as_completed(futures):
            key = futures[fut]
            done[key] = fut.result()
            print(f"{key}: {done[key]:.2f}", file=sys.stderr)
            if args.out is not None:
                args.out.write_text(json.dumps(done, indent=1, sort_keys=True))
    print(f"unallocated GPU % at 100 % arrived demand, seeds {args.seeds}\n")
    print(HEADER)
    for c in cases:
        got = {p: [done[f"{c}|{p}|{s}"] for s in seeds] for p in (*POLICIES, BOUND)}
        print(Row(c, got["FGD"], got["ai-scheduler"], got[BOUND]).line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
