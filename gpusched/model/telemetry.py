"""One card's live readings, as the telemetry reader (gpusched/telemetry) or the simulator's
sampled heat model delivers them: what the ingestion turns into snapshot columns.

A reading names its card the way dcgm-exporter does: the host label, the NVML index (`gpu`
label) and the UUID. Which node and card slot it belongs to is decided at ingestion (by
UUID through the node's inventory first, then host + index). A value the source did not
give is NaN; nothing here is ever read as "cold".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NAN = math.nan
NO_XID = 0  # DCGM's "no XID since the GPU was reset"
# The XID was not read (its query failed, or the exporter does not export it): says nothing
# about the card's health either way, so it neither marks a card sick nor clears it.
XID_UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class CardReading:
    host: str  # the exporter's host label ("" when absent)
    gpu: int  # NVML index (-1 when absent)
    uuid: str  # "GPU-..." ("" when absent)
    # When the values were sampled (wall clock, seconds): Prometheus' sample time, not when
    # we asked, so a dead exporter's last values age and go stale.
    at: float
    gpu_temp: float = NAN  # °C
    memory_temp: float = NAN  # °C (HBM)
    power_w: float = NAN  # draw
    power_limit_w: float = NAN  # enforced limit
    util_pct: float = NAN  # 0-100
    fb_used_mib: float = NAN
    fb_free_mib: float = NAN
    xid: int = NO_XID  # the last XID DCGM saw on the card (0: none; XID_UNKNOWN: not read)
