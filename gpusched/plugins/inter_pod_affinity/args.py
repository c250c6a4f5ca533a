"""InterPodAffinityArgs: kube-scheduler's InterPodAffinityArgs (config/v1)."""

from __future__ import annotations

from dataclasses import dataclass

MIN_HARD_POD_AFFINITY_WEIGHT = 0
MAX_HARD_POD_AFFINITY_WEIGHT = 100


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    # The score weight of an existing pod's *required* affinity term that the incoming pod
    # matches (kube-scheduler's default 1; 0 turns it off).
    hard_pod_affinity_weight: int = 1
    # Score only by the incoming pod's own preferred terms: existing pods' preferred
    # (anti-)affinity toward it is not read (and PreScore skips pods without terms).
    ignore_preferred_terms_of_existing_pods: bool = False

    def validate(self) -> list[tuple[str, str]]:
        w = self.hard_pod_affinity_weight
        if not MIN_HARD_POD_AFFINITY_WEIGHT <= w <= MAX_HARD_POD_AFFINITY_WEIGHT:
            return [
                (
                    "hardPodAffinityWeight",
                    f"Invalid value: {w}: not in valid range"
                    f" [{MIN_HARD_POD_AFFINITY_WEIGHT}-{MAX_HARD_POD_AFFINITY_WEIGHT}]",
                )
            ]
        return []
