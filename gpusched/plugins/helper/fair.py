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

from collections.abc import Collection, Sequence

from gpusched.framework.interfaces import Handle
from gpusched.model import quota
from gpusched.model.quota import Limits
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


def tenant_shares(handle: Handle, tenants: Collection[str]) -> dict[str, float]:
    """The current share of each of `tenants`: one capacity pass, one usage read each."""
    cap = capacity(handle)
    mins = effective_mins([q for q in handle.tenancy.quotas() if not q.problem], cap)
    return {t: dominant_share(handle.tenant_usage(t), mins.get(t), cap) for t in tenants}
