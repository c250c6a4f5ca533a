"""An FGD workload variant whose pods belong to ReplicaSets (``--owners replicasets``).

The openb traces' pods have no owner, so nothing in the FGD protocol exercises what
kube-scheduler does to controller-owned pods: PodTopologySpread's system default
constraints (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) apply to every pod of a
ReplicaSet, StatefulSet or ReplicationController. This variant groups the arrival sequence
into ReplicaSets the way Deployments of identical replicas would look: pods of one shape
(cpu, memory, GPU count, per-GPU milli, acceptable models) are cut, in arrival order, into
consecutive runs of a seeded size (``min_size``..``max_size`` replicas, uniform), each run
one ReplicaSet (a Deployment scaled up over time). The arrival sequence and every pod's
request are the protocol's own; only ownership is added.

Each ReplicaSet gets its own namespace. PodTopologySpread counts, for a default constraint,
the pods of the same controller uid in the pod's namespace, and every replica of a
ReplicaSet lives in one namespace whichever it is, so the scores are the same as with one
shared namespace; the per-ReplicaSet namespace only keeps the count (one pass over the
namespace's pods per attempt) from scanning the whole trace's pods at every arrival.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.sim.fgd_workload import PodResource, WorkloadPod

__all__ = ["OWNERS", "Owner", "max_replicas_per_node", "replicaset_owners"]

OWNERS = ("none", "replicasets")
MIN_REPLICAS = 3
MAX_REPLICAS = 30
# Keeps the grouping's stream apart from the workload's own (Go's) stream of the same seed.
_SEED_SALT = 0x5EED_0F_45


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's ReplicaSet: its name (also its namespace and its ``app`` label) and uid."""

    name: str
    uid: str

    @property
    def namespace(self) -> str:
        return self.name

    @property
    def labels(self) -> Mapping[str, str]:
        # What a Deployment's pod template carries and its selector matches.
        return {"app": self.name}


def _shape(pod: WorkloadPod) -> tuple[PodResource, int]:
    return (pod.resource, pod.source.memory_mib)


def replicaset_owners(
    pods: Sequence[WorkloadPod],
    seed: int,
    *,
    min_size: int = MIN_REPLICAS,
    max_size: int = MAX_REPLICAS,
) -> list[Owner]:
    """Each arrival's ReplicaSet (same order as `pods`), reproducible from `seed`."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}..{max_size}")
    rng = np.random.default_rng([seed, _SEED_SALT])
    # Per shape: the open ReplicaSet and how many replicas it still takes.
    open_sets: dict[tuple[PodResource, int], tuple[Owner, int]] = {}
    owners: list[Owner] = []
    count = 0
    for pod in pods:
        key = _shape(pod)
        current = open_sets.get(key)
        if current is None or current[1] == 0:
            name = f"rs-{count:05d}"
            current = (Owner(name, f"uid-{name}"), int(rng.integers(min_size, max_size + 1)))
            count += 1
        owner, left = current
        open_sets[key] = (owner, left - 1)
        owners.append(owner)
    return owners


def max_replicas_per_node(owners: Sequence[Owner], nodes: Sequence[str]) -> float:
    """The spread achieved: over ReplicaSets with two or more placed replicas, the mean of
    the most replicas any one node holds (1.0 is perfect hostname spreading). `nodes` is
    each arrival's node, "" for a dropped pod. NaN when no ReplicaSet qualifies."""
    per_set: dict[str, dict[str, int]] = {}
    for owner, node in zip(owners, nodes, strict=True):
        if node:
            counts = per_set.setdefault(owner.uid, {})
            counts[node] = counts.get(node, 0) + 1
    maxima = [max(c.values()) for c in per_set.values() if sum(c.values()) >= 2]
    return float(np.mean(maxima)) if maxima else float("nan")
