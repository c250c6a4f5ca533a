"""The Handle plugins receive: snapshot and cache views plus the cluster port."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.cache.snapshot import Snapshot
from gpusched.core.gangs import GangIndex
from gpusched.core.runtime.waiting import WaitingPod, WaitingPods
from gpusched.framework.disruption import NO_DISRUPTION, DisruptionPort
from gpusched.framework.dra import NO_DRA, DraPort
from gpusched.framework.gangs import NO_GANGS, GangPort
from gpusched.framework.interfaces import Allocation, ClusterPort, PodMatcher, Rows, UsedPorts
from gpusched.framework.tenancy import NO_TENANCY, TenancyPort
from gpusched.framework.volumes import NO_VOLUMES, VolumePort
from gpusched.model import quota
from gpusched.model.pod import PodInfo


class SchedulerHandle:
    def __init__(
        self,
        cache: ClusterCache,
        cluster: ClusterPort,
        clock: Callable[[], float],
        volumes: VolumePort = NO_VOLUMES,
        gangs: GangPort = NO_GANGS,
        dra: DraPort = NO_DRA,
        tenancy: TenancyPort = NO_TENANCY,
        disruption: DisruptionPort = NO_DISRUPTION,
        wall: Callable[[], float] | None = None,
    ) -> None:
        self.cache = cache
        # Unix seconds for API timestamps (the daemon's `clock` is monotonic); the
        # simulator's pods carry times on its virtual clock, so there it is `clock`.
        self._wall = wall or clock
        self._tenancy = tenancy
        self._disruption = disruption
        self._dra = dra
        self._cluster = cluster
        self._clock = clock
        self._volumes = volumes
        self._gangs = gangs
        # Shared by every profile's framework (kube-scheduler shares one waitingPods map),
        # so a gang plugin sees its siblings whichever profile placed them.
        self.waiting = WaitingPods()
        # Filled by ClusterEvents (which is built later and handed this same index).
        self.gang_index = GangIndex()
        # Whether a pod is in the scheduling queue: set by whoever builds the queue (the
        # daemon, the simulator); until then every pod counts as pending.
        self.pending: Callable[[str], bool] = _always
        # tenant -> its namespaces holding placed pods, and the (cache namespace version,
        # tenancy generation) it was grouped at (tenant_usage).
        self._groups: dict[str, list[str]] = {}
        self._groups_stamp: tuple[int, int] = (-1, -1)

    @property
    def snapshot(self) -> Snapshot:
        return self.cache.snapshot

    @property
    def cluster(self) -> ClusterPort:
        return self._cluster

    def now(self) -> float:
        return self._clock()

    def wall_now(self) -> float:
        return self._wall()

    def pods_on_node(self, node: str) -> Iterable[PodInfo]:
        return self.cache.pods_on_node(node)

    def assumed_pods(self) -> Iterable[tuple[PodInfo, str]]:
        return self.cache.assumed_pods()

    def job_rows(self, job_key: str) -> Rows:
        return self.cache.job_rows(job_key)

    def used_host_ports(self) -> Mapping[str, UsedPorts]:
        return self.cache.used_host_ports()

    @property
    def volumes(self) -> VolumePort:
        return self._volumes

    def count_matching_pods(self, matcher: PodMatcher) -> NDArray[np.int64]:
        return self.cache.count_matching_pods(matcher)

    def pods_with_affinity(
        self, *, required_anti_only: bool = False
    ) -> Sequence[tuple[PodInfo, int]]:
        return self.cache.pods_with_affinity(required_anti_only=required_anti_only)

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self.cache.namespace_labels()

    @property
    def gangs(self) -> GangPort:
        return self._gangs

    @property
    def dra(self) -> DraPort:
        return self._dra

    @property
    def tenancy(self) -> TenancyPort:
        return self._tenancy

    @property
    def disruption(self) -> DisruptionPort:
        return self._disruption

    def tenant_usage(self, tenant: str) -> quota.Usage:
        # The cache keeps each namespace's sum (core/cache/cache.py); the namespaces are
        # grouped by tenant once per change of the namespace set or of the tenancy
        # (generation), so this reads only the tenant's own namespaces. A relabelled
        # Namespace moves its usage at once.
        usage = self.cache.namespace_usage()
        total: quota.Usage | None = None
        for namespace in self._tenant_groups().get(tenant, ()):
            u = usage[namespace]
            total = u if total is None else quota.add(total, u)
        return quota.ZERO if total is None else total

    def _tenant_groups(self) -> Mapping[str, list[str]]:
        """Tenant -> its namespaces holding placed pods, regrouped only when the cache's
        namespace set or the tenancy changes."""
        stamp = (self.cache.namespace_version, self._tenancy.generation)
        if stamp != self._groups_stamp:
            groups: dict[str, list[str]] = {}
            tenant_of = self._tenancy.tenant_of
            for namespace in self.cache.namespace_usage():
                groups.setdefault(tenant_of(namespace), []).append(namespace)
            self._groups, self._groups_stamp = groups, stamp
        return self._groups

    def tenant_usages(self) -> Mapping[str, quota.Usage]:
        usage = self.cache.namespace_usage()
        out: dict[str, quota.Usage] = {}
        for tenant, namespaces in self._tenant_groups().items():
            total = usage[namespaces[0]]
            for namespace in namespaces[1:]:
                total = quota.add(total, usage[namespace])
            out[tenant] = total
        return out

    def tenant_gpu_rows(self, tenant: str) -> NDArray[np.int64]:
        out = np.zeros(len(self.cache.snapshot.node_valid), np.int64)
        for namespace in self._tenant_groups().get(tenant, ()):
            for row, milli in self.cache.namespace_gpu_rows(namespace).items():
                out[row] += milli
        return out

    def is_pending(self, uid: str) -> bool:
        return self.pending(uid)

    def allocation_of(self, uid: str) -> Allocation | None:
        entry = self.cache.get(uid)
        return entry.alloc if entry is not None else None

    def gang_members(self, key: str) -> Sequence[tuple[PodInfo, str]]:
        out = []
        for pod in self.gang_index.members(key):
            entry = self.cache.get(pod.uid)
            out.append((pod, entry.node if entry is not None else ""))
        return out

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self.waiting.get(uid)

    def waiting_pods(self) -> Iterable[WaitingPod]:
        return iter(self.waiting)


def _always(uid: str) -> bool:
    return True
