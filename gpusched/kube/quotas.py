"""The daemon's TenancyPort (framework/tenancy.py): a watch of ElasticQuotas and the
Namespaces' tenant labels. The only module that reads ElasticQuota objects.

* A tenant is the Namespace's `gpusched.io/tenant` label, else the namespace. The labels
  come from the daemon's Namespace watch (the one that feeds the cache's namespaceSelector
  labels): the daemon hands each Namespace to `set_namespace` / `remove_namespace`. A
  pod's own labels never count (a pod's owner could charge another team's quota).
* Every ElasticQuota of `scheduling.x-k8s.io/v1alpha1` is parsed once
  (model/elastic_quota.py; a malformed one carries a `problem`) and filed under its
  namespace's tenant; a tenant's TenantQuota is rebuilt only when a quota or a tenant
  label changes, so `quota(tenant)` is one dict lookup on the scheduling path.
* `on_change()` is called after every change that may change a tenant's quota or which
  namespaces a tenant has (the daemon requeues the pods ElasticQuota refused and
  republishes status.used).
* Without the CRD the list answers 404: the reflector logs it once and stops (kube/watch.py
  `optional`), /healthz does not count it, and every tenant is unlimited until a restart.

RBAC: get/list/watch `elasticquotas` (manifests/rbac/gpusched.yaml); the Namespace watch
is the daemon's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from gpusched.framework.tenancy import TenantQuota, tenant_from_labels
from gpusched.kube.client import JSON, Kube
from gpusched.kube.watch import Backoff, EventType, Reflector
from gpusched.model.elastic_quota import (
    ElasticQuotaSpec,
    duplicate_problem,
    elastic_quota_from_k8s,
    tenant_quotas,
)

GROUP = "scheduling.x-k8s.io"
VERSION = "v1alpha1"
PLURAL = "elasticquotas"
PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


def elastic_quota_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


def _decode(raw: JSON) -> ElasticQuotaSpec:
    return elastic_quota_from_k8s(raw)


class KubeQuotas:
    def __init__(
        self,
        kube: Kube,
        *,
        on_change: Callable[[], None] = lambda: None,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout: int = 60,
        read_timeout: float = 90.0,
    ) -> None:
        self.on_change = on_change
        self.specs: dict[str, ElasticQuotaSpec] = {}  # "namespace/name" -> spec
        # Namespaces whose label names a tenant other than themselves.
        self._tenant_of: dict[str, str] = {}
        self._generation = 0  # bumped when a namespace changes tenant (TenancyPort)
        self._by_tenant: dict[str, TenantQuota] = {}
        self._objects_of: dict[str, tuple[ElasticQuotaSpec, ...]] = {}
        self.watch: Reflector[ElasticQuotaSpec] = Reflector(
            kube,
            PATH,
            _decode,
            self._on_event,
            name=PLURAL,
            watch_timeout=watch_timeout,
            read_timeout=read_timeout,
            backoff=backoff(),
            optional=True,
        )

    @property
    def reflectors(self) -> tuple[Reflector[ElasticQuotaSpec], ...]:
        return (self.watch,)

    @property
    def served(self) -> bool:
        """False once the API server said it does not serve ElasticQuotas (no CRD)."""
        return not self.watch.unserved

    async def wait_synced(self) -> None:
        await self.watch.synced.wait()

    async def run(self) -> None:
        """The watch until cancelled; without the CRD it idles (never a dead watch)."""
        await self.watch.run()
        await asyncio.get_running_loop().create_future()

    # -- the Namespace side (the daemon's watch) ----------------------------------------------

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        tenant = tenant_from_labels(name, labels)
        before = self._tenant_of.get(name, name)
        if tenant == name:
            self._tenant_of.pop(name, None)
        else:
            self._tenant_of[name] = tenant
        if tenant != before:
            self._generation += 1
            self._rebuild()

    def remove_namespace(self, name: str) -> None:
        if self._tenant_of.pop(name, None) is not None:
            self._generation += 1
            self._rebuild()

    # -- TenancyPort ----------------------------------------------------------------------

    def tenant_of(self, namespace: str) -> str:
        return self._tenant_of.get(namespace, namespace)

    def quota(self, tenant: str) -> TenantQuota | None:
        return self._by_tenant.get(tenant)

    @property
    def generation(self) -> int:
        return self._generation

    def quotas(self) -> Iterable[TenantQuota]:
        return tuple(self._by_tenant.values())

    def objects_of(self, tenant: str) -> tuple[ElasticQuotaSpec, ...]:
        """Every ElasticQuota filed under the tenant (more than one is a problem)."""
        return self._objects_of.get(tenant, ())

    def tenants(self) -> Mapping[str, tuple[ElasticQuotaSpec, ...]]:
        return self._objects_of

    # -- the watch ------------------------------------------------------------------------

    def _on_event(self, kind: EventType, spec: ElasticQuotaSpec) -> None:
        if kind is EventType.DELETED:
            old = self.specs.get(spec.key)
            if old is None or (old.uid and spec.uid and old.uid != spec.uid):
                return  # a stale deletion of an object already replaced
            del self.specs[spec.key]
        else:
            if self.specs.get(spec.key) == spec:
                return  # a status write (ours) or a label: nothing the scheduler reads
            self.specs[spec.key] = spec
        self._rebuild()

    def _rebuild(self) -> None:
        self._objects_of = tenant_quotas(self.specs.values(), self.tenant_of)
        self._by_tenant = {t: _tenant_quota(t, group) for t, group in self._objects_of.items()}
        self.on_change()


def _tenant_quota(tenant: str, group: tuple[ElasticQuotaSpec, ...]) -> TenantQuota:
    first = group[0]
    if len(group) > 1:
        return TenantQuota(
            tenant, first.key, uid=first.uid, problem=duplicate_problem(tenant, group)
        )
    return TenantQuota(
        tenant,
        first.key,
        min=first.min,
        max=first.max,
        uid=first.uid,
        problem=first.problem,
    )
