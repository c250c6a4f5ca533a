"""Thermal: no new heavy GPU work on a node at its throttling red line (Filter), and a
preference for cool nodes (Score), from the snapshot's `node_temp` column.

A node without temperature data (NaN) passes the filter and scores neutral (50): missing
telemetry is reported by the telemetry reader, never taken as "cold".
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import FilterResult, Handle, Mask, Rows, Scores
from gpusched.kernels import (
    thermal_filter_nb,
    thermal_filter_np,
    thermal_score_nb,
    thermal_score_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import PodInfo
from gpusched.plugins.thermal.args import ThermalArgs

thermal_filter = pick(thermal_filter_nb, thermal_filter_np)
thermal_score = pick(thermal_score_nb, thermal_score_np)


class Thermal:
    name: ClassVar[str] = "Thermal"
    Args: ClassVar[type[ThermalArgs]] = ThermalArgs

    def __init__(self, args: ThermalArgs | None, handle: Handle) -> None:
        self.args = args or ThermalArgs()
        self.handle = handle
        self.reason = (
            f"node(s) at or above the thermal red line ({self.args.red_line_celsius:g} °C)"
        )

    def _gpus(self, pod: PodInfo, rows: Rows | slice) -> NDArray[np.float32]:
        """Cards' worth of GPU the pod takes on each node."""
        snap = self.handle.snapshot
        req = pod.request
        gpus = np.full(len(snap.node_card_count[rows]), req.gpu_milli_total / 1000.0, np.float32)
        if req.gpu_cards == 0 and req.gpu_mem_mib:
            # A memory request takes the matching share of compute on that node's cards.
            card_mem = snap.card_total_mem[rows, 0].astype(np.float32)
            by_mem = np.divide(
                np.float32(req.gpu_mem_mib),
                card_mem,
                out=np.ones_like(card_mem),
                where=card_mem > 0,
            )
            gpus = np.maximum(gpus, by_mem)
        return gpus

    def _projected(
        self, pod: PodInfo, rows: Rows | slice, gpus: NDArray[np.float32] | None = None
    ) -> NDArray[np.float32]:
        """Temperature each node would reach with the pod (NaN stays NaN)."""
        snap = self.handle.snapshot
        temp = snap.node_temp[rows]
        cards = snap.node_card_count[rows].astype(np.float32)
        if gpus is None:
            gpus = self._gpus(pod, rows)
        # Pods placed but not yet seen bound (a gang's members waiting at Permit, bindings
        # in flight) heat the node too once they start, though no temperature shows them
        # yet: without them every member of a gang would be judged alone.
        pending = self._pending_gpus(len(snap.node_valid))
        if pending is not None:
            gpus = gpus + pending[rows]
        share = np.divide(gpus, cards, out=np.zeros_like(cards), where=cards > 0)
        rise = np.float32(self.args.full_load_rise_celsius) * np.minimum(share, np.float32(1.0))
        return (temp + rise).astype(np.float32)

    def _pending_gpus(self, n: int) -> NDArray[np.float32] | None:
        """Cards' worth of GPU per row held by assumed pods; None when there are none."""
        out: NDArray[np.float32] | None = None
        snap = self.handle.snapshot
        for pod, node in self.handle.assumed_pods():
            milli = pod.request.gpu_milli_total
            row = snap.row_of(node)
            if milli <= 0 or row < 0:
                continue
            if out is None:
                out = np.zeros(n, np.float32)
            out[row] += np.float32(milli / 1000.0)
        return out

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        req = pod.request
        heavy_min = max(1, self.args.heavy_min_gpu_milli)
        if req.gpu_milli_total < heavy_min and not (req.gpu_cards == 0 and req.gpu_mem_mib):
            return FilterResult(candidates)
        rows = slice(0, len(candidates))
        gpus = self._gpus(pod, rows)
        projected = self._projected(pod, rows, gpus)
        ok = np.empty(len(candidates), np.bool_)
        thermal_filter(candidates, projected, self.args.red_line_celsius, ok)
        if req.gpu_milli_total < heavy_min:
            # Heavy only through its GPU memory: as heavy as the card share it implies there.
            ok |= candidates & (gpus * np.float32(1000.0) < np.float32(heavy_min))
        return FilterResult(ok, (self.reason,))

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        out = np.empty(len(rows), np.float64)
        thermal_score(
            np.ones(len(rows), np.bool_),
            self._projected(pod, rows),
            self.args.cool_celsius,
            self.args.red_line_celsius,
            out,
        )
        return out
