"""Thermal plugin arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ThermalArgs:
    # The temperature at which data-centre GPUs start to throttle clocks.
    red_line_celsius: float = 82.0
    # Below this a node is as good as cold. The seed article ramps from 50 °C; measured in
    # the simulator that ramp spreads load like LeastAllocated (-5 to -9 points of GPU
    # allocation, -10 to -20 points of 8-card job success), so the default only ramps over
    # the last degrees before the red line, where it buys thermal headroom (README).
    cool_celsius: float = 75.0
    # Pods asking for at least this much GPU (milli) count as heavy work and are kept off
    # nodes at the red line; CPU pods are not.
    heavy_min_gpu_milli: int = 1
    # How much a node warms from idle to all cards busy: a node is judged by the
    # temperature it will reach with the pod (now + this x the pod's share of the node's
    # cards), not the one it has now, so a cool node is not pushed over the line.
    full_load_rise_celsius: float = 40.0
    # A node whose hottest card reached the red line takes no heavy work until that card
    # reads below redLine - this. 5 °C: above the step-to-step swing of a busy card
    # (DCGM reports whole degrees; a synchronous job's cards move 2-3 °C between compute
    # and communication phases), so a node hovering at the line does not flap in and out;
    # and the warming of one card's worth of work on an 8-card node (40 °C / 8), so a
    # node just released can take one more card without being projected back over the line.
    hysteresis_celsius: float = 5.0

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if not 0 < self.red_line_celsius < 150:
            errors.append(("redLineCelsius", f"must be in (0, 150), got {self.red_line_celsius}"))
        if not self.cool_celsius < self.red_line_celsius:
            errors.append(
                (
                    "coolCelsius",
                    f"must be < redLineCelsius ({self.red_line_celsius}), got {self.cool_celsius}",
                )
            )
        if self.heavy_min_gpu_milli < 0:
            errors.append(("heavyMinGpuMilli", f"must be >= 0, got {self.heavy_min_gpu_milli}"))
        if not 0 <= self.full_load_rise_celsius <= 100:
            errors.append(
                ("fullLoadRiseCelsius", f"must be in [0, 100], got {self.full_load_rise_celsius}")
            )
        if not 0 <= self.hysteresis_celsius <= 30:
            errors.append(
                ("hysteresisCelsius", f"must be in [0, 30], got {self.hysteresis_celsius}")
            )
        return errors
