"""Whether a configuration's profiles can run: build each one's Framework, with no cluster.

The loader (gpusched/config) checks everything it can without constructing plugins; this
goes one step further, as `gpusched check-config` and start-up need: the Framework refuses
a profile it cannot run, and a plugin constructor may reject its args.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from gpusched.config import ConfigError, SchedulerConfig
from gpusched.config.args import ErrorList
from gpusched.core.runtime.framework import Framework
from gpusched.framework.disruption import NO_DISRUPTION, DisruptionPort
from gpusched.framework.dra import NO_DRA, DraPort
from gpusched.framework.gangs import NO_GANGS, GangPort
from gpusched.framework.interfaces import (
    Allocation,
    ClusterPort,
    Handle,
    PodMatcher,
    Rows,
    UsedPorts,
    WaitingPodView,
)
from gpusched.framework.registry import Registry
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Code, Status
from gpusched.framework.tenancy import NO_TENANCY, TenancyPort
from gpusched.framework.volumes import NO_VOLUMES, VolumePort
from gpusched.model import quota
from gpusched.model.pod import PodInfo

__all__ = ["validate_profiles"]


class _StubCluster:
    """A cluster port that refuses every write: check-config never touches a cluster."""

    async def bind(
        self, pod: PodInfo, node: str, annotations: Mapping[str, str] | None = None
    ) -> Status:
        return Status(Code.ERROR, ("check-config: no cluster",))


class _StubHandle:
    """Lets plugins be constructed without a cluster: an empty snapshot, a clock at zero."""

    def __init__(self, max_cards: int) -> None:
        self._cluster = _StubCluster()
        self._snapshot = NodeColumns(max_cards, capacity=1)

    @property
    def cluster(self) -> ClusterPort:
        return self._cluster

    @property
    def snapshot(self) -> NodeColumns:
        return self._snapshot

    def now(self) -> float:
        return 0.0

    def wall_now(self) -> float:
        return 0.0

    def pods_on_node(self, node: str) -> Iterable[PodInfo]:
        return ()

    def assumed_pods(self) -> Iterable[tuple[PodInfo, str]]:
        return ()

    def job_rows(self, job_key: str) -> Rows:
        return np.empty(0, np.intp)

    def count_matching_pods(self, matcher: PodMatcher) -> NDArray[np.int64]:
        return np.zeros(len(self._snapshot.node_valid), np.int64)

    def pods_with_affinity(
        self, *, required_anti_only: bool = False
    ) -> Sequence[tuple[PodInfo, int]]:
        return ()

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {}

    def used_host_ports(self) -> Mapping[str, UsedPorts]:
        return {}

    @property
    def volumes(self) -> VolumePort:
        return NO_VOLUMES

    @property
    def gangs(self) -> GangPort:
        return NO_GANGS

    @property
    def dra(self) -> DraPort:
        return NO_DRA

    @property
    def tenancy(self) -> TenancyPort:
        return NO_TENANCY

    @property
    def disruption(self) -> DisruptionPort:
        return NO_DISRUPTION

    def tenant_usage(self, tenant: str) -> quota.Usage:
        return quota.ZERO

    def tenant_usages(self) -> Mapping[str, quota.Usage]:
        return {}

    def tenant_gpu_rows(self, tenant: str) -> NDArray[np.int64]:
        return np.zeros(0, np.int64)

    def is_pending(self, uid: str) -> bool:
        return False

    def allocation_of(self, uid: str) -> Allocation | None:
        return None

    def gang_members(self, key: str) -> Sequence[tuple[PodInfo, str]]:
        return ()

    def get_waiting_pod(self, uid: str) -> WaitingPodView | None:
        return None

    def waiting_pods(self) -> Iterable[WaitingPodView]:
        return ()


def validate_profiles(config: SchedulerConfig, registry: Registry) -> None:
    """Build every profile's Framework (with a stub handle) and raise what it refuses,
    including plugin constructors that reject their args."""
    errs = ErrorList()
    handle: Handle = _StubHandle(config.max_cards_per_node)
    for i, profile in enumerate(config.profiles):
        try:
            Framework(profile, registry, handle)
        except ConfigError as exc:
            errs.extend(exc)
        except Exception as exc:  # a plugin constructor's failure is a config problem too
            errs.add(
                f"profiles[{i}]",
                f"building profile {profile.scheduler_name!r} failed: {exc!r}",
            )
    errs.raise_if_any()
