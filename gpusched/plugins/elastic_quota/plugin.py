"""ElasticQuota (PreFilter): a tenant's pods stay within its ElasticQuota.

    max            the tenant's placed pods (bound or assumed, not finished) plus this
                   pod never use more of a resource the max names than the max says;
                   Unschedulable (the tenant's own pods leaving, or a lower-priority one
                   preempted, lifts it)
    gangs          a member of a gang whose minimum is not placed yet is charged with all
                   its live unplaced members: the gang is admitted only if it all fits
                   (a gang admitted member by member could fill the quota half-way and
                   hold it while waiting for members that can never come)
    problem        an ElasticQuota that cannot be used (malformed, min above max, two for
                   one tenant) refuses its tenant's pods: UnschedulableAndUnresolvable,
                   with what is wrong (until the object is fixed)
    preemptible    a pod with gpusched.io/preemptible: "false" is never evicted, so it may
                   not borrow: it is admitted only while its tenant stays within its
                   (effective) guarantee of every resource some tenant's min guarantees;
                   otherwise reclaim could not give the owners back their guarantee. With
                   no min anywhere nothing is ever reclaimed, and the rule is off.

The tenant and its quota come from Handle.tenancy (Namespace labels and ElasticQuota
objects: framework/tenancy.py), the usage from Handle.tenant_usage (the cache's index).
A tenant without an ElasticQuota is not limited. The quota arithmetic is shared with the
preemption plugin (plugins/helper/quota.py).

Requeue: a refused pod comes back when a placed pod of its tenant is deleted or finishes,
when an ElasticQuota or a Namespace's tenant changes, or when the cluster's capacity grows
(core/queue/hints.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, PreFilterResult
from gpusched.framework.status import SUCCESS, Status, unresolvable, unschedulable
from gpusched.framework.tenancy import TenantQuota
from gpusched.model import keys, quota
from gpusched.model.pod import GangAPI, PodInfo
from gpusched.model.quota import Limits, Usage
from gpusched.plugins.helper.quota import QuotaState

NAME = "ElasticQuota"
_PODS = quota.INDEX[quota.PODS]


class ElasticQuota:
    name: ClassVar[str] = NAME

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        tenancy = self.handle.tenancy
        tenant = tenancy.tenant_of(pod.namespace)
        q = tenancy.quota(tenant)
        if q is None and pod.preemptible:
            return None, SUCCESS  # the common case: no ElasticQuota, nothing to count
        if q is not None and q.problem:
            return None, unresolvable(f"{keys_of(q)}: {q.problem}")
        charge, who = self._charge(pod)
        used = self.handle.tenant_usage(tenant)
        after = quota.add(used, charge)
        if q is not None:
            over = _over(after, used, charge, q.max, "max", who)
            if over:
                return None, unschedulable(f"{keys_of(q)}: {'; '.join(over)}")
        if not pod.preemptible:
            return None, self._within_guarantee(tenant, q, used, charge, after, who)
        return None, SUCCESS

    # -- what the pod (or its gang) adds ----------------------------------------------------

    def _charge(self, pod: PodInfo) -> tuple[Usage, str]:
        """What placing the pod adds to its tenant's usage, and how a message names it: the
        pod alone, or every live unplaced member of its gang while the gang's minimum is
        not placed."""
        own = quota.usage_of(pod.request)
        minimum = self._gang_minimum(pod)
        if minimum <= 1 or pod.gang is None:
            return own, "this pod"
        members = self.handle.gang_members(pod.gang.name)
        placed = sum(1 for _, node in members if node)
        if placed >= minimum:
            return own, "this pod"
        total = own
        count = 1
        for member, node in members:
            if not node and member.uid != pod.uid and not member.deleting:
                total = quota.add(total, quota.usage_of(member.request))
                count += 1
        return total, f"gang {pod.gang.name}'s {count} unplaced pod" + ("" if count == 1 else "s")

    def _gang_minimum(self, pod: PodInfo) -> int:
        g = pod.gang
        if g is None:
            return 0
        if g.api is GangAPI.ANNOTATIONS:
            return g.min_member
        spec = self.handle.gangs.pod_group(g.api, g.name)
        if spec is None or spec.problem or not spec.gang:
            # GangScheduling holds or refuses such a pod; alone it adds only itself.
            return 0
        return spec.min_member

    # -- the non-preemptible rule -----------------------------------------------------------

    def _within_guarantee(
        self,
        tenant: str,
        q: TenantQuota | None,
        used: Usage,
        charge: Usage,
        after: Usage,
        who: str,
    ) -> Status:
        quotas = [x for x in self.handle.tenancy.quotas() if not x.problem]
        guaranteed = [
            i
            for i in range(len(quota.RESOURCES))
            if any((x.min[i] or 0) > 0 for x in quotas) and charge[i] > 0
        ]
        if not guaranteed:
            return SUCCESS  # nothing it asks for is ever reclaimed: it borrows nothing
        qs = QuotaState.of(self.handle)
        mins = qs.min_of(tenant)
        limits: list[int | None] = [None] * len(quota.RESOURCES)
        for i in guaranteed:
            limits[i] = mins[i] or 0
        over = _over(after, used, charge, tuple(limits), "guaranteed min", who)
        if not over:
            return SUCCESS
        head = (
            f'{keys_of(q)}: a pod with {keys.PREEMPTIBLE}: "false" is never preempted, so it'
            " may only use its tenant's guaranteed minimum"
            if q is not None
            else f"tenant {tenant!r} has no ElasticQuota, so no guaranteed minimum, and a pod"
            f' with {keys.PREEMPTIBLE}: "false" is never preempted, so it may not borrow'
        )
        scaled = [
            quota.RESOURCES[i]
            for i in guaranteed
            if q is not None and q.min[i] is not None and (mins[i] or 0) < (q.min[i] or 0)
        ]
        tail = (
            f" (the mins of {', '.join(scaled)} are scaled down in proportion: the"
            " ElasticQuotas' mins add up to more than the cluster has)"
            if scaled
            else ""
        )
        return unschedulable(f"{head}: {'; '.join(over)}{tail}")


def keys_of(q: TenantQuota | None) -> str:
    return f"ElasticQuota {q.key}" if q is not None else "ElasticQuota"


def _over(
    after: Sequence[int],
    used: Sequence[int],
    charge: Sequence[int],
    limits: Limits,
    what: str,
    who: str,
) -> list[str]:
    """Each resource the charge asks for whose usage would pass its limit, in words."""
    out = []
    for i, (a, u, c, lim) in enumerate(zip(after, used, charge, limits, strict=True)):
        if lim is None or c <= 0 or a <= lim:
            continue
        name = quota.RESOURCES[i]
        out.append(
            f"{name} would be {quota.describe(name, a)}, {what} {quota.describe(name, lim)}"
            f" (used {quota.describe(name, u)}, {who} {quota.describe(name, c)})"
        )
    return out
