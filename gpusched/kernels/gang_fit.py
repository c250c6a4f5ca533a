"""``gang_fit``: how many pods of one shape fit on each node at once, card by card.

Gang scheduling asks, per node row, for the number of copies of one pod shape the node can
take simultaneously once the plans of other gangs (``held_*``) are set aside. The card rules
are ``gpu_summary``'s (see its docstring and ``_card_rules.py``):

* usable card: present (model >= 0), healthy, model allowed by the request.
* whole-card pod (``req_cards = k >= 1``): eligible cards are usable, intact
  (``free_milli == 1000``) and, when ``req_mem > 0``, hold ``free_mem >= req_mem``.

  - ``nvlink != 2``: ``floor(max(0, eligible - held_cards) / k)`` pods.
  - ``nvlink == 2`` (required): each pod needs its k cards inside one known NVLink island
    (id >= 0; unknown islands, -1, never count), so the row takes
    ``sum over islands of floor(eligible_in_island / k)`` pods, minus
    ``ceil(held_cards / k)``, floored at 0. **Conservative:** the held cards are charged as
    if each held pod-sized group cost one whole pod slot, whichever island they come from
    (they may come from an island's leftover cards that no pod of this shape could use).

* shared pod (``req_cards == 0`` and ``req_milli > 0`` or ``req_mem > 0``): on card c a
  pod needs ``need_milli`` and ``need_mem`` (a share of compute implies the same share of
  memory and back; a memory ask on a card of unknown memory, ``total_mem <= 0``, never
  fits). Card c takes ``fits_c = min(free_milli // need_milli, free_mem // need_mem)`` pods
  (the memory term only when ``need_mem > 0``), 0 when not usable or not fitting once (an
  over-allocated card, ``free_milli < 0``, takes none). The row takes
  ``sum_c fits_c - held_cards * max_c fits_c``, floored at 0. **Conservative:** each held
  whole card is assumed to be the row's roomiest one.
* no GPU ask (``req_cards == req_milli == req_mem == 0``): the cards do not limit.

The count is then capped by the node's CPU, memory and pod slots left after the held amounts
(``(cpu_free - held_cpu) // req_cpu`` when ``req_cpu > 0``, the same for memory bytes,
``pods_free - held_pods``), floored at 0 and capped at ``cap``. Negative ``held_*`` values
(a caller's bug) count as 0 rather than lending the node capacity it does not have. Rows that
are not ``node_valid & candidates`` get 0. Every count is at most ``pods_free`` (int32), and
the returned sum is accumulated in int64. ``cap < 0`` and more than 63 card slots per node
(gpu_summary's limit) raise ValueError.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._card_rules import (
    INTACT_MILLI,
    MAX_CARDS,
    shared_need_np,
    usable_cards_np,
)
from gpusched.kernels._jit import Int, njit_inline, njit_kernel

# The per-card phase reuses gpu_summary's own loops (usable flags, whole-card eligibility,
# island slots): the two kernels then cannot drift apart on which card a pod may take.
from gpusched.kernels.gpu_summary import (
    HIGH_ISLAND,
    ONES8,
    _byte_sum,
    _island_slots,
    _usable_bits,
    _usable_gather,
    _whole_cards,
    _whole_cards_mem,
)

# Rows per block: the block's scratch (at most 8 bytes per card slot) stays in L1.
BLOCK_ROWS = 512
# NVLink island ids are int8: known ones are 0..127, so a per-island histogram has 128 bins.
ISLAND_BINS = 128
# Integers below 2**53 are exact in float64, and so is the truncated quotient of two of them
# (the rounding error of a / b is below 1 / b, its distance to the next integer).
EXACT_F64 = 1 << 53
# Room is at most the node's free pod slots (int32), so larger quotients can be clamped here.
INT32_MAX_F = 2147483647.0


@njit_kernel
def gang_fit_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    candidates: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    held_cards: npt.NDArray[np.int32],
    held_cpu: npt.NDArray[np.int64],
    held_mem: npt.NDArray[np.int64],
    held_pods: npt.NDArray[np.int32],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    req_cpu: int,
    req_mem_bytes: int,
    cap: int,
    out_count: npt.NDArray[np.int32],
) -> int:
    """Write per row the number of pods of this shape that fit at once; return their sum.

    Works in blocks of rows like ``gpu_summary_nb`` (a per-row loop over 8 cards with
    branches ran 7x slower), three phases per block:

    0. per row, the room the node's CPU, memory and pod slots leave (and ``cap``); a block
       where no row has room skips the cards;
    1. flat, branch-free loops over the block's cards (vectorised) write per-card scratch:
       gpu_summary's usable / eligible flags and island slots, or a shared pod's ``fits_c``
       (integer quotients from exact float64 divisions: integer division does not
       vectorise);
    2. short loops over the block's rows reduce the scratch into the counts.
    """
    N, C = card_free_milli.shape
    if C > MAX_CARDS:
        raise ValueError("gang_fit: more than 63 card slots per node")
    if cap < 0:
        raise ValueError("gang_fit: cap must be >= 0")
    M = allowed_models.shape[0]
    model_bits = np.int64(0)
    for i in range(min(M, 64)):
        if allowed_models[i]:
            model_bits |= np.int64(1) << i
    k = np.int64(req_cards)
    r_milli = np.int64(req_milli)
    r_mem = np.int64(req_mem)
    whole = k > 0
    shared = not whole and (r_milli > 0 or r_mem > 0)
    islands = whole and nvlink == 2
    # floor(i / k) for every count a row can reach (at most 63 cards): a lookup, not a
    # division per row.
    # ceil(held / k) reads it at held + k - 1 <= 64 + 64 - 1.
    per_k = np.zeros(2 * MAX_CARDS + 2, dtype=np.int64)
    if whole:
        for i in range(per_k.shape[0]):
            per_k[i] = i // k
    island_one = np.zeros(9, dtype=np.uint64)
    for i in range(8):
        island_one[i] = np.uint64(1) << np.uint64(8 * i)

    free_milli = card_free_milli.ravel()
    free_mem = card_free_mem.ravel()
    total_mem = card_total_mem.ravel()
    model = card_model.ravel()
    healthy = card_healthy.ravel()
    island = card_island.ravel()

    B = BLOCK_ROWS
    room = np.zeros(B, dtype=np.int64)
    flags = np.zeros(B * C if whole or shared else 0, dtype=np.uint8)
    milli = np.zeros(B * C if whole else 0, dtype=np.int16)
    slots = np.zeros(B * C if islands else 0, dtype=np.uint8)
    fits = np.zeros(B * C if shared else 0, dtype=np.int32)
    hist = np.zeros(ISLAND_BINS, dtype=np.int64)

    total = np.int64(0)
    for r0 in range(0, N, B):
        rows = min(N, r0 + B) - r0
        lo = r0 * C
        hi = lo + rows * C
        room_b = room[:rows]
        out_b = out_count[r0 : r0 + rows]
        if not _room(
            node_valid[r0 : r0 + rows],
            candidates[r0 : r0 + rows],
            node_pods_free[r0 : r0 + rows],
            held_pods[r0 : r0 + rows],
            node_cpu_free[r0 : r0 + rows],
            held_cpu[r0 : r0 + rows],
            node_mem_free[r0 : r0 + rows],
            held_mem[r0 : r0 + rows],
            np.int64(req_cpu),
            np.int64(req_mem_bytes),
            np.int64(cap),
            room_b,
        ):
            out_b[:] = 0
            continue
        held_b = held_cards[r0 : r0 + rows]
        if not (whole or shared):
            total += _no_gpu_rows(room_b, out_b)
            continue
        if M <= 64:
            _usable_bits(model[lo:hi], healthy[lo:hi], model_bits, M, flags)
        else:
            _usable_gather(model[lo:hi], healthy[lo:hi], allowed_models, flags)
        if shared:
            if r_mem > 0:
                _shared_fits_mem(
                    free_milli[lo:hi],
                    free_mem[lo:hi],
                    total_mem[lo:hi],
                    r_milli,
                    r_mem,
                    flags,
                    fits,
                )
            else:
                _shared_fits(
                    free_milli[lo:hi], free_mem[lo:hi], total_mem[lo:hi], r_milli, flags, fits
                )
            if C == 8:
                total += _shared_rows8(fits, room_b, held_b, out_b)
            else:
                total += _shared_rows(fits, C, room_b, held_b, out_b)
            continue
        if r_mem > 0:
            _whole_cards_mem(free_milli[lo:hi], free_mem[lo:hi], r_mem, flags, milli)
        else:
            _whole_cards(free_milli[lo:hi], flags, milli)
        if islands:
            _island_slots(island[lo:hi], flags, slots)
            total += _island_rows(
                slots, island_one, flags, island[lo:hi], C, k, per_k, hist, room_b, held_b, out_b
            )
        elif C == 8:
            total += _whole_rows8(flags, per_k, room_b, held_b, out_b)
        else:
            total += _whole_rows(flags, C, per_k, room_b, held_b, out_b)
    return int(total)


@njit_inline
def _held(amount: Int) -> Int:
    """A held amount as int64; a negative one (a caller's bug) holds nothing."""
    x = np.int64(amount)
    return x if x > 0 else np.int64(0)


@njit_kernel
def _room(
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    pods: npt.NDArray[np.int32],
    held_pods: npt.NDArray[np.int32],
    cpu: npt.NDArray[np.int64],
    held_cpu: npt.NDArray[np.int64],
    mem: npt.NDArray[np.int64],
    held_mem: npt.NDArray[np.int64],
    r_cpu: Int,
    r_bytes: Int,
    cap: Int,
    room: npt.NDArray[np.int64],
) -> bool:
    """Phase 0: pods the node's CPU, memory and pod slots leave room for, capped and floored
    at 0 (0 outside ``valid & cand``); whether any row of the block has room.

    Branch-free, with float64 quotients (int64 division costs tens of cycles, rows need two):
    exact while the dividend and divisor are below 2**53, clamped to the int32 range (the
    pod-slot term already is). A block holding larger amounts takes the exact loop.
    """
    if r_cpu >= EXACT_F64 or r_bytes >= EXACT_F64:
        return _room_exact(
            valid, cand, pods, held_pods, cpu, held_cpu, mem, held_mem, r_cpu, r_bytes, cap, room
        )
    per_cpu = np.float64(max(r_cpu, 1))
    per_byte = np.float64(max(r_bytes, 1))
    big = False
    any_room = False
    for b in range(valid.shape[0]):
        x = np.int64(min(cap, np.int64(pods[b]) - _held(held_pods[b])))
        c = cpu[b] - _held(held_cpu[b])
        m = mem[b] - _held(held_mem[b])
        big |= (c >= EXACT_F64) | (m >= EXACT_F64)
        # A negative amount becomes -1: its quotient truncates to 0, as its floor would
        # after the final max(., 0).
        by_cpu = np.int64(min(np.float64(max(c, -1)) / per_cpu, INT32_MAX_F))
        by_mem = np.int64(min(np.float64(max(m, -1)) / per_byte, INT32_MAX_F))
        x = min(x, by_cpu) if r_cpu > 0 else x
        x = min(x, by_mem) if r_bytes > 0 else x
        x = x if (x > 0) & valid[b] & cand[b] else np.int64(0)
        room[b] = x
        any_room |= bool(x > 0)
    if big:
        return _room_exact(
            valid, cand, pods, held_pods, cpu, held_cpu, mem, held_mem, r_cpu, r_bytes, cap, room
        )
    return any_room


@njit_kernel
def _room_exact(
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    pods: npt.NDArray[np.int32],
    held_pods: npt.NDArray[np.int32],
    cpu: npt.NDArray[np.int64],
    held_cpu: npt.NDArray[np.int64],
    mem: npt.NDArray[np.int64],
    held_mem: npt.NDArray[np.int64],
    r_cpu: Int,
    r_bytes: Int,
    cap: Int,
    room: npt.NDArray[np.int64],
) -> bool:
    """:func:`_room` in integer division, for amounts beyond float64's exact integers."""
    any_room = False
    for b in range(valid.shape[0]):
        x = np.int64(0)
        if valid[b] & cand[b]:
            x = np.int64(min(cap, np.int64(pods[b]) - _held(held_pods[b])))
            if r_cpu > 0:
                x = min(x, (cpu[b] - _held(held_cpu[b])) // r_cpu)
            if r_bytes > 0:
                x = min(x, (mem[b] - _held(held_mem[b])) // r_bytes)
        x = x if x > 0 else np.int64(0)
        room[b] = x
        any_room |= bool(x > 0)
    return any_room


@njit_kernel
def _no_gpu_rows(room: npt.NDArray[np.int64], out: npt.NDArray[np.int32]) -> Int:
    total = np.int64(0)
    for b in range(room.shape[0]):
        out[b] = room[b]
        total += room[b]
    return total


# Phase 1 for shared pods: one flat loop per shape (memory asked or not), branch-free so
# LLVM vectorises it. Quotients are float64: operands are int32 columns or products below
# 2**53, so the truncated float quotient is the exact integer one; a product that is not
# exact only arises for needs far above any card, where the card fails `once` anyway.


@njit_kernel
def _shared_fits(
    free_milli: npt.NDArray[np.int32],
    free_mem: npt.NDArray[np.int32],
    total_mem: npt.NDArray[np.int32],
    r_milli: Int,
    flags: npt.NDArray[np.uint8],
    fits: npt.NDArray[np.int32],
) -> None:
    # r_mem == 0: need_milli = r_milli >= 1, need_mem = floor(r_milli * total / 1000) (<= 0
    # on a card of unknown memory: no memory term).
    rm = np.float64(r_milli)
    for j in range(free_milli.shape[0]):
        fm = np.float64(free_milli[j])
        fmem = np.float64(free_mem[j])
        need_mem = np.floor(rm * np.float64(total_mem[j]) / np.float64(INTACT_MILLI))
        once = ((flags[j] & 1) != 0) & (fm >= rm) & (fmem >= need_mem)
        by_milli = fm / max(rm, 1.0)  # see _shared_fits_mem on max(..., 1.0)
        by_mem = fmem / max(need_mem, 1.0)
        q = min(by_milli, by_mem) if need_mem > 0 else by_milli
        fits[j] = np.int32(q) if once else np.int32(0)


@njit_kernel
def _shared_fits_mem(
    free_milli: npt.NDArray[np.int32],
    free_mem: npt.NDArray[np.int32],
    total_mem: npt.NDArray[np.int32],
    r_milli: Int,
    r_mem: Int,
    flags: npt.NDArray[np.uint8],
    fits: npt.NDArray[np.int32],
) -> None:
    # r_mem > 0: need_milli = max(r_milli, ceil(r_mem * 1000 / total)) and need_mem =
    # max(r_mem, floor(r_milli * total / 1000)) >= 1; a card of unknown memory never fits.
    rm = np.float64(r_milli)
    a = np.float64(r_mem * INTACT_MILLI)
    rmem = np.float64(r_mem)
    for j in range(free_milli.shape[0]):
        fm = np.float64(free_milli[j])
        fmem = np.float64(free_mem[j])
        tm = np.float64(total_mem[j])
        need_milli = max(rm, np.ceil(a / max(tm, 1.0)))
        need_mem = max(rmem, np.floor(rm * tm / np.float64(INTACT_MILLI)))
        once = ((flags[j] & 1) != 0) & (tm > 0) & (fm >= need_milli) & (fmem >= need_mem)
        # Both needs are >= 1; max(..., 1.0) says so to LLVM, which then drops numba's
        # division-by-zero check (a branch that keeps the loop scalar).
        q = min(fm / max(need_milli, 1.0), fmem / max(need_mem, 1.0))
        fits[j] = np.int32(q) if once else np.int32(0)


# Phase 2: loops over the block's rows.


@njit_kernel
def _shared_rows8(
    fits: npt.NDArray[np.int32],
    room: npt.NDArray[np.int64],
    held: npt.NDArray[np.int32],
    out: npt.NDArray[np.int32],
) -> Int:
    """Shared counts with 8 slots (the literal trip count unrolls the sum and the max)."""
    total = np.int64(0)
    for b in range(room.shape[0]):
        s = np.int64(0)
        most = np.int64(0)
        for c in range(8):
            v = np.int64(fits[8 * b + c])
            s += v
            most = max(most, v)
        g = max(s - _held(held[b]) * most, 0)
        x = min(room[b], g)
        out[b] = x
        total += x
    return total


@njit_kernel
def _shared_rows(
    fits: npt.NDArray[np.int32],
    C: Int,
    room: npt.NDArray[np.int64],
    held: npt.NDArray[np.int32],
    out: npt.NDArray[np.int32],
) -> Int:
    """Shared counts for any slot count."""
    total = np.int64(0)
    for b in range(room.shape[0]):
        s = np.int64(0)
        most = np.int64(0)
        for c in range(b * C, b * C + C):
            v = np.int64(fits[c])
            s += v
            most = max(most, v)
        g = max(s - _held(held[b]) * most, 0)
        x = min(room[b], g)
        out[b] = x
        total += x
    return total


@njit_kernel
def _whole_rows8(
    flags: npt.NDArray[np.uint8],
    per_k: npt.NDArray[np.int64],
    room: npt.NDArray[np.int64],
    held: npt.NDArray[np.int32],
    out: npt.NDArray[np.int32],
) -> Int:
    """Whole-card counts with 8 slots: a row's eligible bits are one uint64 (SWAR sum)."""
    flags64 = flags.view(np.uint64)
    total = np.int64(0)
    for b in range(room.shape[0]):
        elig = _byte_sum((flags64[b] >> np.uint64(1)) & ONES8)
        free = min(max(elig - _held(held[b]), 0), MAX_CARDS)
        x = min(room[b], per_k[free])
        out[b] = x
        total += x
    return total


@njit_kernel
def _whole_rows(
    flags: npt.NDArray[np.uint8],
    C: Int,
    per_k: npt.NDArray[np.int64],
    room: npt.NDArray[np.int64],
    held: npt.NDArray[np.int32],
    out: npt.NDArray[np.int32],
) -> Int:
    """Whole-card counts for any slot count."""
    total = np.int64(0)
    for b in range(room.shape[0]):
        elig = np.int64(0)
        for c in range(b * C, b * C + C):
            elig += (flags[c] >> 1) & 1
        free = min(max(elig - _held(held[b]), 0), MAX_CARDS)
        x = min(room[b], per_k[free])
        out[b] = x
        total += x
    return total


@njit_kernel
def _island_rows(
    slots: npt.NDArray[np.uint8],
    island_one: npt.NDArray[np.uint64],
    flags: npt.NDArray[np.uint8],
    island: npt.NDArray[np.int8],
    C: Int,
    k: Int,
    per_k: npt.NDArray[np.int64],
    hist: npt.NDArray[np.int64],
    room: npt.NDArray[np.int64],
    held: npt.NDArray[np.int32],
    out: npt.NDArray[np.int32],
) -> Int:
    """NVLink-required counts: sum over known islands of floor(eligible in island / k),
    minus ceil(held / k).

    Islands 0..7 are the bytes of one uint64 histogram per row (as in ``gpu_summary``),
    branch-free; rows with eligible cards in islands >= 8 (flagged ``HIGH_ISLAND``; never,
    on real topologies) are recounted afterwards through ``hist``.
    """
    total = np.int64(0)
    any_high = False
    for b in range(room.shape[0]):
        h = np.uint64(0)
        high = np.uint8(0)
        if C == 8:
            # Literal trip count: unrolled, no per-row loop overhead.
            for c in range(8):
                h += island_one[slots[8 * b + c]]
                high |= flags[8 * b + c]
        else:
            for c in range(b * C, b * C + C):
                h += island_one[slots[c]]
                high |= flags[c]
        x = _held_islands(h, per_k, k, np.int64(0), held[b], room[b])
        any_high |= (room[b] > 0) & ((high & HIGH_ISLAND) != 0)
        out[b] = x
        total += x
    if any_high:
        for b in range(room.shape[0]):
            j0 = b * C
            high = np.uint8(0)
            h = np.uint64(0)
            for c in range(j0, j0 + C):
                h += island_one[slots[c]]
                high |= flags[c]
            if room[b] > 0 and high & HIGH_ISLAND:
                extra = _high_island_pods(flags, island, j0, C, k, hist)
                x = _held_islands(h, per_k, k, extra, held[b], room[b])
                total += x - np.int64(out[b])
                out[b] = x
    return total


@njit_inline
def _held_islands(
    h: np.uint64, per_k: npt.NDArray[np.int64], k: Int, extra: Int, held: Int, room: Int
) -> Int:
    """One row's count from its island histogram ``h`` (islands 0..7) and ``extra`` pods
    in higher islands: their pods minus ceil(held / k), within [0, room]."""
    pods = extra
    for i in range(8):
        pods += per_k[np.int64((h >> np.uint64(8 * i)) & np.uint64(0xFF))]
    # A row holds at most 63 cards, i.e. at most floor(63 / k) pods: held amounts above 64
    # zero the count as 64 does, and per_k's index stays in range.
    # Past k = 64 no row takes a pod at all, so any in-range ceiling will do.
    hb = min(_held(held), np.int64(MAX_CARDS + 1))
    pods -= per_k[hb + min(k, np.int64(MAX_CARDS + 1)) - 1] if hb > 0 else 0
    return max(min(room, pods), 0)


@njit_kernel
def _high_island_pods(
    flags: npt.NDArray[np.uint8],
    island: npt.NDArray[np.int8],
    j0: Int,
    C: Int,
    k: Int,
    hist: npt.NDArray[np.int64],
) -> Int:
    """Pods the eligible cards in islands >= 8 of one row take; leaves ``hist`` zeroed."""
    for c in range(j0, j0 + C):
        if flags[c] & HIGH_ISLAND:
            hist[island[c]] += 1
    pods = np.int64(0)
    for c in range(j0, j0 + C):
        if flags[c] & HIGH_ISLAND:
            pods += hist[island[c]] // k
            hist[island[c]] = 0
    return pods


def gang_fit_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    candidates: npt.NDArray[np.bool_],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    held_cards: npt.NDArray[np.int32],
    held_cpu: npt.NDArray[np.int64],
    held_mem: npt.NDArray[np.int64],
    held_pods: npt.NDArray[np.int32],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    req_cpu: int,
    req_mem_bytes: int,
    cap: int,
    out_count: npt.NDArray[np.int32],
) -> int:
    """NumPy twin of :func:`gang_fit_nb` (same arguments, same outputs)."""
    N, C = card_free_milli.shape
    if C > MAX_CARDS:
        raise ValueError("gang_fit: more than 63 card slots per node")
    if cap < 0:
        raise ValueError("gang_fit: cap must be >= 0")
    rows = node_valid & candidates
    held = np.maximum(held_cards.astype(np.int64), 0)
    room = np.minimum(
        np.int64(cap), node_pods_free.astype(np.int64) - np.maximum(held_pods.astype(np.int64), 0)
    )
    if req_cpu > 0:
        room = np.minimum(room, (node_cpu_free - np.maximum(held_cpu, 0)) // req_cpu)
    if req_mem_bytes > 0:
        room = np.minimum(room, (node_mem_free - np.maximum(held_mem, 0)) // req_mem_bytes)
    usable = usable_cards_np(card_model, card_healthy, allowed_models)
    free_milli = card_free_milli.astype(np.int64)
    free_mem = card_free_mem.astype(np.int64)
    if req_cards > 0:
        elig = usable & (free_milli == INTACT_MILLI)
        if req_mem > 0:
            elig &= free_mem >= req_mem
        if nvlink == 2:
            known = elig & (card_island >= 0)
            bins = np.arange(N)[:, None] * ISLAND_BINS + card_island.astype(np.int64)
            per_island = np.bincount(bins[known], minlength=N * ISLAND_BINS)
            pods = (per_island.reshape(N, ISLAND_BINS) // req_cards).sum(axis=1)
            gpu = pods - (-(-held // req_cards))
        else:
            gpu = np.maximum(elig.sum(axis=1) - held, 0) // req_cards
    elif req_milli > 0 or req_mem > 0:
        need_milli, need_mem, has_mem = shared_need_np(req_milli, req_mem, card_total_mem)
        once = usable & has_mem & (free_milli >= need_milli) & (free_mem >= need_mem)
        by_milli = free_milli // np.where(once, need_milli, 1)
        by_mem = np.where(need_mem > 0, free_mem // np.maximum(need_mem, 1), by_milli)
        fits = np.where(once, np.minimum(by_milli, by_mem), 0)
        most = fits.max(axis=1, initial=0)
        gpu = fits.sum(axis=1) - held * most
    else:
        gpu = room
    count = np.where(rows, np.maximum(np.minimum(room, gpu), 0), 0)
    out_count[:] = count
    return int(count.sum())
