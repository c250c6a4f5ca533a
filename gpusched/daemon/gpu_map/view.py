"""What the GPU map shows, as plain data, and the rules that colour it.

Nothing here reads the daemon: collect.py fills these from it, render.py draws them, and
the unit tests build them by hand.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpusched.model.node import FULL_CARD_MILLI

# Card use, the cell's colour (docs/gpu-map.md names each).
FREE = "free"  # nothing holds the card
WHOLE = "whole"  # a whole-card pod holds it
SHARED = "shared"  # shares (gpusched.io/gpu-milli) hold part or all of it

# Temperature, the stripe on top of a cell. NO_DATA is never drawn as cool: a card without a
# fresh reading may be the hottest in the room.
NO_DATA = "nodata"
COOL = "cool"  # below the Thermal plugin's coolCelsius
WARM = "warm"  # between coolCelsius and the red line
HOT = "hot"  # at or above the red line (Thermal's redLineCelsius, 82 °C by default)


def card_use(used_milli: int, whole: bool) -> str:
    """A card's use class: WHOLE when a whole-card pod holds it, else SHARED when any
    share is taken, else FREE."""
    if whole:
        return WHOLE
    return SHARED if used_milli > 0 else FREE


def temperature_class(temp: float | None, red_line: float, cool: float) -> str:
    """HOT at or above `red_line`, WARM from `cool`, COOL below it; NO_DATA without a
    reading (None or NaN: telemetry off, stale, or the card never seen)."""
    if temp is None or math.isnan(temp):
        return NO_DATA
    if temp >= red_line:
        return HOT
    if temp >= cool:
        return WARM
    return COOL


@dataclass(frozen=True, slots=True)
class CardView:
    index: int
    model: str
    used_milli: int  # 0..1000 (more only on an over-committed card)
    whole: bool = False  # held by a whole-card pod
    healthy: bool = True  # may be given out (the node's inventory and telemetry agree)
    temp: float | None = None  # °C, None: no fresh reading
    pods: tuple[str, ...] = ()  # "namespace/name" of the pods holding it
    # FREE, WHOLE or SHARED (card_use): derived, a field so that map.json carries it.
    use: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "use", card_use(self.used_milli, self.whole))

    @property
    def share(self) -> float:
        """The used fraction of the card, clamped to [0, 1] for drawing."""
        return min(max(self.used_milli / FULL_CARD_MILLI, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    rack: str = ""
    cards: tuple[CardView, ...] = ()
    temp: float | None = None  # the hottest fresh card, None: no data
    cordoned: bool = False


@dataclass(frozen=True, slots=True)
class PendingView:
    pod: str  # "namespace/name"
    queue: str  # active, backoff, unschedulable, gated, inflight
    request: str  # "2 GPUs", "250m of a GPU", "no GPU"
    reason: str = ""  # Unschedulable, SchedulerError, Gated; "" before a first attempt
    message: str = ""  # the FailedScheduling message (or the gate's)
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class GangView:
    key: str  # "namespace/name"
    api: str
    min_member: int
    placed: int = 0  # assumed or bound, not Running yet
    running: int = 0
    pending: int = 0
    finished: int = 0  # succeeded + failed
    reason: str = ""
    message: str = ""  # the latest failed member attempt's message
    problem: str = ""  # why the PodGroup object cannot be used

    @property
    def bound(self) -> int:
        return self.placed + self.running


@dataclass(frozen=True, slots=True)
class QuotaRow:
    resource: str
    used: int  # in model/quota.py's units (milli-GPU, MiB, milli-CPU, bytes, pods)
    min: int | None = None  # None: not set
    max: int | None = None


@dataclass(frozen=True, slots=True)
class QuotaView:
    key: str  # the ElasticQuota's "namespace/name"
    tenant: str
    rows: tuple[QuotaRow, ...] = ()
    problem: str = ""


@dataclass(frozen=True, slots=True)
class MapData:
    nodes: tuple[NodeView, ...] = ()
    pending: tuple[PendingView, ...] = ()  # the first MAX_PENDING_SHOWN
    pending_total: int = 0
    pending_by_reason: Mapping[str, int] = field(default_factory=dict)
    gangs: tuple[GangView, ...] = ()
    quotas: tuple[QuotaView, ...] = ()
    red_line: float = 82.0
    cool: float = 75.0
    telemetry: bool = False  # a Prometheus URL is configured
    leading: bool = False  # this replica schedules (a standby's map is its own cache's)
    generated_at: float = 0.0  # unix seconds
    page: int = 0  # pages of MapPage.nodes_per_page nodes (render.py)
    pages: int = 1
    nodes_total: int = 0


def by_reason(pending: Iterable[PendingView]) -> dict[str, int]:
    """Pending pods per reason ("" for those not attempted yet)."""
    return dict(Counter(p.reason for p in pending))
