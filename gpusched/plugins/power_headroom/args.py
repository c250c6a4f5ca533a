"""PowerHeadroom plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PowerHeadroomArgs:
    # A node with at least this fraction of its cards' power limit left scores 100, one
    # with none left 0, linear between. Power draw follows GPU load, so a ramp over the
    # whole range would spread work like LeastAllocated (what Thermal's 50 °C ramp cost:
    # its README); 0.25 separates only the nodes running close to their cap.
    ample_headroom_fraction: float = 0.25

    def validate(self) -> list[tuple[str, str]]:
        if not 0.0 < self.ample_headroom_fraction <= 1.0:
            return [
                (
                    "ampleHeadroomFraction",
                    f"must be in (0, 1], got {self.ample_headroom_fraction}",
                )
            ]
        return []
