"""Builders for the data the tests share: nodes, pods, snapshots, simulations and the kernels'
array clusters. Pure constructors with defaults the tests rely on; no fakes of ports here
(those live in tests/fakes.py), see tests/README.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from gpusched.config import (
    API_VERSION,
    KIND,
    builtin_profile,
    builtin_profiles,
    config_from_dict,
    config_to_document,
    default_config,
)
from gpusched.config.profile import ConfigError
from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import FilterResult, Mask, Rows
from gpusched.framework.registry import Registry
from gpusched.model.node import Card, NodeModel, Taint
from gpusched.model.pod import Gang, GangAPI, PodInfo, PodRequest
from gpusched.model.selector import Requirement
from gpusched.model.volume import (
    Claim,
    NodeSelectorTerm,
    PersistentVolume,
    PodVolume,
    StorageClass,
)
from gpusched.plugins import default_registry
from gpusched.plugins.node_resources_fit import (
    NodeResourcesFitArgs,
    RequestedToCapacityRatioParam,
    ResourceSpec,
    ScoringStrategy,
    UtilizationShapePoint,
)
from gpusched.sim.engine import Simulation
from gpusched.sim.fgd_protocol import Trace
from gpusched.sim.openb import TraceNode, TracePod

GiB = 2**30
MiB = 2**20
RACK_LABEL = "topology.gpusched.io/rack"

# --- nodes -------------------------------------------------------------------------------


def gpu_node(
    name: str,
    cards: int = 8,
    mem: int = 81920,
    model: str = "A100",
    island: int = 4,
    rack: str = "",
) -> NodeModel:
    """A big GPU node (64 CPUs, 512 GiB): `cards` cards of `model`, NVLink islands of
    `island` cards, in `rack` (field and topology label) when given."""
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        cards=tuple(Card(i, model, mem, nvlink_island=i // island) for i in range(cards)),
        rack=rack,
        labels={RACK_LABEL: rack} if rack else {},
    )


def node(
    name: str,
    *,
    cpu: int = 4_000,
    mem: int = 16 * GiB,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[tuple[str, str, str]] = (),
    unschedulable: bool = False,
    cards: int = 0,
    other: Mapping[str, int] | None = None,
) -> NodeModel:
    """A small CPU node (4 CPUs, 16 GiB) with the labels, taints and flags the standard
    plugins look at; `cards` A100s if asked; `other` allocatable resources (rdma/hca: 2)."""
    return NodeModel(
        name=name,
        cpu_milli=cpu,
        memory_bytes=mem,
        pods=pods,
        cards=tuple(Card(i, "A100", 81920) for i in range(cards)),
        labels=dict(labels or {}),
        taints=tuple(Taint(k, v, e) for k, v, e in taints),
        unschedulable=unschedulable,
        other=tuple(sorted((other or {}).items())),
    )


# --- pods --------------------------------------------------------------------------------


def make_pod(name: str = "p", **req: Any) -> PodInfo:
    """A pod in namespace ns whose request is exactly PodRequest(**req)."""
    return PodInfo(uid=f"uid-{name}", namespace="ns", name=name, request=PodRequest(**req))


def pod(name: str = "p", *, request: PodRequest | None = None, **kw: Any) -> PodInfo:
    """A pod in namespace ns with `request` (default: empty) and any PodInfo field."""
    return PodInfo(
        uid=f"uid-{name}", namespace="ns", name=name, request=request or PodRequest(), **kw
    )


def ai_pod(name: str, job: str = "", **req: object) -> PodInfo:
    """A pod for the ai-scheduler profile: 1 CPU, 1 GiB plus `req`, in job `job`."""
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, **req),  # type: ignore[arg-type]
        scheduler_name="ai-scheduler",
        job_id=job,
    )


def gang_pod(name: str, gang: str, size: int, cards: int = 8) -> PodInfo:
    """An ai-scheduler pod (1 CPU, 1 GiB, `cards` whole GPUs) in annotation gang `gang` of
    `size` pods (scheduling.ai/gang-name + gang-total)."""
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=PodRequest(cpu_milli=1000, memory_bytes=GiB, gpu_cards=cards),
        scheduler_name="ai-scheduler",
        gang=Gang(f"ns/{gang}", size, GangAPI.ANNOTATIONS),
    )


# --- snapshots ---------------------------------------------------------------------------


def snapshot(*nodes: NodeModel) -> Snapshot:
    snap = Snapshot(max_cards=8, capacity=4)  # small capacity: tests also cover growth
    for n in nodes:
        snap.upsert_node(n)
    return snap


def all_rows(snap: Snapshot) -> Mask:
    return snap.node_valid.copy()


def passing(snap: Snapshot, res: FilterResult) -> list[str]:
    return sorted(snap.names_of(np.flatnonzero(res.feasible)))


def reasons_by_node(snap: Snapshot, candidates: Mask, res: FilterResult) -> dict[str, str]:
    """node name -> the reason the filter gives for rejecting it (several, in the
    filter's order and joined by ", ", when its result has `hits`)."""
    out: dict[str, str] = {}
    for row in np.flatnonzero(candidates & ~res.feasible):
        if res.hits is not None:
            held = [reason for i, reason in enumerate(res.reasons) if res.hits[i, row]]
            out[snap.names[row]] = ", ".join(held)
            continue
        code = 0 if res.codes is None else int(res.codes[row])
        out[snap.names[row]] = res.reasons[code]
    return out


def rows_of(snap: Snapshot, *names: str) -> Rows:
    return np.array([snap.row_of(n) for n in names], np.intp)


# --- simulations (the daemon's framework, cache and cycles over an in-memory cluster) ----


def ai_sim(*nodes: NodeModel, temps: dict[str, float] | None = None) -> Simulation:
    """The built-in ai-scheduler profile over `nodes` (idle temperatures `temps`), seed 1."""
    reg = default_registry()
    return Simulation(
        nodes, builtin_profile("ai-scheduler", reg), reg, seed=1, idle_temperatures=temps
    )


def card_free(s: Simulation, node: str) -> list[int]:
    row = s.snapshot.row_of(node)
    return [int(x) for x in s.snapshot.card_free_milli[row, : s.snapshot.node_card_count[row]]]


# --- the kernels' array clusters -----------------------------------------------------------
# Random clusters and requests for the kernel property tests. Contents come from a seeded
# NumPy generator drawn by Hypothesis (fast to build; shrinking then works on the shape, the
# fill mix and the request, which is where bugs hide).

MEM_SIZES = np.array([0, 16384, 24576, 40960, 81920], dtype=np.int32)


@dataclass
class Cluster:
    card_free_milli: npt.NDArray[np.int32]
    card_free_mem: npt.NDArray[np.int32]
    card_total_mem: npt.NDArray[np.int32]
    card_model: npt.NDArray[np.int16]
    card_healthy: npt.NDArray[np.bool_]
    card_island: npt.NDArray[np.int8]
    node_valid: npt.NDArray[np.bool_]
    node_cpu_free: npt.NDArray[np.int64]
    node_mem_free: npt.NDArray[np.int64]
    node_pods_free: npt.NDArray[np.int32]
    node_cpu_alloc: npt.NDArray[np.int64]
    node_mem_alloc: npt.NDArray[np.int64]
    node_temp: npt.NDArray[np.float32]
    n_models: int
    # Per-card GPU temperatures (choose_cards' cool-cards-first), NaN where no reading.
    card_temp: npt.NDArray[np.float32]

    @property
    def n(self) -> int:
        return int(self.card_free_milli.shape[0])

    def cards(self) -> tuple[npt.NDArray[np.generic], ...]:
        return (
            self.card_free_milli,
            self.card_free_mem,
            self.card_total_mem,
            self.card_model,
            self.card_healthy,
            self.card_island,
        )


@dataclass
class Request:
    req_cards: int
    req_milli: int
    req_mem: int
    allowed_models: npt.NDArray[np.bool_]
    nvlink: int

    def args(self) -> tuple[object, ...]:
        return (self.req_cards, self.req_milli, self.req_mem, self.allowed_models, self.nvlink)


def build_cluster(seed: int, n: int, c: int, n_models: int, p_intact: float) -> Cluster:
    rng = np.random.default_rng(seed)
    n_cards = rng.integers(0, c + 1, n)
    present = np.arange(c)[None, :] < n_cards[:, None]
    node_size = MEM_SIZES[rng.integers(0, MEM_SIZES.size, n)]
    # Mostly one size per node (as in real clusters), sometimes mixed or odd sizes.
    total = np.repeat(node_size[:, None], c, axis=1)
    mixed = rng.random((n, c)) < 0.1
    total = np.where(mixed, MEM_SIZES[rng.integers(0, MEM_SIZES.size, (n, c))], total)
    odd = rng.random((n, c)) < 0.05
    total = np.where(odd, rng.integers(1, 100_000, (n, c)), total).astype(np.int32)
    state = rng.random((n, c))
    partial = rng.choice(np.array([1, 125, 250, 333, 500, 750, 999]), (n, c))
    partial = np.where(rng.random((n, c)) < 0.5, partial, rng.integers(0, 1001, (n, c)))
    free_milli = np.where(state < p_intact, 1000, np.where(state < p_intact + 0.2, 0, partial))
    # Memory mostly follows milli; sometimes it is off either way (the two are independent
    # columns in the snapshot and the kernels must not assume they agree).
    free_mem = total.astype(np.int64) * free_milli // 1000
    jitter = rng.random((n, c)) < 0.2
    free_mem = np.where(jitter, rng.integers(0, np.maximum(total, 1) + 1), free_mem)
    model = rng.integers(0, n_models + 1, (n, c))  # n_models = an id the request may not know
    # Mostly small island ids; ids >= 8 take the kernels' slow path and must agree too.
    island_ids = np.array([0, 1, 2, 9, 100])
    island = island_ids[rng.choice(5, (n, c), p=[0.35, 0.3, 0.15, 0.1, 0.1])]
    island = np.where(rng.random((n, c)) < 0.15, -1, island)
    healthy = rng.random((n, c)) < 0.9
    free_milli = np.where(present, free_milli, 0).astype(np.int32)
    free_mem = np.where(present, free_mem, 0).astype(np.int32)
    total = np.where(present, total, 0).astype(np.int32)
    model = np.where(present, model, -1).astype(np.int16)
    island = np.where(present, island, -1).astype(np.int8)
    cpu_alloc = rng.choice(np.array([0, 8000, 64000, 128000]), n).astype(np.int64)
    mem_alloc = rng.choice(np.array([0, 2**34, 2**38]), n).astype(np.int64)
    temp = rng.uniform(30.0, 95.0, n).astype(np.float32)
    temp[rng.random(n) < 0.2] = np.nan
    # Drawn last so the columns above are what they were before temperatures existed.
    # Whole degrees (as DCGM reports them), so equal temperatures and ties are common;
    # some nodes without any reading, some cards without one.
    card_temp = rng.integers(30, 90, (n, c)).astype(np.float32)
    card_temp[rng.random((n, c)) < 0.2] = np.nan
    card_temp[rng.random(n) < 0.2] = np.nan
    card_temp[~present] = np.nan
    return Cluster(
        card_free_milli=free_milli,
        card_free_mem=free_mem,
        card_total_mem=total,
        card_model=model,
        card_healthy=healthy,
        card_island=island,
        node_valid=rng.random(n) < 0.9,
        node_cpu_free=(cpu_alloc * rng.random(n)).astype(np.int64),
        node_mem_free=(mem_alloc * rng.random(n)).astype(np.int64),
        node_pods_free=rng.integers(0, 4, n).astype(np.int32),
        node_cpu_alloc=cpu_alloc,
        node_mem_alloc=mem_alloc,
        node_temp=temp,
        n_models=n_models,
        card_temp=card_temp,
    )


@st.composite
def clusters(draw: st.DrawFn, max_n: int = 64, max_c: int = 8) -> Cluster:
    return build_cluster(
        seed=draw(st.integers(0, 2**32 - 1)),
        n=draw(st.integers(0, max_n)),
        c=draw(st.integers(1, max_c)),
        n_models=draw(st.integers(1, 4)),
        p_intact=draw(st.sampled_from([0.0, 0.3, 0.6, 0.9])),
    )


@st.composite
def requests(draw: st.DrawFn, n_models: int) -> Request:
    whole = draw(st.booleans())
    if draw(st.booleans()):
        allowed = np.ones(n_models, dtype=np.bool_)
    else:
        allowed = np.array(draw(st.lists(st.booleans(), min_size=n_models, max_size=n_models)))
    req_mem = draw(st.sampled_from([0, 0, 1, 8000, 20000, 40960, 81920, 100_000]))
    if whole:
        return Request(draw(st.integers(1, 8)), 0, req_mem, allowed, draw(st.integers(0, 2)))
    milli = draw(st.one_of(st.sampled_from([1, 250, 500, 999, 1000]), st.integers(1, 1000)))
    return Request(0, milli, req_mem, allowed, draw(st.integers(0, 2)))


@dataclass
class Summary:
    fit: npt.NDArray[np.bool_]
    intact: npt.NDArray[np.int16]
    usable: npt.NDArray[np.int16]
    best_leftover: npt.NDArray[np.int32]
    best_is_partial: npt.NDArray[np.bool_]
    free_milli_total: npt.NDArray[np.int32]

    @classmethod
    def empty(cls, n: int) -> Summary:
        # Garbage-filled on purpose: a kernel that skips a row must still write it.
        return cls(
            np.ones(n, dtype=np.bool_),
            np.full(n, 77, dtype=np.int16),
            np.full(n, 77, dtype=np.int16),
            np.full(n, 77, dtype=np.int32),
            np.ones(n, dtype=np.bool_),
            np.full(n, 77, dtype=np.int32),
        )

    def outs(self) -> tuple[npt.NDArray[np.generic], ...]:
        return (
            self.fit,
            self.intact,
            self.usable,
            self.best_leftover,
            self.best_is_partial,
            self.free_milli_total,
        )


def summarise(
    kernel: Callable[..., int],
    cl: Cluster,
    req: Request,
    candidates: npt.NDArray[np.bool_] | None = None,
) -> tuple[int, Summary]:
    s = Summary.empty(cl.n)
    cand = np.ones(cl.n, dtype=np.bool_) if candidates is None else candidates
    n_fit = kernel(*cl.cards(), cl.node_valid, cand, *req.args(), *s.outs())
    return int(n_fit), s


def one_node_cluster(
    free_milli: list[int],
    total_mem: int = 81920,
    island: list[int] | None = None,
    model: int = 0,
) -> Cluster:
    """A one-node cluster with the given cards (memory follows milli)."""
    c = len(free_milli)
    cl = build_cluster(seed=0, n=1, c=c, n_models=1, p_intact=1.0)
    cl.card_free_milli[:] = np.array([free_milli], dtype=np.int32)
    cl.card_total_mem[:] = total_mem
    cl.card_free_mem[:] = (cl.card_total_mem.astype(np.int64) * cl.card_free_milli // 1000).astype(
        np.int32
    )
    cl.card_model[:] = model
    cl.card_healthy[:] = True
    cl.card_island[:] = np.array([island if island is not None else [0] * c], dtype=np.int8)
    cl.card_temp[:] = np.nan
    cl.node_valid[:] = True
    return cl


ALL = np.ones(1, dtype=np.bool_)


def fgd_columns(seed: int, n: int = 40, c: int = 8) -> dict[str, np.ndarray]:
    """Random card columns (free milli, count, model, health) and node CPU for the FGD and
    card-price kernels."""
    rng = np.random.default_rng(seed)
    count = rng.choice([0, 1, 2, 4, 8], size=n).astype(np.int16)
    free = rng.choice([0, 90, 250, 500, 700, 1000], size=(n, c)).astype(np.int32)
    model = rng.integers(0, 2, size=(n, 1)).repeat(c, axis=1).astype(np.int16)
    for r in range(n):
        free[r, count[r] :] = 0
        model[r, count[r] :] = -1
    return {
        "free": free,
        "count": count,
        "model": model,
        "healthy": rng.random((n, c)) > 0.05,
        "cpu": rng.integers(0, 64000, n).astype(np.int64),
        "valid": rng.random(n) > 0.05,
    }


# --- a tiny openb-shaped trace (the FGD protocol without the real trace) -------------------

TINY_NODES = (
    TraceNode("n-0", 64000, 262144, 2, "P100"),
    TraceNode("n-1", 96000, 786432, 8, "G2"),
    TraceNode("n-2", 32000, 131072, 4, "T4"),
    TraceNode("n-3", 96000, 786432, 8, "G2"),
)


def tiny_pods() -> tuple[TracePod, ...]:
    """40 pods of seven shapes (seeded): shared, whole-card, multi-card, CPU-only, typed."""
    rng = np.random.default_rng(7)
    out = []
    shapes = [(4000, 1, 250, ""), (8000, 1, 500, ""), (12000, 1, 1000, ""), (24000, 2, 1000, "")]
    shapes += [(3000, 0, 0, ""), (6000, 1, 300, "T4"), (16000, 4, 1000, "G2")]
    for i in range(40):
        cpu, n, milli, spec = shapes[int(rng.integers(len(shapes)))]
        out.append(TracePod(f"p-{i:03d}", cpu, 4096, n, milli, spec))
    return tuple(out)


def tiny_trace() -> Trace:
    return Trace("tiny", TINY_NODES, tiny_pods())


# --- configuration documents ----------------------------------------------------------

CONFIG_HEAD = {"apiVersion": "gpusched.io/v1alpha1", "kind": "GpuSchedulerConfiguration"}


def config_doc(*profiles: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {**CONFIG_HEAD, **settings, "profiles": list(profiles)}


def config_plugins(**points: Any) -> dict[str, Any]:
    return {"schedulerName": "p", "plugins": points}


def config_load_error(d: Any, registry: Registry) -> str:
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d, registry)
    return str(ei.value)


# --- one-row kernel calls (scalar columns of length one) -------------------------------

Kernel = Callable[..., None]


def score_one_node(kernel: Kernel, *args: object) -> float:
    out = np.zeros(1)
    kernel(np.ones(1, dtype=np.bool_), *args, out)
    return float(out[0])


def col_i16(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int16)


def col_i32(v: int) -> np.ndarray:
    return np.array([v], dtype=np.int32)


def col_bool(v: bool) -> np.ndarray:
    return np.array([v], dtype=np.bool_)


# --- caches ----------------------------------------------------------------------------


def cache_with(*names: str) -> ClusterCache:
    """A cache over gpu_node()s `names`, in a snapshot small enough to grow."""
    c = ClusterCache(Snapshot(8, capacity=2))  # small capacity: forces growth
    for n in names:
        c.upsert_node(gpu_node(n))
    return c


# --- the GPUFragmentation scenarios: 1-CPU pods on a T4 fleet, the plugin's args --------


def t4_request(cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodRequest:
    return PodRequest(cpu_milli=cpu, memory_bytes=GiB, gpu_milli=milli, gpu_cards=cards)


def t4_pod(name: str, cpu: int = 1000, milli: int = 0, cards: int = 0) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        request=t4_request(cpu, milli, cards),
        scheduler_name="ai-scheduler",
    )


def t4_node(name: str, cards: int = 2) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * GiB,
        pods=110,
        cards=tuple(Card(i, "T4", 15360) for i in range(cards)),
    )


