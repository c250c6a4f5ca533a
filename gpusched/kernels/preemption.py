"""``preemption_victims``: per candidate node, the cheapest set of victims that makes room.

The snapshot's rows hold the node's free capacity now; the victim table (padded N x K slots,
one per placed pod the preemptor may evict, built by the Preemption plugin) holds what each
slot's pod would give back: cpu, memory, and per card its milli-GPU and GPU memory. Slots are
grouped in **units** (`slot_unit`): a gang evicted whole is one unit whose members may sit
on several slots and nodes; every other pod is a unit of its own. A slot with unit -1 is
not a victim (empty, or not eligible) and keeps what it holds.

Per candidate row (kube-scheduler's SelectVictimsOnNode, with a unit for a pod):

1. give back every eligible slot of the row; if the pod does not fit even then, the row is
   infeasible;
2. walk the row's slots in `order` (the plugin's reprieve order: for LeastLostWork the most
   expensive unit first; for KubeDefault PDB-violating first, then the highest priority),
   a unit's slots together: take the unit's resources back; if the pod still fits, the unit
   is reprieved, otherwise it is given back again and becomes a victim.

Fit is card-level, the rules of ``gpu_summary``: a whole-card pod needs ``req_cards`` usable
cards with ``free_milli >= 1000`` (and ``free_mem >= req_mem`` when it asks for memory), all
in one known NVLink island when ``nvlink == 2``; a shared pod needs one usable card with
``free_milli >= need_milli`` and ``free_mem >= need_mem`` (``_card_rules``); then cpu,
memory and one pod slot.

Outputs per row: `out_feasible`, the victims' `out_cost` (sum of their units' costs, each
unit once), `out_pods` (pods evicted, a gang unit counting all its members), the highest
and summed unit priorities (`out_max_prio` is INT64_MIN without victims), PDB violations
(`out_viol`), and `out_victim` per slot. Rows outside `candidates` (which the caller
narrows to valid rows) get infeasible, zeros and no victims.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpusched.kernels._card_rules import (
    INTACT_MILLI,
    card_usable,
    shared_need_mem,
    shared_need_milli,
    shared_need_np,
    usable_cards_np,
)
from gpusched.kernels._jit import njit_inline, njit_kernel

NO_PRIORITY = np.iinfo(np.int64).min
# NVLink islands tracked per row by the kernel (ids 0..MAX_ISLANDS-1); a card in a higher
# island counts as unknown for a required NVLink request.
MAX_ISLANDS = 64


@njit_inline
def _fits(
    fm: npt.NDArray[np.int64],
    gm: npt.NDArray[np.int64],
    total_mem: npt.NDArray[np.int32],
    model: npt.NDArray[np.int16],
    healthy: npt.NDArray[np.bool_],
    island: npt.NDArray[np.int8],
    allowed_models: npt.NDArray[np.bool_],
    cpu: np.int64,
    mem: np.int64,
    pods: np.int64,
    req_cards: np.int64,
    req_milli: np.int64,
    req_mem: np.int64,
    nvlink: np.int64,
    req_cpu: np.int64,
    req_memory: np.int64,
    counts: npt.NDArray[np.int64],
) -> bool:
    if cpu < req_cpu or mem < req_memory or pods < 1:
        return False
    n_cards = fm.shape[0]
    if req_cards > 0:
        if nvlink == 2:
            for i in range(MAX_ISLANDS):
                counts[i] = 0
        got = np.int64(0)
        for c in range(n_cards):
            if not card_usable(model[c], healthy[c], allowed_models):
                continue
            if fm[c] < INTACT_MILLI or (req_mem > 0 and gm[c] < req_mem):
                continue
            if nvlink == 2:
                isl = np.int64(island[c])
                if 0 <= isl < MAX_ISLANDS:
                    counts[isl] += 1
                    if counts[isl] >= req_cards:
                        return True
            else:
                got += 1
                if got >= req_cards:
                    return True
        return False
    if req_milli > 0 or req_mem > 0:
        for c in range(n_cards):
            if not card_usable(model[c], healthy[c], allowed_models):
                continue
            total = np.int64(total_mem[c])
            if req_mem > 0 and total <= 0:
                continue
            if fm[c] >= shared_need_milli(req_milli, req_mem, total) and gm[c] >= shared_need_mem(
                req_milli, req_mem, total
            ):
                return True
        return False
    return True


@njit_kernel
def preemption_victims_nb(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    candidates: npt.NDArray[np.bool_],
    allowed_models: npt.NDArray[np.bool_],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    nvlink: int,
    req_cpu: int,
    req_memory: int,
    slot_unit: npt.NDArray[np.int64],
    slot_cpu: npt.NDArray[np.int64],
    slot_mem: npt.NDArray[np.int64],
    slot_milli: npt.NDArray[np.int32],
    slot_gmem: npt.NDArray[np.int32],
    order: npt.NDArray[np.int64],
    unit_cost: npt.NDArray[np.float64],
    unit_pods: npt.NDArray[np.int64],
    unit_prio: npt.NDArray[np.int64],
    unit_viol: npt.NDArray[np.int64],
    out_feasible: npt.NDArray[np.bool_],
    out_cost: npt.NDArray[np.float64],
    out_pods: npt.NDArray[np.int64],
    out_max_prio: npt.NDArray[np.int64],
    out_sum_prio: npt.NDArray[np.int64],
    out_viol: npt.NDArray[np.int64],
    out_victim: npt.NDArray[np.bool_],
) -> int:
    """Fill the outputs (module docstring); returns the number of feasible rows."""
    n_rows = candidates.shape[0]
    n_cards = card_free_milli.shape[1]
    n_slots = slot_unit.shape[1]
    k_cards = np.int64(req_cards)
    k_milli = np.int64(req_milli)
    k_mem = np.int64(req_mem)
    k_nv = np.int64(nvlink)
    k_cpu = np.int64(req_cpu)
    k_memory = np.int64(req_memory)
    fm = np.zeros(n_cards, np.int64)
    gm = np.zeros(n_cards, np.int64)
    counts = np.zeros(MAX_ISLANDS, np.int64)
    feasible = 0
    for r in range(n_rows):
        out_feasible[r] = False
        out_cost[r] = 0.0
        out_pods[r] = 0
        out_max_prio[r] = NO_PRIORITY
        out_sum_prio[r] = 0
        out_viol[r] = 0
        for k in range(n_slots):
            out_victim[r, k] = False
        if not candidates[r]:
            continue
        cpu = np.int64(node_cpu_free[r])
        mem = np.int64(node_mem_free[r])
        pods = np.int64(node_pods_free[r])
        for c in range(n_cards):
            fm[c] = card_free_milli[r, c]
            gm[c] = card_free_mem[r, c]
        # 1. every eligible slot of the row given back
        for k in range(n_slots):
            if slot_unit[r, k] < 0:
                continue
            cpu += slot_cpu[r, k]
            mem += slot_mem[r, k]
            pods += 1
            for c in range(n_cards):
                fm[c] += slot_milli[r, k, c]
                gm[c] += slot_gmem[r, k, c]
        tm = card_total_mem[r]
        md = card_model[r]
        hl = card_healthy[r]
        isl = card_island[r]
        if not _fits(
            fm, gm, tm, md, hl, isl, allowed_models, cpu, mem, pods,
            k_cards, k_milli, k_mem, k_nv, k_cpu, k_memory, counts,
        ):  # fmt: skip
            continue
        out_feasible[r] = True
        feasible += 1
        # 2. reprieve unit by unit in the given order
        i = 0
        while i < n_slots:
            k0 = order[r, i]
            if k0 < 0:
                break
            unit = slot_unit[r, k0]
            j = i
            while j < n_slots and order[r, j] >= 0 and slot_unit[r, order[r, j]] == unit:
                k = order[r, j]
                cpu -= slot_cpu[r, k]
                mem -= slot_mem[r, k]
                pods -= 1
                for c in range(n_cards):
                    fm[c] -= slot_milli[r, k, c]
                    gm[c] -= slot_gmem[r, k, c]
                j += 1
            if not _fits(
                fm, gm, tm, md, hl, isl, allowed_models, cpu, mem, pods,
                k_cards, k_milli, k_mem, k_nv, k_cpu, k_memory, counts,
            ):  # fmt: skip
                for q in range(i, j):
                    k = order[r, q]
                    cpu += slot_cpu[r, k]
                    mem += slot_mem[r, k]
                    pods += 1
                    for c in range(n_cards):
                        fm[c] += slot_milli[r, k, c]
                        gm[c] += slot_gmem[r, k, c]
                    out_victim[r, k] = True
                out_cost[r] += unit_cost[unit]
                out_pods[r] += unit_pods[unit]
                out_sum_prio[r] += unit_prio[unit]
                out_viol[r] += unit_viol[unit]
                out_max_prio[r] = max(out_max_prio[r], unit_prio[unit])
            i = j
    return feasible


def _fits_np(
    fm: npt.NDArray[np.int64],
    gm: npt.NDArray[np.int64],
    usable: npt.NDArray[np.bool_],
    need_milli: npt.NDArray[np.int64],
    need_mem: npt.NDArray[np.int64],
    serve: npt.NDArray[np.bool_],
    island: npt.NDArray[np.int8],
    free: tuple[int, int, int],
    req: tuple[int, int, int, int, int, int],
) -> bool:
    cpu, mem, pods = free
    req_cards, req_milli, req_mem, nvlink, req_cpu, req_memory = req
    if cpu < req_cpu or mem < req_memory or pods < 1:
        return False
    if req_cards > 0:
        ok = usable & (fm >= INTACT_MILLI)
        if req_mem > 0:
            ok &= gm >= req_mem
        if nvlink == 2:
            isl = island.astype(np.int64)
            known = ok & (isl >= 0) & (isl < MAX_ISLANDS)
            if not known.any():
                return False
            return bool(np.bincount(isl[known], minlength=1).max() >= req_cards)
        return int(np.count_nonzero(ok)) >= req_cards
    if req_milli > 0 or req_mem > 0:
        return bool(np.any(usable & serve & (fm >= need_milli) & (gm >= need_mem)))
    return True


def preemption_victims_np(
    card_free_milli: npt.NDArray[np.int32],
    card_free_mem: npt.NDArray[np.int32],
    card_total_mem: npt.NDArray[np.int32],
    card_model: npt.NDArray[np.int16],
    card_healthy: npt.NDArray[np.bool_],
    card_island: npt.NDArray[np.int8],
    node_cpu_free: npt.NDArray[np.int64],
    node_mem_free: npt.NDArray[np.int64],
    node_pods_free: npt.NDArray[np.int32],
    candidates: npt.NDArray[np.bool_],
    allowed_models: npt.NDArray[np.bool_],
    req_cards: int,
    req_milli: int,
    req_mem: int,
    nvlink: int,
    req_cpu: int,
    req_memory: int,
    slot_unit: npt.NDArray[np.int64],
    slot_cpu: npt.NDArray[np.int64],
    slot_mem: npt.NDArray[np.int64],
    slot_milli: npt.NDArray[np.int32],
    slot_gmem: npt.NDArray[np.int32],
    order: npt.NDArray[np.int64],
    unit_cost: npt.NDArray[np.float64],
    unit_pods: npt.NDArray[np.int64],
    unit_prio: npt.NDArray[np.int64],
    unit_viol: npt.NDArray[np.int64],
    out_feasible: npt.NDArray[np.bool_],
    out_cost: npt.NDArray[np.float64],
    out_pods: npt.NDArray[np.int64],
    out_max_prio: npt.NDArray[np.int64],
    out_sum_prio: npt.NDArray[np.int64],
    out_viol: npt.NDArray[np.int64],
    out_victim: npt.NDArray[np.bool_],
) -> int:
    """NumPy twin of :func:`preemption_victims_nb`: the whole-row give-back is one array
    sum per row, the card fit array expressions (written apart from the kernel)."""
    out_feasible[:] = False
    out_cost[:] = 0.0
    out_pods[:] = 0
    out_max_prio[:] = NO_PRIORITY
    out_sum_prio[:] = 0
    out_viol[:] = 0
    out_victim[:] = False
    usable_all = usable_cards_np(card_model, card_healthy, allowed_models)
    need_milli_all, need_mem_all, serve_all = shared_need_np(req_milli, req_mem, card_total_mem)
    req = (req_cards, req_milli, req_mem, nvlink, req_cpu, req_memory)
    rows = np.flatnonzero(candidates)
    for r in rows.tolist():
        elig = slot_unit[r] >= 0
        fm = card_free_milli[r].astype(np.int64) + slot_milli[r][elig].astype(np.int64).sum(0)
        gm = card_free_mem[r].astype(np.int64) + slot_gmem[r][elig].astype(np.int64).sum(0)
        cpu = int(node_cpu_free[r]) + int(slot_cpu[r][elig].sum())
        mem = int(node_mem_free[r]) + int(slot_mem[r][elig].sum())
        pods = int(node_pods_free[r]) + int(np.count_nonzero(elig))
        cards = (
            usable_all[r],
            need_milli_all[r],
            need_mem_all[r],
            serve_all[r],
            card_island[r],
        )
        if not _fits_np(
            fm, gm, cards[0], cards[1], cards[2], cards[3], cards[4], (cpu, mem, pods), req
        ):
            continue
        out_feasible[r] = True
        seq = order[r][order[r] >= 0]
        units = slot_unit[r][seq]
        # Contiguous runs of one unit in the order: reprieved or evicted together.
        starts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]]) if len(seq) else seq
        ends = np.r_[starts[1:], len(seq)] if len(seq) else seq
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            group = seq[s:e]
            fm2 = fm - slot_milli[r][group].astype(np.int64).sum(0)
            gm2 = gm - slot_gmem[r][group].astype(np.int64).sum(0)
            cpu2 = cpu - int(slot_cpu[r][group].sum())
            mem2 = mem - int(slot_mem[r][group].sum())
            pods2 = pods - len(group)
            if _fits_np(
                fm2, gm2, cards[0], cards[1], cards[2], cards[3], cards[4], (cpu2, mem2, pods2), req
            ):
                fm, gm, cpu, mem, pods = fm2, gm2, cpu2, mem2, pods2
                continue
            unit = int(units[s])
            out_victim[r, group] = True
            out_cost[r] += unit_cost[unit]
            out_pods[r] += unit_pods[unit]
            out_sum_prio[r] += unit_prio[unit]
            out_viol[r] += unit_viol[unit]
            out_max_prio[r] = max(int(out_max_prio[r]), int(unit_prio[unit]))
    return int(np.count_nonzero(out_feasible))
