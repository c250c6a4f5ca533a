"""How low can unallocated GPU go in the FGD protocol? Bin-packing bounds, per trace and seed.

At 100 % arrived demand the unallocated GPU is at least the packing waste of the shared
(fractional, one-card) pods placed by then: a card holding a shared pod is never taken by
a whole-card pod, so its free milli is idle. Five numbers per seed, all computed on the
seed's arrival sequence (the protocol's, policy-independent); the first two and the last
ignore nodes, CPU and GPU models, which can only add waste:

- ``lp``: the cutting-stock LP bound on the waste of packing every shared pod that arrived
  by the first sample the protocol averages "at 100 %" (99.5 % arrived demand). A valid
  lower bound for any scheduler, online or offline, that places those pods; it is the LP
  dual value, rescaled so the duals are exactly feasible (checked by an exact knapsack),
  so solver tolerances cannot make it too high.
- ``drop``: the same bound when the scheduler also drops the largest shared size ``b``
  (810 milli in openb): a pod of size b is dropped only once no card has b milli free,
  and from then on every whole-card pod is dropped too, so dropping the last k pods of
  size b costs the demand of every pod >= b after the k-th last one. The value is
  ``min_k max(lp waste without those k pods, that dropped demand)``. A bound under the
  stated assumption (other shared pods are placed, b-size pods are not dropped for CPU or
  model reasons), not a proof for every conceivable run.
- ``models+cpu`` (:mod:`gpusched.sim.fleet_bound`): an LP over node groups (model, cards,
  CPU, memory) and pod classes that sees GPU models, node CPU and memory, whole-card pods,
  the shared pods' cutting-stock waste as cuts per group, and the CPU-only pods (those
  that arrived before anything could block them must be placed; a later one is dropped
  only if every node is blocked for it); under ``lp``'s assumption (every arrived shared
  pod that fits some node is placed), averaged over the samples the protocol averages.
  At least ``lp``'s waste on the same sample's pods.
- ``any``: the same LP without that assumption (a scheduler may also drop shared pods): a
  bound for every scheduler, weaker.
- ``best_fit``: what online best fit achieves when the shared pods are packed alone in
  arrival order (a card per pod that fits nowhere), the gaps of every used card counted.
  Not a bound: a reference for what an online packer loses against the LP.

Run: ``python -m gpusched.sim.packing_bound --trace-dir ../shared/traces/openb --pods
openb_pod_list_default.csv --seeds 42-51`` (``make packing-bound`` runs every trace);
``--nodes`` names another node file in the trace directory, ``--pods`` may be any pod list
(e.g. a generated variant), absolute or relative to ``--trace-dir``.

:func:`trace_bound` gives one seed's numbers for a report; :func:`gap_closed` the share of
FGD's gap to a bound that another policy closes.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.model.node import FULL_CARD_MILLI
from gpusched.packing import cutting_stock
from gpusched.sim.fgd_protocol import Trace, load_trace, parse_seeds
from gpusched.sim.fgd_workload import build_workload, cluster_milli_gpu
from gpusched.sim.fleet_bound import InfeasibleError, fleet_bound
from gpusched.sim.openb import DEFAULT_NODE_FILE, TraceNode, TracePod

FIRST_SAMPLE_AT_100 = 0.995  # round(arrived %) == 100 from 99.5 % on


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One seed's arrivals up to the cut: shared sizes in order, and every pod's
    (per-card milli, cards) so the drop analysis sees whole-card pods too."""

    capacity: int
    shared: tuple[int, ...]
    pods: tuple[tuple[int, int], ...]


