"""spread_filter and spread_score: numba equals twin on random clusters; hand-checked cases
against kube-scheduler's arithmetic."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels.spread_filter import (
    SPREAD_MISSING_LABEL,
    SPREAD_NOT_EVALUATED,
    SPREAD_OK,
    SPREAD_SKEW,
    spread_filter_nb,
    spread_filter_np,
)
from gpusched.kernels.spread_score import spread_score_nb, spread_score_np


@st.composite
def spread_inputs(draw: st.DrawFn) -> dict[str, np.ndarray]:
    k = draw(st.integers(1, 3))
    n = draw(st.integers(1, 40))
    width = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    dom = rng.integers(-1, width, size=(k, n)).astype(np.int32)
    return {
        "candidates": rng.random(n) < 0.8,
        "dom": dom,
        "eligible": rng.random((k, n)) < 0.7,
        "counts": rng.integers(0, 6, size=(k, n)).astype(np.int64),
        "self_match": rng.integers(0, 2, size=k).astype(np.int64),
        "max_skew": rng.integers(1, 4, size=k).astype(np.int64),
        "min_domains": rng.integers(1, width + 2, size=k).astype(np.int64),
        "hostname": rng.random(k) < 0.3,
        "rows": np.flatnonzero(rng.random(n) < 0.7).astype(np.intp),
        "width": np.array(width),
    }


def _filter(fn, x: dict[str, np.ndarray]) -> tuple[int, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    k, n = x["dom"].shape
    w = int(x["width"])
    totals = np.full((k, w), -7, np.int64)  # garbage: the kernels must clear their scratch
    present = np.ones((k, w), np.bool_)
    code = np.full(n, 9, np.int8)
    passed = fn(
        x["candidates"], x["dom"], x["eligible"], x["counts"], x["self_match"],
        x["max_skew"], x["min_domains"], totals, present, code,
    )  # fmt: skip
    return passed, code, totals


def _score(fn, x: dict[str, np.ndarray], require_all: bool) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    k, _ = x["dom"].shape
    w = int(x["width"])
    r = len(x["rows"])
    ignored = np.zeros(r, np.bool_)
    score = np.full(r, -1, np.int64)
    fn(
        x["rows"], x["dom"], x["eligible"], x["counts"], x["max_skew"], x["hostname"],
        require_all, np.full((k, w), -7, np.int64), np.ones((k, w), np.bool_), ignored, score,
    )  # fmt: skip
    return ignored, score


@settings(max_examples=200, deadline=None)
@given(spread_inputs(), st.booleans())
def test_spread_kernels_equal_twins(x: dict[str, np.ndarray], require_all: bool) -> None:
    p_nb, code_nb, tot_nb = _filter(spread_filter_nb, x)
    p_np, code_np, tot_np = _filter(spread_filter_np, x)
    assert p_nb == p_np
    np.testing.assert_array_equal(code_nb, code_np)
    np.testing.assert_array_equal(tot_nb, tot_np)
    assert ((code_nb == SPREAD_NOT_EVALUATED) == ~x["candidates"]).all()
    assert p_nb == int((code_nb == SPREAD_OK).sum())
    ig_nb, s_nb = _score(spread_score_nb, x, require_all)
    ig_np, s_np = _score(spread_score_np, x, require_all)
    np.testing.assert_array_equal(ig_nb, ig_np)
    np.testing.assert_array_equal(s_nb, s_np)
    assert (s_nb[ig_nb] == 0).all() and (s_nb >= 0).all()


def test_filter_skew_min_domains_and_missing_label() -> None:
    # One constraint over zones a, b (ids 0, 1): a holds 3 matching pods, b 1; row 2 has
    # no zone; row 3 is in zone c (id 2), which has no eligible node.
    dom = np.array([[0, 1, -1, 2]], np.int32)
    eligible = np.array([[True, True, False, False]])
    counts = np.array([[3, 1, 0, 0]], np.int64)
    cands = np.ones(4, np.bool_)

    def run(max_skew: int, min_domains: int) -> list[int]:
        code = np.zeros(4, np.int8)
        spread_filter_nb(
            cands, dom, eligible, counts, np.array([1], np.int64),
            np.array([max_skew], np.int64), np.array([min_domains], np.int64),
            np.zeros((1, 3), np.int64), np.zeros((1, 3), np.bool_), code,
        )  # fmt: skip
        return code.tolist()

    # min = 1: a: 3+1-1 = 3 > 1, b: 1+1-1 = 1, c: 0+1-1 = 0.
    assert run(1, 1) == [SPREAD_SKEW, SPREAD_OK, SPREAD_MISSING_LABEL, SPREAD_OK]
    # 2 domains < minDomains 3: the global minimum is 0, so b's 1+1-0 = 2 > 1 fails too.
    assert run(1, 3) == [SPREAD_SKEW, SPREAD_SKEW, SPREAD_MISSING_LABEL, SPREAD_OK]
    assert run(3, 1) == [SPREAD_OK, SPREAD_OK, SPREAD_MISSING_LABEL, SPREAD_OK]


def test_score_matches_kube_formula() -> None:
    # Zones: rows 0,1 in zone 0 (2 + 1 pods), row 2 in zone 1 (0 pods), row 3 lacks it.
    dom = np.array([[0, 0, 1, -1]], np.int32)
    eligible = np.ones((1, 4), np.bool_)
    counts = np.array([[2, 1, 0, 0]], np.int64)
    rows = np.arange(4, dtype=np.intp)
    ignored = np.zeros(4, np.bool_)
    score = np.zeros(4, np.int64)
    spread_score_nb(
        rows, dom, eligible, counts, np.array([1], np.int64), np.array([False]), True,
        np.zeros((1, 2), np.int64), np.zeros((1, 2), np.bool_), ignored, score,
    )  # fmt: skip
    w = math.log(2 + 2)
    assert ignored.tolist() == [False, False, False, True]
    assert score.tolist() == [round(3 * w), round(3 * w), 0, 0]