def frag_sim(args: dict[str, Any], *nodes: NodeModel) -> Simulation:
    reg = default_registry()
    profile = builtin_profiles()["ai-scheduler"]
    profile["pluginConfig"] = [{"name": "GPUFragmentation", "args": args}]
    doc = {"apiVersion": API_VERSION, "kind": KIND, "profiles": [profile]}
    return Simulation(nodes, config_from_dict(doc, reg).profiles[0], reg, seed=1)


# --- API server wire format -------------------------------------------------------------


def watch_line(kind: str, obj: dict[str, Any]) -> bytes:
    """One line of a watch stream."""
    return orjson.dumps({"type": kind, "object": obj})


# --- plugin args -------------------------------------------------------------------------


def fit_strategy(
    kind: str, *res: tuple[str, int], shape: tuple[tuple[int, int], ...] = ()
) -> NodeResourcesFitArgs:
    rtcr = (
        RequestedToCapacityRatioParam(tuple(UtilizationShapePoint(u, s) for u, s in shape))
        if shape
        else None
    )
    resources = tuple(ResourceSpec(n, w) for n, w in res) or (
        ResourceSpec("cpu"),
        ResourceSpec("memory"),
    )
    return NodeResourcesFitArgs(ScoringStrategy(kind, resources, rtcr))


