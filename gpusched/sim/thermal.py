"""A node thermal model for the simulator (documented in the README).

    temperature = rack ambient + idle rise + load rise x GPU utilisation + node offset

GPU utilisation is the node's allocated share of its cards (0-1): a busy card heats its
node. A normal rack's ambient is 25 °C and a hot-aisle rack's 31 °C; idle adds 10 °C and
full load 40 °C, so a full node reaches about 75 °C in a normal rack and about 81 °C in a
hot one, where a badly placed node crosses the 82 °C throttling red line. Each node has a
fixed offset (airflow, position in the rack), normal with sd 2 °C. CPU nodes report no
GPU temperature (NaN).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpusched.core.cache.snapshot import Snapshot
from gpusched.model.node import FULL_CARD_MILLI

NORMAL_AMBIENT_C = 25.0
HOT_AMBIENT_C = 31.0
IDLE_RISE_C = 10.0
LOAD_RISE_C = 40.0


class ThermalModel:
    def __init__(self, snapshot: Snapshot, base: Mapping[str, float]) -> None:
        """`base`: per-node temperature at idle (ambient + idle rise + offset)."""
        self.snapshot = snapshot
        self.base = {
            snapshot.row_of(name): t for name, t in base.items() if snapshot.row_of(name) >= 0
        }
        for row in self.base:
            self.update(row)

    def update(self, row: int) -> None:
        snap = self.snapshot
        cards = int(snap.node_card_count[row])
        if cards == 0 or row not in self.base:
            return
        used = cards * FULL_CARD_MILLI - int(snap.card_free_milli[row, :cards].sum())
        util = used / (cards * FULL_CARD_MILLI)
        snap.set_temperature(row, self.base[row] + LOAD_RISE_C * util)
