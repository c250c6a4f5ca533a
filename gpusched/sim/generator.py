"""A built-in fleet and workload, so the demo runs on a fresh checkout with no trace files.

The fleet is heterogeneous and racked like a real training cluster: 8-card 80 GB nodes
behind one NVSwitch, 8-card 32 GB nodes whose cards form two NVLink islands of four, small
2-card 16 GB inference nodes, and CPU nodes. Some racks run hotter than others.
The workload mixes multi-pod training jobs (whole cards: 1, 2, 4 or 8 per pod), shared
inference pods (a share of one card, sometimes memory- or model-constrained) and CPU pods,
arriving in random order until the GPU demand reaches `load` times the fleet's capacity.
`generate_gang_workload` is the gang variant: 2-32 pod gang jobs of 1/2/4/8 cards per pod,
and single pods.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpusched.model import keys
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import Gang, GangAPI, NVLink, PodInfo, PodRequest
from gpusched.sim.thermal import HeatEnvironment, Site, node_site, rack_inlet

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class NodeKind:
    prefix: str
    cards: int
    model: str
    memory_mib: int
    island_size: int
    cpu_milli: int
    memory_gib: int


H100 = NodeKind("h100", 8, "NVIDIA-H100-80GB-HBM3", 81559, 8, 96_000, 1024)
V100 = NodeKind("v100", 8, "Tesla-V100-SXM2-32GB", 32768, 4, 64_000, 512)
T4 = NodeKind("t4", 2, "Tesla-T4", 15360, 1, 32_000, 128)
CPU = NodeKind("cpu", 0, "", 0, 1, 64_000, 256)


@dataclass(frozen=True, slots=True)
class Fleet:
    nodes: tuple[NodeModel, ...]
    # Where each GPU node sits (inlet air, offset): the heat model's input (sim/thermal.py).
    heat: HeatEnvironment

    @property
    def gpu_milli_capacity(self) -> int:
        return sum(n.gpu_count for n in self.nodes) * 1000


def generate_fleet(
    seed: int = 1,
    racks: int = 16,
    nodes_per_rack: int = 8,
    racks_per_spine: int = 4,
    mix: tuple[float, float, float, float] = (0.35, 0.35, 0.2, 0.1),
) -> Fleet:
    """`mix`: share of H100, V100, T4 and CPU nodes. Each rack holds one kind where
    possible (as real clusters are racked by purchase), so locality and kind correlate."""
    rng = np.random.default_rng(seed)
    kinds = (H100, V100, T4, CPU)
    counts = np.round(np.asarray(mix) / sum(mix) * racks).astype(int)
    counts[0] += racks - counts.sum()
    rack_kinds = [k for k, c in zip(kinds, counts, strict=True) for _ in range(int(c))]
    nodes: list[NodeModel] = []
    sites: dict[str, Site] = {}
    inlet_rng = np.random.default_rng([seed, 0x1E7])
    for r, kind in enumerate(rack_kinds):
        rack = f"rack-{r:02d}"
        spine = f"spine-{r // racks_per_spine}"
        # A few racks sit near the hot aisle (see sim/thermal.py for the model).
        hot = rng.random() < 0.2
        inlet = rack_inlet(hot, inlet_rng)
        for i in range(nodes_per_rack):
            name = f"{kind.prefix}-{r:02d}-{i:02d}"
            cards = tuple(
                Card(
                    index=c,
                    model=kind.model,
                    memory_mib=kind.memory_mib,
                    nvlink_island=c // kind.island_size,
                    numa=c * 2 // max(1, kind.cards),
                )
                for c in range(kind.cards)
            )
            labels = {
                "topology.gpusched.io/rack": rack,
                "topology.gpusched.io/spine": spine,
                "node.kubernetes.io/instance-type": kind.prefix,
            }
            if kind.cards:
                labels |= {
                    "nvidia.com/gpu.product": kind.model,
                    "nvidia.com/gpu.count": str(kind.cards),
                    "nvidia.com/gpu.memory": str(kind.memory_mib),
                }
            nodes.append(
                NodeModel(
                    name=name,
                    cpu_milli=kind.cpu_milli,
                    memory_bytes=kind.memory_gib * GIB,
                    pods=110,
                    cards=cards,
                    labels=labels,
                    rack=rack,
                    spine=spine,
                    gpu_source="inventory" if kind.cards else "none",
                )
            )
            if kind.cards:
                sites[name] = node_site(inlet, rng)
    return Fleet(tuple(nodes), HeatEnvironment(sites, seed))


def _pod(
    i: int,
    req: PodRequest,
    *,
    job: str = "",
    gang: Gang | None = None,
    priority: int = 0,
    kind: str = "",
) -> PodInfo:
    name = f"{kind}-{i:05d}"
    return PodInfo(
        uid=f"uid-{name}",
        namespace="demo",
        name=name,
        request=req,
        scheduler_name="ai-scheduler",
        priority=priority,
        created=float(i),
        labels={"ai.training/job-id": job} if job else {},
        gang=gang,
        job_id=job,
    )


def generate_workload(fleet: Fleet, seed: int = 1, load: float = 1.1) -> list[PodInfo]:
    """Pods in arrival order until requested GPUs reach `load` x capacity.

    Training jobs arrive as consecutive pods (a job is submitted at once); their pods share
    an `ai.training/job-id`, which is what network locality groups by.
    """
    rng = np.random.default_rng(seed + 7919)
    target = load * fleet.gpu_milli_capacity
    pods: list[PodInfo] = []
    demand = 0
    job_no = 0
    while demand < target:
        u = rng.random()
        i = len(pods)
        if u < 0.30:
            # Training job: k cards per pod, P pods.
            k = int(rng.choice([1, 2, 4, 8], p=[0.25, 0.2, 0.25, 0.3]))
            p = int(rng.choice([1, 2, 4], p=[0.5, 0.3, 0.2]))
            job = f"job-{job_no:04d}"
            job_no += 1
            kind = f"train{k}"
            nv = NVLink.PREFERRED if k > 1 else NVLink.NONE
            for j in range(p):
                req = PodRequest(
                    cpu_milli=k * 8000, memory_bytes=k * 64 * GIB, gpu_cards=k, nvlink=nv
                )
                pods.append(_pod(i + j, req, job=job, priority=100, kind=kind))
                demand += k * 1000
        elif u < 0.85:
            milli = int(
                rng.choice([100, 200, 250, 300, 500, 700], p=[0.2, 0.2, 0.2, 0.1, 0.2, 0.1])
            )
            models: tuple[str, ...] = ()
            if rng.random() < 0.15:
                models = (T4.model, V100.model)
            mem = int(rng.choice([0, 4096, 8192])) if rng.random() < 0.3 else 0
            req = PodRequest(
                cpu_milli=2000,
                memory_bytes=8 * GIB,
                gpu_milli=milli,
                gpu_mem_mib=mem,
                gpu_models=models,
            )
            pods.append(_pod(i, req, kind="infer"))
            demand += milli
        else:
            req = PodRequest(cpu_milli=int(rng.choice([500, 1000, 4000])), memory_bytes=4 * GIB)
            pods.append(_pod(i, req, kind="cpu"))
    return pods


# Gang jobs: pods per job and cards per pod, with their probabilities. Sizes span 2-32 pods
# (half the jobs at most 4, a few whole-rack jobs); cards per pod as in generate_workload.
GANG_SIZES: tuple[int, ...] = (2, 3, 4, 8, 16, 32)
GANG_SIZE_P: tuple[float, ...] = (0.3, 0.1, 0.2, 0.2, 0.12, 0.08)
GANG_CARDS: tuple[int, ...] = (1, 2, 4, 8)
GANG_CARDS_P: tuple[float, ...] = (0.2, 0.2, 0.25, 0.35)


def generate_gang_workload(
    fleet: Fleet, seed: int = 1, load: float = 1.1, gang_share: float = 0.5
) -> list[PodInfo]:
    """Gang jobs and single pods in arrival order until requested GPUs reach `load` x
    capacity; the same seed gives the same pods.

    A job (probability `gang_share` per draw) is GANG_SIZES pods of GANG_CARDS whole cards
    each, every pod a member of the annotation gang `demo/gang-NNNN` with minMember = the
    job's size (`scheduling.ai/gang-name`/`gang-total`, as a user writes them) and the job's
    `ai.training/job-id`; its pods arrive together. Otherwise one pod of 1, 2, 4 or 8 cards
    (no gang). Feed the pods through `Simulation.arrive`: a member is held at PreEnqueue
    until its job's last pod has arrived.
    """
    if not 0 <= gang_share <= 1:
        raise ValueError(f"gang_share must be in [0, 1], got {gang_share}")
    rng = np.random.default_rng(seed + 104729)
    target = load * fleet.gpu_milli_capacity
    pods: list[PodInfo] = []
    demand = 0
    job_no = 0
    while demand < target:
        k = int(rng.choice(GANG_CARDS, p=GANG_CARDS_P))
        nv = NVLink.PREFERRED if k > 1 else NVLink.NONE
        req = PodRequest(cpu_milli=k * 8000, memory_bytes=k * 64 * GIB, gpu_cards=k, nvlink=nv)
        i = len(pods)
        if rng.random() < gang_share:
            size = int(rng.choice(GANG_SIZES, p=GANG_SIZE_P))
            job = f"gang-{job_no:04d}"
            job_no += 1
            gang = Gang(f"demo/{job}", size, GangAPI.ANNOTATIONS)
            for j in range(size):
                pod = _pod(i + j, req, job=job, gang=gang, priority=100, kind=f"gang{k}")
                pods.append(
                    dataclasses.replace(
                        pod, annotations={keys.GANG_NAME: job, keys.GANG_TOTAL: str(size)}
                    )
                )
            demand += size * k * 1000
        else:
            pods.append(_pod(i, req, kind=f"single{k}"))
            demand += k * 1000
    return pods
