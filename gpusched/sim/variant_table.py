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
from gpusched.sim.variants import DEV_TRACES, STRESS, base_of

# A stress variant's case: its base pod list's name, "+", the variant.
VARIANT_CASES = tuple(
    f"{base_of(v).removeprefix('openb_pod_list_').removesuffix('.csv')}+{v}" for v in STRESS
)
POLICIES = ("FGD", "ai-scheduler")
# The pseudo-policy of the fleet bound (models and CPU; sim/fleet_bound.py): `bound` assumes
# every shared pod that fits somewhere is placed (NaN where even that cannot hold), and
# `bound-any` assumes nothing (weaker). One run computes both.
BOUND = "bound"
BOUND_ANY = "bound-any"
REPORT_AT = 100


def case_trace(trace_dir: str, case: str) -> Trace:
    base, _, variant = case.partition("+")
    trace = load_trace(trace_dir, f"openb_pod_list_{base}.csv")
    return variant_trace(trace, variant, trace_dir=trace_dir) if variant else trace


def run_job(trace_dir: str, case: str, policy: str, seed: int) -> dict[str, float]:
    """{policy: unallocated GPU % at 100 % arrived demand}, or both bounds for BOUND."""
    trace = case_trace(trace_dir, case)
    if policy == BOUND:
        b = trace_bound(trace, seed)
        return {BOUND: b.models_cpu_pct, BOUND_ANY: b.any_pct}
    run = run_seed(trace, policy, seed, default_registry())
    return {policy: 100.0 - float(run.curve()[REPORT_AT])}


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    fgd: list[float]
    ai: list[float]
    bound: list[float]
    bound_any: list[float]

    @staticmethod
    def _mean(v: Sequence[float]) -> float:
        return statistics.fmean(v) if v else math.nan

    def line(self) -> str:
        f, a = self._mean(self.fgd), self._mean(self.ai)
        b, b_any = self._mean(self.bound), self._mean(self.bound_any)
        ran = [x for x in self.ai if not math.isnan(x)]  # NaN: not run (yet)
        sd = statistics.pstdev(ran) if len(ran) > 1 else 0.0
        change = (a - f) / f * 100 if f else math.nan
        # The fleet bound's assumption (shared pods that fit are placed) fails where a policy
        # drops shared pods and lands below it: the share closed is then against the bound
        # without assumption, marked *.
        held = not math.isnan(b) and b <= min(a, f) + 1e-9
        closed = gap_closed(f, a, b if held else b_any)
        worse = sum(x > y for x, y in zip(self.ai, self.fgd, strict=False))
        return (
            f"| {self.case} | {f:.2f} | {a:.2f} ± {sd:.2f} | {change:+.0f} % | {b:.2f} |"
            f" {b_any:.2f} | {closed * 100:.0f} %{'' if held else '*'} | {worse}/{len(self.ai)} |"
        )


HEADER = (
    "| trace | FGD | ai-scheduler | ai vs FGD | bound (models, CPU) | bound, no assumption |"
    " FGD's gap closed | seeds ai > FGD |\n|---|---:|---:|---:|---:|---:|---:|---:|"
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
        futures: dict[Future[dict[str, float]], str] = {
            pool.submit(run_job, args.trace_dir, c, p, s): f"{c}|{p}|{s}" for c, p, s in jobs
        }
        for fut in as_completed(futures):
            case, _, seed = futures[fut].split("|")
            for policy, value in fut.result().items():
                done[f"{case}|{policy}|{seed}"] = value
                print(f"{case}|{policy}|{seed}: {value:.2f}", file=sys.stderr)
            if args.out is not None:
                args.out.write_text(json.dumps(done, indent=1, sort_keys=True))
    print(f"unallocated GPU % at 100 % arrived demand, seeds {args.seeds}\n")
    print(HEADER)
    for c in cases:
        got = {
            p: [done.get(f"{c}|{p}|{s}", math.nan) for s in seeds]
            for p in (*POLICIES, BOUND, BOUND_ANY)
        }
        print(Row(c, got["FGD"], got["ai-scheduler"], got[BOUND], got[BOUND_ANY]).line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
