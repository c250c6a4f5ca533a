"""GPUFit on live telemetry: cards the ingestion found sick (hardware XID, memory over its
temperature limit) are not given out, through the summary cache that was warm before they
fell sick; cool cards first, and the same cards as before without telemetry."""

from __future__ import annotations

from gpusched.config.settings import Telemetry
from gpusched.core.schedule_one import Decision, Result
from gpusched.model.telemetry import CardReading
from gpusched.sim.engine import Simulation
from gpusched.telemetry.ingest import TelemetryIngest
from tests.builders import ai_pod, ai_sim, gpu_node

NOW = 1000.0


def _ingest(s: Simulation, readings: list[CardReading], now: float = NOW) -> None:
    TelemetryIngest(s.snapshot, Telemetry()).apply(readings, now=now)


def _cards(d: Decision) -> tuple[int, ...]:
    assert d.alloc is not None, d.message
    return d.alloc.cards


def _reading(node: str, card: int, at: float = NOW, **kw: float) -> CardReading:
    return CardReading(node, card, "", at, **kw)  # type: ignore[arg-type]


def test_sick_cards_are_not_given_out_even_with_a_warm_summary_cache() -> None:
    s = ai_sim(gpu_node("n", cards=4, island=4))
    # Warm GPUFit's summary cache for the 2-card shape: the node fits.
    assert _cards(s.submit(ai_pod("first", gpu_cards=2))) == (0, 1)
    ingest = TelemetryIngest(s.snapshot, Telemetry())
    # Card 2: XID 79 (fell off the bus); card 3: HBM at 97 °C (limit 95).
    ingest.apply(
        [_reading("n", 2, xid=79), _reading("n", 3, memory_temp=97.0, gpu_temp=70.0)], now=NOW
    )
    d = s.submit(ai_pod("second", gpu_cards=2))
    assert d.result is Result.UNSCHEDULABLE
    assert d.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    d = s.submit(ai_pod("share", gpu_milli=500))
    assert d.result is Result.UNSCHEDULABLE
    # The memory cools below limit - margin (90 °C): card 3 is back; card 2 stays sick.
    later = NOW + 15
    ingest.apply([_reading("n", 3, later, memory_temp=89.0, gpu_temp=60.0)], now=later)
    assert _cards(s.submit(ai_pod("third", gpu_cards=1))) == (3,)


def test_whole_card_pod_gets_the_coolest_cards() -> None:
    s = ai_sim(gpu_node("n", cards=8, island=8))
    # Cool enough that Thermal lets 3 cards' worth of work in (66 + 40 x 3/8 < 82 °C).
    temps = [61.0, 45.0, 66.0, 42.0, 56.0, 40.0, 64.0, 50.0]
    _ingest(s, [_reading("n", i, gpu_temp=t) for i, t in enumerate(temps)])
    assert _cards(s.submit(ai_pod("job", gpu_cards=3))) == (1, 3, 5)
    # A card without a reading counts as the median of the known ones (neither cold nor
    # hot): cards 1 and 3 unread, the median of {61, 66, 56, 40, 64, 50} is 58.5, so they
    # rank after the 56 °C card and before the 61 °C one.
    s2 = ai_sim(gpu_node("n", cards=8, island=8))
    _ingest(s2, [_reading("n", i, gpu_temp=t) for i, t in enumerate(temps) if i not in (1, 3)])
    assert _cards(s2.submit(ai_pod("job", gpu_cards=3))) == (4, 5, 7)
    assert _cards(s2.submit(ai_pod("job2", gpu_cards=3))) == (0, 1, 3)


def test_without_telemetry_the_cards_are_the_lowest_index_ones() -> None:
    s = ai_sim(gpu_node("n", cards=8, island=8))
    assert _cards(s.submit(ai_pod("job", gpu_cards=3))) == (0, 1, 2)
