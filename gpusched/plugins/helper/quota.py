"""Tenant quota arithmetic shared by ElasticQuota (admission) and Preemption (reclaim).

The rules (README "Tenants and quotas"):

* **max** is a ceiling: a tenant's placed pods plus the new one never use more of a limited
  resource than its `max`.
* **min** is a guarantee, not a reservation: capacity a tenant's guarantee does not use is
  lent to whoever asks (borrowing), and taken back by preemption when the owner asks for it
  again (reclaim). A tenant at or under its min is never preempted by another tenant.
* When the mins of all tenants add up to more than the cluster has of a resource, every
  guarantee of that resource is scaled down in proportion (`effective_min`), so the
  guarantees can all be honoured at once; the operator says so on each ElasticQuota.

A tenant without an ElasticQuota has no guarantee (min 0) and no ceiling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from gpusched.framework.interfaces import Handle
from gpusched.framework.tenancy import TenantQuota
from gpusched.model import quota
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.quota import Limits, Usage


def capacity(handle: Handle) -> Usage:
    """The cluster's total of each quota resource: every card of every valid node, its
    allocatable cpu, memory and pods."""
    snap = handle.snapshot
    valid = snap.node_valid
    present = (snap.card_model >= 0) & valid[:, None]
    gpu = int(np.count_nonzero(present)) * FULL_CARD_MILLI
    gpu_mem = int(snap.card_total_mem[present].sum())
    return (
        gpu,
        gpu_mem,
        int(snap.node_cpu_alloc[valid].sum()),
        int(snap.node_mem_alloc[valid].sum()),
        int(snap.node_pods_alloc[valid].sum()),
    )


def effective_mins(quotas: Iterable[TenantQuota], cap: Usage) -> dict[str, Limits]:
    """Each tenant's guarantee, scaled down per resource where the mins together exceed the
    cluster (integer floor, so the scaled mins never add up to more than `cap`). A resource
    the min does not name stays None: no guarantee of it."""
    usable = [q for q in quotas if not q.problem]
    total = [sum(q.min[i] or 0 for q in usable) for i in range(len(quota.RESOURCES))]
    out: dict[str, Limits] = {}
    for q in usable:
        out[q.tenant] = tuple(
            None if m is None else m if total[i] <= cap[i] else (m * cap[i]) // total[i]
            for i, m in enumerate(q.min)
        )
    return out


def oversubscribed(quotas: Iterable[TenantQuota], cap: Usage) -> list[str]:
    """The resources whose mins add up to more than the cluster has."""
    usable = [q for q in quotas if not q.problem]
    return [
        name
        for i, name in enumerate(quota.RESOURCES)
        if sum(q.min[i] or 0 for q in usable) > cap[i]
    ]


@dataclass(slots=True)
class QuotaState:
    """Every tenant's guarantee, ceiling and usage at one moment (one scheduling cycle)."""

    handle: Handle
    mins: Mapping[str, Limits]
    maxes: Mapping[str, Limits]

    @classmethod
    def of(cls, handle: Handle) -> QuotaState:
        quotas = [q for q in handle.tenancy.quotas() if not q.problem]
        return cls(
            handle,
            effective_mins(quotas, capacity(handle)),
            {q.tenant: q.max for q in quotas},
        )

    def min_of(self, tenant: str) -> Limits:
        """The tenant's (effective) guarantee; None where it names no guarantee."""
        return self.mins.get(tenant, _NO_GUARANTEE)

    def max_of(self, tenant: str) -> Limits:
        return self.maxes.get(tenant, quota.UNLIMITED)

    def used(self, tenant: str) -> Usage:
        return self.handle.tenant_usage(tenant)

    def within_min(self, tenant: str, usage: Usage, request: Usage) -> bool:
        """Whether the tenant's guarantee covers `usage` in every resource its min names and
        `request` asks for, and names at least one of them: the tenant may then reclaim what
        others borrowed. A quota that guarantees only GPUs reclaims for a pod that also
        asks for cpu and memory (nobody guarantees those to anyone); a tenant without a
        guarantee of anything the pod asks for may not reclaim."""
        mins = self.min_of(tenant)
        covered = False
        for u, m, r in zip(usage, mins, request, strict=True):
            if r <= 0 or m is None:
                continue
            if u > m:
                return False
            covered = True
        return covered

    def over_min(self, tenant: str, usage: Usage) -> bool:
        """Whether `usage` is above the guarantee in some resource it names (the pod count
        only where named): the tenant is borrowing, and what it borrowed may be reclaimed.
        A tenant without an ElasticQuota has no guarantee: any use of a resource is
        borrowed."""
        mins = self.mins.get(tenant)
        if mins is None:
            return any(u > 0 for i, u in enumerate(usage) if i != _PODS)
        return any(m is not None and u > m for u, m in zip(usage, mins, strict=True))


_PODS = quota.INDEX[quota.PODS]
_NO_GUARANTEE: Limits = (0, 0, 0, 0, None)
