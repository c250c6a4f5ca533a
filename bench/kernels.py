"""Per-pod Filter + Score cost of the GPU kernels, jitted vs NumPy twins.

Run: ``.venv/bin/python bench/kernels.py`` (``make bench``). Prints one table: for each
request shape, the median time of ``gpu_summary`` + ``frag_score`` + ``packing_score`` for
one pod over a 10,000-node x 8-card cluster with a realistic random fill, and the time to
update one node's row in the snapshot columns. Targets: <= 50 us per pod jitted, <= 5 us
per row update.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusched.core.cache.snapshot import Snapshot
from gpusched.kernels import (
    frag_score_nb,
    frag_score_np,
    gpu_summary_nb,
    gpu_summary_np,
    packing_score_nb,
    packing_score_np,
)
from gpusched.kernels.card_prices import price_loss_nb, price_loss_np
from gpusched.model.node import Card, NodeModel
from gpusched.plugins.gpu_fragmentation.prices import UNIT, CardPrices, LossCache
from gpusched.plugins.helper.gpu_state import GpuRequest, SummaryCache, restrict

C = 8
# (model id, card MiB, NVLink islands of an 8-card node, share of the fleet)
NODE_KINDS = [
    (0, 81920, [0, 0, 0, 0, 1, 1, 1, 1], 0.4),  # A100 80GB, two NVLink quads
    (1, 81920, [0] * 8, 0.3),  # H100 SXM, one NVSwitch island
    (2, 49152, [-1] * 8, 0.2),  # L40S, PCIe only (island unknown)
    (3, 24576, [-1] * 8, 0.1),  # L4, 4 cards per node
]


@dataclass
class Columns:
    card_free_milli: npt.NDArray[np.int32]
    card_free_mem: npt.NDArray[np.int32]
    card_total_mem: npt.NDArray[np.int32]
    card_model: npt.NDArray[np.int16]
    card_healthy: npt.NDArray[np.bool_]
    card_island: npt.NDArray[np.int8]
    node_valid: npt.NDArray[np.bool_]
    node_cpu_free: npt.NDArray[np.int64]
    node_mem_free: npt.NDArray[np.int64]

    def cards(self) -> tuple[npt.NDArray[np.generic], ...]:
        return (
            self.card_free_milli,
            self.card_free_mem,
            self.card_total_mem,
            self.card_model,
            self.card_healthy,
            self.card_island,
        )


def realistic_cluster(n: int, seed: int = 7) -> Columns:
    """A busy fleet: ~30% idle nodes, ~30% full ones, the rest a mix of whole-card jobs,
    torn cards shared by small pods (125..875 milli), and the odd unhealthy card."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(len(NODE_KINDS), n, p=[k[3] for k in NODE_KINDS])
    model = np.full((n, C), -1, dtype=np.int16)
    total = np.zeros((n, C), dtype=np.int32)
    island = np.full((n, C), -1, dtype=np.int8)
    for i, (mid, mem, isl, _) in enumerate(NODE_KINDS):
        rows = kinds == i
        cards = 4 if mid == 3 else 8
        model[rows, :cards] = mid
        total[rows, :cards] = mem
        island[rows, :cards] = isl[:cards]
    present = model >= 0
    load = rng.choice(3, n, p=[0.3, 0.3, 0.4])  # idle, full, mixed
    state = rng.random((n, C))
    torn = rng.integers(1, 8, (n, C)) * 125
    free_milli = np.where(state < 0.45, 1000, np.where(state < 0.75, 0, torn))
    free_milli[load == 0] = 1000
    free_milli[load == 1] = 0
    free_milli = np.where(present, free_milli, 0).astype(np.int32)
    free_mem = (total.astype(np.int64) * free_milli // 1000).astype(np.int32)
    healthy = present & (rng.random((n, C)) > 0.005)
    return Columns(
        card_free_milli=free_milli,
        card_free_mem=free_mem,
        card_total_mem=total,
        card_model=model,
        card_healthy=healthy,
        card_island=island,
        node_valid=np.ones(n, dtype=np.bool_),
        node_cpu_free=rng.integers(0, 128_000, n).astype(np.int64),
        node_mem_free=rng.integers(0, 2**40, n).astype(np.int64),
    )


def median_us(fn: Callable[[], object], reps: int) -> float:
    fn()  # compile / warm caches
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000.0


def pod_cycle(cols: Columns, req: tuple[int, int, int, int], jit: bool) -> Callable[[], object]:
    n = cols.card_free_milli.shape[0]
    summary = gpu_summary_nb if jit else gpu_summary_np
    frag = frag_score_nb if jit else frag_score_np
    packing = packing_score_nb if jit else packing_score_np
    k, milli, mem, nvlink = req
    allowed = np.ones(4, dtype=np.bool_)
    candidates = np.ones(n, dtype=np.bool_)
    fit = np.zeros(n, dtype=np.bool_)
    intact = np.zeros(n, dtype=np.int16)
    usable = np.zeros(n, dtype=np.int16)
    leftover = np.zeros(n, dtype=np.int32)
    partial = np.zeros(n, dtype=np.bool_)
    total = np.zeros(n, dtype=np.int32)
    s_frag = np.zeros(n)
    s_pack = np.zeros(n)
    cards = cols.cards()
    valid = cols.node_valid

    def cycle() -> object:
        summary(
            *cards,
            valid,
            candidates,
            k,
            milli,
            mem,
            allowed,
            nvlink,
            fit,
            intact,
            usable,
            leftover,
            partial,
            total,
        )
        frag(fit, intact, usable, leftover, partial, k, s_frag)
        packing(fit, intact, partial, k, s_pack)
        return None

    return cycle


def snapshot_of(cols: Columns) -> Snapshot:
    """A real Snapshot holding the benchmark's columns (all rows valid)."""
    n = cols.card_free_milli.shape[0]
    snap = Snapshot(C, capacity=n)
    for name in (
        "card_free_milli",
        "card_free_mem",
        "card_total_mem",
        "card_model",
        "card_healthy",
        "card_island",
        "node_valid",
        "node_cpu_free",
        "node_mem_free",
    ):
        getattr(snap, name)[:] = getattr(cols, name)
    snap.node_card_count[:] = (cols.card_model >= 0).sum(axis=1)
    return snap


def one_row_changed(snap: Snapshot, rng: np.random.Generator) -> Callable[[], None]:
    """Each call flips one card of a random row and touches it: a bind or a release on one
    node, the churn between two pods that the per-shape caches refresh."""
    rows = rng.integers(0, snap.capacity, size=1 << 16)
    step = [0]

    def churn() -> None:
        row = int(rows[step[0] & 0xFFFF])
        step[0] += 1
        snap.card_free_milli[row, 0] ^= 1
        snap.touch(row)

    return churn


def incremental_cycle(
    snap: Snapshot, req: tuple[int, int, int, int], rng: np.random.Generator
) -> Callable[[], object]:
    """GPUFit's path in the scheduler: the cached summary of this request shape brought up
    to date after one bind changed one row, then the same two scores."""
    k, milli, mem, nvlink = req
    request = GpuRequest(k, milli, mem, nvlink, np.ones(4, dtype=np.bool_))
    cache = SummaryCache()
    n = snap.capacity
    candidates = snap.node_valid.copy()
    s_frag = np.zeros(n)
    s_pack = np.zeros(n)
    churn = one_row_changed(snap, rng)

    def cycle() -> object:
        churn()
        s = restrict(cache.summary(snap, request, ()), candidates)
        frag_score_nb(s.fit, s.intact, s.usable, s.best_leftover, s.best_is_partial, k, s_frag)
        packing_score_nb(s.fit, s.intact, s.best_is_partial, k, s_pack)
        return None

    return cycle


def snapshot_update_us(reps: int) -> dict[str, float]:
    """The snapshot's own row writes: a pod bound or released, a node updated."""
    snap = Snapshot(C, capacity=64)
    cards = tuple(Card(i, "A100", 81920, nvlink_island=i // 4) for i in range(C))
    node = NodeModel("n", 64_000, 2**39, 110, cards=cards, rack="r1")
    row = snap.upsert_node(node)
    ids, milli, mem = (1, 2), (1000, 1000), (81920, 81920)

    def bind_release() -> None:
        snap.apply(row, 8000, 2**34, ids, milli, mem)
        snap.apply(row, 8000, 2**34, ids, milli, mem, -1)

    return {
        "Snapshot.apply: bind + release a 2-card pod": median_us(bind_release, reps) / 2,
        "Snapshot.upsert_node: node update": median_us(lambda: snap.upsert_node(node), reps),
    }


def row_update_us(cols: Columns, reps: int) -> dict[str, float]:
    """Ways to write one node's row (8 cards' free milli and MiB, node cpu/mem free)."""
    fm, fmem = cols.card_free_milli, cols.card_free_mem
    cpu, mem = cols.node_cpu_free, cols.node_mem_free
    new_milli = np.array([1000, 750, 0, 0, 1000, 1000, 500, 0], dtype=np.int32)
    new_mem = (new_milli.astype(np.int64) * 81920 // 1000).astype(np.int32)
    row = 4321
    milli_list = new_milli.tolist()
    mem_list = new_mem.tolist()

    def slice_assign() -> None:
        fm[row] = new_milli
        fmem[row] = new_mem
        cpu[row] = 64_000
        mem[row] = 2**39

    def slice_assign_colon() -> None:
        fm[row, :] = new_milli
        fmem[row, :] = new_mem
        cpu[row] = 64_000
        mem[row] = 2**39

    def from_lists() -> None:
        fm[row] = milli_list
        fmem[row] = mem_list
        cpu[row] = 64_000
        mem[row] = 2**39

    def per_card() -> None:
        for c in range(C):
            fm[row, c] = milli_list[c]
            fmem[row, c] = mem_list[c]
        cpu[row] = 64_000
        mem[row] = 2**39

    return {
        "fm[row] = arr (numpy rows)": median_us(slice_assign, reps),
        "fm[row, :] = arr": median_us(slice_assign_colon, reps),
        "fm[row] = list": median_us(from_lists, reps),
        "fm[row, c] = v per card": median_us(per_card, reps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=2000, help="repetitions, jitted")
    parser.add_argument("--twin-reps", type=int, default=50, help="repetitions, NumPy twin")
    args = parser.parse_args()
    if os.environ.get("NUMBA_DISABLE_JIT") == "1":
        print("note: NUMBA_DISABLE_JIT=1, the 'jitted' column is pure Python")
    cols = realistic_cluster(args.nodes)
    fm = cols.card_free_milli
    print(
        f"cluster: {args.nodes} nodes x {C} card slots; cards intact "
        f"{(fm == 1000).mean():.0%}, full {((fm == 0) & cols.card_healthy).mean():.0%}, "
        f"torn {((fm > 0) & (fm < 1000)).mean():.0%}"
    )
    requests = [
        ("whole 1 card", (1, 0, 0, 0)),
        ("whole 4 cards, nvlink preferred", (4, 0, 0, 1)),
        ("whole 4 cards, nvlink required", (4, 0, 0, 2)),
        ("whole 8 cards, nvlink required", (8, 0, 0, 2)),
        ("shared 250 milli", (0, 250, 0, 0)),
        ("shared 250 milli + 10 GiB", (0, 250, 10240, 0)),
    ]
    print()
    header = "request (summary + frag + packing)"
    print(f"{header:<36}{'jitted us':>11}{'twin us':>11}{'twin/jit':>10}{'cached us':>11}")
    snap = snapshot_of(cols)
    rng = np.random.default_rng(3)
    for name, req in requests:
        jit = median_us(pod_cycle(cols, req, jit=True), args.reps)
        twin = median_us(pod_cycle(cols, req, jit=False), args.twin_reps)
        cached = median_us(incremental_cycle(snap, req, rng), args.reps)
        flag = "" if min(jit, cached) <= 50.0 else "  (over the 50 us target)"
        print(f"{name:<36}{jit:>11.1f}{twin:>11.1f}{twin / jit:>9.1f}x{cached:>11.1f}{flag}")
    print(
        "cached: GPUFit's summary cache (gpusched/plugins/helper/gpu_state.py) after one bind"
        " changed one row; the scheduler's real per-pod path"
    )
    print()
    print(f"{'update one node row (8 cards + cpu/mem)':<46}{'us':>8}")
    for name, us in {**row_update_us(cols, args.reps * 5), **snapshot_update_us(args.reps)}.items():
        print(f"{name:<46}{us:>8.2f}")
    print()
    card_prices(snap, args.reps, args.twin_reps)


# An openb-like mix of shared-pod sizes (milli per card: weight), for the card prices.
SHARED_MIX = {810: 1100, 470: 760, 320: 340, 650: 260, 230: 150, 460: 130, 160: 80, 50: 7}


def card_prices(snap: Snapshot, reps: int, twin_reps: int) -> None:
    """GPUFragmentation's card prices: the per-pod loss over every row, and the LP
    re-solve the plugin runs every priceRefreshPods pods."""
    prices = CardPrices()
    rows = np.nonzero(snap.node_valid)[0].astype(np.intp)
    loss = np.empty(len(rows))
    card = np.empty(len(rows), np.int16)
    allowed = np.ones(4, np.bool_)
    prices.update(SHARED_MIX, cpu_per_card=8000.0)

    def run(fn: Callable[..., None]) -> Callable[[], object]:
        def go() -> object:
            fn(
                rows, snap.card_free_milli, snap.node_card_count, snap.card_model,
                snap.card_healthy, allowed, snap.node_cpu_free, prices.value, UNIT, 470,
                prices.price_of(470), 4000, prices.cpu_per_card, loss, card,
            )  # fmt: skip
            return None

        return go

    jit = median_us(run(price_loss_nb), reps)
    twin = median_us(run(price_loss_np), twin_reps)
    print(f"{'card prices: loss of a 470-milli pod, all rows':<46}{jit:>8.1f} us jitted,"
          f" {twin:.1f} us twin ({twin / jit:.1f}x)")  # fmt: skip
    cache = LossCache()
    churn = one_row_changed(snap, np.random.default_rng(5))

    def cached() -> object:
        churn()
        return cache.losses(snap, prices, milli=470, cpu=4000, models=(), use_cpu=True)

    print(f"{'  same, cached per shape, one row changed':<46}{median_us(cached, reps):>8.1f} us")
    solve = median_us(lambda: prices.update(SHARED_MIX, 8000.0), 20)
    print(f"{'card prices: LP re-solve, 8 sizes':<46}{solve / 1000:>8.2f} ms")


if __name__ == "__main__":
    main()
