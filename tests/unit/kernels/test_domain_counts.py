"""domain_counts / domain_gather: the numba kernels equal their NumPy twins, and the sums
are what a per-domain dictionary gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import (
    domain_counts_nb,
    domain_counts_np,
    domain_gather_nb,
    domain_gather_np,
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n = draw(st.integers(0, 40))
    n_domains = draw(st.integers(0, 6))
    domains = np.array(
        draw(st.lists(st.integers(-1, n_domains - 1), min_size=n, max_size=n)), np.int32
    )
    values = np.array(
        draw(st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n)), np.int64
    )
    eligible = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    return domains, values, eligible, n_domains


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_domain_counts_twin_and_reference(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    domains, values, eligible, n_domains = case
    a = np.full(n_domains, 7, np.int64)  # garbage: the kernels clear it
    b = np.full(n_domains, -3, np.int64)
    domain_counts_nb(domains, values, eligible, a)
    domain_counts_np(domains, values, eligible, b)
    ref = [0] * n_domains
    for d, v, e in zip(domains.tolist(), values.tolist(), eligible.tolist(), strict=True):
        if d >= 0 and e:
            ref[d] += v
    assert a.tolist() == ref
    assert b.tolist() == ref


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(-5, 5))
def test_domain_gather_twin_adds_each_rows_domain(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, int], start: int
) -> None:
    domains, _values, _eligible, n_domains = case
    per_domain = np.arange(n_domains, dtype=np.int64) * 10 + 1
    a = np.full(len(domains), start, np.int64)
    b = a.copy()
    domain_gather_nb(domains, per_domain, a)
    domain_gather_np(domains, per_domain, b)
    ref = [start + (int(per_domain[d]) if d >= 0 else 0) for d in domains.tolist()]
    assert a.tolist() == ref
    assert b.tolist() == ref


def test_rows_without_the_key_count_nowhere() -> None:
    domains = np.array([0, -1, 1, 0], np.int32)
    out = np.zeros(2, np.int64)
    domain_counts_nb(domains, np.array([2, 5, 1, 3], np.int64), np.ones(4, np.bool_), out)
    assert out.tolist() == [5, 1]
    back = np.zeros(4, np.int64)
    domain_gather_nb(domains, out, back)
    assert back.tolist() == [5, 0, 1, 5]
