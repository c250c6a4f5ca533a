"""A packing bound that sees the fleet: GPU models, node CPU and memory, by node group.

``packing_bound``'s ``lp``/``drop`` bounds pack the shared pods alone: no nodes, no CPU, no
models. This module bounds, for one arrival sequence of the FGD protocol, the GPU any
scheduler can have allocated at the samples the protocol averages "at 100 %", with an LP
relaxation over node groups and pod classes:

- a node group is the nodes of one (model, cards, cpu, memory); a pod class the pods of one
  (whole cards or shared milli, cards, cpu, memory, allowed models) arrived by the sample,
  CPU-only pods (and GPU pods asking 0 milli, which hold no card) as (cpu, memory);
- ``x[k, g]`` is how many pods of class k sit on group g (only where one fits an empty node
  of g and the model is allowed); per group the pods' CPU, memory and cards fit the group's
  totals, and per class ``sum_g x[k, g] <= arrived``. A shared pod counts ``prices[size]``
  cards, for each vector of prices every card filling respects (``sum prices <= 1``): the
  cutting-stock duals of the arrived shared sizes and ``milli / 1000``. Any packing of shared
  pods onto a set of cards uses at least ``prices . counts`` of them (weak duality), so these
  are valid cuts per group;
- the objective is the allocated GPU milli; a whole-card pod counts its cards x 1000; a
  class holds at most what fits one node (by CPU, memory, cards) times the group's nodes.

Relaxed on purpose, so the bound holds for every scheduler, online or offline: integrality,
arrival order, and the rule that a pod that fits when it arrives must be placed (the LP may
refuse any GPU pod; that can only raise the allocation it finds, so the bound only gets
weaker, never invalid). CPU-only pods are different: refusing them frees CPU for GPU pods,
so a relaxation that may refuse them never sees CPU. What the protocol implies instead: a
pod is dropped only when no node can take it, and free resources only shrink (pods never
leave). Two consequences enter the LP:

- :func:`surely_placed`: a CPU-only or shared pod that arrived while the pods before it
  could not block every node (fractionally, by CPU, memory or, for a shared pod, GPU) was
  placed by every run: a lower bound per class. This is the part that sees the CPU-only
  pods' CPU: order-free, a run could always have taken its GPU pods first and turned the
  CPU-only pods away once the nodes were full;
- cases on the smallest dropped CPU-only class (in (cpu, memory) order): "none dropped"
  (every arrived CPU-only pod placed), or "it is k": every CPU-only class before k wholly
  placed, at least one pod of k dropped, and at the sample every node blocked for k (per
  group, ``u`` nodes blocked by CPU use at least ``cpu - c + 1`` each, the other ``N - u``
  at least ``memory - m + 1`` of memory). Every run falls in one case, so the largest
  optimum over the cases bounds its allocation.

Shared pods may be dropped freely in the LP (bar the surely placed ones): that is what
makes the assumption-free bound weak (``assume="none"``; on openb's default trace ~3.0 %
against ``lp``'s 3.8 %: the LP turns away the wasteful sizes, which a real run does only
once no card has room). ``assume="shared"`` takes ``packing_bound.lp``'s assumption
instead, every arrived shared pod that fits some node placed; the result is then at least
``lp``'s waste for the same pods. Real runs break that assumption now and then (ai-scheduler
on gpushare40 drops some shared pods of every size near 100 %, and sits below ``lp``).

The protocol averages the samples whose arrived demand rounds to 100 % of capacity
(``fgd_protocol.discrete_curve``). Allocation only grows, so with ``A`` the bound at the
first such sample and ``B`` at the last, sample j has at most ``min(B, A + arrived_j -
arrived_first, arrived_j)``; the bound is 100 % minus their mean. The protocol rounds
allocation to 0.01 points, so a run may sit up to 0.01 below this number.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from gpusched.model.node import FULL_CARD_MILLI
from gpusched.packing import cutting_stock
from gpusched.packing.cutting_stock import quiet_solver
from gpusched.sim.fgd_workload import WorkloadPod
from gpusched.sim.openb import TraceNode

REPORTED_AT = 100  # the "at 100 %" column of the protocol's table
# What a bound may assume of the runs it bounds: nothing; every arrived shared pod that fits
# some node is placed (packing_bound's ``lp``); all of them but the largest size, which may
# be dropped (packing_bound's ``drop``, without its other conditions).
ASSUMPTIONS = ("none", "shared", "shared-but-largest")


@dataclass(frozen=True, slots=True)
class NodeGroup:
    model: str
    cards: int
    cpu_milli: int
    memory_mib: int
    count: int


@dataclass(frozen=True, slots=True)
class PodClass:
    """Pods alike for the bound. ``cards == 0``: CPU-only; ``milli < 1000`` with one card:
    shared; else whole cards. ``models`` empty: any model."""

    cards: int
    milli: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str]

    @property
    def shared(self) -> bool:
        return self.cards == 1 and self.milli < FULL_CARD_MILLI

    @property
    def value(self) -> int:
        """GPU milli allocated when placed (whole-card pods hold whole cards)."""
        return self.milli if self.shared else self.cards * FULL_CARD_MILLI


def node_groups(nodes: Sequence[TraceNode]) -> list[NodeGroup]:
    """The GPU nodes (the protocol's cluster) grouped by (model, cards, cpu, memory)."""
    c = Counter((n.model, n.gpu, n.cpu_milli, n.memory_mib) for n in nodes if n.gpu > 0)
    return [NodeGroup(m, g, cpu, mem, k) for (m, g, cpu, mem), k in sorted(c.items())]


def pod_class(p: WorkloadPod) -> PodClass:
    r = p.resource
    if r.total_milli_gpu == 0:
        return PodClass(0, 0, r.milli_cpu, p.source.memory_mib, frozenset())
    models = frozenset(m for m in r.gpu_type.split("|") if m)
    return PodClass(r.gpu_number, r.milli_gpu, r.milli_cpu, p.source.memory_mib, models)


def _fits(k: PodClass, g: NodeGroup) -> bool:
    return (
        k.cpu_milli <= g.cpu_milli
        and k.memory_mib <= g.memory_mib
        and k.cards <= g.cards
        and (not k.models or g.model in k.models or k.cards == 0)
    )


def _per_node(k: PodClass, g: NodeGroup) -> int:
    n = min(g.cpu_milli // max(1, k.cpu_milli), g.memory_mib // max(1, k.memory_mib))
    if k.cards > 0:
        n = min(n, g.cards // k.cards if not k.shared else g.cards * (FULL_CARD_MILLI // k.milli))
    return n


def card_prices(sizes: Sequence[int]) -> list[dict[int, float]]:
    """Price vectors (card fraction per shared size) no card filling exceeds: milli/1000,
    and the cutting-stock duals of `sizes` (one pod per entry)."""
    out = [{s: s / FULL_CARD_MILLI for s in set(sizes)}]
    counts = Counter(s for s in sizes if 0 < s < FULL_CARD_MILLI)
    if counts:
        uniq = sorted(counts)
        unit = math.gcd(FULL_CARD_MILLI, *uniq)
        steps = FULL_CARD_MILLI // unit
        units = np.array([s // unit for s in uniq], np.int64)
        demand = np.array([counts[s] for s in uniq], np.int64)
        cs = cutting_stock(units, np.minimum(demand, steps // units), demand.astype(float), steps)
        out.append({s: float(p) for s, p in zip(uniq, cs.prices, strict=True)})
    return out


class _Lp:
    """A sparse LP/MILP under construction (rows and columns added as they come)."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.rows_lo: list[float] = []
        self.rows_hi: list[float] = []
        self.entries: list[tuple[int, int, float]] = []  # (row, col, value)

    def col(self, cost: float = 0.0, upper: float = highspy.kHighsInf) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        return len(self.cost) - 1

    def row(self, lo: float, hi: float, terms: Sequence[tuple[int, float]]) -> None:
        r = len(self.rows_lo)
        self.rows_lo.append(lo)
        self.rows_hi.append(hi)
        self.entries.extend((r, c, v) for c, v in terms if v != 0.0)

    def maximise(self) -> float:
        """The LP optimum, -inf when infeasible."""
        n = len(self.cost)
        lp = highspy.HighsLp()
        lp.num_col_ = n
        lp.num_row_ = len(self.rows_lo)
        lp.col_cost_ = -np.asarray(self.cost)  # HiGHS minimises
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.asarray(self.upper)
        lp.row_lower_ = np.asarray(self.rows_lo)
        lp.row_upper_ = np.asarray(self.rows_hi)
        self.entries.sort(key=lambda e: (e[1], e[0]))
        start = np.zeros(n + 1, np.int64)
        for _, c, _ in self.entries:
            start[c + 1] += 1
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.cumsum(start).astype(np.int32)
        lp.a_matrix_.index_ = np.array([r for r, _, _ in self.entries], np.int32)
        lp.a_matrix_.value_ = np.array([v for _, _, v in self.entries], np.float64)
        h = quiet_solver()
        h.passModel(lp)
        h.run()
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return -math.inf
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"fleet bound LP not solved: HiGHS model status {status}")
        # Solver tolerances must not make the allocation too small (the bound too high).
        return -float(h.getInfo().objective_function_value) * (1 + 1e-7) + 1e-3


def _order(k: PodClass) -> tuple[int, int, int, int, str]:
    return (k.cards, k.milli, k.cpu_milli, k.memory_mib, "|".join(sorted(k.models)))


def max_allocation(
    groups: Sequence[NodeGroup],
    arrived: Counter[PodClass],
    prices: Sequence[dict[int, float]],
    placed_sizes: frozenset[int] = frozenset(),
    at_least: Counter[PodClass] | None = None,
) -> float:
    """The most GPU milli any scheduler can have allocated once `arrived` pods arrived:
    the largest optimum over the cases of the module docstring. `placed_sizes`: assume
    every shared pod of these sizes that fits some node is placed (an assumption, see
    :data:`ASSUMPTIONS`); `at_least`: pods of a class every run placed
    (:func:`surely_placed`)."""
    classes = sorted(arrived, key=_order)
    fits = [[j for j, g in enumerate(groups) if _fits(k, g)] for k in classes]
    cpu_only = sorted(
        (i for i, k in enumerate(classes) if k.cards == 0),
        key=lambda i: (classes[i].cpu_milli, classes[i].memory_mib),
    )
    always = {i for i, k in enumerate(classes) if k.shared and k.milli in placed_sizes and fits[i]}
    best = -math.inf
    # "cpu_only[w] is the smallest dropped CPU-only class", then "none dropped".
    for w in range(len(cpu_only) + 1):
        witness = cpu_only[w] if w < len(cpu_only) else None
        forced = always | set(cpu_only[:w])
        if any(not fits[i] for i in forced):
            continue  # a class no node can take is dropped: this case cannot happen
        best = max(
            best,
            _case(groups, classes, arrived, at_least or Counter(), fits, forced, witness, prices),
        )
    if best == -math.inf:
        raise InfeasibleError("no case of the bound is feasible")
    return best


class InfeasibleError(RuntimeError):
    """No case of the relaxation is feasible: the arrivals (under the assumption) cannot
    happen, e.g. shared pods that cannot all be placed when `placed_sizes` assumes so."""


def _case(
    groups: Sequence[NodeGroup],
    classes: Sequence[PodClass],
    arrived: Counter[PodClass],
    at_least: Counter[PodClass],
    fits: Sequence[Sequence[int]],
    forced: set[int],
    witness: int | None,
    prices: Sequence[dict[int, float]],
) -> float:
    lp = _Lp()
    # A node holds at most per_node(k, g) pods of one class: a valid cap per (class, group).
    x = {
        (i, j): lp.col(cost=float(k.value), upper=float(groups[j].count * _per_node(k, groups[j])))
        for i, k in enumerate(classes)
        for j in fits[i]
    }
    on_group = [
        [(c, classes[i]) for (i, jj), c in x.items() if jj == j] for j in range(len(groups))
    ]
    inf = highspy.kHighsInf
    for j, g in enumerate(groups):
        ks = on_group[j]
        lp.row(-inf, float(g.count * g.cpu_milli), [(c, float(k.cpu_milli)) for c, k in ks])
        lp.row(-inf, float(g.count * g.memory_mib), [(c, float(k.memory_mib)) for c, k in ks])
        for price in prices:
            terms = [
                (c, price.get(k.milli, 0.0) if k.shared else float(k.cards))
                for c, k in ks
                if k.cards > 0
            ]
            lp.row(-inf, float(g.count * g.cards), terms)
    for i, k in enumerate(classes):
        d = float(arrived[k])
        # The witness dropped at least one of its pods.
        hi = d - 1.0 if i == witness else d
        lo = d if i in forced else float(min(at_least[k], arrived[k]))
        if lo > hi:
            return -math.inf
        lp.row(lo, hi, [(x[i, j], 1.0) for j in fits[i]])
    if witness is not None:
        w = classes[witness]
        for j in fits[witness]:  # elsewhere the witness fits no empty node: blocked anyway
            g = groups[j]
            ks = on_group[j]
            u = lp.col(upper=float(g.count))  # nodes blocked by CPU, the others by memory
            cpu_gap = float(g.cpu_milli - w.cpu_milli + 1)
            mem_gap = float(g.memory_mib - w.memory_mib + 1)
            # CPU used >= u * cpu_gap; memory used >= (count - u) * mem_gap.
            lp.row(0.0, inf, [(c, float(k.cpu_milli)) for c, k in ks] + [(u, -cpu_gap)])
            lp.row(
                float(g.count) * mem_gap,
                inf,
                [(c, float(k.memory_mib)) for c, k in ks] + [(u, mem_gap)],
            )
    return lp.maximise()


def surely_placed(groups: Sequence[NodeGroup], seq: Sequence[PodClass]) -> list[int]:
    """For each arrival of `seq` (in order), 1 if no run can have dropped it, else 0.

    A pod is dropped only if, when it arrives, every node it fits (empty) is blocked: CPU
    used >= cpu - c + 1, or memory >= memory - m + 1, or, for a shared pod of s milli,
    every card holds > 1000 - s. The cluster then holds at most the CPU, memory and GPU of
    the pods arrived before it; if even those totals, spent where they block most, cannot
    block every node (fractionally), the pod was placed. (Spending each total separately is
    a relaxation: a pod's CPU and GPU land on the same node. Measured: placing the earlier
    pods' classes jointly marks ~5 % more pods at 4x the time.) Blocking only gets easier
    as arrivals add up, so per class the surely placed pods are a prefix of its arrivals,
    found by bisection. Whole-card pods are never marked (a card holding one small shared
    pod already blocks them)."""
    cpu = np.concatenate(([0], np.cumsum([k.cpu_milli for k in seq])))
    mem = np.concatenate(([0], np.cumsum([k.memory_mib for k in seq])))
    gpu = np.concatenate(([0], np.cumsum([k.value for k in seq])))
    where: dict[PodClass, list[int]] = {}
    for i, k in enumerate(seq):
        if k.cards == 0 or k.shared:
            where.setdefault(k, []).append(i)
    out = [0] * len(seq)
    for k, pos in where.items():
        fit = [g for g in groups if _fits(k, g)]
        if not fit:
            continue
        lo, hi = 0, len(pos)  # pos[:lo] cannot be blocked; pos[hi:] can
        while lo < hi:
            mid = (lo + hi) // 2
            i = pos[mid]
            if _blockable(k, fit, float(cpu[i]), float(mem[i]), float(gpu[i])):
                hi = mid
            else:
                lo = mid + 1
        for i in pos[:lo]:
            out[i] = 1
    return out


def _blockable(k: PodClass, fit: Sequence[NodeGroup], cpu: float, mem: float, gpu: float) -> bool:
    lp = _Lp()
    cpu_terms: list[tuple[int, float]] = []
    mem_terms: list[tuple[int, float]] = []
    gpu_terms: list[tuple[int, float]] = []
    for g in fit:
        u, r = lp.col(), lp.col()
        cpu_terms.append((u, float(g.cpu_milli - k.cpu_milli + 1)))
        mem_terms.append((r, float(g.memory_mib - k.memory_mib + 1)))
        split = [(u, 1.0), (r, 1.0)]
        if k.shared:
            v = lp.col()
            gpu_terms.append((v, float(g.cards * (FULL_CARD_MILLI + 1 - k.milli))))
            split.append((v, 1.0))
        lp.row(float(g.count), float(g.count), split)
    inf = highspy.kHighsInf
    lp.row(-inf, cpu, cpu_terms)
    lp.row(-inf, mem, mem_terms)
    if gpu_terms:
        lp.row(-inf, gpu, gpu_terms)
    return lp.maximise() > -math.inf


def window(arrived: np.ndarray, capacity: int, at: int = REPORTED_AT) -> np.ndarray:
    """Indices of the samples ``discrete_curve`` averages at `at` % (a +- 1 if none)."""
    pct = np.round(arrived * 100.0 / capacity)
    sel = np.nonzero(pct == at)[0]
    if len(sel) == 0:
        sel = np.nonzero((pct >= at - 1) & (pct <= at + 1))[0]
    if len(sel) == 0:
        raise ValueError(f"no sample of the arrival sequence is at {at} % arrived demand")
    return sel


@dataclass(frozen=True, slots=True)
class FleetBound:
    unallocated_pct: float  # lower bound on the protocol's unallocated GPU % at 100 %
    first: float  # the most milli allocatable at the window's first sample
    last: float  # ... at its last sample


def fleet_bound(
    pods: Sequence[WorkloadPod],
    nodes: Sequence[TraceNode],
    at: int = REPORTED_AT,
    assume: str = "none",
) -> FleetBound:
    """The bound for one arrival sequence `pods` on the GPU nodes of `nodes`, under one of
    :data:`ASSUMPTIONS`."""
    if assume not in ASSUMPTIONS:
        raise ValueError(f"assume must be one of {', '.join(ASSUMPTIONS)}, got {assume!r}")
    groups = node_groups(nodes)
    capacity = sum(g.count * g.cards for g in groups) * FULL_CARD_MILLI
    arrived = np.cumsum([p.resource.total_milli_gpu for p in pods])
    sel = window(arrived, capacity, at)
    f, last = int(sel[0]), int(sel[-1])
    classes = [pod_class(p) for p in pods[: last + 1]]
    # milli / 1000 and the cutting-stock duals of the shared pods at the last sample and at
    # the first (a size absent from a solve is priced 0: still no filling exceeds a card).
    prices = (
        card_prices([k.milli for k in classes if k.shared])
        + card_prices([k.milli for k in classes[: f + 1] if k.shared])[1:]
    )
    sure = surely_placed(groups, classes)
    at_f = Counter(k for k, s in zip(classes[: f + 1], sure, strict=False) if s)
    at_l = Counter(k for k, s in zip(classes, sure, strict=True) if s)
    sizes = {k.milli for k in classes if k.shared}
    placed = frozenset(
        ()
        if assume == "none" or not sizes
        else sizes
        if assume == "shared"
        else sizes - {max(sizes)}
    )
    a = max_allocation(groups, Counter(classes[: f + 1]), prices, placed, at_f)
    b = max_allocation(groups, Counter(classes), prices, placed, at_l) if last > f else a
    alloc = np.minimum(np.minimum(b, a + arrived[sel] - arrived[f]), arrived[sel])
    return FleetBound(100.0 - float(alloc.mean()) * 100.0 / capacity, a, b)
