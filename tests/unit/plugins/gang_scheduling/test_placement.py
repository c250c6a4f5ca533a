"""The fewest-racks choice, checked against brute force over every subset of racks."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpusched.plugins.gang_scheduling import placement


def _brute(caps: list[int], need: int) -> int | None:
    """The fewest racks holding `need`, by trying every subset."""
    for k in range(1, len(caps) + 1):
        if any(sum(c) >= need for c in itertools.combinations(caps, k)):
            return k
    return None


@given(st.lists(st.integers(0, 12), min_size=1, max_size=8), st.integers(1, 40))
def test_fewest_racks_is_minimal(caps: list[int], need: int) -> None:
    found = placement.fewest_racks(np.array(caps, np.int64), need)
    best = _brute(caps, need)
    if best is None:
        assert found is None
        return
    assert found is not None
    racks, leftover = found
    assert len(racks) == best
    held = sum(caps[r] for r in racks)
    assert held >= need
    assert leftover == held - need


def test_one_rack_best_fit() -> None:
    # Racks 0, 1, 2 hold 10, 6, 8: a gang of 6 goes to rack 1, the tightest that holds it.
    assert placement.fewest_racks(np.array([10, 6, 8], np.int64), 6) == ((1,), 0)
    # Two racks needed for 14: 10 + the smallest that completes it (6), not 10 + 8.
    assert placement.fewest_racks(np.array([10, 6, 8], np.int64), 14) == ((0, 1), 2)
    assert placement.fewest_racks(np.array([10, 6, 8], np.int64), 17) == ((0, 2), 1)
    assert placement.fewest_racks(np.array([1, 1], np.int64), 3) is None


def test_choose_prefers_one_spine_with_as_few_racks() -> None:
    # Four racks of one node each: racks 0, 1 in spine 0 (4 + 4), racks 2, 3 in spine 1
    # (6 + 1). A gang of 7: two racks either way; spine 1's pair (6 + 1) fits tighter, and
    # the cross-spine pair 0 + 2 (4 + 6) has as few racks but spans two spines.
    counts = np.array([4, 4, 6, 1], np.int64)
    rack = np.array([0, 1, 2, 3], np.int64)
    spine = np.array([0, 0, 1, 1], np.int64)
    choice = placement.choose(counts, rack, spine, 7)
    assert choice is not None
    assert choice.racks == (2, 3)
    assert choice.spines == 1
    assert choice.leftover == 0


def test_choose_fewest_racks_beats_one_spine() -> None:
    # Spine 0 needs three racks (3 + 3 + 3), across spines two do (8 + 3): fewer racks win.
    counts = np.array([3, 3, 3, 8], np.int64)
    rack = np.array([0, 1, 2, 3], np.int64)
    spine = np.array([0, 0, 0, 1], np.int64)
    choice = placement.choose(counts, rack, spine, 9)
    assert choice is not None
    assert len(choice.racks) == 2
    assert 3 in choice.racks
    assert choice.spines == 2


def test_required_domain_must_hold_all() -> None:
    counts = np.array([4, 4, 6, 1], np.int64)
    rack = np.array([0, 1, 2, 3], np.int64)
    spine = np.array([0, 0, 1, 1], np.int64)
    # Rack required: no single rack holds 7.
    assert placement.choose(counts, rack, spine, 7, domain=rack) is None
    # Spine required: spine 0 holds 8, spine 1 holds 7 exactly: the tighter one.
    choice = placement.choose(counts, rack, spine, 7, domain=spine)
    assert choice is not None
    assert choice.racks == (2, 3)
    # Rows outside every domain (-1) never count.
    assert placement.choose(counts, rack, spine, 7, domain=np.array([-1, -1, 0, 0])) is not None
    assert placement.choose(counts, rack, spine, 8, domain=np.array([-1, -1, 0, 0])) is None


def test_slots_fill_the_fullest_rows_first() -> None:
    counts = np.array([1, 3, 2, 0], np.int64)
    inside = np.array([True, True, True, True])
    assert placement.slots(counts, inside, 4) == {1: 3, 2: 1}
    assert placement.slots(counts, inside, 9) == {1: 3, 2: 2, 0: 1}
