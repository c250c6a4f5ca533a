"""frag_score on hand-made nodes."""

from __future__ import annotations

from collections.abc import Callable

from gpusched.kernels import (
    frag_score_nb,
)
from tests.builders import (
    col_bool,
    col_i16,
    col_i32,
    score_one_node,
)

Kernel = Callable[..., None]


def test_frag_score_examples() -> None:
    # Whole cards: filling all 4 intact cards is best, 1 of 8 is poor.
    assert (
        score_one_node(frag_score_nb, col_i16(4), col_i16(8), col_i32(0), col_bool(False), 4)
        == 100.0
    )
    assert (
        score_one_node(frag_score_nb, col_i16(8), col_i16(8), col_i32(7), col_bool(False), 1)
        == 12.5
    )
    # Shared: a tight partial card beats tearing; tearing prefers nodes with few intact.
    assert (
        score_one_node(frag_score_nb, col_i16(8), col_i16(8), col_i32(0), col_bool(True), 0)
        == 100.0
    )
    assert (
        score_one_node(frag_score_nb, col_i16(8), col_i16(8), col_i32(500), col_bool(True), 0)
        == 75.0
    )
    assert (
        score_one_node(frag_score_nb, col_i16(8), col_i16(8), col_i32(750), col_bool(False), 0)
        == 0.0
    )
    assert (
        score_one_node(frag_score_nb, col_i16(2), col_i16(8), col_i32(750), col_bool(False), 0)
        == 30.0
    )
