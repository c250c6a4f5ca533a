"""PrioritySort plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PrioritySortArgs:
    # Equal-priority pods of different tenants leave the queue by the tenants' dominant
    # resource shares (plugins/helper/fair.py); false: kube-scheduler's order, blind to
    # tenants.
    tenant_fairness: bool = True

    def validate(self) -> list[tuple[str, str]]:
        return []
