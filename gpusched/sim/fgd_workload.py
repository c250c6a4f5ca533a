"""The FGD paper's workload construction, replayed exactly.

Mirrors hkust-adsl/kubernetes-scheduler-simulator (the artifact of "Beware of Fragmentation",
USENIX ATC 2023) as run by its ``experiments/run_scripts/generate_run_scripts.py``
(``-tune 1.3 -tuneseed <seed> --shuffle-pod=true``). See ``docs/fgd-protocol.md`` for the
source of every rule; in short, with Go's global ``math/rand`` seeded by ``rand.Seed(seed)``:

1. ``pkg/simulator/core.go`` ``Simulate``: one ``rand.Int()`` is drawn for a debug log line
   (Go evaluates the arguments even when the level is off);
2. ``SortClusterPods``: the trace pods are sorted by name, then ``rand.Shuffle``-d;
3. ``TunePodsByNodeTotalResource``: if the trace asks for less than ``ratio`` x the cluster's
   milli-GPUs, ``tuneUpPods`` appends clones ``<name>-tuned-<i>`` of pods drawn with
   ``rand.Intn`` from the *name-sorted* trace until the next draw would cross the target
   (checked with the per-GPU share only, a quirk kept here); if it asks for more,
   ``tuneDownPods`` removes pods drawn with ``rand.Intn`` from the shuffled list;
4. ``syncClusterResourceList``: nodes sorted by name get the prefix ``"%04d-" % perm[i]``
   from ``rand.Perm(len(nodes))``.

Also here: the simulator's view of a pod (:func:`pod_resource`) and its "typical pods" target
workload for FGD (:func:`typical_pods`, ``pkg/utils/frag.go`` ``GetTypicalPods``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpusched.sim.gorand import GoRand
from gpusched.sim.openb import TraceNode, TracePod

__all__ = [
    "MILLI",
    "FgdWorkload",
    "PodResource",
    "TargetPod",
    "WorkloadPod",
    "build_workload",
    "cluster_milli_gpu",
    "pod_resource",
    "seeded_node_names",
    "typical_pods",
]

MILLI = 1000  # milli-GPUs in one GPU (gpushareutils.MILLI)

# simontype.DefaultTypicalPodPopularityThreshold / DefaultTypicalPodIncreaseStep: what the
# simulator falls back to when a config value is <= 0 (the experiments pass 95 and 1).
_DEFAULT_POPULARITY_THRESHOLD = 60
_DEFAULT_INCREASE_STEP = 10


@dataclass(frozen=True, slots=True, order=False)
class PodResource:
    """``simontype.PodResource``: what the simulator's policies see of a pod.

    Memory is absent on purpose: the scoring code ignores it (only kube-scheduler's
    NodeResourcesFit filter checks memory, from the pod spec). ``gpu_type`` is the pod's
    acceptable-model list (``"A|B"``), empty for "any model".
    """

    milli_cpu: int
    milli_gpu: int  # per requested GPU, 0-1000
    gpu_number: int
    gpu_type: str

    @property
    def total_milli_gpu(self) -> int:
        return self.milli_gpu * self.gpu_number

    @property
    def is_gpu_share(self) -> bool:
        """One GPU, partly: the only case where a policy picks among cards by score."""
        return self.gpu_number == 1 and self.milli_gpu < MILLI

    def sort_key(self) -> tuple[int, int, int, str]:
        """``PodResource.Less`` order (cpu, then per-GPU milli, count, model string)."""
        return (self.milli_cpu, self.milli_gpu, self.gpu_number, self.gpu_type)


def pod_resource(pod: TracePod) -> PodResource:
    """A trace pod as the simulator sees it.

    ``data/pod_csv_to_yaml.py`` writes GPU annotations only when ``num_gpu != 0`` (so a
    CPU-only pod has no GPU share and no model constraint whatever its CSV cells say), clamps
    ``gpu_milli`` to 1000, maps a non-positive share to 0 and drops empty ``|``-separated model
    names. ``utils.GetPodResource`` then reads the annotations back; CPU is the explicit
    request, so kube-scheduler's 100m default for a missing request never applies.
    """
    if pod.num_gpu == 0:
        return PodResource(pod.cpu_milli, 0, 0, "")
    milli = min(pod.gpu_milli, MILLI) if pod.gpu_milli > 0 else 0
    models = "|".join(m for m in pod.gpu_spec.split("|") if m)
    return PodResource(pod.cpu_milli, milli, pod.num_gpu, models)


@dataclass(frozen=True, slots=True)
class WorkloadPod:
    """One arrival of the inflated workload.

    ``name`` is the simulator's pod name: the trace name, or ``<trace name>-tuned-<i>`` for
    the i-th clone (i counts clones from 0 in arrival order).
    """

    name: str
    source: TracePod
    resource: PodResource

    @property
    def is_clone(self) -> bool:
        return self.name != self.source.name


@dataclass(frozen=True, slots=True)
class FgdWorkload:
    """The arrival sequence of one seed, plus what the same RNG stream decides next."""

    seed: int
    ratio: float
    cluster_milli_gpu: int
    tuning: Literal["up", "down", "none"]
    pods: tuple[WorkloadPod, ...]
    # Node names as the simulator renames them ("%04d-<sn>"), in name-sorted node order.
    # Exact only if nothing else drew from Go's global source in between; see
    # docs/fgd-protocol.md ("RNG stream") for the informer goroutines that may.
    node_names: tuple[str, ...]

    @property
    def requested_milli_gpu(self) -> int:
        return sum(p.resource.total_milli_gpu for p in self.pods)


def cluster_milli_gpu(nodes: Iterable[TraceNode]) -> int:
    """``RecordNodeTotalResource``: the nodes' GPU capacity in milli-GPUs."""
    return sum(n.gpu * MILLI for n in nodes)