def arrivals(pods: Sequence[TracePod], nodes: Sequence[TraceNode], seed: int) -> Arrivals:
    """The protocol's arrival sequence (ratio 1.3) cut at the first 100 % sample."""
    wl = build_workload(pods, nodes, seed, 1.3)
    capacity = cluster_milli_gpu([n for n in nodes if n.gpu > 0])
    cut = FIRST_SAMPLE_AT_100 * capacity
    arrived = 0
    shared: list[int] = []
    seq: list[tuple[int, int]] = []
    for p in wl.pods:
        r = p.resource
        if arrived + r.total_milli_gpu > cut:
            break
        arrived += r.total_milli_gpu
        seq.append((r.milli_gpu, r.gpu_number))
        if r.is_gpu_share:
            shared.append(r.milli_gpu)
    return Arrivals(capacity, tuple(shared), tuple(seq))


def _unit(sizes: Sequence[int]) -> int:
    return math.gcd(FULL_CARD_MILLI, *sizes) if sizes else FULL_CARD_MILLI


@dataclass(frozen=True, slots=True)
class LpBound:
    bins: float  # LP optimum: fractional cards needed
    lower_bound_bins: float  # sum(counts * duals) with duals rescaled to be feasible
    waste_milli: float  # lower_bound_bins * 1000 - sum of sizes

    def waste_pct(self, capacity: int) -> float:
        return self.waste_milli * 100.0 / capacity


