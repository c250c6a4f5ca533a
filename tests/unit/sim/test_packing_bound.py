"""Packing bounds: exact knapsack, a valid LP lower bound, online best fit, and the bound
held against real simulator runs."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.plugins import default_registry
from gpusched.sim.fgd_protocol import run_seed
from gpusched.sim.packing_bound import (
    FIRST_SAMPLE_AT_100,
    arrivals,
    best_fit_waste,
    lp_bound,
    main,
    seed_bound,
)
from tests.builders import tiny_trace

TRACE = tiny_trace()
SIZES = st.sampled_from([50, 110, 160, 230, 320, 400, 470, 500, 650, 810])


def _min_cards(items: list[int]) -> int:
    """Exact bin packing by exhaustive search (tiny inputs only)."""
    best = len(items)

    def go(i: int, loads: list[int]) -> None:
        nonlocal best
        if len(loads) >= best:
            return
        if i == len(items):
            best = len(loads)
            return
        for j in range(len(loads)):
            if loads[j] + items[i] <= 1000:
                loads[j] += items[i]
                go(i + 1, loads)
                loads[j] -= items[i]
        go(i + 1, [*loads, items[i]])

    go(0, [])
    return best


@given(st.lists(SIZES, min_size=1, max_size=7))
@settings(max_examples=60, deadline=None)
def test_lp_bound_is_a_lower_bound_on_cards(items: list[int]) -> None:
    c = Counter(items)
    sizes = sorted(c)
    bound = lp_bound(sizes, [c[s] for s in sizes])
    optimum = _min_cards(sorted(items, reverse=True))
    assert sum(items) / 1000 - 1e-9 <= bound.lower_bound_bins <= optimum + 1e-9
    assert bound.lower_bound_bins <= bound.bins + 1e-6
    assert bound.waste_milli <= optimum * 1000 - sum(items) + 1e-6


def test_lp_bound_known_instances() -> None:
    # 810s cannot share a card with each other; the 160 fills one gap.
    b = lp_bound([160, 810], [1, 3])
    assert b.lower_bound_bins == pytest.approx(3.0)
    assert b.waste_milli == pytest.approx(3000 - 2590)
    # Three 400s: the LP takes 1.5 cards (two per card), the integer answer is 2.
    b = lp_bound([400], [3])
    assert b.lower_bound_bins == pytest.approx(1.5)
    assert lp_bound([], []).waste_milli == 0.0


def test_best_fit_waste_by_hand() -> None:
    # 600 opens card A (400 free); 300 -> A (100); 500 opens B (500); 100 -> A, the
    # tightest gap (0). Left: B's 500.
    assert best_fit_waste([600, 300, 500, 100]) == 500
    assert best_fit_waste([500, 500]) == 0
    assert best_fit_waste([]) == 0


@pytest.mark.parametrize("policy", ["FGD", "BestFit", "ai-scheduler"])
def test_real_runs_never_beat_the_bound(policy: str) -> None:
    """A run's idle GPU on cards holding shared pods, at the first 100 % sample, is at
    least the LP bound of the shared pods it had placed by then."""
    run = run_seed(TRACE, policy, 42, default_registry(), keep_placements=True)
    cut = int((run.arrived <= FIRST_SAMPLE_AT_100 * run.capacity).sum())
    assert 0 < cut < len(run.placements)
    load: dict[tuple[str, int], int] = defaultdict(int)
    shared_cards: set[tuple[str, int]] = set()
    placed_shared: list[int] = []
    for p in run.placements[:cut]:
        for card, milli in zip(p.gpu_ids, p.gpu_milli, strict=True):
            load[(p.node, card)] += milli
            if milli < 1000:
                shared_cards.add((p.node, card))
                placed_shared.append(milli)
    idle = sum(1000 - load[k] for k in shared_cards)
    c = Counter(placed_shared)
    sizes = sorted(c)
    assert idle >= lp_bound(sizes, [c[s] for s in sizes]).waste_milli - 1e-6


def test_seed_bound_orders_its_numbers() -> None:
    a = arrivals(TRACE.pods, TRACE.nodes, 42)
    assert sum(m * n for m, n in a.pods) <= FIRST_SAMPLE_AT_100 * a.capacity
    assert list(a.shared) == [m for m, n in a.pods if n == 1 and m < 1000]
    b = seed_bound(a, 42)
    # Dropping pods can only lower the bound; online best fit cannot beat the LP.
    assert b.drop_pct <= b.lp_pct + 1e-9
    assert b.best_fit_pct >= b.lp_pct - 1e-9


def test_cli_rejects_bad_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--trace-dir", "/nonexistent", "--pods", "x.csv", "--seeds", "5-1"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_cli_reports_a_missing_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--trace-dir", str(tmp_path), "--pods", "nope.csv", "--seeds", "42"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: trace file not found:") and str(tmp_path) in err
