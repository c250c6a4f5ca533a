"""DynamicResources plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass

from gpusched.dra.allocator import DEFAULT_TIMEOUT_SECONDS
from gpusched.dra.cards import CARD_CLASSES


@dataclass(frozen=True, slots=True)
class DynamicResourcesArgs:
    # How long the allocator may search one node for one pod (kube-scheduler's
    # DynamicResourcesArgs.filterTimeout, DRASchedulerFilterTimeout: 10 s by default); a
    # node that takes longer is refused with "timed out trying to allocate devices".
    filter_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    # DeviceClasses whose requests are whole cards or a share of one card (dra/cards.py):
    # the card plugins (GPUFit, GPUFragmentation) place them as they place GPU pods. Name
    # only classes that select full GPUs (NVIDIA's `gpu.nvidia.com` selects type == 'gpu').
    card_classes: tuple[str, ...] = CARD_CLASSES

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if not 0 < self.filter_timeout_seconds <= 300:
            errors.append(
                (
                    "filterTimeoutSeconds",
                    f"must be in (0, 300], got {self.filter_timeout_seconds}",
                )
            )
        if any(not c for c in self.card_classes):
            errors.append(("cardClasses", "must not contain an empty name"))
        return errors