# --- openb trace rows (the replay's input) -----------------------------------------------


def trace_pod(
    name: str, t0: int, t1: int | None, gpus: int = 1, milli: int = 1000, cpu: int = 1000
) -> TracePod:
    """A Running trace pod created (and scheduled) at t0, deleted at t1."""
    return TracePod(
        name=name,
        cpu_milli=cpu,
        memory_mib=1024,
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        pod_phase="Running",
        creation_time=t0,
        deletion_time=t1,
        scheduled_time=t0,
    )


def trace_nodes(count: int, gpus: int) -> list[TraceNode]:
    return [TraceNode(f"n{i}", 32000, 65536, gpus, "T4") for i in range(count)]


# --- raw Kubernetes JSON as the watch delivers it (the parsers' fuzz tests) -----------------

# The fuzz tests' example counts are sized for CI (the lot in well under a minute on two
# cores); GPUSCHED_FUZZ_SCALE=20 multiplies them for a longer soak.
FUZZ_SCALE = max(1, int(os.environ.get("GPUSCHED_FUZZ_SCALE", "1")))


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings of a fuzz test: `examples` times FUZZ_SCALE, no deadline (the
    first example may compile the numba kernels)."""
    return settings(max_examples=examples * FUZZ_SCALE, deadline=None)


# Hypothesis strategies for nodes and pods with well-formed, hostile and malformed parts:
# quantities with exotic suffixes and non-ASCII digits, annotations with nested garbage,
# wrong JSON types where the API has objects or lists.

_GARBAGE: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)

# Cheap values of the wrong JSON type, for places that expect an object, a list or a string.
_WRONG: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, 5, -1, 1.5, "x", "", [], [1], ["a", None], {}, {"a": 1}, {"": [None]}]
)

QUANTITIES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(["0", "1", "2", "4", "8", "32", "110", "500m", "1.5", ".5", "+2", "0.1"]),
    st.sampled_from(["1Gi", "256Gi", "16G", "2Ki", "1e3", "1E6", "1e8", "1.5e3", "100u", "1n"]),
    # huge, negative, past int64, absurd exponents
    st.sampled_from(["1e30", "9223372036854775807", "8Ei", "1e999999999", "-1", "-500m"]),
    # not quantities: exotic suffixes, non-ASCII digits ('٣' Arabic-Indic, '²', fullwidth)
    st.sampled_from(["1Qi", "1mi", "1K", "1e", "1.2.3", "0x10", "\u0663", "\u00b2", "\uff11"]),
    st.sampled_from(["1\u0663m", "", " ", "1 Gi", "nan", "inf"]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.tuples(
        st.sampled_from(["", "-", "+"]),
        st.integers(0, 99999).map(str) | st.just(""),
        st.sampled_from(["", ".", ".5", ".125", ".0001"]),
        st.sampled_from(["", "m", "k", "Ki", "Mi", "Gi", "Ei", "e3", "e-3", "E18", "e999"]),
    ).map("".join),
    _WRONG,
)

_LABEL_KEYS = st.one_of(
    st.sampled_from(
        [
            "kubernetes.io/hostname",
            RACK_LABEL,
            "topology.gpusched.io/spine",
            "nvidia.com/gfd.timestamp",
            "pool",
            "",
            "a/b/c",
            "x" * 300,
            "\u00e9t\u00e9/\u0663",
        ]
    ),
    st.text(max_size=12),
)
_LABEL_VALUES = st.sampled_from(
    ["", "a", "gpu", "r1", "r2", "x" * 100, "\u0663", "-bad-"]
) | st.text(max_size=8)


def _gfd_labels() -> st.SearchStrategy[dict[str, Any]]:
    count = st.sampled_from(["0", "1", "2", "8", "64", "1e8", "-1", "\u0663", "2_0", "", " 2"])
    memory = st.sampled_from(["81920", "0", "16384", str(2**31), "\u0663", "80GB", "-5"])
    product = st.sampled_from(["A100", "H100", "", "\u00e9\u00e9"]) | st.text(max_size=6)
    return st.fixed_dictionaries(
        {},
        optional={
            "nvidia.com/gpu.count": count,
            "nvidia.com/gpu.memory": memory,
            "nvidia.com/gpu.product": product,
        },
    )


_CARD_FIELDS = {
    "index": st.integers(-2, 70) | st.sampled_from([True, "0", 1.0, None, 2**64]),
    "model": st.sampled_from(["A100", "H100", "T4", ""]) | st.integers() | st.none(),
    "memoryMiB": st.sampled_from([81920, 16384, 0, 2**31 - 1, 2**31, -1, 1.5, "80GB", None, True]),
    "nvlinkIsland": st.integers(-3, 130) | st.sampled_from([True, "0", 1.5]),
    "numa": st.integers(-(2**70), 2**70) | st.sampled_from([None, "0"]),
    "healthy": st.booleans() | st.sampled_from(["yes", 1, None]),
    "uuid": st.text(max_size=8) | st.integers(),
}


@st.composite
def gpu_inventories(draw: st.DrawFn) -> Any:
    """The gpusched.io/gpu-inventory annotation: usually a JSON list of cards (well-formed,
    with a field broken, too many, ids out of range), sometimes not JSON or not a list."""
    kind = draw(st.sampled_from(["good", "good", "mutated", "many", "garbage", "text", "nonstr"]))
    if kind == "text":
        return draw(st.sampled_from(["", "[", "{}", "null", "[1,2]", "[{]", "\u0663"]))
    if kind == "nonstr":
        return draw(_GARBAGE)
    if kind == "garbage":
        return json.dumps(draw(_GARBAGE))
    n = draw(st.integers(0, 10)) if kind != "many" else draw(st.sampled_from([63, 64, 1025]))
    model = draw(st.sampled_from(["A100", "H100", "T4"]))
    mem = draw(st.sampled_from([81920, 16384, 0, 2**31 - 1]))
    cards: list[Any] = [
        {"index": i, "model": model, "memoryMiB": mem, "nvlinkIsland": i // 4, "healthy": True}
        for i in range(n)
    ]
    if kind == "mutated" and cards:
        i = draw(st.integers(0, n - 1))
        fields = draw(st.dictionaries(st.sampled_from(sorted(_CARD_FIELDS)), st.none(), min_size=1))
        for f in fields:
            cards[i][f] = draw(_CARD_FIELDS[f])
        if draw(st.booleans()):
            cards[i] = draw(_GARBAGE)
    return json.dumps(cards)


def _taints() -> st.SearchStrategy[Any]:
    taint = st.fixed_dictionaries(
        {
            "key": st.sampled_from(["gpu", "dedicated", ""]) | st.text(max_size=5),
            "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule", "Bad"]),
        },
        optional={"value": st.sampled_from(["true", ""]) | st.integers()},
    )
    return st.lists(taint | _GARBAGE, max_size=3) | _GARBAGE


@st.composite
def raw_nodes(draw: st.DrawFn, name: str | st.SearchStrategy[str] = "n0") -> dict[str, Any]:
    """A Node object as the node watch delivers it, hostile or malformed in any part."""
    node_name = name if isinstance(name, str) else draw(name)
    labels: Any = {
        **draw(st.dictionaries(_LABEL_KEYS, _LABEL_VALUES, max_size=4)),
        **draw(_gfd_labels()),
    }
    if draw(st.integers(0, 9)) == 0:
        n = draw(st.sampled_from([500, 5000]))
        labels.update({f"bulk.example.com/k{i}": str(i) for i in range(n)})
    if draw(st.integers(0, 9)) == 0:
        labels = draw(_GARBAGE)
    elif draw(st.integers(0, 9)) == 0 and labels:
        labels[draw(st.sampled_from(sorted(labels)))] = draw(_GARBAGE)
    annotations: Any = {}
    if draw(st.booleans()):
        annotations["gpusched.io/gpu-inventory"] = draw(gpu_inventories())
    if draw(st.integers(0, 19)) == 0:
        annotations = draw(_GARBAGE)
    alloc = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "cpu": QUANTITIES,
                "memory": QUANTITIES,
                "pods": QUANTITIES,
                "nvidia.com/gpu": QUANTITIES | st.sampled_from(["0", "1", "4", "8"]),
            },
        )
    )
    status: Any = {draw(st.sampled_from(["allocatable", "capacity"])): alloc}
    if draw(st.integers(0, 19)) == 0:
        status = draw(_GARBAGE)
    spec: Any = {"taints": draw(_taints()), "unschedulable": draw(st.booleans())}
    meta: Any = {
        "name": node_name,
        "uid": f"uid-{node_name}",
        "labels": labels,
        "annotations": annotations,
    }
    return {"metadata": meta, "spec": spec, "status": status}


_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "ephemeral-storage")


def _resource_lists() -> st.SearchStrategy[Any]:
    """Mostly sensible requests (so pods also get placed), else any quantity or type."""
    sensible = st.fixed_dictionaries(
        {},
        optional={
            "cpu": st.sampled_from(["100m", "1", "2"]),
            "memory": st.sampled_from(["1Gi", "4Gi"]),
            "nvidia.com/gpu": st.sampled_from(["1", "2", "8"]),
        },
    )
    fuzzed = st.dictionaries(st.sampled_from(_RESOURCES), QUANTITIES, max_size=3)
    return st.one_of(sensible, sensible, fuzzed, _WRONG)


def _containers(prefix: str) -> st.SearchStrategy[Any]:
    container = st.fixed_dictionaries(
        {"name": st.sampled_from([f"{prefix}0", f"{prefix}1"])},
        optional={
            "resources": st.fixed_dictionaries(
                {}, optional={"requests": _resource_lists(), "limits": _resource_lists()}
            )
            | _WRONG,
            "restartPolicy": st.sampled_from(["Always", "Never", 5]),
        },
    )
    return st.lists(container | _WRONG, max_size=3) | _WRONG


_POD_ANNOTATION_VALUES = {
    "gpusched.io/gpu-milli": [
        "1",
        "250",
        "500",
        "1000",
        "0",
        "1001",
        "-5",
        "\u0663",
        "\u00b2",
        "2_50",
        "",
    ],
    "gpusched.io/gpu-memory-mib": ["1024", "16384", "0", str(2**31), "\u0663", "1e3"],
    "gpusched.io/gpu-model": ["A100", "A100|H100", "T4", "", "|", "A100||H100", "nope"],
    "gpusched.io/nvlink": ["required", "preferred", "none", "REQUIRED", "maybe", ""],
    "gpusched.io/gpu-ids": ["0", "1", "0,1", "1,1", "7", "99", "100", "\u0663", "-1", "0,", ""],
    "gpusched.io/gpu-milli-assigned": ["250", "1000", "0", "1001", "\u00b2", "x"],
    "gpusched.io/preemptible": ["true", "false", "yes"],
    "gpusched.io/last-checkpoint-time": [
        "2024-01-01T00:00:00Z",
        "yesterday",
        "9999-12-31T23:59:59-23:59",
    ],
    "gpusched.io/checkpoint-interval-seconds": ["60", "0", "\u0663"],
    "scheduling.ai/gang-name": ["g1", "", " "],
    "scheduling.ai/gang-total": ["2", "0", "x"],
    "gpusched.io/gpu-mili": ["250"],  # a typo of gpu-milli
}


def _pod_annotations() -> st.SearchStrategy[Any]:
    value = {k: st.sampled_from(v) | st.text(max_size=4) for k, v in _POD_ANNOTATION_VALUES.items()}
    sensible = st.fixed_dictionaries(
        {},
        optional={
            "gpusched.io/gpu-milli": st.sampled_from(["250", "500", "1000"]),
            "gpusched.io/gpu-model": st.sampled_from(["A100", "T4", "A100|T4"]),
            "gpusched.io/nvlink": st.sampled_from(["preferred", "required"]),
        },
    )
    shared = st.fixed_dictionaries(
        {"gpusched.io/gpu-milli": st.sampled_from(["100", "250", "500"])}
    )
    return st.one_of(sensible, shared, st.fixed_dictionaries({}, optional=value), _WRONG)


_SELECTOR_KEYS = st.sampled_from(["pool", RACK_LABEL, "kubernetes.io/hostname", "", "x" * 70])


def _affinity() -> st.SearchStrategy[Any]:
    requirement = st.fixed_dictionaries(
        {
            "key": _SELECTOR_KEYS | st.integers(),
            "operator": st.sampled_from(
                ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bad"]
            ),
        },
        optional={
            "values": st.lists(st.sampled_from(["a", "r1", "1", "\u0663", "x" * 70]), max_size=3)
            | _WRONG
        },
    )
    term = st.fixed_dictionaries(
        {}, optional={"matchExpressions": st.lists(requirement | _WRONG, max_size=2) | _WRONG}
    )
    required = st.fixed_dictionaries(
        {"nodeSelectorTerms": st.lists(term | _WRONG, max_size=2) | _WRONG}
    )
    preferred = st.lists(
        st.fixed_dictionaries(
            {"weight": st.integers(-5, 200) | _WRONG, "preference": term | _WRONG}
        ),
        max_size=2,
    )
    node_affinity = st.fixed_dictionaries(
        {},
        optional={
            "requiredDuringSchedulingIgnoredDuringExecution": required | _WRONG,
            "preferredDuringSchedulingIgnoredDuringExecution": preferred | _WRONG,
        },
    )
    return st.fixed_dictionaries({"nodeAffinity": node_affinity | _WRONG}) | _WRONG


def _tolerations() -> st.SearchStrategy[Any]:
    toleration = st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["gpu", "dedicated", ""]) | _WRONG,
            "operator": st.sampled_from(["Exists", "Equal", "Bad"]) | _WRONG,
            "value": st.sampled_from(["true", ""]) | _WRONG,
            "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]) | _WRONG,
            "tolerationSeconds": st.integers() | _WRONG,
        },
    )
    return st.lists(toleration | _WRONG, max_size=3) | _WRONG


def _pod_status() -> st.SearchStrategy[Any]:
    status = st.fixed_dictionaries(
        {"resources": st.fixed_dictionaries({}, optional={"requests": _resource_lists()}) | _WRONG},
        optional={
            "name": st.sampled_from(["c0", "c1", "i0"]),
            "allocatedResources": _resource_lists(),
        },
    )
    condition = st.fixed_dictionaries(
        {"type": st.just("PodResizePending"), "reason": st.sampled_from(["Infeasible", "Deferred"])}
    )
    return st.fixed_dictionaries(
        {"phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed", ""])},
        optional={
            "containerStatuses": st.lists(status, max_size=2) | _WRONG,
            "initContainerStatuses": st.lists(status, max_size=1),
            "conditions": st.lists(condition | _WRONG, max_size=2),
            "resize": st.sampled_from(["Infeasible", "InProgress"]),
        },
    )


@st.composite
def raw_pods(draw: st.DrawFn, uid: str = "u0", node_names: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Pod object as the pod watch delivers it, for the ai-scheduler profile: bound to one
    of `node_names` (or an unknown node) when that is non-empty, else pending."""
    spec: dict[str, Any] = {
        "schedulerName": "ai-scheduler",
        "containers": draw(_containers("c")),
    }
    optional = {
        "initContainers": _containers("i"),
        "overhead": _resource_lists(),
        "resources": st.fixed_dictionaries({"requests": _resource_lists()}) | _WRONG,
        "nodeSelector": st.dictionaries(
            _SELECTOR_KEYS, st.sampled_from(["a", "r1"]) | _WRONG, max_size=2
        )
        | _WRONG,
        "affinity": _affinity(),
        "tolerations": _tolerations(),
        "priority": st.integers(-(2**70), 2**70) | _WRONG,
    }
    spec.update(draw(st.fixed_dictionaries({}, optional=optional)))
    if node_names:
        spec["nodeName"] = draw(st.sampled_from([*node_names, "unknown-node"]))
    labels = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "ai.training/job-id": st.sampled_from(["j1", "j2", ""]) | _WRONG,
                "scheduling.x-k8s.io/pod-group": st.sampled_from(["pg", ""]),
                "gpusched.io/tenant": st.sampled_from(["t1", ""]),
            },
        )
        | _WRONG
    )
    meta = {
        "name": f"p-{uid}",
        "namespace": draw(st.sampled_from(["ns", "other"])),
        "uid": uid,
        "labels": labels,
        "annotations": draw(_pod_annotations()),
        "creationTimestamp": draw(
            st.sampled_from(["2024-01-01T00:00:00Z", "", "garbage", "9999-12-31T23:59:59-23:59"])
        ),
    }
    return {"metadata": meta, "spec": spec, "status": draw(_pod_status())}


