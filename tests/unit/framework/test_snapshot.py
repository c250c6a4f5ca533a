"""The snapshot read API's limits agree with the kernels."""

from __future__ import annotations

from gpusched.framework.snapshot import MAX_CARDS_LIMIT
from gpusched.kernels._card_rules import MAX_CARDS


def test_max_cards_limit_matches_the_kernels() -> None:

    assert MAX_CARDS_LIMIT == MAX_CARDS
