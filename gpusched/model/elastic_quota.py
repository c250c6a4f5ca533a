"""An ElasticQuota object (scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`) as gpusched
reads it, and the rule that makes one TenantQuota per tenant out of them.

* `elastic_quota_from_k8s` never raises: a malformed object gives a spec whose `problem`
  names every fault (a quantity that does not parse, a resource name gpusched does not
  count, a negative amount, `min` above `max`), and the tenant's pods are refused with it:
  ignoring a misspelt limit would let the tenant past the ceiling its admin believes is
  set.
* `tenant_quotas` groups the specs by tenant (the Namespace's `gpusched.io/tenant` label,
  else the namespace: framework/tenancy.py); two or more for one tenant give a quota whose
  `problem` names them all (choosing one would enforce the limit the admin meant to
  remove, or drop the one they meant to add).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.model import quota
from gpusched.model.quota import UNLIMITED, Limits

KIND = "ElasticQuota"


@dataclass(frozen=True, slots=True)
class ElasticQuotaSpec:
    namespace: str
    name: str
    uid: str = ""
    min: Limits = UNLIMITED
    max: Limits = UNLIMITED
    problem: str = ""
    # The resources the object names in min or max (status.used reports these).
    named: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def elastic_quota_from_k8s(obj: Mapping[str, Any]) -> ElasticQuotaSpec:
    """One ElasticQuota object; never raises (`problem` says what is wrong)."""
    meta = _dict(obj.get("metadata"))
    problems: list[str] = []
    raw_spec = obj.get("spec")
    if raw_spec is not None and not isinstance(raw_spec, Mapping):
        problems.append("spec is not an object")
    spec = _dict(raw_spec)
    mins = quota.parse_resource_list(spec.get("min"), "spec.min", problems)
    maxes = quota.parse_resource_list(spec.get("max"), "spec.max", problems)
    for name, lo, hi in zip(quota.RESOURCES, mins, maxes, strict=True):
        if lo is not None and hi is not None and lo > hi:
            problems.append(
                f"spec.min[{name!r}] ({quota.describe(name, lo)}) is above spec.max"
                f" ({quota.describe(name, hi)})"
            )
    named = tuple(
        name
        for name, lo, hi in zip(quota.RESOURCES, mins, maxes, strict=True)
        if lo is not None or hi is not None
    )
    return ElasticQuotaSpec(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        min=mins,
        max=maxes,
        problem="; ".join(problems),
        named=named,
    )


def tenant_quotas(
    specs: Iterable[ElasticQuotaSpec], tenant_of: Callable[[str], str]
) -> dict[str, tuple[ElasticQuotaSpec, ...]]:
    """The specs of each tenant that has any, sorted by key (so a problem naming several
    reads the same every time)."""
    out: dict[str, list[ElasticQuotaSpec]] = {}
    for spec in specs:
        out.setdefault(tenant_of(spec.namespace), []).append(spec)
    return {t: tuple(sorted(group, key=lambda s: s.key)) for t, group in out.items()}


def duplicate_problem(tenant: str, specs: Iterable[ElasticQuotaSpec]) -> str:
    keys = [s.key for s in specs]
    return (
        f"tenant {tenant!r} has {len(keys)} {KIND}s ({', '.join(keys)}): a tenant has one;"
        " delete all but one"
    )
