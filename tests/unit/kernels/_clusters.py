"""Random clusters and requests for the kernel property tests, plus small helpers.

Contents come from a seeded NumPy generator drawn by Hypothesis (fast to build; shrinking
then works on the shape, the fill mix and the request, which is where bugs hide).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

MEM_SIZES = np.array([0, 16384, 24576, 40960, 81920], dtype=np.int32)


@dataclass
class Cluster:
    card_free_milli: npt.NDArray[np.int32]
    card_free_mem: npt.NDArray[np.int32]
    card_total_mem: npt.NDArray[np.int32]
    card_model: npt.NDArray[np.int16]
    card_healthy: npt.NDArray[np.bool_]
    card_island: npt.NDArray[np.int8]
    node_valid: npt.NDArray[np.bool_]
    node_cpu_free: npt.NDArray[np.int64]
    node_mem_free: npt.NDArray[np.int64]
    node_pods_free: npt.NDArray[np.int32]
    node_cpu_alloc: npt.NDArray[np.int64]
    node_mem_alloc: npt.NDArray[np.int64]
    node_temp: npt.NDArray[np.float32]
    n_models: int

    @property
    def n(self) -> int:
        return int(self.card_free_milli.shape[0])

    def cards(self) -> tuple[npt.NDArray[np.generic], ...]:
        return (
            self.card_free_milli,
            self.card_free_mem,
            self.card_total_mem,
            self.card_model,
            self.card_healthy,
            self.card_island,
        )


@dataclass
class Request:
    req_cards: int
    req_milli: int
    req_mem: int
    allowed_models: npt.NDArray[np.bool_]
    nvlink: int

    def args(self) -> tuple[object, ...]:
        return (self.req_cards, self.req_milli, self.req_mem, self.allowed_models, self.nvlink)


def build_cluster(seed: int, n: int, c: int, n_models: int, p_intact: float) -> Cluster:
    rng = np.random.default_rng(seed)
    n_cards = rng.integers(0, c + 1, n)
    present = np.arange(c)[None, :] < n_cards[:, None]
    node_size = MEM_SIZES[rng.integers(0, MEM_SIZES.size, n)]
    # Mostly one size per node (as in real clusters), sometimes mixed or odd sizes.
    total = np.repeat(node_size[:, None], c, axis=1)
    mixed = rng.random((n, c)) < 0.1
    total = np.where(mixed, MEM_SIZES[rng.integers(0, MEM_SIZES.size, (n, c))], total)
    odd = rng.random((n, c)) < 0.05
    total = np.where(odd, rng.integers(1, 100_000, (n, c)), total).astype(np.int32)
    state = rng.random((n, c))
    partial = rng.choice(np.array([1, 125, 250, 333, 500, 750, 999]), (n, c))
    partial = np.where(rng.random((n, c)) < 0.5, partial, rng.integers(0, 1001, (n, c)))
    free_milli = np.where(state < p_intact, 1000, np.where(state < p_intact + 0.2, 0, partial))
    # Memory mostly follows milli; sometimes it is off either way (the two are independent
    # columns in the snapshot and the kernels must not assume they agree).
    free_mem = total.astype(np.int64) * free_milli // 1000
    jitter = rng.random((n, c)) < 0.2
    free_mem = np.where(jitter, rng.integers(0, np.maximum(total, 1) + 1), free_mem)
    model = rng.integers(0, n_models + 1, (n, c))  # n_models = an id the request may not know
    # Mostly small island ids; ids >= 8 take the kernels' slow path and must agree too.
    island_ids = np.array([0, 1, 2, 9, 100])
    island = island_ids[rng.choice(5, (n, c), p=[0.35, 0.3, 0.15, 0.1, 0.1])]
    island = np.where(rng.random((n, c)) < 0.15, -1, island)
    healthy = rng.random((n, c)) < 0.9
    free_milli = np.where(present, free_milli, 0).astype(np.int32)
    free_mem = np.where(present, free_mem, 0).astype(np.int32)
    total = np.where(present, total, 0).astype(np.int32)
    model = np.where(present, model, -1).astype(np.int16)
    island = np.where(present, island, -1).astype(np.int8)
    cpu_alloc = rng.choice(np.array([0, 8000, 64000, 128000]), n).astype(np.int64)
    mem_alloc = rng.choice(np.array([0, 2**34, 2**38]), n).astype(np.int64)
    temp = rng.uniform(30.0, 95.0, n).astype(np.float32)
    temp[rng.random(n) < 0.2] = np.nan
    return Cluster(
        card_free_milli=free_milli,
        card_free_mem=free_mem,
        card_total_mem=total,
        card_model=model,
        card_healthy=healthy,
        card_island=island,
        node_valid=rng.random(n) < 0.9,
        node_cpu_free=(cpu_alloc * rng.random(n)).astype(np.int64),
        node_mem_free=(mem_alloc * rng.random(n)).astype(np.int64),
        node_pods_free=rng.integers(0, 4, n).astype(np.int32),
        node_cpu_alloc=cpu_alloc,
        node_mem_alloc=mem_alloc,
        node_temp=temp,
        n_models=n_models,
    )


@st.composite
def clusters(draw: st.DrawFn, max_n: int = 64, max_c: int = 8) -> Cluster:
    return build_cluster(
        seed=draw(st.integers(0, 2**32 - 1)),
        n=draw(st.integers(0, max_n)),
        c=draw(st.integers(1, max_c)),
        n_models=draw(st.integers(1, 4)),
        p_intact=draw(st.sampled_from([0.0, 0.3, 0.6, 0.9])),
    )


@st.composite
def requests(draw: st.DrawFn, n_models: int) -> Request:
    whole = draw(st.booleans())
    if draw(st.booleans()):
        allowed = np.ones(n_models, dtype=np.bool_)
    else:
        allowed = np.array(draw(st.lists(st.booleans(), min_size=n_models, max_size=n_models)))
    req_mem = draw(st.sampled_from([0, 0, 1, 8000, 20000, 40960, 81920, 100_000]))
    if whole:
        return Request(draw(st.integers(1, 8)), 0, req_mem, allowed, draw(st.integers(0, 2)))
    milli = draw(st.one_of(st.sampled_from([1, 250, 500, 999, 1000]), st.integers(1, 1000)))
    return Request(0, milli, req_mem, allowed, draw(st.integers(0, 2)))


@dataclass
class Summary:
    fit: npt.NDArray[np.bool_]
    intact: npt.NDArray[np.int16]
    usable: npt.NDArray[np.int16]
    best_leftover: npt.NDArray[np.int32]
    best_is_partial: npt.NDArray[np.bool_]
    free_milli_total: npt.NDArray[np.int32]

    @classmethod
    def empty(cls, n: int) -> Summary:
        # Garbage-filled on purpose: a kernel that skips a row must still write it.
        return cls(
            np.ones(n, dtype=np.bool_),
            np.full(n, 77, dtype=np.int16),
            np.full(n, 77, dtype=np.int16),
            np.full(n, 77, dtype=np.int32),
            np.ones(n, dtype=np.bool_),
            np.full(n, 77, dtype=np.int32),
        )

    def outs(self) -> tuple[npt.NDArray[np.generic], ...]:
        return (
            self.fit,
            self.intact,
            self.usable,
            self.best_leftover,
            self.best_is_partial,
            self.free_milli_total,
        )


def summarise(
    kernel: Callable[..., int],
    cl: Cluster,
    req: Request,
    candidates: npt.NDArray[np.bool_] | None = None,
) -> tuple[int, Summary]:
    s = Summary.empty(cl.n)
    cand = np.ones(cl.n, dtype=np.bool_) if candidates is None else candidates
    n_fit = kernel(*cl.cards(), cl.node_valid, cand, *req.args(), *s.outs())
    return int(n_fit), s


def node(
    free_milli: list[int],
    total_mem: int = 81920,
    island: list[int] | None = None,
    model: int = 0,
) -> Cluster:
    """A one-node cluster with the given cards (memory follows milli)."""
    c = len(free_milli)
    cl = build_cluster(seed=0, n=1, c=c, n_models=1, p_intact=1.0)
    cl.card_free_milli[:] = np.array([free_milli], dtype=np.int32)
    cl.card_total_mem[:] = total_mem
    cl.card_free_mem[:] = (cl.card_total_mem.astype(np.int64) * cl.card_free_milli // 1000).astype(
        np.int32
    )
    cl.card_model[:] = model
    cl.card_healthy[:] = True
    cl.card_island[:] = np.array([island if island is not None else [0] * c], dtype=np.int8)
    cl.node_valid[:] = True
    return cl


ALL = np.ones(1, dtype=np.bool_)