def lp_bound(sizes: Sequence[int], counts: Sequence[int]) -> LpBound:
    """The cutting-stock LP bound on packing `counts[i]` pods of `sizes[i]` milli."""
    items = [(s, c) for s, c in zip(sizes, counts, strict=True) if c > 0]
    if not items:
        return LpBound(0.0, 0.0, 0.0)
    unit = _unit([s for s, _ in items])
    steps = FULL_CARD_MILLI // unit
    units = np.array([s // unit for s, _ in items], np.int64)
    demand = np.array([c for _, c in items], np.int64)
    lp = cutting_stock(units, np.minimum(demand, steps // units), demand.astype(float), steps)
    total = sum(s * c for s, c in items)
    return LpBound(lp.bins, lp.lower_bound, lp.lower_bound * FULL_CARD_MILLI - total)


def best_fit_waste(shared: Sequence[int]) -> int:
    """Online best fit over the sequence: the summed free milli of every used card."""
    unit = _unit(list(set(shared)))
    cap = FULL_CARD_MILLI // unit
    gaps = np.zeros(cap + 1, np.int64)  # cards by free units (partly used only)
    for s in shared:
        u = s // unit
        fit = np.nonzero(gaps[u:cap])[0]
        if len(fit):
            g = u + int(fit[0])
            gaps[g] -= 1
        else:
            g = cap
        gaps[g - u] += 1
    return int((gaps * np.arange(cap + 1)).sum()) * unit


@dataclass(frozen=True, slots=True)
class SeedBound:
    seed: int
    capacity: int
    lp_pct: float
    drop_pct: float
    dropped_largest: int  # k at the drop bound
    best_fit_pct: float


def _drop_bound(a: Arrivals, base: LpBound) -> tuple[float, int]:
    if not a.shared:
        return base.waste_pct(a.capacity), 0
    counts = Counter(a.shared)
    b = max(counts)
    sizes = sorted(counts)
    # dropped(k): demand of every pod >= b arriving after the k-th last pod of size b.
    dropped = [0]
    demand = 0
    for milli, cards in reversed(a.pods):
        if milli >= b:
            demand += milli * cards
        if cards == 1 and milli == b:
            dropped.append(demand)
    cache: dict[int, float] = {0: base.waste_pct(a.capacity)}

    def waste(k: int) -> float:
        if k not in cache:
            c = [counts[s] - (k if s == b else 0) for s in sizes]
            cache[k] = lp_bound(sizes, c).waste_pct(a.capacity)
        return cache[k]

    def cost(k: int) -> float:
        return max(waste(k), dropped[k] * 100.0 / a.capacity)

    # waste(k) falls and dropped(k) rises with k: bisect for the crossing, then take the
    # better neighbour.
    lo, hi = 0, len(dropped) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if waste(mid) > dropped[mid] * 100.0 / a.capacity:
            lo = mid
        else:
            hi = mid
    k = min((lo, hi), key=cost)
    return cost(k), k


def seed_bound(a: Arrivals, seed: int) -> SeedBound:
    counts = Counter(a.shared)
    sizes = sorted(counts)
    base = lp_bound(sizes, [counts[s] for s in sizes])
    drop, k = _drop_bound(a, base)
    return SeedBound(
        seed=seed,
        capacity=a.capacity,
        lp_pct=base.waste_pct(a.capacity),
        drop_pct=drop,
        dropped_largest=k,
        best_fit_pct=best_fit_waste(a.shared) * 100.0 / a.capacity,
    )


@dataclass(frozen=True, slots=True)
class TraceBound:
    """One seed's bounds on unallocated GPU % at 100 % arrived demand."""

    seed: int
    lp_pct: float
    drop_pct: float
    # fleet bound, every shared pod that fits placed (lp's assumption); NaN if impossible
    models_cpu_pct: float
    any_pct: float  # fleet bound, no assumption
    best_fit_pct: float
    seconds: float


def trace_bound(trace: Trace, seed: int) -> TraceBound:
    """Every bound of this module for `trace`'s arrival sequence of `seed` (ratio 1.3)."""
    t0 = time.perf_counter()
    gpu_nodes = [n for n in trace.nodes if n.gpu > 0]
    sb = seed_bound(arrivals(trace.pods, trace.nodes, seed), seed)
    wl = build_workload(trace.pods, gpu_nodes, seed, 1.3)
    free = fleet_bound(wl.pods, gpu_nodes).unallocated_pct
    try:
        placed = fleet_bound(wl.pods, gpu_nodes, assume="shared").unallocated_pct
    except InfeasibleError:
        placed = math.nan  # the shared pods cannot all be placed: the assumption is false
    return TraceBound(
        seed=seed,
        lp_pct=sb.lp_pct,
        drop_pct=sb.drop_pct,
        models_cpu_pct=placed,
        any_pct=free,
        best_fit_pct=sb.best_fit_pct,
        seconds=time.perf_counter() - t0,
    )


def gap_closed(fgd: float, other: float, bound: float) -> float:
    """(FGD - other) / (FGD - bound): the share of FGD's distance to the bound (all
    unallocated GPU %) that `other` closes; 1 at the bound, < 0 when worse than FGD. NaN
    when FGD is at or below the bound (no gap to close) or a value is NaN."""
    gap = fgd - bound
    if not gap > 0 or math.isnan(other):
        return math.nan
    return (fgd - other) / gap


def main(argv: Sequence[str] | None = None) -> int:

    ap = argparse.ArgumentParser(
        prog="python -m gpusched.sim.packing_bound",
        description="Bin-packing bounds on unallocated GPU at 100 %% arrived demand.",
    )
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--pods", action="append", required=True, help="pod list file (repeatable)")
    ap.add_argument("--nodes", default=DEFAULT_NODE_FILE, help="node list file")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--per-seed", action="store_true", help="a line per seed too")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        traces = [load_trace(args.trace_dir, p, args.nodes) for p in args.pods]
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"unallocated GPU % at 100 % arrived demand, mean over seeds {args.seeds}")
    print("trace            lp   drop  models+cpu    any  best fit   s/seed")
    for tr in traces:
        rows = []
        for s in seeds:
            r = trace_bound(tr, s)
            rows.append(r)
            if args.per_seed:
                print(f"  {tr.name:<12} seed {s}: " + _cells(r), flush=True)
        print(f"{tr.name:<14} " + _cells(*rows), flush=True)
    return 0


def _cells(*rows: TraceBound) -> str:
    def mean(f: str) -> float:
        return float(np.mean([getattr(r, f) for r in rows]))

    return (
        f"{mean('lp_pct'):5.2f}  {mean('drop_pct'):5.2f}  {mean('models_cpu_pct'):10.2f}"
        f"  {mean('any_pct'):5.2f}  {mean('best_fit_pct'):8.2f}  {mean('seconds'):7.1f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
