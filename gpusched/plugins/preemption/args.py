"""Preemption plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass

LEAST_LOST_WORK = "LeastLostWork"
KUBE_DEFAULT = "KubeDefault"
RECLAIM_ANY = "Any"
RECLAIM_LOWER_PRIORITY = "LowerPriority"


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    # LeastLostWork: the victims whose eviction throws away the fewest GPU-hours since their
    # last checkpoint, gangs whole. KubeDefault: kube-scheduler DefaultPreemption's choice
    # (priority, PDB violations, count; gang-blind), kept for comparisons.
    strategy: str = LEAST_LOST_WORK
    # What a tenant within its guarantee may take back from tenants borrowing above theirs:
    # Any pod of theirs (the guarantee wins over priority), or only lower-priority pods.
    reclaim: str = RECLAIM_ANY
    # A pod that has run less than this is never a victim (against preemption thrash: a job
    # evicted before it checkpoints once makes no progress at all). Pods not started yet
    # have lost nothing and are not protected.
    min_run_seconds: float = 0.0
    # A preemptor's nomination keeps room on its node for it for this long at most (it is
    # dropped as soon as the pod is placed); a preemptor deleted meanwhile holds nothing
    # after it.
    nomination_timeout_seconds: float = 300.0

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if self.strategy not in (LEAST_LOST_WORK, KUBE_DEFAULT):
            errors.append(
                ("strategy", f"must be {LEAST_LOST_WORK} or {KUBE_DEFAULT}, got {self.strategy!r}")
            )
        if self.reclaim not in (RECLAIM_ANY, RECLAIM_LOWER_PRIORITY):
            errors.append(
                (
                    "reclaim",
                    f"must be {RECLAIM_ANY} or {RECLAIM_LOWER_PRIORITY}, got {self.reclaim!r}",
                )
            )
        if not 0 <= self.min_run_seconds <= 7 * 86400:
            errors.append(("minRunSeconds", f"must be in [0, 604800], got {self.min_run_seconds}"))
        if not 0 < self.nomination_timeout_seconds <= 86400:
            errors.append(
                (
                    "nominationTimeoutSeconds",
                    f"must be in (0, 86400], got {self.nomination_timeout_seconds}",
                )
            )
        return errors
