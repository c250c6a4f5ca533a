"""``gpu_summary``: one pass over the N x C card columns -> per-node GPU summaries.

Every GPU Filter and Score plugin reads these few O(N) columns instead of re-streaming the
card columns, so a scheduling cycle touches the card state once per pod.

Card rules (decided with the lead; ``choose_cards`` applies the same ones per card):

* usable card: present (model >= 0), healthy, model allowed by the request.
* whole-card pod (``req_cards = k >= 1``): takes intact cards only, i.e. usable with
  ``free_milli == 1000``; when ``req_mem > 0`` the card must also have ``free_mem >= req_mem``
  (a whole-card job asking for 80 GB cannot run on a 40 GB card). It fits when k such cards
  exist; with ``nvlink == 2`` (required) k of them must share one known NVLink island
  (island -1 = unknown never satisfies "required"; for "preferred" or "none" the island does
  not matter to fit).
* shared pod (``req_cards == 0``): on card c it needs
  ``need_milli = max(req_milli, ceil(req_mem * 1000 / total_mem[c]))`` and
  ``need_mem = max(req_mem, floor(req_milli * total_mem[c] / 1000))``: a share of compute
  implies the same share of memory and vice versa. The card fits when usable,
  ``free_milli >= need_milli`` and ``free_mem >= need_mem``, and, for a pod that asks for
  memory, ``total_mem > 0`` (a card whose memory is unknown serves compute shares only).
  The best-fit card is the fitting card with the smallest ``free_milli - need_milli``,
  ties -> lowest index.

Outputs per row (rows that are not ``node_valid & candidates`` get fit False, zero counts and
leftover -1, so the outputs never carry stale values from a previous pod):

* ``fit``: the pod's GPU request fits (includes ``node_valid`` and ``candidates``).
* ``intact``: whole-card requests: cards the pod could take (above); shared requests: usable
  cards with ``free_milli == 1000``.
* ``usable``: usable cards (the node's GPU capacity as this request sees it; the scores divide
  by it).
* ``best_leftover``: shared: leftover milli of the best-fit card; whole: ``intact - k``;
  -1 where the row does not fit.
* ``best_is_partial``: shared: the best-fit card is already partly used. False otherwise.
* ``free_milli_total``: sum of ``free_milli`` over usable cards; an over-allocated card
  (negative ``free_milli``: the cache keeps pods the API bound beyond a card) counts 0.

A GPU request has ``req_cards >= 1`` or ``req_milli >= 1``; pods without GPUs skip the GPU
plugins rather than calling this kernel. Nodes have at most 63 card slots (a bitmask).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._card_rules import (
    INTACT_MILLI,
    MAX_CARDS,
    NO_LEFTOVER,
    shared_need_np,
    usable_cards_np,
)
from gpusched.kernels._jit import Int, njit_inline, njit_kernel

# Rows per block: the block's scratch (at most 4 bytes per card slot) stays in L1.
BLOCK_ROWS = 512
# Scratch leftover of a card that does not fit: above any real leftover, fits int16.
NO_FIT_16 = 0x7FFF
# Scratch flag bits per card: bit 0 usable; bit 1 eligible (whole: intact and big enough,
# shared: intact); bit 2 (HIGH_ISLAND) eligible in an island id >= 8, outside the per-row
# island histogram.
HIGH_ISLAND = np.uint8(4)
ONES8 = np.uint64(0x0101010101010101)
HIGH8 = np.uint64(0x8080808080808080)


@njit_kernel
def gpu_summary_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    candidates: npt.NDArray[np.bool_],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out_fit: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_best_leftover: npt.NDArray[np.int32],
    out_best_is_partial: npt.NDArray[np.bool_],
    out_free_milli_total: npt.NDArray[np.int32],
) -> int:
    """Fill the summary outputs for every row; return the number of fitting rows.

    Works in blocks of rows, two phases per block, because a per-row loop over 8 cards is
    too short for LLVM to vectorise and runs at ~2 cycles per card:

    1. flat, branch-free loops over the block's cards (vectorised, one function per request
       shape) write per-card scratch: flag bits, the usable card's free milli (int16), the
       shared pod's packed best-fit key (int16) or, for NVLink-required pods, the card's
       island slot (uint8);
    2. short loops over the block's rows reduce the scratch into the outputs. With 8 slots
       (the common shape) a row's flags are one uint64 and its milli two: counts and sums
       are a few shift-adds (SWAR), and the best-fit min is unrolled.

    Blocks without a candidate row skip phase 1 (non-GPU filters ran first).
    """
    N, C = card_free_milli.shape
    if C > MAX_CARDS:
        raise ValueError("gpu_summary: more than 63 card slots per node")
    M = allowed_models.shape[0]
    # Allowed models as a bitmask: a shift instead of a gather in the vectorised loop. More
    # than 64 model ids (no real cluster has that many) take the gather loop instead.
    model_bits = np.int64(0)
    for i in range(min(M, 64)):
        if allowed_models[i]:
            model_bits |= np.int64(1) << i
    k = np.int64(req_cards)
    r_milli = np.int64(req_milli)
    r_mem = np.int64(req_mem)
    islands = k > 0 and nvlink == 2
    # Shared pods with 8 slots: phase 1 packs leftover << 4 | card << 1 | partial into the
    # scratch key (<= 16015, fits int16), so phase 2's best fit (ties -> lowest index, the
    # partial bit never decides) is a plain min and needs no second lookup.
    shift = 4 if C == 8 else 0
    tail = 15 if C == 8 else 0

    free_milli = card_free_milli.ravel()
    free_mem = card_free_mem.ravel()
    total_mem = card_total_mem.ravel()
    model = card_model.ravel()
    healthy = card_healthy.ravel()
    island = card_island.ravel()

    B = BLOCK_ROWS
    flags = np.zeros(B * C, dtype=np.uint8)
    milli = np.zeros(B * C, dtype=np.int16)
    left = np.zeros(B * C if k == 0 else 0, dtype=np.int16)
    slots = np.zeros(B * C if islands else 0, dtype=np.uint8)
    # Island histogram increments by slot: byte `island` of a row's uint64 histogram; slot
    # 8 (not eligible, or island unknown / >= 8) adds nothing.
    island_one = np.zeros(9, dtype=np.uint64)
    for i in range(8):
        island_one[i] = np.uint64(1) << np.uint64(8 * i)

    n_fit: Int = 0
    for r0 in range(0, N, B):
        rows = min(N, r0 + B) - r0
        lo = r0 * C
        hi = lo + rows * C
        # Every loop works on slices indexed from 0: numba then knows an index is >= 0 and
        # drops the negative-index wraparound that blocks vectorisation (5x slower loops).
        valid_b = node_valid[r0 : r0 + rows]
        cand_b = candidates[r0 : r0 + rows]
        if _any_row(valid_b, cand_b):
            if M <= 64:
                _usable_bits(model[lo:hi], healthy[lo:hi], model_bits, M, flags)
            else:
                _usable_gather(model[lo:hi], healthy[lo:hi], allowed_models, flags)
            if k > 0:
                if r_mem > 0:
                    _whole_cards_mem(free_milli[lo:hi], free_mem[lo:hi], r_mem, flags, milli)
                else:
                    _whole_cards(free_milli[lo:hi], flags, milli)
                if islands:
                    _island_slots(island[lo:hi], flags, slots)
            elif r_mem > 0:
                _shared_cards_mem(
                    free_milli[lo:hi],
                    free_mem[lo:hi],
                    total_mem[lo:hi],
                    r_milli,
                    r_mem,
                    shift,
                    tail,
                    flags,
                    milli,
                    left,
                )
            else:
                _shared_cards(
                    free_milli[lo:hi],
                    free_mem[lo:hi],
                    total_mem[lo:hi],
                    r_milli,
                    shift,
                    tail,
                    flags,
                    milli,
                    left,
                )
        intact_b = out_intact[r0 : r0 + rows]
        if C == 8:
            _counts8(
                flags,
                milli,
                valid_b,
                cand_b,
                intact_b,
                out_usable[r0 : r0 + rows],
                out_free_milli_total[r0 : r0 + rows],
            )
        else:
            _counts(
                flags,
                milli,
                C,
                valid_b,
                cand_b,
                intact_b,
                out_usable[r0 : r0 + rows],
                out_free_milli_total[r0 : r0 + rows],
            )
        fit_b = out_fit[r0 : r0 + rows]
        leftover_b = out_best_leftover[r0 : r0 + rows]
        partial_b = out_best_is_partial[r0 : r0 + rows]
        if k == 0:
            if C == 8:
                n_fit += _fit_shared8(left, valid_b, cand_b, fit_b, leftover_b, partial_b)
            else:
                n_fit += _fit_shared(left, milli, C, valid_b, cand_b, fit_b, leftover_b, partial_b)
        elif islands:
            n_fit += _fit_whole_islands(
                valid_b,
                cand_b,
                intact_b,
                k,
                slots,
                island_one,
                flags,
                island[lo:hi],
                C,
                fit_b,
                leftover_b,
                partial_b,
            )
        else:
            n_fit += _fit_whole(valid_b, cand_b, intact_b, k, fit_b, leftover_b, partial_b)
    return int(n_fit)


@njit_kernel
def _any_row(valid: npt.NDArray[np.bool_], cand: npt.NDArray[np.bool_]) -> bool:
    # An explicit loop: numba compiles generator expressions inside any() poorly.
    for b in range(valid.shape[0]):  # noqa: SIM110
        if valid[b] & cand[b]:
            return True
    return False


# Phase 1: one flat loop per request shape over the block's card slices, writing
# scratch[0 : len(slice)]. Each is branch-free so LLVM vectorises it (a loop-invariant `if`
# inside one loop is not reliably unswitched).


@njit_kernel
def _usable_bits(
    model: npt.NDArray[np.int16],
    healthy: npt.NDArray[np.bool_],
    model_bits: Int,
    M: Int,
    flags: npt.NDArray[np.uint8],
) -> None:
    if model_bits == (np.int64(1) << M) - 1 and M < 64:
        # Every model allowed (most pods): a range check, no per-card shift.
        for j in range(model.shape[0]):
            m = np.int64(model[j])
            flags[j] = np.uint8(healthy[j] & (m >= 0) & (m < M))
        return
    for j in range(model.shape[0]):
        m = np.int64(model[j])
        allowed = (m >= 0) & (m < M) & (((model_bits >> (m & 63)) & 1) == 1)
        flags[j] = np.uint8(healthy[j] & allowed)


@njit_kernel
def _usable_gather(
    model: npt.NDArray[np.int16],
    healthy: npt.NDArray[np.bool_],
    allowed_models: npt.NDArray[np.bool_],
    flags: npt.NDArray[np.uint8],
) -> None:
    M = allowed_models.shape[0]
    for j in range(model.shape[0]):
        m = np.int64(model[j])
        allowed = (m >= 0) & (m < M) & allowed_models[min(max(m, 0), M - 1)]
        flags[j] = np.uint8(healthy[j] & allowed)


@njit_kernel
def _whole_cards(
    free_milli: npt.NDArray[np.int32],
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
) -> None:
    # No memory asked: the free-memory column is not streamed at all.
    for j in range(free_milli.shape[0]):
        ok = flags[j]
        fm = free_milli[j]
        flags[j] = ok | ((ok & np.uint8(fm == INTACT_MILLI)) << np.uint8(1))
        milli[j] = np.int16(fm if fm > 0 else 0) if ok else np.int16(0)


@njit_kernel
def _whole_cards_mem(
    free_milli: npt.NDArray[np.int32],
    free_mem: npt.NDArray[np.int32],
    r_mem: Int,
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
) -> None:
    for j in range(free_milli.shape[0]):
        ok = flags[j]
        fm = free_milli[j]
        elig = ok & np.uint8((fm == INTACT_MILLI) & (np.int64(free_mem[j]) >= r_mem))
        flags[j] = ok | (elig << np.uint8(1))
        milli[j] = np.int16(fm if fm > 0 else 0) if ok else np.int16(0)


@njit_kernel
def _island_slots(
    island: npt.NDArray[np.int8], flags: npt.NDArray[np.uint8], slots: npt.NDArray[np.uint8]
) -> None:
    # An eligible card in island 0..7 gets slot = island, any other card slot 8 (counts in
    # no island). Eligible cards in islands >= 8 are flagged for the slow path instead.
    for j in range(island.shape[0]):
        isl = np.int32(island[j])
        elig = (flags[j] >> np.uint8(1)) & np.uint8(1)
        low = (elig != 0) & (isl >= 0) & (isl < 8)
        slots[j] = np.uint8(isl) if low else np.uint8(8)
        flags[j] |= (elig & np.uint8(isl >= 8)) << np.uint8(2)


@njit_kernel
def _shared_cards(
    free_milli: npt.NDArray[np.int32],
    free_mem: npt.NDArray[np.int32],
    total_mem: npt.NDArray[np.int32],
    r_milli: Int,
    shift: Int,
    tail: Int,
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
    left: npt.NDArray[np.int16],
) -> None:
    for j in range(free_milli.shape[0]):
        ok = flags[j]
        fm = np.int64(free_milli[j])
        fmem = np.int64(free_mem[j])
        tm = np.int64(total_mem[j])
        flags[j] = ok | ((ok & np.uint8(fm == INTACT_MILLI)) << np.uint8(1))
        milli[j] = np.int16(fm if fm > 0 else 0) if ok else np.int16(0)
        # need_mem = floor(r_milli * tm / 1000) <= fmem, written without the division.
        mem_ok = r_milli * tm <= fmem * INTACT_MILLI + (INTACT_MILLI - 1)
        # r_mem == 0 here: a card of unknown memory (tm 0) serves a compute share.
        fits = (ok != 0) & (fm >= r_milli) & mem_ok
        key = ((fm - r_milli) << shift) | ((((j & 7) << 1) | (fm < INTACT_MILLI)) & tail)
        left[j] = np.int16(key) if fits else np.int16(NO_FIT_16)


@njit_kernel
def _shared_cards_mem(
    free_milli: npt.NDArray[np.int32],
    free_mem: npt.NDArray[np.int32],
    total_mem: npt.NDArray[np.int32],
    r_milli: Int,
    r_mem: Int,
    shift: Int,
    tail: Int,
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
    left: npt.NDArray[np.int16],
) -> None:
    # need_milli = max(r_milli, ceil(a / tm)) with a = r_mem * 1000 needs a division per
    # card; integer division does not vectorise (a scalar loop was 4x slower), float32
    # division does. Its quotient is within +-1 of the exact ceiling wherever it matters
    # (<= 1002: relative error ~2e-7), clamped above that, and two exact integer steps
    # correct it, so the result is the integer ceiling (or > 1001: does not fit).
    a = r_mem * INTACT_MILLI
    a_f = np.float32(a)
    for j in range(free_milli.shape[0]):
        ok = flags[j]
        fm = np.int64(free_milli[j])
        fmem = np.int64(free_mem[j])
        tm = np.int64(total_mem[j])
        flags[j] = ok | ((ok & np.uint8(fm == INTACT_MILLI)) << np.uint8(1))
        milli[j] = np.int16(fm if fm > 0 else 0) if ok else np.int16(0)
        tm1 = max(tm, np.int64(1))
        q = np.int64(min(np.float32(INTACT_MILLI + 2), np.ceil(a_f / np.float32(tm1))))
        q -= np.int64((q - 1) * tm1 >= a)
        q += np.int64(q * tm1 < a)
        need = max(r_milli, q)
        mem_ok = (fmem >= r_mem) & (r_milli * tm <= fmem * INTACT_MILLI + (INTACT_MILLI - 1))
        fits = (ok != 0) & (tm > 0) & (fm >= need) & mem_ok
        key = ((fm - need) << shift) | ((((j & 7) << 1) | (fm < INTACT_MILLI)) & tail)
        left[j] = np.int16(key) if fits else np.int16(NO_FIT_16)


# Phase 2: loops over the block's rows. Kept small and separate: one loop doing all of it
# held so many array pointers live that LLVM spilled them on every row (3x slower).


@njit_inline
def _byte_sum(x: np.uint64) -> Int:
    """Sum of the 8 byte lanes of ``x`` (each small enough that no lane carries)."""
    x += x >> np.uint64(8)
    x += x >> np.uint64(16)
    x += x >> np.uint64(32)
    return np.int64(x & np.uint64(0xFF))


@njit_kernel
def _counts8(
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_total: npt.NDArray[np.int32],
) -> None:
    """Row counts with 8 slots: a row's flags are one uint64, its milli two (SWAR sums;
    0/1 byte lanes and int16 lanes <= 1000 never carry into the next lane)."""
    flags64 = flags.view(np.uint64)
    milli64 = milli.view(np.uint64)
    for b in range(valid.shape[0]):
        row = valid[b] & cand[b]
        w = flags64[b]
        usable = _byte_sum(w & ONES8)
        intact = _byte_sum((w >> np.uint64(1)) & ONES8)
        s = milli64[2 * b] + milli64[2 * b + 1]
        s += s >> np.uint64(16)
        s += s >> np.uint64(32)
        total = np.int64(s & np.uint64(0xFFFF))
        out_usable[b] = usable if row else 0
        out_intact[b] = intact if row else 0
        out_total[b] = total if row else 0


@njit_kernel
def _counts(
    flags: npt.NDArray[np.uint8],
    milli: npt.NDArray[np.int16],
    C: Int,
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_total: npt.NDArray[np.int32],
) -> None:
    """Row counts for any slot count."""
    for b in range(valid.shape[0]):
        usable = 0
        intact = 0
        total = 0
        if valid[b] & cand[b]:
            for c in range(b * C, b * C + C):
                usable += flags[c] & 1
                intact += (flags[c] >> 1) & 1
                total += milli[c]
        out_usable[b] = usable
        out_intact[b] = intact
        out_total[b] = total


@njit_kernel
def _fit_whole(
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    k: Int,
    out_fit: npt.NDArray[np.bool_],
    out_leftover: npt.NDArray[np.int32],
    out_partial: npt.NDArray[np.bool_],
) -> Int:
    """Whole-card fit without NVLink requirement: k eligible cards."""
    n_fit = 0
    for b in range(valid.shape[0]):
        fit = valid[b] & cand[b] & (intact[b] >= k)
        out_fit[b] = fit
        out_leftover[b] = intact[b] - k if fit else -1
        out_partial[b] = False
        n_fit += fit
    return n_fit


@njit_kernel
def _fit_whole_islands(
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    intact: npt.NDArray[np.int16],
    k: Int,
    slots: npt.NDArray[np.uint8],
    island_one: npt.NDArray[np.uint64],
    flags: npt.NDArray[np.uint8],
    island: npt.NDArray[np.int8],
    C: Int,
    out_fit: npt.NDArray[np.bool_],
    out_leftover: npt.NDArray[np.int32],
    out_partial: npt.NDArray[np.bool_],
) -> Int:
    """Whole-card fit with NVLink required: k eligible cards in one known island.

    A row's island histogram lives in the bytes of one uint64 (islands 0..7, at most 63
    cards: no byte carries), summed from the per-card slots through ``island_one``.
    """
    # Byte b of (h | 0x80..) - k * 0x01.. keeps its high bit iff byte b of h >= k (bytes
    # <= 63, k <= 63: no borrow crosses a byte).
    kk = np.uint64(min(k, 127)) * ONES8
    n_fit = 0
    any_high = False
    for b in range(valid.shape[0]):
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
        enough = valid[b] & cand[b] & (intact[b] >= k)
        fit = enough & ((((h | HIGH8) - kk) & HIGH8) != np.uint64(0))
        # Branch-free here; rows that may still fit through an island id >= 8 are
        # revisited below (never, on real topologies).
        any_high |= enough & ~fit & ((high & HIGH_ISLAND) != 0)
        out_fit[b] = fit
        n_fit += fit
    if any_high:
        for b in range(valid.shape[0]):
            if valid[b] & cand[b] & (intact[b] >= k) and not out_fit[b]:
                fit = _high_island_holds(island, flags, b * C, C, k)
                out_fit[b] = fit
                n_fit += fit
    for b in range(valid.shape[0]):
        out_leftover[b] = intact[b] - k if out_fit[b] else -1
        out_partial[b] = False
    return n_fit


@njit_kernel
def _high_island_holds(
    island: npt.NDArray[np.int8], flags: npt.NDArray[np.uint8], j0: Int, C: Int, k: Int
) -> bool:
    """Whether k eligible cards share one island with id >= 8 (pairwise; rare)."""
    for c in range(j0, j0 + C):
        if not flags[c] & HIGH_ISLAND:
            continue
        count = 0
        for d in range(c, j0 + C):
            count += (flags[d] & HIGH_ISLAND) != 0 and island[d] == island[c]
        if count >= k:
            return True
    return False


@njit_kernel
def _fit_shared8(
    left: npt.NDArray[np.int16],
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    out_fit: npt.NDArray[np.bool_],
    out_leftover: npt.NDArray[np.int32],
    out_partial: npt.NDArray[np.bool_],
) -> Int:
    """Shared fit with 8 slots from the packed scratch keys (see ``gpu_summary_nb``); the
    literal trip count unrolls the min."""
    n_fit = 0
    for b in range(valid.shape[0]):
        best = np.int16(NO_FIT_16)
        for c in range(8):
            best = min(best, left[8 * b + c])
        fit = valid[b] & cand[b] & (best < NO_FIT_16)
        out_fit[b] = fit
        out_leftover[b] = np.int32(best >> 4) if fit else np.int32(-1)
        out_partial[b] = fit & ((best & 1) == 1)
        n_fit += fit
    return n_fit


@njit_kernel
def _fit_shared(
    left: npt.NDArray[np.int16],
    milli: npt.NDArray[np.int16],
    C: Int,
    valid: npt.NDArray[np.bool_],
    cand: npt.NDArray[np.bool_],
    out_fit: npt.NDArray[np.bool_],
    out_leftover: npt.NDArray[np.int32],
    out_partial: npt.NDArray[np.bool_],
) -> Int:
    """Shared fit for any slot count."""
    n_fit = 0
    for b in range(valid.shape[0]):
        best_key = np.int64(NO_LEFTOVER)
        j0 = b * C
        for c in range(C):
            best_key = min(best_key, (np.int64(left[j0 + c]) << 6) | c)
        best_left = best_key >> 6
        fit = valid[b] & cand[b] & (best_left < NO_FIT_16)
        out_fit[b] = fit
        out_leftover[b] = best_left if fit else -1
        out_partial[b] = fit & (milli[j0 + (best_key & 63)] < INTACT_MILLI)
        n_fit += fit
    return n_fit


def gpu_summary_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_valid: npt.NDArray[np.bool_],
    candidates: npt.NDArray[np.bool_],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    allowed_models: npt.NDArray[np.bool_],
    nvlink: int,
    out_fit: npt.NDArray[np.bool_],
    out_intact: npt.NDArray[np.int16],
    out_usable: npt.NDArray[np.int16],
    out_best_leftover: npt.NDArray[np.int32],
    out_best_is_partial: npt.NDArray[np.bool_],
    out_free_milli_total: npt.NDArray[np.int32],
) -> int:
    """NumPy twin of :func:`gpu_summary_nb` (same arguments, same outputs)."""
    N, C = card_free_milli.shape
    if C > MAX_CARDS:
        raise ValueError("gpu_summary: more than 63 card slots per node")
    rows = node_valid & candidates
    if C == 0:
        out_fit[:] = False
        out_intact[:] = 0
        out_usable[:] = 0
        out_best_leftover[:] = -1
        out_best_is_partial[:] = False
        out_free_milli_total[:] = 0
        return 0
    usable = usable_cards_np(card_model, card_healthy, allowed_models) & rows[:, None]
    free_milli = card_free_milli.astype(np.int64)
    free_mem = card_free_mem.astype(np.int64)
    fresh = usable & (free_milli == INTACT_MILLI)
    if req_cards > 0:
        elig = fresh & (free_mem >= req_mem)
        intact = elig.sum(axis=1)
        if nvlink == 2:
            known = elig & (card_island >= 0)
            same = (card_island[:, :, None] == card_island[:, None, :]) & known[:, None, :]
            largest_island = np.where(known, same.sum(axis=2), 0).max(axis=1, initial=0)
            fit = rows & (largest_island >= req_cards)
        else:
            fit = rows & (intact >= req_cards)
        leftover = np.where(fit, intact - req_cards, -1)
        partial = np.zeros(N, dtype=np.bool_)
    else:
        intact = fresh.sum(axis=1)
        need_milli, need_mem, has_mem = shared_need_np(req_milli, req_mem, card_total_mem)
        fits = usable & has_mem & (free_milli >= need_milli) & (free_mem >= need_mem)
        card_left = np.where(fits, free_milli - need_milli, NO_LEFTOVER)
        best_c = card_left.argmin(axis=1)
        fit = fits.any(axis=1)
        at = np.arange(N)
        leftover = np.where(fit, card_left[at, best_c], -1)
        partial = fit & (free_milli[at, best_c] < INTACT_MILLI)
    out_fit[:] = fit
    out_intact[:] = intact
    out_usable[:] = usable.sum(axis=1)
    out_best_leftover[:] = leftover
    out_best_is_partial[:] = partial
    out_free_milli_total[:] = np.where(usable, np.maximum(free_milli, 0), 0).sum(axis=1)
    return int(fit.sum())
