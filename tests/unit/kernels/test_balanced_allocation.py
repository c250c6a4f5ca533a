"""balanced_score: numba kernel == NumPy twin == upstream's balancedResourceScorer, row by
row, on random amounts (zero allocatable, over-commitment, 1-5 resources, huge values)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpusched.kernels import (
    balanced_cpu_mem_nb,
    balanced_cpu_mem_np,
    balanced_score_nb,
    balanced_score_np,
)
from tests.builders import fuzz_settings


def go_balanced(requested: list[int], alloc: list[int]) -> float:
    """balancedResourceScorer (balanced_allocation.go) transcribed: float64 fractions capped
    at 1, |f1 - f2| / 2 for two, the population std for more, int64((1 - std) * 100)."""
    fractions: list[float] = []
    total = 0.0
    for r, a in zip(requested, alloc, strict=True):
        if a == 0:
            continue
        f = min(float(r) / float(a), 1.0)
        total += f
        fractions.append(f)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / len(fractions)
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / len(fractions))
    return float(math.trunc((1 - std) * 100))


@st.composite
def resource_matrices(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    k = draw(st.integers(1, 5))
    m = draw(st.integers(0, 12))
    amounts = st.integers(0, 2**40) | st.integers(0, 16)
    alloc = [[draw(amounts | st.just(0)) for _ in range(m)] for _ in range(k)]
    req = [[draw(amounts) for _ in range(m)] for _ in range(k)]
    return (
        np.array(alloc, np.int64).reshape(k, m),
        np.array(req, np.int64).reshape(k, m),
    )


@fuzz_settings(300)
@given(resource_matrices())
def test_kernel_twin_and_upstream_agree(mat: tuple[np.ndarray, np.ndarray]) -> None:
    alloc, req = mat
    m = alloc.shape[1]
    nb = np.full(m, -1.0)
    twin = np.full(m, -1.0)
    balanced_score_nb(alloc, req, nb)
    balanced_score_np(alloc, req, twin)
    want = [go_balanced(req[:, j].tolist(), alloc[:, j].tolist()) for j in range(m)]
    assert nb.tolist() == want
    assert twin.tolist() == want
    assert ((nb >= 0) & (nb <= 100)).all()


def test_upstream_examples() -> None:
    # balanced_allocation_test.go: 3000m/4000m and 5000/10000 -> 87; three resources with
    # cpu 3000/3500, memory 5000/40000, GPU 4/8 -> 70; a left-out resource does not count.
    alloc = np.array([[4000, 3500, 3500], [10000, 40000, 40000], [0, 8, 0]], np.int64)
    req = np.array([[3000, 3000, 3000], [5000, 5000, 5000], [9, 4, 0]], np.int64)
    for kernel in (balanced_score_nb, balanced_score_np):
        out = np.zeros(3)
        kernel(alloc, req, out)
        assert out.tolist() == [87.0, 70.0, 63.0]


@st.composite
def cpu_mem_columns(draw: st.DrawFn) -> tuple[np.ndarray, ...]:
    n = draw(st.integers(1, 10))
    amounts = st.integers(0, 2**40) | st.integers(0, 16)
    cols = [np.array([draw(amounts) for _ in range(n)], np.int64) for _ in range(4)]
    rows = np.array(draw(st.lists(st.integers(0, n - 1), max_size=12)), np.intp)
    return (rows, *cols)


@fuzz_settings(300)
@given(cpu_mem_columns(), st.integers(0, 2**30), st.integers(0, 2**30))
def test_cpu_mem_kernel_equals_the_general_one(
    cols: tuple[np.ndarray, ...], req_cpu: int, req_mem: int
) -> None:
    rows, cpu_alloc, cpu_free, mem_alloc, mem_free = cols
    m = len(rows)
    # The general kernel on the gathered amounts, cpu first and memory first.
    alloc = np.stack((cpu_alloc[rows], mem_alloc[rows]))
    req = np.stack(
        (cpu_alloc[rows] - cpu_free[rows] + req_cpu, mem_alloc[rows] - mem_free[rows] + req_mem)
    )
    want = np.full(m, -1.0)
    balanced_score_nb(alloc, req, want)
    swapped = np.full(m, -1.0)
    balanced_score_nb(alloc[::-1].copy(), req[::-1].copy(), swapped)
    assert swapped.tolist() == want.tolist()
    for kernel in (balanced_cpu_mem_nb, balanced_cpu_mem_np):
        out = np.full(m, -1.0)
        kernel(rows, cpu_alloc, cpu_free, mem_alloc, mem_free, req_cpu, req_mem, out)
        assert out.tolist() == want.tolist()
