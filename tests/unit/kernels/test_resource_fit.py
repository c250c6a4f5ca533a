"""resource_fit: numba equals twin; the rows of `hits` follow the checks made."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import resource_fit_nb, resource_fit_np


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cpu_alloc = rng.integers(0, 10_000, n).astype(np.int64)
    mem_alloc = rng.integers(0, 2**36, n).astype(np.int64)
    return (
        rng.random(n) < 0.8,
        rng.integers(-1, 3, n).astype(np.int32),
        cpu_alloc - rng.integers(0, 12_000, n),
        mem_alloc - rng.integers(0, 2**36, n),
        cpu_alloc,
        mem_alloc,
    )


@settings(max_examples=200, deadline=None)
@given(cases(), st.sampled_from([0, 1, 500, 4000, 20_000]), st.sampled_from([0, 1, 2**30, 2**37]))
def test_resource_fit_equals_twin(cols: tuple[np.ndarray, ...], cpu: int, mem: int) -> None:
    n = len(cols[0])
    k = 1 + (cpu > 0) + (mem > 0)
    outs = []
    for kernel in (resource_fit_nb, resource_fit_np):
        hits = np.zeros((k, n), np.bool_)
        feasible = np.zeros(n, np.bool_)
        unresolvable = np.zeros(n, np.bool_)
        rejected = kernel(*cols, cpu, mem, hits, feasible, unresolvable)
        outs.append((rejected, hits, feasible, unresolvable))
    (r1, h1, f1, u1), (r2, h2, f2, u2) = outs
    assert r1 == r2 == int(np.count_nonzero(cols[0] & ~f1))
    np.testing.assert_array_equal(h1, h2)
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(u1, u2)
    assert not (u1 & f1).any()


def test_checks_skip_what_the_pod_does_not_ask_for() -> None:
    one = np.ones(2, np.bool_)
    pods = np.array([1, 0], np.int32)
    cpu = np.array([0, 100], np.int64)  # row 0 has no cpu left
    mem = np.array([10, 10], np.int64)
    hits = np.zeros((2, 2), np.bool_)
    feasible = np.zeros(2, np.bool_)
    unresolvable = np.zeros(2, np.bool_)
    # cpu not asked: row 0 fits whatever its cpu; row 1 has no pod slot.
    assert resource_fit_nb(one, pods, cpu, mem, cpu, mem, 0, 5, hits, feasible, unresolvable) == 1
    assert hits.tolist() == [[False, True], [False, False]]
    assert feasible.tolist() == [True, False] and not unresolvable.any()
