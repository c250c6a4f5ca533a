"""TenantLoad plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TenantLoadArgs:
    # The share of a node's GPUs the pod's tenant may hold before the node scores lower,
    # at least (the tenant's share of all GPUs in use is allowed anyway): 0.5 lets a
    # tenant fill half of any node for free.
    free_share: float = 0.0

    def validate(self) -> list[tuple[str, str]]:
        if not 0.0 <= self.free_share < 1.0:
            return [("freeShare", f"must be in [0, 1), got {self.free_share}")]
        return []
