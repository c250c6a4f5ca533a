"""FGD and FGD-baseline kernels: numba kernel == NumPy twin, and FGD == a direct reading."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.kernels.fgd import (
    fgd_delta_nb,
    fgd_delta_np,
    fgd_refresh_nb,
    fgd_refresh_np,
    fgd_refresh_rows_nb,
    fgd_refresh_rows_np,
)
from tests.builders import fgd_columns


def _classes(seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed + 100)
    cpu = rng.integers(0, 20000, 7).astype(np.int64)
    milli = np.array([0, 250, 500, 810, 1000, 1000, 1000], np.int64)
    num = np.array([0, 1, 1, 1, 1, 2, 8], np.int64)
    p = rng.random(7)
    access = rng.random((7, 2)) > 0.2
    return cpu, milli, num, p / p.sum(), access


def _direct_frag(left: np.ndarray, cpu: int, model: int, cls: tuple[np.ndarray, ...]) -> float:
    ccpu, cm, cn, cp, acc = cls
    g = int(left.sum())
    total = 0.0
    for m in range(len(cp)):
        if cm[m] == 0 or model < 0 or not acc[m, model]:
            total += cp[m] * g
            continue
        fits = int((left >= cm[m]).sum())
        frag = int(left[left < cm[m]].sum())
        total += cp[m] * (frag if fits >= cn[m] and cpu >= ccpu[m] else g)
    return total


@pytest.mark.parametrize("seed", range(6))
def test_refresh_twins_and_direct(seed: int) -> None:
    cl = fgd_columns(seed)
    cls = _classes(seed)
    n, k = len(cl["count"]), len(cls[0])
    outs = []
    for fn in (fgd_refresh_nb, fgd_refresh_np):
        cnt = np.zeros((n, k), np.int16)
        fs = np.zeros((n, k), np.int64)
        before = np.zeros(n)
        seen_f = np.zeros_like(cl["free"])
        seen_c = np.zeros(n, np.int64)
        fn(
            True,
            cl["valid"],
            cl["free"],
            cl["count"],
            cl["model"],
            cl["cpu"],
            seen_f,
            seen_c,
            *cls,
            cnt,
            fs,
            before,
        )
        # A second, unforced call finds nothing changed.
        assert (
            fn(
                False,
                cl["valid"],
                cl["free"],
                cl["count"],
                cl["model"],
                cl["cpu"],
                seen_f,
                seen_c,
                *cls,
                cnt,
                fs,
                before,
            )
            == 0
        )
        outs.append((cnt, fs, before))
    np.testing.assert_array_equal(outs[0][2], outs[1][2])
    for r in np.flatnonzero(cl["valid"]):
        k_r = int(cl["count"][r])
        model = int(cl["model"][r, 0]) if k_r else -1
        assert outs[0][2][r] == pytest.approx(
            _direct_frag(cl["free"][r, :k_r], int(cl["cpu"][r]), model, cls)
        )


def _refreshed(
    cl: dict[str, np.ndarray], cls: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's FGD statistics (fit counts, fragment sums, fragmentation) by the twin."""
    n, k = len(cl["count"]), len(cls[0])
    cnt = np.zeros((n, k), np.int16)
    fs = np.zeros((n, k), np.int64)
    before = np.zeros(n)
    fgd_refresh_np(
        True,
        cl["valid"],
        cl["free"],
        cl["count"],
        cl["model"],
        cl["cpu"],
        np.zeros_like(cl["free"]),
        np.zeros(n, np.int64),
        *cls,
        cnt,
        fs,
        before,
    )
    return cnt, fs, before


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pod", [(3000, 300, 0), (8000, 1000, 1), (16000, 1000, 2), (2000, 0, 0)])
@pytest.mark.parametrize(("quantize", "by_raw"), [(True, False), (True, True), (False, False)])
def test_delta_twins(seed: int, pod: tuple[int, int, int], quantize: bool, by_raw: bool) -> None:
    cl = fgd_columns(seed)
    cls = _classes(seed)
    cnt, fs, before = _refreshed(cl, cls)
    rows = np.flatnonzero(cl["valid"])
    allowed = np.array([True, seed % 2 == 0])
    got = []
    for fn in (fgd_delta_nb, fgd_delta_np):
        v = np.full(len(rows), -9.0)
        c = np.full(len(rows), -9, np.int16)
        fn(
            rows,
            cl["free"],
            cl["count"],
            cl["model"],
            cl["healthy"],
            cl["cpu"],
            cnt,
            fs,
            before,
            *cls,
            allowed,
            *pod,
            quantize,
            by_raw,
            v,
            c,
        )
        got.append((v, c))
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])


