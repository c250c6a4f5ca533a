"""What the daemon publishes on the QuotaBoard (operator/quota_board.py) for the status
operator: per ElasticQuota object, its tenant's usage (status.used) and the Warning Events
it should carry (InvalidQuota: the problem that makes its tenant's pods refused;
MinimumsExceedCluster: its min is part of a resource whose mins add up to more than the
cluster has, so every min of it is scaled down in proportion).

Runs on the daemon's event loop: the cache names each namespace whose usage changed
(ClusterCache.usage_changed), which marks its tenant dirty; a quota, tenant-label or
capacity change marks every tenant; one callback per loop turn recomputes the dirty
tenants' objects and publishes them, so a burst of binds costs one report per tenant.
"""

from __future__ import annotations

from gpusched.core.handle import SchedulerHandle
from gpusched.daemon.coalesce import CoalescedFlush
from gpusched.kube.quotas import KubeQuotas
from gpusched.model import quota
from gpusched.model.elastic_quota import ElasticQuotaSpec
from gpusched.operator.quota_board import (
    INVALID_QUOTA,
    MINIMUMS_EXCEED_CLUSTER,
    QuotaBoard,
    QuotaReport,
)
from gpusched.plugins.helper.quota import capacity, effective_mins


class QuotaStatusPublisher(CoalescedFlush):
    def __init__(self, board: QuotaBoard, quotas: KubeQuotas, handle: SchedulerHandle) -> None:
        super().__init__()
        self.board = board
        self.quotas = quotas
        self.handle = handle
        self._dirty: set[str] = set()
        self._all = True
        # resource index -> (sum of the usable mins, the cluster's capacity), for the
        # resources whose mins exceed the cluster; with each tenant's effective min.
        self._oversubscribed: dict[int, tuple[int, int]] = {}
        self._effective: dict[str, quota.Limits] = {}

    def namespace_used(self, namespace: str) -> None:
        """The cache: `namespace`'s usage changed."""
        tenant = self.quotas.tenant_of(namespace)
        if self.quotas.objects_of(tenant):
            self._dirty.add(tenant)
            self._schedule()

    def touch_all(self) -> None:
        """Quotas, tenants or the cluster's capacity changed: every report again."""
        self._all = True
        self._schedule()

    def flush(self) -> None:
        tenants = self.quotas.tenants()
        removed: set[str] = set()
        if self._all:
            self._all = False
            self._dirty.clear()
            self._measure()
            chosen = list(tenants)
            live = {spec.key for group in tenants.values() for spec in group}
            removed = set(self.board.keys()) - live
        else:
            chosen = [t for t in self._dirty if t in tenants]
            self._dirty.clear()
        reports = [self.report(t, spec) for t in chosen for spec in tenants[t]]
        self.board.publish(reports, removed)

    def _measure(self) -> None:
        usable = [q for q in self.quotas.quotas() if not q.problem]
        cap = capacity(self.handle)
        self._effective = effective_mins(usable, cap)
        self._oversubscribed = {}
        for i in range(len(quota.RESOURCES)):
            total = sum(q.min[i] or 0 for q in usable)
            if total > cap[i]:
                self._oversubscribed[i] = (total, cap[i])

    def report(self, tenant: str, spec: ElasticQuotaSpec) -> QuotaReport:
        usage = self.handle.tenant_usage(tenant)
        shown = set(spec.named) | {quota.GPU}
        used = quota.render(
            tuple(
                u if name in shown else None for name, u in zip(quota.RESOURCES, usage, strict=True)
            )
        )
        warnings: list[tuple[str, str]] = []
        tq = self.quotas.quota(tenant)
        if tq is not None and tq.problem:
            warnings.append(
                (
                    INVALID_QUOTA,
                    f"ElasticQuota {spec.key} cannot be enforced: {tq.problem}; the pods of"
                    f" tenant {tenant!r} are refused until it is fixed",
                )
            )
        elif tq is not None:
            effective = self._effective.get(tenant, quota.UNLIMITED)
            for i, (total, cap) in sorted(self._oversubscribed.items()):
                mine = spec.min[i]
                if not mine:
                    continue
                name = quota.RESOURCES[i]
                scaled = effective[i]
                now = scaled if scaled is not None else mine
                warnings.append(
                    (
                        MINIMUMS_EXCEED_CLUSTER,
                        f"the ElasticQuotas' mins of {name} add up to"
                        f" {quota.describe(name, total)}, more than the cluster's"
                        f" {quota.describe(name, cap)}: every min of {name} is scaled down in"
                        f" proportion, this one's {quota.describe(name, mine)} to"
                        f" {quota.describe(name, now)}",
                    )
                )
        return QuotaReport(spec.key, tenant, used, tuple(warnings))
