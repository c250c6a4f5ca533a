"""Dominant resource shares (DRF) of tenants: the fair queue order's key.

A tenant's share is the largest fraction, over resources, of what it uses against what it
is entitled to:

* a tenant with an ElasticQuota: its usage against its (effective) `min`, over the
  resources the min names (quota.py `effective_mins`): 1.0 means "exactly at its
  guarantee"; a resource guaranteed at 0 that it uses makes the share infinite (it is
  borrowing all of it);
* a tenant without one (no guarantee, e.g. every namespace when no ElasticQuota exists):
  classic DRF, its usage against the cluster's capacity, over GPUs, GPU memory, cpu and
  memory (not the pod count). Among tenants without quotas the order is then exactly DRF;
  next to guaranteed tenants, such a tenant counts as if guaranteed the whole cluster.

Lower share pops first, so the tenant furthest below its entitlement is served next.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpusched.framework.interfaces import Handle
from gpusched.framework.tenancy import TenantQuota
from gpusched.model import quota
from gpusched.model.quota import Limits, Usage
from gpusched.plugins.helper.quota import capacity, effective_mins

_DRF = tuple(quota.INDEX[r] for r in (quota.GPU, quota.GPU_MEMORY, quota.CPU, quota.MEMORY))


def dominant_share(used: Sequence[int], mins: Limits | None, cap: Sequence[int]) -> float:
    """One tenant's share (module docstring): `mins` None when it has no quota."""
    if mins is None:
        return max((used[i] / cap[i] for i in _DRF if cap[i] > 0), default=0.0)
    share = 0.0
    for u, m in zip(used, mins, strict=True):
        if m is None or u <= 0:
            continue
        share = max(share, u / m if m > 0 else float("inf"))
    return share


class TenantShares:
    """The shares a QueueSort plugin hands the queue at each pop (TenantFairSort.shares).

    A pop must cost O(tenants): the usage of every tenant comes from one pass over the
    cache's per-namespace sums (Handle.tenant_usages), and the cluster's capacity is
    recomputed only when nodes join or leave (the snapshot's membership stamp; a node whose
    allocatable changes in place is seen at the next join or leave: it only shifts the
    order, never what is admitted)."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self._cap: tuple[int, Usage] | None = None
        # The guarantees change only with the ElasticQuotas (or the capacity): kept until
        # the port's quotas compare different.
        self._mins: tuple[Usage, tuple[TenantQuota, ...], Mapping[str, Limits]] | None = None

    def capacity(self) -> Usage:
        stamp = self.handle.snapshot.membership
        if self._cap is None or self._cap[0] != stamp:
            self._cap = (stamp, capacity(self.handle))
        return self._cap[1]

    def __call__(self, tenants: Collection[str]) -> dict[str, float]:
        cap = self.capacity()
        quotas = tuple(self.handle.tenancy.quotas())
        if self._mins is None or self._mins[0] != cap or self._mins[1] != quotas:
            usable = [q for q in quotas if not q.problem]
            self._mins = (cap, quotas, effective_mins(usable, cap))
        mins = self._mins[2]
        used = self.handle.tenant_usages()
        return {t: dominant_share(used.get(t, quota.ZERO), mins.get(t), cap) for t in tenants}
