"""gang_fit: the numba kernel equals its NumPy twin; hand-computed examples; it agrees with
gpu_summary on whether a row takes one pod."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.kernels import gang_fit_nb, gang_fit_np, gpu_summary_nb
from tests.builders import (
    ALL,
    Cluster,
    Request,
    build_cluster,
    clusters,
    one_node_cluster,
    requests,
    summarise,
)

SETTINGS = settings(max_examples=150, deadline=None)
KERNELS = (gang_fit_nb, gang_fit_np)
GiB = 2**30


@dataclass
class Held:
    cards: npt.NDArray[np.int32]
    cpu: npt.NDArray[np.int64]
    mem: npt.NDArray[np.int64]
    pods: npt.NDArray[np.int32]

    @classmethod
    def none(cls, n: int) -> Held:
        return cls(
            np.zeros(n, np.int32),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.int32),
        )


@dataclass
class Host:
    """The pod's non-GPU ask and the cap on the count."""

    cpu: int = 0
    mem_bytes: int = 0
    cap: int = 1000


def run(
    kernel: Callable[..., int],
    cl: Cluster,
    req: Request,
    held: Held | None = None,
    host: Host | None = None,
    candidates: npt.NDArray[np.bool_] | None = None,
) -> tuple[int, npt.NDArray[np.int32]]:
    h = held or Held.none(cl.n)
    x = host or Host()
    cand = np.ones(cl.n, dtype=np.bool_) if candidates is None else candidates
    out = np.full(cl.n, 77, dtype=np.int32)  # garbage: every row must be written
    total = kernel(
        *cl.cards(),
        cl.node_valid,
        cand,
        cl.node_cpu_free,
        cl.node_mem_free,
        cl.node_pods_free,
        h.cards,
        h.cpu,
        h.mem,
        h.pods,
        *req.args(),
        x.cpu,
        x.mem_bytes,
        x.cap,
        out,
    )
    return int(total), out


def roomy(cl: Cluster) -> Cluster:
    """The cluster with plenty of CPU, memory and pod slots (only the cards limit)."""
    cl.node_cpu_free[:] = 10**9
    cl.node_mem_free[:] = 2**50
    cl.node_pods_free[:] = 10**6
    return cl


def counts(cl: Cluster, req: Request, held_cards: int = 0, host: Host | None = None) -> list[int]:
    """The one-node count from both flavours (asserted equal)."""
    held = Held.none(cl.n)
    held.cards[:] = held_cards
    got = [int(run(kernel, cl, req, held, host)[1][0]) for kernel in KERNELS]
    assert got[0] == got[1]
    return got


def one(free_milli: list[int], **kw: object) -> Cluster:
    return roomy(one_node_cluster(free_milli, **kw))  # type: ignore[arg-type]


# --- hand-computed cases ------------------------------------------------------------------


def test_whole_card_pods_share_the_eligible_cards_minus_held() -> None:
    cl = one([1000, 1000, 1000, 1000, 500])
    assert counts(cl, Request(2, 0, 0, ALL, 0)) == [2, 2]
    assert counts(cl, Request(2, 0, 0, ALL, 0), held_cards=1) == [1, 1]
    assert counts(cl, Request(1, 0, 0, ALL, 1), held_cards=6) == [0, 0]
    # An 80 GB ask fits no 40 GB card, intact or not.
    small = one([1000, 1000], total_mem=40960)
    assert counts(small, Request(1, 0, 81920, ALL, 0)) == [0, 0]
    assert counts(small, Request(1, 0, 40960, ALL, 0)) == [2, 2]


def test_nvlink_required_counts_per_known_island_and_charges_held_conservatively() -> None:
    cl = one([1000] * 7, island=[0, 0, 0, 1, 1, -1, -1])
    # island 0: 3 // 2 = 1, island 1: 2 // 2 = 1, unknown cards never count.
    assert counts(cl, Request(2, 0, 0, ALL, 2)) == [2, 2]
    # One held card costs a whole pod (ceil(1 / 2)), even though island 0 has a spare card.
    assert counts(cl, Request(2, 0, 0, ALL, 2), held_cards=1) == [1, 1]
    assert counts(cl, Request(2, 0, 0, ALL, 2), held_cards=3) == [0, 0]
    # Preferred or no NVLink: 7 eligible cards, 3 pods of 2.
    assert counts(cl, Request(2, 0, 0, ALL, 1)) == [3, 3]
    # High island ids are islands like any other.
    high = one([1000] * 4, island=[100, 100, 9, 9])
    assert counts(high, Request(2, 0, 0, ALL, 2)) == [2, 2]


