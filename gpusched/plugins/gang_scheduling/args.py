"""GangScheduling plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GangSchedulingArgs:
    # How long a gang's placed members wait at Permit for the rest when the PodGroup sets
    # no scheduleTimeoutSeconds (and for annotation gangs): kube-scheduler 1.36's
    # GangScheduling waits 5 minutes.
    default_timeout_seconds: float = 300.0
    # A gang refused for capacity this long starts reserving nodes (the starvation bound):
    # from then on no other pod is placed on the nodes it reserved, so a stream of small
    # pods cannot keep it out forever. Only the longest-starved gang reserves at a time.
    starvation_seconds: float = 120.0
    # Equal-priority gangs of different tenants leave the queue by the tenants' dominant
    # resource shares (plugins/helper/fair.py); false: blind to tenants.
    tenant_fairness: bool = True

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if not 0 < self.default_timeout_seconds <= 86400:
            errors.append(
                (
                    "defaultTimeoutSeconds",
                    f"must be in (0, 86400], got {self.default_timeout_seconds}",
                )
            )
        if not 0 <= self.starvation_seconds <= 86400:
            errors.append(
                ("starvationSeconds", f"must be in [0, 86400], got {self.starvation_seconds}")
            )
        return errors