# --- configuration documents for fuzzing: the defaults with any part mutated -------------

_CONFIG_VALUES: st.SearchStrategy[Any] = st.one_of(
    st.integers(-3, 100),
    st.sampled_from([0, -1, 2**63, 2**64, 10**30, 63, 64, 1e308, 1.7976931348623157e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "*", "x", "ai-scheduler", "Kube-System", "a/b", "\u0663", "1"]),
    st.booleans(),
    _WRONG,
    _GARBAGE,
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested mappings and lists (the places a mutation can hit)."""
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


def _config_base(registry: Registry) -> dict[str, Any]:
    """The example manifest's shape: every setting and every plugin's default args written
    out, so a mutation can reach any field."""
    doc = config_to_document(default_config(registry))
    profile = doc["profiles"][0]
    second = {**profile, "schedulerName": "least-allocated"}
    doc["profiles"] = [profile, second]
    return doc


@st.composite
def config_documents(draw: st.DrawFn, registry: Registry) -> Any:
    """A scheduler configuration document: the full default one with 0-4 values replaced
    (right type out of range, wrong type, nested garbage), keys added or removed; sometimes
    not a mapping at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(_GARBAGE)
    doc = _config_base(registry)
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(_CONFIG_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "weight", "name", "args", 5, None]))] = draw(
                _CONFIG_VALUES
            )
        else:
            parent.append(draw(_CONFIG_VALUES))
    return doc