def test_shared_pods_fill_each_card_and_held_cards_take_the_roomiest() -> None:
    # 250 milli of an 80 GB card also needs 20 GB; memory follows milli on these cards.
    cl = one([1000, 500, 250, -200, 0])
    req = Request(0, 250, 0, ALL, 0)
    assert counts(cl, req) == [7, 7]  # 4 + 2 + 1, the over-allocated card takes none
    assert counts(cl, req, held_cards=1) == [3, 3]  # minus the 4-pod card
    assert counts(cl, req, held_cards=2) == [0, 0]  # 7 - 8 floored


def test_shared_memory_ask_raises_the_milli_need_and_memory_can_bind() -> None:
    # 20 GB of an 80 GB card is 250 milli: a 1000-milli card takes 4, a 400-milli card 1.
    cl = one([1000, 400, 200])
    assert counts(cl, Request(0, 100, 20480, ALL, 0)) == [5, 5]
    # The first card's free memory (30,000 MiB) holds only one 20 GB share.
    cl.card_free_mem[0, 0] = 30000
    assert counts(cl, Request(0, 100, 20480, ALL, 0)) == [2, 2]


def test_card_of_unknown_memory_serves_compute_shares_only() -> None:
    cl = one([1000, 300], total_mem=0)
    assert counts(cl, Request(0, 250, 0, ALL, 0)) == [5, 5]
    assert counts(cl, Request(0, 250, 1024, ALL, 0)) == [0, 0]


def test_disallowed_and_unhealthy_cards_do_not_count() -> None:
    cl = one([1000, 1000, 1000])
    cl.card_healthy[0, 0] = False
    assert counts(cl, Request(1, 0, 0, ALL, 0)) == [2, 2]
    assert counts(cl, Request(0, 500, 0, ALL, 0)) == [4, 4]
    assert counts(cl, Request(1, 0, 0, np.zeros(1, dtype=np.bool_), 0)) == [0, 0]


def test_cpu_memory_pods_and_cap_limit_after_the_held_amounts() -> None:
    cl = one([1000] * 8)
    cl.node_cpu_free[0] = 10_000
    cl.node_mem_free[0] = 20 * GiB
    cl.node_pods_free[0] = 6
    held = Held.none(1)
    held.cpu[0] = 1000
    held.mem[0] = 2 * GiB
    held.pods[0] = 1
    no_gpu = Request(0, 0, 0, ALL, 0)
    for kernel in KERNELS:
        # The cards do not limit a pod without a GPU ask: pods 6 - 1 = 5.
        assert run(kernel, cl, no_gpu, held, Host())[1][0] == 5
        # cpu (10,000 - 1,000) // 2,000 = 4.
        assert run(kernel, cl, no_gpu, held, Host(cpu=2000))[1][0] == 4
        # memory (20 - 2) GiB // 5 GiB = 3.
        assert run(kernel, cl, no_gpu, held, Host(cpu=2000, mem_bytes=5 * GiB))[1][0] == 3
        assert run(kernel, cl, Request(4, 0, 0, ALL, 0), held, Host(cpu=2000))[1][0] == 2
        assert run(kernel, cl, no_gpu, held, Host(cap=2))[1][0] == 2
        assert run(kernel, cl, no_gpu, held, Host(cap=0))[1][0] == 0
        # Held beyond what is free: nothing fits, never a negative count.
        assert run(kernel, cl, no_gpu, held, Host(cpu=20_000))[1][0] == 0


def test_amounts_beyond_float64_integers_divide_exactly() -> None:
    # The kernel divides in float64 where that is exact; 2**54 - 1 is not (it rounds up to
    # 2**54, whose quotient is one more), nor is a divisor of 2**53 + 1.
    cl = one([1000])
    cl.node_pods_free[0] = 2**30
    no_gpu = Request(0, 0, 0, ALL, 0)
    for kernel in KERNELS:
        cl.node_cpu_free[0] = 2**54 - 1
        assert run(kernel, cl, no_gpu, host=Host(cpu=2**26, cap=2**31))[1][0] == 2**28 - 1
        cl.node_cpu_free[0] = 2**60
        assert run(kernel, cl, no_gpu, host=Host(cpu=2**53 + 1, cap=2**31))[1][0] == 127


def test_more_cards_than_any_node_has_fit_nowhere() -> None:
    cl = one([1000] * 8)
    for nvlink in (0, 2):
        assert counts(cl, Request(100, 0, 0, ALL, nvlink), held_cards=3) == [0, 0]
        assert counts(cl, Request(9, 0, 0, ALL, nvlink)) == [0, 0]


def test_negative_held_amounts_lend_no_capacity() -> None:
    cl = one([1000] * 2)
    cl.node_pods_free[0] = 3
    held = Held(
        np.array([-5], np.int32),
        np.array([-5], np.int64),
        np.array([-5], np.int64),
        np.array([-5], np.int32),
    )
    for kernel in KERNELS:
        assert run(kernel, cl, Request(1, 0, 0, ALL, 2), held)[1][0] == 2
        assert run(kernel, cl, Request(0, 0, 0, ALL, 0), held)[1][0] == 3


