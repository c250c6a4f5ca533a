"""The tenancy port: who a pod's tenant is, and the tenant's quota (Handle.tenancy).

A **tenant** is a namespace, or several: a Namespace labelled `gpusched.io/tenant: T`
belongs to tenant T, an unlabelled one is its own tenant (named after it). Only the
Namespace's label counts, never a pod's: a pod's owner can write the pod's labels, and a
pod that could name its tenant could charge another team's quota or escape its own.

A tenant's **quota** is the `ElasticQuota` (scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`,
`spec.min`, `spec.max`) in one of its namespaces; a tenant with none is not limited and
has no guarantee. Two ElasticQuotas for one tenant are a configuration error: the tenant's
quota then carries a `problem` and its pods are refused naming both objects (choosing one
silently could enforce the limit the admin meant to remove).

The daemon implements the port over watches of ElasticQuotas and Namespaces
(gpusched/kube/quotas.py); the simulator and the unit tests over dicts (`StaticTenancy`).
What each tenant uses is not part of the port: the cache counts it from the placed pods
(Handle.tenant_usage), so an assumed pod counts the moment it is assumed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpusched.model import keys
from gpusched.model.quota import UNLIMITED, Limits


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """One tenant's ElasticQuota as the scheduler uses it. `min`: the guarantee (an
    unlisted resource guarantees nothing); `max`: the ceiling (unlisted: unlimited).
    `problem`: why it cannot be used (a malformed quantity, min above max, two objects);
    the tenant's pods are then refused with it."""

    tenant: str
    key: str  # "namespace/name" of the ElasticQuota
    min: Limits = UNLIMITED
    max: Limits = UNLIMITED
    uid: str = ""
    problem: str = ""


class TenancyPort(Protocol):
    def tenant_of(self, namespace: str) -> str:
        """The namespace's tenant: its `gpusched.io/tenant` label, else its own name."""
        ...

    def quota(self, tenant: str) -> TenantQuota | None:
        """The tenant's quota; None: the tenant has no ElasticQuota (unlimited)."""
        ...

    def quotas(self) -> Iterable[TenantQuota]:
        """Every tenant's quota (one per tenant that has any)."""
        ...

    @property
    def generation(self) -> int:
        """Changes whenever `tenant_of` may answer differently for some namespace (a
        Namespace relabelled): the Handle keeps its tenant -> namespaces grouping until
        then, so a tenant's usage sums its own namespaces only."""
        ...


def tenant_from_labels(namespace: str, labels: Mapping[str, str] | None) -> str:
    """The tenancy rule on a Namespace's name and labels."""
    if labels:
        value = labels.get(keys.TENANT_LABEL)
        if value:
            return str(value)
    return namespace


class StaticTenancy:
    """Tenants and quotas held in memory: the simulator's and the unit tests' port."""

    def __init__(
        self,
        quotas: Iterable[TenantQuota] = (),
        namespace_tenants: Mapping[str, str] | None = None,
    ) -> None:
        self._quotas: dict[str, TenantQuota] = {q.tenant: q for q in quotas}
        self._tenants: dict[str, str] = dict(namespace_tenants or {})
        self._generation = 0

    def put(self, quota: TenantQuota) -> None:
        self._quotas[quota.tenant] = quota

    def remove(self, tenant: str) -> None:
        self._quotas.pop(tenant, None)

    def set_tenant(self, namespace: str, tenant: str) -> None:
        self._tenants[namespace] = tenant
        self._generation += 1

    @property
    def generation(self) -> int:
        return self._generation

    def tenant_of(self, namespace: str) -> str:
        return self._tenants.get(namespace, namespace)

    def quota(self, tenant: str) -> TenantQuota | None:
        return self._quotas.get(tenant)

    def quotas(self) -> Iterable[TenantQuota]:
        return tuple(self._quotas.values())


class _NoTenancy:
    """Every namespace its own tenant, no quotas (a cluster without the ElasticQuota CRD)."""

    def tenant_of(self, namespace: str) -> str:
        return namespace

    def quota(self, tenant: str) -> TenantQuota | None:
        return None

    def quotas(self) -> Iterable[TenantQuota]:
        return ()

    @property
    def generation(self) -> int:
        return 0


NO_TENANCY: TenancyPort = _NoTenancy()