def _tune_up(
    pods: list[WorkloadPod],
    *,
    by_name: Sequence[TracePod],
    resources: Sequence[PodResource],
    total: int,
    target: float,
    rng: GoRand,
) -> None:
    i = 0
    n = len(by_name)
    while True:
        idx = rng.intn(n)
        res = resources[idx]
        # tuneUpPods compares with the per-GPU share (podRes.MilliGpu), not the total: a
        # multi-GPU clone can overshoot the target and is still kept. Float comparison as Go.
        if float(total + res.milli_gpu) > target:
            return
        total += res.total_milli_gpu
        src = by_name[idx]
        pods.append(WorkloadPod(f"{src.name}-tuned-{i}", src, res))
        i += 1


def _tune_down(pods: list[WorkloadPod], total: int, target: float, rng: GoRand) -> None:
    while float(total) > target:
        if not pods:
            raise ValueError("no pods left while the GPU request still exceeds the target")
        removed = pods.pop(rng.intn(len(pods)))
        total -= removed.resource.total_milli_gpu


def seeded_node_names(nodes: Sequence[TraceNode], rng: GoRand) -> list[str]:
    """``syncClusterResourceList``'s renaming: ``"%04d-" % perm[i] + sn`` by sorted ``sn``."""
    ordered = sorted(nodes, key=lambda n: n.sn)
    perm = rng.perm(len(ordered))
    return [f"{perm[i]:04d}-{node.sn}" for i, node in enumerate(ordered)]