def test_rows_outside_valid_candidates_get_zero_and_the_sum_is_returned() -> None:
    cl = roomy(build_cluster(seed=3, n=6, c=4, n_models=1, p_intact=1.0))
    cl.card_healthy[:] = True
    cl.card_model[:] = 0
    cl.card_free_milli[:] = 1000
    cl.node_valid[:] = [True, True, False, True, True, True]
    cand = np.array([True, False, True, True, True, True])
    for kernel in KERNELS:
        total, out = run(kernel, cl, Request(1, 0, 0, ALL, 0), candidates=cand)
        assert list(out) == [4, 0, 0, 4, 4, 4]
        assert total == 16


def test_negative_cap_is_a_clear_error() -> None:
    cl = one([1000])
    for kernel in KERNELS:
        with pytest.raises(ValueError, match="cap must be >= 0"):
            run(kernel, cl, Request(1, 0, 0, ALL, 0), host=Host(cap=-1))


def test_many_rows_and_odd_slot_counts() -> None:
    for c in (1, 3, 8, 12):
        cl = build_cluster(seed=c, n=1500, c=c, n_models=3, p_intact=0.5)
        rng = np.random.default_rng(c)
        held = random_held(rng, cl.n)
        for req in (
            Request(2, 0, 0, np.ones(3, dtype=np.bool_), 2),
            Request(1, 0, 20000, np.ones(3, dtype=np.bool_), 0),
            Request(0, 300, 9000, np.array([True, False, True]), 0),
        ):
            total_nb, nb = run(gang_fit_nb, cl, req, held, Host(cpu=500))
            total_np, ref = run(gang_fit_np, cl, req, held, Host(cpu=500))
            np.testing.assert_array_equal(nb, ref)
            assert total_nb == total_np == int(ref.sum())
            # Some row takes a pod whenever a node has enough slots (the test can fail).
            assert ref.any() or req.req_cards > c


# --- properties ---------------------------------------------------------------------------


def random_held(rng: np.random.Generator, n: int) -> Held:
    none = rng.random(n) < 0.4  # most rows hold nothing
    return Held(
        np.where(none, 0, rng.integers(-1, 6, n)).astype(np.int32),
        np.where(none, 0, rng.integers(-100, 40_000, n)).astype(np.int64),
        np.where(none, 0, rng.integers(-100, 2**36, n)).astype(np.int64),
        np.where(none, 0, rng.integers(-1, 4, n)).astype(np.int32),
    )


@st.composite
def shapes(draw: st.DrawFn, n_models: int) -> Request:
    if draw(st.integers(0, 4)) == 0:
        return Request(0, 0, 0, np.ones(n_models, dtype=np.bool_), draw(st.integers(0, 2)))
    req: Request = draw(requests(n_models))
    return req


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Request, Held, Host, npt.NDArray[np.bool_]]:
    cl = draw(clusters())
    req = draw(shapes(cl.n_models))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        # Room for many pods, so the cards (not the node's pod slots) decide the count.
        cl.node_pods_free[:] = rng.integers(0, 200, cl.n)
    held = random_held(rng, cl.n) if draw(st.booleans()) else Held.none(cl.n)
    host = Host(
        cpu=draw(st.sampled_from([0, 0, 1, 500, 4000])),
        mem_bytes=draw(st.sampled_from([0, 0, 1, GiB, 40 * GiB])),
        cap=draw(st.sampled_from([0, 1, 3, 64, 2**31 - 1])),
    )
    cand = rng.random(cl.n) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    return cl, req, held, host, cand


@SETTINGS
@given(cases())
def test_kernel_equals_twin(
    case: tuple[Cluster, Request, Held, Host, npt.NDArray[np.bool_]],
) -> None:
    cl, req, held, host, cand = case
    total_nb, nb = run(gang_fit_nb, cl, req, held, host, cand)
    total_np, ref = run(gang_fit_np, cl, req, held, host, cand)
    np.testing.assert_array_equal(nb, ref)
    assert total_nb == total_np == int(ref.astype(np.int64).sum())
    assert (nb >= 0).all() and (nb <= host.cap).all()
    assert (nb[~(cl.node_valid & cand)] == 0).all()


@SETTINGS
@given(clusters(), st.data())
def test_one_pod_fits_exactly_where_gpu_summary_says(cl: Cluster, data: st.DataObject) -> None:
    # With nothing held and room on the node, the count is >= 1 iff gpu_summary fits: the
    # two kernels apply the same card rules.
    req = data.draw(requests(cl.n_models))
    roomy(cl)
    _, s = summarise(gpu_summary_nb, cl, req)
    for kernel in KERNELS:
        _, out = run(kernel, cl, req)
        np.testing.assert_array_equal(out >= 1, s.fit)
