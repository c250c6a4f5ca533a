"""How low can unallocated GPU go in the FGD protocol? Bin-packing bounds, per trace and seed.

At 100 % arrived demand the unallocated GPU is at least the packing waste of the shared
(fractional, one-card) pods placed by then: a card holding a shared pod is never taken by
a whole-card pod, so its free milli is idle. Three numbers per seed, all computed on the
seed's arrival sequence (the protocol's, policy-independent) and ignoring nodes, CPU and
GPU models, which can only add waste:

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
- ``best_fit``: what online best fit achieves when the shared pods are packed alone in
  arrival order (a card per pod that fits nowhere), the gaps of every used card counted.
  Not a bound: a reference for what an online packer loses against the LP.

Run: ``python -m gpusched.sim.packing_bound --trace-dir ../shared/traces/openb --pods
openb_pod_list_default.csv --seeds 42-51`` (``make packing-bound`` runs every trace).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.model.node import FULL_CARD_MILLI
from gpusched.packing import cutting_stock
from gpusched.sim.fgd_protocol import load_trace, parse_seeds
from gpusched.sim.fgd_workload import build_workload, cluster_milli_gpu
from gpusched.sim.openb import TraceNode, TracePod

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


def main(argv: Sequence[str] | None = None) -> int:

    ap = argparse.ArgumentParser(
        prog="python -m gpusched.sim.packing_bound",
        description="Bin-packing bounds on unallocated GPU at 100 %% arrived demand.",
    )
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--pods", action="append", required=True, help="pod list file (repeatable)")
    ap.add_argument("--seeds", default="42-51")
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
        traces = [load_trace(args.trace_dir, p) for p in args.pods]
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = [(tr, [seed_bound(arrivals(tr.pods, tr.nodes, s), s) for s in seeds]) for tr in traces]
    print(f"unallocated GPU % at 100 % arrived demand, mean over seeds {args.seeds}")
    print("trace        LP bound   with drops (k)   online best fit")
    for tr, rows in table:
        lp = np.mean([r.lp_pct for r in rows])
        drop = np.mean([r.drop_pct for r in rows])
        k = np.mean([r.dropped_largest for r in rows])
        bf = np.mean([r.best_fit_pct for r in rows])
        print(f"{tr.name:<12} {lp:8.2f}   {drop:8.2f} ({k:5.0f})   {bf:15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