# --- storage (the volume plugins) --------------------------------------------------------

HOSTNAME = "kubernetes.io/hostname"


def on_nodes(*names: str) -> tuple[NodeSelectorTerm, ...]:
    """A local volume's node affinity: kubernetes.io/hostname In names."""
    return (NodeSelectorTerm((Requirement(HOSTNAME, "In", frozenset(names)),)),)


def claim(
    name: str,
    sc: str = "local",
    *,
    size: int = GiB,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **kw: Any,
) -> Claim:
    """A claim in namespace ns asking for `size` bytes of class `sc`."""
    return Claim(
        "ns",
        name,
        uid=f"uid-{name}",
        resource_version="1",
        storage_class=sc,
        access_modes=modes,
        request=size,
        **kw,
    )


def bound_claim(name: str, pv_name: str, **kw: Any) -> Claim:
    return claim(
        name,
        volume_name=pv_name,
        phase="Bound",
        annotations={"pv.kubernetes.io/bind-completed": "yes"},
        **kw,
    )


def pv(
    name: str,
    sc: str = "local",
    *,
    size: int = GiB,
    nodes: tuple[str, ...] = (),
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    **kw: Any,
) -> PersistentVolume:
    """An Available volume of `size` bytes of class `sc`, on `nodes` (any node if none)."""
    kw.setdefault("phase", "Available")
    return PersistentVolume(
        name,
        uid=f"uid-{name}",
        resource_version="1",
        storage_class=sc,
        capacity=size,
        access_modes=modes,
        node_affinity=on_nodes(*nodes) if nodes else None,
        **kw,
    )


def storage_class(
    name: str = "local",
    provisioner: str = "kubernetes.io/no-provisioner",
    *,
    mode: str = "WaitForFirstConsumer",
    **kw: Any,
) -> StorageClass:
    return StorageClass(name, provisioner, mode, **kw)


def pvc_volume(claim_name: str, name: str = "data") -> PodVolume:
    return PodVolume(name, claim_name)


def host(name: str, **labels: str) -> NodeModel:
    """A CPU node labelled with its hostname and `labels`."""
    return node(name, labels={HOSTNAME: name, **labels})
