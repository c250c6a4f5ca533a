"""GoRand against values printed by Go's own math/rand (go1.26, rand.New(rand.NewSource(s)))."""

from __future__ import annotations

import hashlib

import pytest

from gpusched.sim.gorand import RNG_COOKED, GoRand


def test_int63_seed1_matches_go() -> None:
    # The classic first values of rand.New(rand.NewSource(1)).Int63().
    r = GoRand(1)
    assert [r.int63() for _ in range(5)] == [
        5577006791947779410,
        8674665223082153551,
        6129484611666145821,
        4037200794235010051,
        3916589616287113937,
    ]


def test_intn_seed42_matches_go() -> None:
    r = GoRand(42)
    assert [r.intn(8152) for _ in range(10)] == [
        7873, 4315, 4996, 1382, 887, 5857, 3685, 5528, 4568, 843,
    ]  # fmt: skip


def test_perm_matches_go() -> None:
    assert GoRand(42).perm(10) == [7, 5, 8, 9, 2, 1, 6, 0, 3, 4]
    assert GoRand(44).perm(1213)[:10] == [186, 601, 1158, 349, 680, 809, 537, 842, 277, 733]


def test_shuffle_uses_lemire_int31n_like_go() -> None:
    # Shuffle's draws differ from Intn's (int31n vs Int31n): the same seed gives a different
    # order than a Fisher-Yates built on intn would.
    items = list(range(10))
    GoRand(42).shuffle_list(items)
    assert items == [2, 5, 7, 9, 6, 8, 1, 4, 0, 3]
    big = list(range(8152))
    GoRand(45).shuffle_list(big)
    assert big[:10] == [6755, 5234, 1815, 4975, 5327, 2683, 1024, 7698, 684, 1785]


def test_shuffle_callback_sees_go_swaps() -> None:
    swaps: list[tuple[int, int]] = []
    GoRand(42).shuffle(4, lambda i, j: swaps.append((i, j)))
    assert [i for i, _ in swaps] == [3, 2, 1]
    assert all(0 <= j <= i for i, j in swaps)


def test_float64_matches_go() -> None:
    r = GoRand(7)
    assert [r.float64() for _ in range(5)] == [
        0.9188921592527635,
        0.23150717404875204,
        0.24138756706529774,
        0.9115621743718174,
        0.6982355437875076,
    ]


def test_negative_seed_and_uint64_match_go() -> None:
    r = GoRand(-5)
    assert [r.uint64() for _ in range(3)] == [
        1811683815564572222,
        4427849682616757295,
        188166459856594692,
    ]


def test_seed_zero_int63n_matches_go() -> None:
    # Seed 0 is replaced by 89482311 inside rngSource.Seed.
    r = GoRand(0)
    assert [r.int63n(1000000007) for _ in range(3)] == [716895808, 888564445, 452095410]
    assert GoRand(89482311).int63() == GoRand(0).int63()


def test_large_seed_int31n_and_int_match_go() -> None:
    r = GoRand(123456789012)
    assert [r.int31n(3) for _ in range(5)] == [2, 1, 0, 2, 2]
    r = GoRand(43)
    assert [r.int_() for _ in range(3)] == [
        251513763977812265,
        4758643001895455243,
        4454543167247874465,
    ]


def test_reseed_restarts_the_stream() -> None:
    r = GoRand(5)
    first = [r.int63() for _ in range(700)]  # past one full register turn
    r.seed(5)
    assert [r.int63() for _ in range(700)] == first


def test_seed_modulus_follows_go() -> None:
    # rngSource.Seed reduces modulo 2**31-1 with Go's truncated %, so these coincide.
    m = (1 << 31) - 1
    assert GoRand(7 + m).int63() == GoRand(7).int63()
    assert GoRand(-7).int63() == GoRand(m - 7).int63()


@pytest.mark.parametrize(
    ("method", "arg"),
    [("intn", 0), ("int31n", -1), ("int63n", 0), ("perm", -1), ("int31n", 1 << 31)],
)
def test_invalid_arguments_raise(method: str, arg: int) -> None:
    with pytest.raises(ValueError, match="invalid argument"):
        getattr(GoRand(1), method)(arg)


def test_power_of_two_bounds_mask() -> None:
    a, b = GoRand(9), GoRand(9)
    assert a.intn(1024) == b.int31() & 1023
    assert a.int63n(1 << 40) == b.int63() & ((1 << 40) - 1)


def test_cooked_table_shape() -> None:
    assert len(RNG_COOKED) == 607
    assert RNG_COOKED[0] == -4181792142133755926
    assert RNG_COOKED[-1] == 4152330101494654406

    # Digest of the table as checked equal to Go's src/math/rand/rng.go and to
    # shared/reference/go_math_rand_cooked.txt when the module was written; any edit shows.
    digest = hashlib.sha256(",".join(map(str, RNG_COOKED)).encode()).hexdigest()
    assert digest == "43adc05b4370b284c32cf50d0fb392452975b4d190e6bb281b5be386b3b4c7e4"
