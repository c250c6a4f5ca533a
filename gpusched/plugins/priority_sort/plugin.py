"""PrioritySort (QueueSort): higher priority first, then the older pod; across tenants,
the lower dominant resource share first among equal priorities (TenantFairSort)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import ClassVar

from gpusched.framework.interfaces import Handle
from gpusched.model.pod import PodInfo
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.fair import TenantShares
from gpusched.plugins.priority_sort.args import PrioritySortArgs


class PrioritySort:
    """kube-scheduler's PrioritySort: spec.priority descending, then the queue timestamp
    ascending. We order by the pod's creation time (the queue does not stamp pods), and
    break a remaining tie by namespace/name so two runs of the simulator pop pods in the
    same order."""

    name: ClassVar[str] = "PrioritySort"
    Args: ClassVar[type[PrioritySortArgs]] = PrioritySortArgs

    def __init__(self, args: PrioritySortArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, PrioritySortArgs)
        self.handle = handle
        self._shares = TenantShares(handle)

    def tenant_of(self, pod: PodInfo) -> str:
        if not self.args.tenant_fairness:
            return ""
        return self.handle.tenancy.tenant_of(pod.namespace)

    def shares(self, tenants: Collection[str]) -> Mapping[str, float]:
        return self._shares(tenants)

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        if a.priority != b.priority:
            return a.priority > b.priority
        if a.created != b.created:
            return a.created < b.created
        return (a.namespace, a.name) < (b.namespace, b.name)