def build_workload(
    pods: Sequence[TracePod],
    nodes: Sequence[TraceNode],
    seed: int,
    ratio: float = 1.3,
    rng: GoRand | None = None,
) -> FgdWorkload:
    """The simulator's arrival sequence for one seed (``-tune ratio -tuneseed seed``).

    ``pods`` is the whole trace in any order and ``nodes`` the cluster. Pass ``rng`` to keep
    drawing from the same stream afterwards (the simulator breaks scheduling ties, picks
    Random's node and Random's card from it); it is re-seeded with ``seed`` here.
    """
    if ratio <= 0:
        raise ValueError("ratio must be positive (the simulator skips tuning for <= 0)")
    names = [p.name for p in pods]
    if len(set(names)) != len(names):
        raise ValueError("pod names must be unique: the simulator sorts and clones by name")
    rng = rng if rng is not None else GoRand(seed)
    rng.seed(seed)
    rng.int_()  # log.Debugf("... Random Int: %d", rand.Int()) in core.go Simulate

    by_name = sorted(pods, key=lambda p: p.name)
    resources = [pod_resource(p) for p in by_name]
    shuffled = [WorkloadPod(p.name, p, r) for p, r in zip(by_name, resources, strict=True)]
    rng.shuffle_list(shuffled)

    capacity = cluster_milli_gpu(nodes)
    if capacity <= 0:
        raise ValueError("the cluster has no GPUs; the simulator panics on this")
    total = sum(r.total_milli_gpu for r in resources)
    if total <= 0:
        raise ValueError("the trace requests no GPUs; the simulator panics on this")
    target = ratio * float(capacity)
    tuning: Literal["up", "down", "none"] = "none"
    if float(total) < target:
        tuning = "up"
        _tune_up(
            shuffled, by_name=by_name, resources=resources, total=total, target=target, rng=rng
        )
    elif float(total) > target:
        tuning = "down"
        _tune_down(shuffled, total, target, rng)

    node_names = seeded_node_names(nodes, rng)
    return FgdWorkload(
        seed=seed,
        ratio=ratio,
        cluster_milli_gpu=capacity,
        tuning=tuning,
        pods=tuple(shuffled),
        node_names=tuple(node_names),
    )


@dataclass(frozen=True, slots=True)
class TargetPod:
    """One task class of FGD's target workload and its probability (they sum to 1)."""

    resource: PodResource
    percentage: float


def typical_pods(
    pods: Iterable[TracePod],
    popularity_threshold: int = 95,
    include_cpu_pods: bool = True,
    increase_step: int = 1,
    gpu_res_weight: float = 0.0,
) -> list[TargetPod]:
    """``GetTypicalPods``: the most frequent pod shapes covering ``popularity_threshold``%.

    Input is the original trace (``sim.workloadPods``, before inflation). Shapes are
    :class:`PodResource` values (cpu, per-GPU milli, GPU count, model list; memory ignored),
    sorted by decreasing count, ties by decreasing :meth:`PodResource.sort_key`. Classes are
    taken ``increase_step`` at a time while the covered count is below
    ``threshold * total / 100``, then renormalised to sum to 1. The float operations follow
    the Go code step by step, since FGD's integer score can flip on the last bit.
    """
    counts: dict[PodResource, float] = {}
    total = 0.0
    for pod in pods:
        res = pod_resource(pod)
        if not include_cpu_pods and res.gpu_number == 0:
            continue
        weight = 1.0
        if gpu_res_weight > 0 and res.milli_gpu == MILLI:
            weight = 1 + float(res.gpu_number) * gpu_res_weight
        counts[res] = counts.get(res, 0.0) + weight
        total += weight
    if total <= 0:
        return []

    # sort.Sort(sort.Reverse(TargetPodList)): Less is a strict total order on distinct shapes,
    # so the unstable Go sort still yields exactly this order.
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].sort_key()), reverse=True)
    threshold = popularity_threshold if popularity_threshold > 0 else _DEFAULT_POPULARITY_THRESHOLD
    step = increase_step if increase_step > 0 else _DEFAULT_INCREASE_STEP
    expected = float(threshold) * total / 100.0

    shares: list[float] = []
    cum = 0.0
    taken = 0
    limit = 0
    while cum < expected:
        limit += step
        while taken < limit and taken < len(ranked):
            count = ranked[taken][1]
            cum += count
            shares.append(count / total)
            taken += 1
        if taken >= len(ranked):
            break  # Go would spin here only if expected > total, which threshold <= 100 rules out

    if taken >= len(ranked):
        return [TargetPod(res, share) for (res, _), share in zip(ranked, shares, strict=True)]
    norm = cum / total
    return [
        TargetPod(res, share / norm) for (res, _), share in zip(ranked[:taken], shares, strict=True)
    ]
