"""The gang port: what a gang's PodGroup object says, for the gang plugin (Handle.gangs).

A pod joins a gang through one of three APIs (model/pod.py `GangAPI`); two of them keep the
gang's size and policy in an object the scheduler reads but users write:

* scheduler-plugins Coscheduling: `podgroups.scheduling.x-k8s.io/v1alpha1` (`spec.minMember`,
  `spec.scheduleTimeoutSeconds`; annotations `gpusched.io/topology-required|-preferred`);
* upstream Kubernetes 1.36: `podgroups.scheduling.k8s.io/v1alpha2`
  (`spec.schedulingPolicy.gang.minCount` or `basic: {}`, `spec.schedulingConstraints
  .topology[].key`; the same annotations).

The daemon implements the port over watches of both (gpusched/kube/podgroups.py); the
simulator and the unit tests over a dict (`StaticGangs`). The third API, the annotations
`scheduling.ai/gang-name` + `gang-total`, needs no object: the gang plugin reads its pods.
Reads are synchronous (the scheduling cycle never awaits).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpusched.model.pod import GangAPI

# A tier a gang's placement may be held to, by name (annotations) or as a node label key
# (the upstream PodGroup's topology key). The plugin maps the names to the configured
# topologyKeys (rack and spine labels).
TIER_RACK = "rack"
TIER_SPINE = "spine"


@dataclass(frozen=True, slots=True)
class PodGroupSpec:
    """One PodGroup object as the scheduler uses it.

    `min_member` 1 with `gang` False is the upstream `basic` policy (no gang: each pod on its
    own). `topology_required` / `topology_preferred`: "" (none), "rack", "spine", or a node
    label key (upstream `schedulingConstraints.topology[0].key`, which is always required).
    `problem`: why the object cannot be used (a negative minMember, two topology keys, an
    unknown tier); its pods stay unschedulable with that message, never silently ungrouped.
    """

    key: str  # "namespace/name"
    api: GangAPI
    min_member: int
    gang: bool = True
    timeout_seconds: float | None = None  # None: the plugin's default
    topology_required: str = ""
    topology_preferred: str = ""
    created: float = 0.0  # unix seconds: the group's place in the queue
    uid: str = ""
    problem: str = ""
    # Upstream `spec.disruptionMode` (gate WorkloadAwarePreemption): "Pod" lets preemption
    # take members one by one, "PodGroup" (and "" for the other APIs, which have no such
    # field) evicts the gang whole or not at all. The API server defaults it to "Pod".
    disruption_mode: str = ""


# PodGroupSpec.disruption_mode values (scheduling.k8s.io/v1alpha2 DisruptionMode).
DISRUPTION_POD = "Pod"
DISRUPTION_POD_GROUP = "PodGroup"


class GangPort(Protocol):
    def pod_group(self, api: GangAPI, key: str) -> PodGroupSpec | None:
        """The PodGroup `key` ("namespace/name") of `api` as last seen; None: not (yet)
        seen. Never called for GangAPI.ANNOTATIONS."""
        ...


class StaticGangs:
    """PodGroups held in memory: the simulator's and the unit tests' port (and the daemon's
    when nothing watches PodGroups)."""

    def __init__(self, groups: Iterable[PodGroupSpec] = ()) -> None:
        self._groups: dict[tuple[GangAPI, str], PodGroupSpec] = {}
        for g in groups:
            self.put(g)

    def put(self, group: PodGroupSpec) -> None:
        self._groups[(group.api, group.key)] = group

    def remove(self, api: GangAPI, key: str) -> None:
        self._groups.pop((api, key), None)

    def pod_group(self, api: GangAPI, key: str) -> PodGroupSpec | None:
        return self._groups.get((api, key))

    @property
    def groups(self) -> Mapping[tuple[GangAPI, str], PodGroupSpec]:
        return self._groups


class _NoGangs:
    """No PodGroup objects at all (a cluster without the CRDs)."""

    def pod_group(self, api: GangAPI, key: str) -> PodGroupSpec | None:
        return None


NO_GANGS: GangPort = _NoGangs()
