"""The FGD paper's evaluation protocol, run through the daemon's framework and plugins.

``docs/fgd-protocol.md`` gives the source of every rule. In short, per policy and seed: the
GPU nodes of the trace; the arrival sequence of :func:`gpusched.sim.fgd_workload.
build_workload` (the whole trace shuffled with Go's RNG, clones appended until the GPU
request reaches 1.3x capacity); pods arrive one at a time, never leave, and a pod no node
can take is dropped; every node is filtered and scored. After each arrival we record the
arrived GPU demand (dropped pods included) and the allocated milli-GPUs; the curve is the
artifact's ``merge_alloc_discrete`` over those samples.

A policy is a scheduler profile built from a configuration document through
:mod:`gpusched.config` (the loader users use); only the profile differs between policies.
Protocol choices are configuration: ties between top nodes are broken by the daemon's own
rule (core/runtime/tie_break.py: the first node in an order hashed from the seed and the
node name), the Thermal filter is off for the published policies (the paper's simulator
has no such filter; the trace has no temperatures, so it would pass every node anyway).
Two other tie-breaks stay available for comparison: the paper's simulator's seeded node
order (``paper``) and kube-scheduler's uniform choice (``random``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpusched.config import API_VERSION, KIND, builtin_profiles, config_from_dict
from gpusched.config.profile import Profile
from gpusched.core.schedule_one import Result
from gpusched.framework.registry import Registry
from gpusched.plugins.helper.fgd_target import TargetClass
from gpusched.sim.engine import Simulation
from gpusched.sim.fgd_owners import OWNERS, max_replicas_per_node, replicaset_owners
from gpusched.sim.fgd_workload import FgdWorkload, build_workload, typical_pods
from gpusched.sim.openb import DEFAULT_NODE_FILE, TraceNode, TracePod, load_nodes, load_pods
from gpusched.sim.tenants import burst_tenants, concentration
from gpusched.sim.trace_cluster import cluster_nodes, workload_pods
from gpusched.sim.trace_dra import (
    MemoryShape,
    claim_for,
    dra_fleet,
    dra_pod,
    drop_claim,
    placed_cards,
)
from gpusched.sim.variants import DEFAULT_SEED, apply_variant, variant_label

# Policy name -> the name the published results use (reference CSV's ``policy`` column).
PUBLISHED = {
    "Random": "Random",
    "DotProduct": "DotProd",
    "GpuPacking": "GpuPacking",
    "GpuClustering": "GpuClustering",
    "BestFit": "BestFit",
    "FGD": "FGD",
}
POLICIES: tuple[str, ...] = (
    *PUBLISHED,
    "LeastAllocated",
    "MostAllocated",
    "ai-scheduler",
)
CURVE_POINTS = 131  # arrived demand 0..130 % in 1 % steps
REPORT_AT = (90, 100, 110)
# The daemon's rule (the default), the paper's simulator's node order, kube-scheduler's.
TIE_BREAKS = ("node-order", "paper", "random")


@dataclass(frozen=True, slots=True)
class Trace:
    name: str  # the pod file's stem without the "openb_pod_list_" prefix
    nodes: tuple[TraceNode, ...]
    pods: tuple[TracePod, ...]


def load_trace(trace_dir: str | Path, pods_file: str, nodes_file: str = DEFAULT_NODE_FILE) -> Trace:
    """A pod list and a node list (a fleet variant written by `gpusched variants write` comes
    with its own) of `trace_dir`, named after the pod file."""
    stem = Path(pods_file).stem
    name = stem.removeprefix("openb_pod_list_")
    return Trace(
        name, tuple(load_nodes(trace_dir, nodes_file)), tuple(load_pods(trace_dir, pods_file))
    )


def variant_trace(
    trace: Trace, variant: str, seed: int = DEFAULT_SEED, trace_dir: str | Path | None = None
) -> Trace:
    """`trace` transformed by a workload variant (sim/variants.py), named `<trace>+<variant>`
    (`@seed` added for a non-default variant seed), a name no published result has."""
    pods, nodes = apply_variant(variant, trace.pods, trace.nodes, seed, trace_dir=trace_dir)
    return Trace(f"{trace.name}+{variant_label(variant, seed)}", tuple(nodes), tuple(pods))


def published_target(trace: Trace) -> tuple[TargetClass, ...]:
    """FGD's target workload as published: the trace's popular shapes, known in advance."""
    return tuple(
        TargetClass(
            cpu_milli=t.resource.milli_cpu,
            gpu_milli=t.resource.milli_gpu,
            gpu_count=t.resource.gpu_number,
            gpu_models=t.resource.gpu_type,
            weight=t.percentage,
        )
        for t in typical_pods(trace.pods)
    )


def _one_score(
    plugin: str, args: Mapping[str, Any] | None = None, pre_score: bool = False
) -> dict[str, Any]:
    plugins: dict[str, Any] = {
        # The paper's simulator has no thermal filter (and no temperatures in the trace).
        "filter": {"disabled": [{"name": "Thermal"}]},
        "preScore": {"disabled": [{"name": "*"}]},
        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": plugin, "weight": 1}]},
    }
    if pre_score:
        plugins["preScore"]["enabled"] = [{"name": plugin}]
    doc: dict[str, Any] = {"schedulerName": f"fgd-{plugin}", "plugins": plugins}
    if args is not None:
        doc["pluginConfig"] = [{"name": plugin, "args": dict(args)}]
    return doc


def policy_document(name: str, trace: Trace, seed: int) -> dict[str, Any]:
    """The configuration document (one profile) for a policy of the comparison."""
    if name == "Random":
        profile = _one_score("RandomScore", {"seed": seed}, pre_score=True)
    elif name == "DotProduct":
        profile = _one_score("DotProductScore")
    elif name == "GpuPacking":
        profile = _one_score("GpuPackingScore")
    elif name == "GpuClustering":
        profile = _one_score("GpuClusteringScore")
    elif name == "BestFit":
        profile = _one_score("BestFitScore")
    elif name == "FGD":
        target = [
            {
                "cpuMilli": c.cpu_milli,
                "gpuMilli": c.gpu_milli,
                "gpuCount": c.gpu_count,
                "gpuModels": c.gpu_models,
                "weight": c.weight,
            }
            for c in published_target(trace)
        ]
        profile = _one_score("FGDScore", {"targetWorkload": target})
    elif name in ("LeastAllocated", "MostAllocated"):
        profile = builtin_profiles()[
            "least-allocated" if name == "LeastAllocated" else "most-allocated"
        ]
    elif name == "ai-scheduler":
        # The daemon's default profile, untouched: it learns the workload online.
        profile = builtin_profiles()["ai-scheduler"]
    else:
        raise KeyError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}


def policy_profile(name: str, trace: Trace, seed: int, registry: Registry) -> Profile:
    return config_from_dict(policy_document(name, trace, seed), registry).profiles[0]


@dataclass(slots=True)
class Placement:
    seq: int
    pod: str
    node: str  # "" = dropped
    gpu_ids: tuple[int, ...] = ()
    gpu_milli: tuple[int, ...] = ()


@dataclass(slots=True)
class SeedRun:
    policy: str
    seed: int
    arrived: NDArray[np.int64]  # milli-GPU arrived after each arrival (dropped included)
    used: NDArray[np.int64]  # milli-GPU allocated after each arrival
    capacity: int
    seconds: float
    placements: list[Placement] = field(default_factory=list)
    timings_us: dict[str, float] = field(default_factory=dict)
    dropped: int = 0
    errors: int = 0
    # --owners replicasets: mean over ReplicaSets of the most replicas on one node
    # (fgd_owners.max_replicas_per_node); NaN without owners.
    max_per_node: float = math.nan
    # tenants > 0: how each tenant's GPUs are spread at the end (sim/tenants.py `concentration`).
    concentration: float = math.nan

    @property
    def us_per_pod(self) -> float:
        return self.seconds / max(1, len(self.arrived)) * 1e6

    def curve(self) -> NDArray[np.float64]:
        return discrete_curve(self.arrived, self.used, self.capacity)


def discrete_curve(
    arrived: NDArray[np.int64], used: NDArray[np.int64], capacity: int
) -> NDArray[np.float64]:
    """``merge_alloc_discrete``: allocation % at each integer % of arrived demand.

    A sample's arrived ratio is rounded half-to-even to an integer percent; the value at
    a is the mean allocation % of the samples at a, else of those within a +- 1, else NaN.
    """
    arrive = np.round(arrived * 100.0 / capacity)
    alloc = np.round(used * 100.0 / capacity, 2)
    out = np.full(CURVE_POINTS, np.nan)
    for a in range(CURVE_POINTS):
        sel = arrive == a
        if not sel.any():
            sel = (arrive >= a - 1) & (arrive <= a + 1)
        if sel.any():
            out[a] = round(float(alloc[sel].mean()), 2)
    return out


def run_seed(
    trace: Trace,
    policy: str,
    seed: int,
    registry: Registry,
    *,
    workload: FgdWorkload | None = None,
    keep_placements: bool = False,
    ratio: float = 1.3,
    tie_break: str = "node-order",
    progress: Callable[[int, int], None] | None = None,
    profile: Profile | None = None,
    owners: str = "none",
    dra: MemoryShape | None = None,
    tenants: int = 0,
) -> SeedRun:
    """One policy on one seed's arrival sequence. `profile`, when given, is a user's
    profile (from a configuration file) measured under the name `policy`. `owners` is
    "none" (the protocol: pods without owner) or "replicasets" (fgd_owners). `dra`, when
    given, runs the DRA mode (trace_dra.py): nodes publish ResourceSlices (cards' memory
    of that shape) and GPU pods ask through ResourceClaims. `tenants` > 0 puts the pods in
    that many tenants' namespaces, in seeded bursts (sim/tenants.py), and measures how
    each tenant's GPUs end up spread over the nodes."""
    if owners not in OWNERS:
        raise ValueError(f"owners must be one of {', '.join(OWNERS)}, got {owners!r}")
    wl = workload or build_workload(trace.pods, trace.nodes, seed, ratio)
    gpu_nodes = [n for n in trace.nodes if n.gpu > 0]
    profile = profile or policy_profile(policy, trace, seed, registry)
    fleet = dra_fleet(gpu_nodes, dra) if dra is not None else None
    if fleet is None:
        sim = Simulation(cluster_nodes(gpu_nodes), profile, registry, seed=seed)
    else:
        sim = Simulation(fleet.nodes, profile, registry, seed=seed, dra=fleet.dra)
    if tie_break == "paper":
        sim.fw.tie_break = first_in_order(sim, wl)
    elif tie_break == "random":
        sim.fw.tie_break = uniform_choice(seed)
    elif tie_break != "node-order":
        raise ValueError(f"tie_break must be one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
    rs = replicaset_owners(wl.pods, seed) if owners == "replicasets" else None
    pods = workload_pods(wl.pods, profile.scheduler_name, rs)
    if tenants > 0:
        pods = [
            dataclasses.replace(p, namespace=t)
            for p, t in zip(pods, burst_tenants(len(pods), tenants, seed), strict=True)
        ]
    held: list[tuple[str, str, int]] = []
    nodes: list[str] = []
    capacity = sim.snapshot.gpu_milli_capacity()
    n = len(pods)
    arrived = np.empty(n, np.int64)
    used = np.empty(n, np.int64)
    placements: list[Placement] = []
    a = u = 0
    dropped = errors = 0
    t0 = time.perf_counter()
    for i, trace_pod in enumerate(pods):
        a += trace_pod.request.gpu_milli_total
        pod = trace_pod
        claim = None
        if fleet is not None:
            # The claim exists before its pod is seen, as a user's (or the resourceclaim
            # controller's, from a template) would.
            claim = claim_for(pod, fleet)
            if claim is not None:
                fleet.dra.put_claim(claim)
            pod = dra_pod(trace_pod, claim)
        d = sim.submit(pod)
        if d.result is Result.SCHEDULED and d.alloc is not None:
            if fleet is None:
                cards, milli = d.alloc.cards, d.alloc.milli
            else:
                # The claim holds the cards, not the pod (DynamicResources' Reserve).
                cards, milli = placed_cards(fleet, claim)
            u += sum(milli)
            nodes.append(d.node)
            held.append((pod.namespace, d.node, sum(milli)))
            if keep_placements:
                placements.append(Placement(i, pod.name, d.node, cards, milli))
        else:
            # The protocol drops a pod no node takes (the daemon's queue would keep it).
            sim.withdraw(pod.uid)
            if fleet is not None:
                drop_claim(fleet, claim)
            dropped += 1
            errors += d.result is Result.ERROR
            nodes.append("")
            if keep_placements:
                placements.append(Placement(i, pod.name, ""))
        arrived[i] = a
        used[i] = u
        if progress is not None and i % 512 == 0:
            progress(i, n)
    seconds = time.perf_counter() - t0
    return SeedRun(
        policy=policy,
        seed=seed,
        arrived=arrived,
        used=used,
        capacity=capacity,
        seconds=seconds,
        placements=placements,
        timings_us=sim.fw.timings.per_call_us(),
        dropped=dropped,
        errors=errors,
        max_per_node=max_replicas_per_node(rs, nodes) if rs is not None else math.nan,
        concentration=concentration(held) if tenants > 0 else math.nan,
    )


def uniform_choice(seed: int) -> Callable[[NDArray[np.intp]], int]:
    """Tie-break for comparison only: kube-scheduler's selectHost, uniform among the best."""
    rng = np.random.default_rng(seed)

    def pick(ties: NDArray[np.intp]) -> int:
        return int(ties[0]) if len(ties) == 1 else int(ties[rng.integers(len(ties))])

    return pick


def first_in_order(sim: Simulation, wl: FgdWorkload) -> Callable[[NDArray[np.intp]], int]:
    """Tie-break for comparison only: the first top-scoring node in the paper's node order.

    The simulator renames node i (name order) ``"%04d-" % perm[i] + name`` with a seeded
    permutation; a scheduler that walks nodes in name order and keeps the first best
    (the artifact's kube-scheduler fork, see docs/fgd-protocol.md section 10) then breaks
    ties by ``perm``. Measured: this, not uniform random choice, reproduces the published
    FGD numbers (ties pile onto the same nodes, a packing effect).
    """
    snap = sim.snapshot
    rank = np.full(snap.capacity, np.iinfo(np.int64).max, np.int64)
    for seeded in wl.node_names:
        prefix, original = seeded.split("-", 1)
        row = snap.row_of(original)
        if row >= 0:
            rank[row] = int(prefix)

    def pick(ties: NDArray[np.intp]) -> int:
        return int(ties[np.argmin(rank[ties])])

    return pick


@dataclass(frozen=True, slots=True)
class Stat:
    mean: float
    std: float  # population std over seeds, as the published summary

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        arr = np.asarray([v for v in values if not math.isnan(v)], np.float64)
        if len(arr) == 0:
            return cls(math.nan, math.nan)
        return cls(float(arr.mean()), float(arr.std()))


@dataclass(slots=True)
class PolicyResult:
    policy: str
    runs: list[SeedRun]

    def unallocated(self, at: int) -> Stat:
        return Stat.of([100.0 - float(r.curve()[at]) for r in self.runs])

    def curves(self) -> NDArray[np.float64]:
        return np.vstack([r.curve() for r in self.runs])

    @property
    def us_per_pod(self) -> float:
        return float(np.mean([r.us_per_pod for r in self.runs]))

    @property
    def seconds_per_seed(self) -> float:
        return float(np.mean([r.seconds for r in self.runs]))


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43`` (or a mix); ValueError naming the text otherwise."""
    out: list[int] = []
    for raw in text.split(","):
        part = raw.strip()
        try:
            if "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            elif part:
                out.append(int(part))
        except ValueError:
            raise ValueError(
                f"--seeds {text!r}: {part!r} is not a seed or a range LO-HI (e.g. 42-51 or 42,43)"
            ) from None
    if not out:
        raise ValueError(f"--seeds {text!r}: no seeds (e.g. 42-51 or 42,43)")
    return out


def parse_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    aliases = {p.lower(): p for p in POLICIES} | {"dotprod": "DotProduct", "ai": "ai-scheduler"}
    out = []
    for n in names:
        if n.lower() not in aliases:
            raise KeyError(f"unknown policy {n!r} (known: {', '.join(POLICIES)})")
        out.append(aliases[n.lower()])
    return out