def test_delta_matches_direct_shared_pod() -> None:
    cl = fgd_columns(3)
    cls = _classes(3)
    cl["healthy"][:] = True
    cnt, fs, before = _refreshed(cl, cls)
    rows = np.flatnonzero(cl["valid"] & (cl["count"] > 0))
    v = np.zeros(len(rows))
    c = np.zeros(len(rows), np.int16)
    pc, pm = 3000, 300
    fgd_delta_np(
        rows,
        cl["free"],
        cl["count"],
        cl["model"],
        cl["healthy"],
        cl["cpu"],
        cnt,
        fs,
        before,
        *cls,
        np.ones(2, bool),
        pc,
        pm,
        0,
        False,
        False,
        v,
        c,
    )
    for i, r in enumerate(rows):
        k_r = int(cl["count"][r])
        model = int(cl["model"][r, 0])
        left = cl["free"][r, :k_r].astype(np.int64)
        best = None
        for card in range(k_r):
            if left[card] >= pm:
                after = left.copy()
                after[card] -= pm
                d = _direct_frag(left, int(cl["cpu"][r]), model, cls) - _direct_frag(
                    after, int(cl["cpu"][r]) - pc, model, cls
                )
                if best is None or d > best[0] + 1e-9:
                    best = (d, card)
        if best is None:
            assert c[i] == -1
        else:
            assert v[i] == pytest.approx(best[0])
            assert c[i] == best[1]


@pytest.mark.parametrize("seed", range(6))
def test_refresh_rows_twins_equal_a_full_refresh(seed: int) -> None:
    """After some rows change, refreshing just those rows (kernel and twin) leaves the same
    statistics as a forced refresh of every row, and counts only the rows really stale."""
    cl = fgd_columns(seed)
    cls = _classes(seed)
    n, k = len(cl["count"]), len(cls[0])
    want = None
    for fn in (fgd_refresh_rows_nb, fgd_refresh_rows_np):
        rng = np.random.default_rng(seed)  # the same changes for both
        cnt = np.zeros((n, k), np.int16)
        fs = np.zeros((n, k), np.int64)
        before = np.zeros(n)
        seen_f = np.zeros_like(cl["free"])
        seen_c = np.zeros(n, np.int64)
        free, cpu = cl["free"].copy(), cl["cpu"].copy()
        cols = (cl["valid"], free, cl["count"], cl["model"], cpu)
        fgd_refresh_nb(True, *cols, seen_f, seen_c, *cls, cnt, fs, before)
        changed = np.random.default_rng(seed + 7).choice(n, 5, replace=False)
        free[changed[:3]] = rng.integers(0, 1001, (3, free.shape[1]), dtype=np.int32)
        cpu[changed[3]] -= 1000
        rows = np.sort(changed).astype(np.intp)
        stale = int(cl["valid"][changed].sum())
        assert 1 <= fn(rows, *cols, seen_f, seen_c, *cls, cnt, fs, before) <= stale
        assert fn(rows, *cols, seen_f, seen_c, *cls, cnt, fs, before) == 0  # all current
        full = (np.zeros((n, k), np.int16), np.zeros((n, k), np.int64), np.zeros(n))
        fgd_refresh_np(
            True, *cols, np.zeros_like(free), np.zeros(n, np.int64), *cls, *full
        )  # fmt: skip
        for got, ref in zip((cnt, fs, before), full, strict=True):
            np.testing.assert_array_equal(got[cl["valid"]], ref[cl["valid"]])
        if want is None:
            want = (cnt, fs, before)
        else:
            for a, b in zip(want, (cnt, fs, before), strict=True):
                np.testing.assert_array_equal(a, b)
