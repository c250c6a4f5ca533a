"""`make demo`'s workload: one realistic mixed workload, written twice.

Once for gpusched (`schedulerName: ai-scheduler`, inference replicas sharing cards through
`gpusched.io/gpu-milli`), once as a user without gpusched runs it on kube-scheduler
(`default-scheduler`, each inference replica asking `nvidia.com/gpu: 1`, since
kube-scheduler cannot share a card). Everything else is the same object: the same
Deployments and Jobs, the same CPU and memory, the same gang.

It arrives in waves, in the order a cluster typically sees it (long-running services first,
then the week's fine-tuning and evaluation Jobs, then a large distributed training run):

1. `inference` Deployment, 16 replicas, each needing half a card (500 milli-GPU);
2. `api` Deployment, 8 CPU-only replicas;
3. `finetune` Job, 4 pods x 2 GPUs; `eval` Job, 4 pods x 1 GPU; `sweep` Job, 2 pods x 4 GPUs;
4. `train` Job, 4 pods x 8 GPUs, all-or-nothing: an Indexed Job, for which the job
   controller (feature gate WorkloadWithJob) creates a Workload and a PodGroup of
   `scheduling.k8s.io/v1alpha2` with `minCount: 4` and names it in each pod's
   `spec.schedulingGroup.podGroupName`; kube-scheduler's GangScheduling and gpusched's
   GangScheduling both read that.

On the demo fleet (`demo_fleet`: 8 nodes x 8 cards, A100 80GB and V100 32GB alternating,
64 cards) the first three waves need 32 cards' worth of GPU (12 for inference, 20 for the
Jobs); the gang then needs four nodes with 4 free cards each. Under kube-scheduler the
inference replicas hold 24 whole cards, so the same waves hold 44.

Job pods carry KWOK's `pod-complete.stage.kwok.x-k8s.io/delay: 1h`: they keep running (and
holding their cards) for the demo, as training does, instead of completing at once. Every
pod template carries its real GPU need in the label `demo.gpusched.io/gpu-milli` (the same
in both variants), so the comparison can say how much of a held card is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpusched.devcluster.configs import BASELINE_SCHEDULER
from gpusched.devcluster.nodes import NodeSpec
from gpusched.kube import JSON
from gpusched.model import keys

DEMO_NODES = 8
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: KWOK runs no containers
NEED_LABEL = "demo.gpusched.io/gpu-milli"  # the pod's real GPU need, milli-GPU
GROUP_LABEL = "demo.gpusched.io/group"  # the controller a pod belongs to
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
RUN_FOR = "1h"

GPUSCHED = "gpusched"
KUBE_SCHEDULER = "kube-scheduler"
VARIANTS = (GPUSCHED, KUBE_SCHEDULER)


@dataclass(frozen=True, slots=True)
class Part:
    """One controller of the workload: `pods` pods, each needing `milli` milli-GPU (1000 =
    one card; below 1000 a share of one card) and `cpu`; `gang`: all-or-nothing."""

    name: str
    kind: str  # "Deployment" or "Job"
    pods: int
    milli: int
    cpu: str
    memory: str
    wave: int
    gang: bool = False

    @property
    def cards(self) -> int:
        """Whole cards each pod asks for (0 for a share or a CPU-only pod)."""
        return self.milli // 1000 if self.milli >= 1000 else 0


PARTS: tuple[Part, ...] = (
    Part("inference", "Deployment", 24, 500, "2", "8Gi", wave=1),
    Part("api", "Deployment", 8, 0, "2", "4Gi", wave=2),
    Part("finetune", "Job", 4, 2000, "8", "64Gi", wave=3),
    Part("eval", "Job", 4, 1000, "4", "32Gi", wave=3),
    Part("sweep", "Job", 2, 4000, "16", "128Gi", wave=3),
    Part("train", "Job", 4, 4000, "16", "128Gi", wave=4, gang=True),
)


def waves(parts: tuple[Part, ...] = PARTS) -> list[list[Part]]:
    """The parts grouped by wave, in arrival order."""
    out: dict[int, list[Part]] = {}
    for part in parts:
        out.setdefault(part.wave, []).append(part)
    return [out[w] for w in sorted(out)]


def manifest(part: Part, variant: str) -> JSON:
    """The Deployment or Job of `part` as `variant` (GPUSCHED or KUBE_SCHEDULER) runs it."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    annotations: dict[str, str] = {}
    limits: dict[str, str] = {}
    if part.cards:
        limits[keys.GPU_RESOURCE] = str(part.cards)
    elif part.milli and variant == GPUSCHED:
        annotations[keys.GPU_MILLI] = str(part.milli)
    elif part.milli:
        limits[keys.GPU_RESOURCE] = "1"  # kube-scheduler cannot share: a whole card
    if part.kind == "Job":
        annotations[KWOK_COMPLETE_DELAY] = RUN_FOR
    resources: JSON = {"requests": {"cpu": part.cpu, "memory": part.memory}}
    if limits:
        resources["limits"] = limits
    labels = {"app": "gpusched-demo", GROUP_LABEL: part.name, NEED_LABEL: str(part.milli)}
    pod_spec: JSON = {
        "schedulerName": keys.SCHEDULER_NAME if variant == GPUSCHED else BASELINE_SCHEDULER,
        "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    template: JSON = {"metadata": {"labels": labels}, "spec": pod_spec}
    if annotations:
        template["metadata"]["annotations"] = annotations
    meta: JSON = {"name": part.name, "labels": {"app": "gpusched-demo"}}
    if part.kind == "Deployment":
        spec: JSON = {
            "replicas": part.pods,
            "selector": {"matchLabels": {GROUP_LABEL: part.name}},
            "template": template,
        }
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}
    pod_spec["restartPolicy"] = "Never"
    spec = {
        "parallelism": part.pods,
        "completions": part.pods,
        "backoffLimit": 0,
        "template": template,
    }
    if part.gang:
        # The job controller makes an Indexed Job's PodGroup (minCount = parallelism).
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def manifests(variant: str, parts: tuple[Part, ...] = PARTS) -> list[JSON]:
    return [manifest(p, variant) for p in parts]


def parts_by_name(parts: tuple[Part, ...] = PARTS) -> Mapping[str, Part]:
    return {p.name: p for p in parts}


def demo_fleet(count: int = DEMO_NODES) -> list[NodeSpec]:
    """`count` 8-card nodes, A100 80GB (96 cores, 1 TiB) and V100 32GB (64 cores, 512 GiB)
    alternating, in one rack; deterministic."""
    specs = []
    for i in range(count):
        a100 = i % 2 == 0
        specs.append(
            NodeSpec(
                name=f"gpu-node-{i:02d}",
                gpus=8,
                model="A100M80" if a100 else "V100M32",
                cpu_milli=96_000 if a100 else 64_000,
                memory_mib=1_048_576 if a100 else 524_288,
                rack=f"rack-{i // 8:03d}",
                spine="spine-00",
                nvlink_island_size=8,
            )
        )
    return specs


def fleet_csv(specs: list[NodeSpec]) -> str:
    """The fleet as an openb node list (`python -m gpusched.devcluster up --node-list`),
    which gives the same nodes: eight to a rack in file order, 8-card NVLink islands."""
    lines = ["sn,cpu_milli,memory_mib,gpu,model"]
    lines += [f"{s.name},{s.cpu_milli},{s.memory_mib},{s.gpus},{s.model}" for s in specs]
    return "\n".join(lines) + "\n"
