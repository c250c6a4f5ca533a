"""Preemption: when no node fits a pod, evict the victims whose loss costs the least.

    PostFilter  kube-scheduler DefaultPreemption's frame (pkg/scheduler/framework/preemption,
                plugins/defaultpreemption): a pod with preemptionPolicy Never, or one already
                nominated whose victims are still terminating, preempts nobody; only nodes
                whose rejection preempting can fix are tried; the chosen node is nominated
                and the victims evicted (DisruptionTarget condition, delete, Event) by a
                background task, a victim waiting at Permit rejected instead.
                Beyond kube: victims chosen to lose the fewest GPU-hours of work since their
                last checkpoint (numba kernel over the snapshot, card by card); a gang
                victim evicted whole or not at all; a gang preemptor gets room for all its
                missing members or evicts nobody; PodDisruptionBudgets never exceeded;
                tenants under their guarantee never preempted by another tenant, and a
                tenant within its guarantee reclaims what others borrowed.
    Filter      a nominated preemptor keeps its room: a node is refused to a pod of lower
                or equal priority when it cannot hold both the nominated pods and it (kube
                runs its filters with the nominated pods added).
    Reserve     a preemptor being placed gives up its nomination.

The rules in full: README.md beside this file and docs/tenancy-preemption.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.gangs import DISRUPTION_POD
from gpusched.framework.interfaces import Diagnosis, FilterResult, Handle, Mask
from gpusched.framework.status import Code, Status, unschedulable
from gpusched.kernels import preemption_victims_nb, preemption_victims_np
from gpusched.kernels._card_rules import INTACT_MILLI
from gpusched.kernels.dispatch import pick
from gpusched.model import keys, quota
from gpusched.model.pod import GangAPI, NVLink, PodInfo, PodRequest
from gpusched.model.share import share_on_card
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.node_rows import StaticRows, TierDomains
from gpusched.plugins.helper.quota import QuotaState
from gpusched.plugins.preemption.args import (
    KUBE_DEFAULT,
    RECLAIM_ANY,
    PreemptionArgs,
)
from gpusched.plugins.preemption.table import VictimTable

NAME = "Preemption"
GANG_PLUGIN = "GangScheduling"
# The Filter's reasons (a node that cannot hold the pods nominated to it and this pod), in
# kube-scheduler's words (NodeResourcesFit, GPUFit): _shortage's codes - 1.
SHORTAGES = (
    "Insufficient cpu",
    "Insufficient memory",
    "Too many pods",
    f"Insufficient {keys.GPU_RESOURCE}",
    "Insufficient GPU share (no single card with enough free share and memory)",
)
NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
# PDB or tenant-guarantee conflicts re-evaluated per node before a node is given up; stale
# victims re-read before the choice is given up.
MAX_RETRIES = 8
# How often the victim table compares every row's pods (between scans only rows whose
# resources changed are re-read, and the chosen victims are checked before acting): a
# checkpoint annotation written on a pod elsewhere is seen within this long.
FULL_SCAN_SECONDS = 10.0

victims_kernel = pick(preemption_victims_nb, preemption_victims_np)
_log = logging.getLogger(__name__)


@dataclass(slots=True)
class Nomination:
    pod: PodInfo
    node: str
    since: float


@dataclass(slots=True)
class Choice:
    """What one preemption does: where each preemptor pod goes, and the victim units."""

    placements: list[tuple[PodInfo, str]]
    units: list[tuple[PodInfo, ...]]
    cost_gpu_hours: float


@dataclass(slots=True)
class _Units:
    """The victim table as this preemptor sees it: which slots it may evict, grouped in
    units, and the units' costs."""

    slot_unit: NDArray[np.int64]
    unit_cost: NDArray[np.float64]
    unit_pods: NDArray[np.int64]
    unit_prio: NDArray[np.int64]
    unit_viol: NDArray[np.int64]
    # gang unit id -> its slots (every placed member's); a single's unit is its flat slot
    gang_slots: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    start: NDArray[np.float64] | None = None


@dataclass(slots=True)
class _Out:
    feasible: NDArray[np.bool_]
    cost: NDArray[np.float64]
    pods: NDArray[np.int64]
    max_prio: NDArray[np.int64]
    sum_prio: NDArray[np.int64]
    viol: NDArray[np.int64]
    victim: NDArray[np.bool_]

    @classmethod
    def of(cls, n: int, k: int) -> _Out:
        return cls(
            np.zeros(n, np.bool_),
            np.zeros(n, np.float64),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros(n, np.int64),
            np.zeros((n, k), np.bool_),
        )


@dataclass(slots=True)
class _Free:
    """Free capacity the gang search edits as it evicts and places (copies of columns)."""

    milli: NDArray[np.int32]
    mem: NDArray[np.int32]
    cpu: NDArray[np.int64]
    memory: NDArray[np.int64]
    pods: NDArray[np.int32]


class Preemption:
    name: ClassVar[str] = NAME
    Args: ClassVar[type[PreemptionArgs]] = PreemptionArgs

    def __init__(self, args: PreemptionArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, PreemptionArgs)
        self.handle = handle
        self.table = VictimTable()
        self._tenant_id: dict[str, int] = {}
        # preemptor uid -> the node it was nominated to (by this instance)
        self.nominations: dict[str, Nomination] = {}
        # Pending pods this instance has held a nomination for: a nomination it gave up (it
        # expired, the preemption failed) is not taken back from the pod's stale status.
        self._nominated_here: set[str] = set()
        # victim uid -> node: evictions asked for and not yet seen gone
        self.evicting: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._domains = TierDomains()
        self._static = StaticRows()
        self._full_scan = -FULL_SCAN_SECONDS
        # What this instance chose to evict: preemptions, victims and their GPU-hours.
        self.preemptions = 0
        self.victims = 0
        self.chosen_gpu_hours = 0.0

    # -- PostFilter ----------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[str | None, Status]:
        if pod.preemption_policy == "Never":
            return None, unschedulable(NEVER)
        self._purge()
        if self._terminating(pod):
            return None, unschedulable(TERMINATING)
        snap = self.handle.snapshot
        gang = self._preemptor_gang(pod)
        pre = diagnosis.pre_filter_status
        usable = snap.node_valid & ~snap.node_unschedulable
        if pre is not None and not pre.is_success():
            # Only the gang's own refusal (its members do not fit together) is something
            # evictions can fix; any other PreFilter refusal holds on every node.
            if gang is None or pre.plugin != GANG_PLUGIN or pre.code is not Code.UNSCHEDULABLE:
                return None, unschedulable("preemption: not helpful for a pod refused at PreFilter")
            potential = usable & self._static_rows(pod)
        else:
            potential = usable.copy()
            unresolvable = diagnosis.unresolvable_rows
            if unresolvable is not None:
                potential &= ~unresolvable[: len(potential)]
        if pod.request.gpu_milli_total or pod.request.gpu_mem_mib:
            # Cards published through DRA go to claims only, and a claim's only come from
            # there (GPUFit): evicting on the other kind of node frees nothing for the pod.
            dra = snap.node_dra_cards[: len(potential)]
            potential &= dra if pod.gpu_from_claims else ~dra
        if not potential.any():
            return None, unschedulable("preemption: no node where preemption may help")
        now = self.handle.now()
        full = now - self._full_scan >= FULL_SCAN_SECONDS
        if full:
            self._full_scan = now
        self.table.refresh(self.handle, self._tenant_id, full=full)
        members = [pod] if gang is None else gang[1]
        choice: Choice | None = None
        # Most refused pods have nobody to evict (nothing placed below their priority, no
        # guarantee to reclaim with): say so before building the victim units (~1 ms at
        # 1,200 nodes, on every refused pod of a one-priority cluster).
        retries = MAX_RETRIES if self._may_have_victims(pod) else 0
        for _ in range(retries):
            units = self._units(pod, members)
            if gang is None:
                choice = self._single(pod, units, potential & ~self._held_for_others(pod))
            else:
                choice = self._gang(pod, gang[0], members, units, potential)
            if choice is None:
                break
            # The table reads only rows whose resources changed; a victim's pod may have
            # been updated since (a checkpoint, a deletion): re-read its rows and choose
            # again on what is true now.
            rows = sorted({self.table.uid_slot[p.uid][0] for unit in choice.units for p in unit})
            stale = self.table.stale(self.handle, rows)
            if not stale:
                break
            self.table.reread(self.handle, stale, self._tenant_id)
            choice = None
        if choice is None:
            if self.nominations.pop(pod.uid, None) is not None:
                # kube's PostFilter clears the nominatedNodeName of a pod that found no
                # candidate: its room is not coming, and no one should be kept off for it.
                self._spawn(self._clear(pod))
            return None, unschedulable(
                "preemption: no victims found: evicting what the rules allow frees no node"
                " for the pod"
            )
        node = next((n for p, n in choice.placements if p.uid == pod.uid), "")
        self._act(pod, choice)
        return node, Status()

    # -- Filter: the room nominated pods hold ------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        """kube-scheduler runs a pod's filters with the pods nominated to the node (of equal
        or higher priority) added to it, so such a node says "Insufficient <resource>" when
        it cannot hold both; here the nominated pods are taken from a copy of the node's
        free capacity (one whose victims are still there takes all its free cards), then
        the pod, and the first shortage names the reason, in NodeResourcesFit's and
        GPUFit's words."""
        if not self.nominations:
            return FilterResult(candidates)
        self._purge()
        snap = self.handle.snapshot
        by_row: dict[int, list[PodInfo]] = {}
        for nom in self.nominations.values():
            if nom.pod.uid == pod.uid or nom.pod.priority < pod.priority:
                continue
            row = snap.row_of(nom.node)
            if 0 <= row < len(candidates) and candidates[row]:
                by_row.setdefault(row, []).append(nom.pod)
        if not by_row:
            return FilterResult(candidates)
        feasible = candidates.copy()
        codes = np.zeros(len(candidates), np.int8)
        for row, held in by_row.items():
            free = _row_free(self.handle, row)
            for p in held:
                if _place(self.handle, free, 0, row, p.request):
                    continue
                # Not room for it yet (its victims are terminating): it holds what it asks
                # for anyway, and all free cards (which ones it gets is not known yet).
                req = p.request
                free.cpu[0] -= req.cpu_milli
                free.memory[0] -= req.memory_bytes
                free.pods[0] -= 1
                if req.gpu_milli_total or req.gpu_mem_mib:
                    free.milli[0] = np.minimum(free.milli[0], 0)
                    free.mem[0] = np.minimum(free.mem[0], 0)
            code = _shortage(self.handle, free, 0, row, pod.request)
            if code:
                feasible[row] = False
                codes[row] = code - 1
        return FilterResult(feasible, SHORTAGES, codes)

    # -- the nominated node first ------------------------------------------------------------

    def nominated_node(self, pod: PodInfo) -> str | None:
        """Where this instance nominated the pod: the runtime picks that node when it passes
        Filter (kube's evaluateNominatedNode), so a preemptor takes the room its victims
        freed even when another freed node scores higher."""
        nom = self.nominations.get(pod.uid)
        if nom is not None:
            return nom.node
        if (
            pod.nominated_node
            and pod.uid not in self._nominated_here
            and self.handle.snapshot.row_of(pod.nominated_node) >= 0
        ):
            # Nominated by an earlier leader (its status says so; the nominations of this
            # instance start empty): honoured as kube-scheduler's nominator restores it from
            # the pod, and from now on its room is held here too.
            self.nominations[pod.uid] = Nomination(pod, pod.nominated_node, self.handle.now())
            self._nominated_here.add(pod.uid)
            return pod.nominated_node
        return None

    # -- Reserve: the preemptor is placed -------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        self.nominations.pop(pod.uid, None)
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Nothing to undo: a nomination given up stays given up (the pod found a node)."""

    # -- eligibility ---------------------------------------------------------------------------

    def _purge(self) -> None:
        now = self.handle.now()
        ttl = self.args.nomination_timeout_seconds
        for uid, nom in list(self.nominations.items()):
            if (
                now - nom.since > ttl
                or self.handle.allocation_of(uid) is not None
                or not self.handle.is_pending(uid)
            ):
                del self.nominations[uid]
        for uid in [u for u in self._nominated_here if not self.handle.is_pending(u)]:
            self._nominated_here.discard(uid)
        for uid in [u for u in self.evicting if self.handle.allocation_of(u) is None]:
            del self.evicting[uid]

    def _terminating(self, pod: PodInfo) -> bool:
        """kube's PodEligibleToPreemptOthers: the pod (or a member of its gang) is nominated
        and a lower-priority pod on that node is still terminating: wait for it."""
        uids = [pod.uid]
        if pod.gang is not None:
            uids += [p.uid for p, _ in self.handle.gang_members(pod.gang.name)]
        for uid in uids:
            nom = self.nominations.get(uid)
            if nom is None:
                continue
            for p in self.handle.pods_on_node(nom.node):
                if p.priority < pod.priority and (p.deleting or p.uid in self.evicting):
                    return True
        return False

    def _held_for_others(self, pod: PodInfo) -> Mask:
        """Rows nominated to another pending pod of equal or higher priority: their room is
        that pod's, evicting more there would be for nothing."""
        snap = self.handle.snapshot
        held = np.zeros(len(snap.node_valid), np.bool_)
        for nom in self.nominations.values():
            if nom.pod.uid != pod.uid and nom.pod.priority >= pod.priority:
                row = snap.row_of(nom.node)
                if row >= 0:
                    held[row] = True
        return held

    def _gang_policy(self, pod: PodInfo) -> tuple[str, int, str, bool] | None:
        """(gang key, minMember, required topology, evicted whole) of the pod's gang."""
        g = pod.gang
        if g is None:
            return None
        if g.api is GangAPI.ANNOTATIONS:
            required = str(pod.annotations.get(keys.TOPOLOGY_REQUIRED, ""))
            return g.name, g.min_member, required, g.min_member > 1
        spec = self.handle.gangs.pod_group(g.api, g.name)
        if spec is None or spec.problem:
            # Unknown or broken: evicted whole (the safe reading), never a preemptor.
            return g.name, 0, "", True
        size = spec.min_member if spec.gang else 1
        whole = size > 1 and spec.disruption_mode != DISRUPTION_POD
        return g.name, size, spec.topology_required, whole

    def _preemptor_gang(
        self, pod: PodInfo
    ) -> tuple[tuple[str, int, str, bool], list[PodInfo]] | None:
        """A gang preemptor: the policy and the pending members to make room for (the pod
        first, then the largest), or None when the pod goes alone."""
        pol = self._gang_policy(pod)
        if pol is None or pol[1] <= 1:
            return None
        members = self.handle.gang_members(pol[0])
        placed = sum(1 for _, node in members if node)
        need = pol[1] - placed
        if need <= 0:
            return None
        pending = [p for p, node in members if not node and p.uid != pod.uid]
        pending.sort(key=lambda p: _size(p.request), reverse=True)
        return pol, [pod, *pending[: need - 1]]

    def _may_have_victims(self, pod: PodInfo) -> bool:
        """False when no placed pod can be a victim whatever the other rules say: none has
        a lower priority, and (LeastLostWork) the pod's tenant has no guarantee to
        reclaim with."""
        t = self.table
        if bool(np.any(t.valid & ~t.deleting & (t.prio < pod.priority))):
            return True
        if self.args.strategy == KUBE_DEFAULT or self.args.reclaim != RECLAIM_ANY:
            return False
        tenant = self.handle.tenancy.tenant_of(pod.namespace)
        return self.handle.tenancy.quota(tenant) is not None

    def _units(self, pod: PodInfo, members: Sequence[PodInfo]) -> _Units:
        t = self.table
        h = self.handle
        # Lost work is measured from API timestamps (startTime, last checkpoint): the wall
        # clock, not the daemon's monotonic one.
        now = h.wall_now()
        kube = self.args.strategy == KUBE_DEFAULT
        elig = t.valid & ~t.deleting
        for uid in self.evicting:
            slot = t.uid_slot.get(uid)
            if slot is not None:
                elig[slot] = False
        lower = t.prio < pod.priority
        if kube:
            elig &= lower
        else:
            elig &= t.preemptible
            started = t.start > 0.0
            elig &= ~started | (now - t.start >= self.args.min_run_seconds)
            elig &= self._tenant_rule(pod, members, lower)
        n, k = t.n, t.k
        flat = np.arange(n * k, dtype=np.int64).reshape(n, k)
        cost = t.gpus * t.lost(now) / 3600.0
        slot_unit = np.where(elig, flat, -1)
        gang_rows, gang_ks = np.nonzero(elig & t.gang) if not kube else (np.empty(0, np.intp),) * 2
        keys_seen: dict[str, list[tuple[int, int]]] = {}
        for r, kk in zip(gang_rows.tolist(), gang_ks.tolist(), strict=True):
            victim = t.pods[r][kk]
            assert victim is not None
            pol = self._gang_policy(victim)
            if pol is None or not pol[3]:
                continue
            keys_seen.setdefault(pol[0], []).append((r, kk))
        gang_slots: dict[int, list[tuple[int, int]]] = {}
        extra_cost: list[float] = []
        extra_pods: list[int] = []
        extra_prio: list[int] = []
        for key, seen in keys_seen.items():
            slots: list[tuple[int, int]] = []
            ok = True
            for member, node in h.gang_members(key):
                if not node:
                    continue
                slot = t.uid_slot.get(member.uid)
                if slot is None or not elig[slot]:
                    ok = False
                    break
                slots.append(slot)
            if not ok or not slots:
                for slot in seen:
                    slot_unit[slot] = -1
                continue
            unit = n * k + len(gang_slots)
            gang_slots[unit] = slots
            for slot in slots:
                slot_unit[slot] = unit
            extra_cost.append(float(sum(cost[s] for s in slots)))
            extra_pods.append(len(slots))
            extra_prio.append(int(max(t.prio[s] for s in slots)))
        unit_viol = np.zeros(n * k + len(gang_slots), np.int64)
        if kube:
            for r, kk in zip(*np.nonzero(slot_unit >= 0), strict=True):
                victim = t.pods[int(r)][int(kk)]
                if victim is not None and any(
                    b.disruptions_allowed <= 0 for b in h.disruption.budgets_of(victim)
                ):
                    unit_viol[int(r) * k + int(kk)] = 1
        return _Units(
            slot_unit=slot_unit,
            unit_cost=np.concatenate([cost.ravel(), np.asarray(extra_cost, np.float64)]),
            unit_pods=np.concatenate([np.ones(n * k, np.int64), np.asarray(extra_pods, np.int64)]),
            unit_prio=np.concatenate([t.prio.ravel(), np.asarray(extra_prio, np.int64)]),
            unit_viol=unit_viol,
            gang_slots=gang_slots,
            start=t.start,
        )

    def _tenant_rule(
        self, pod: PodInfo, members: Sequence[PodInfo], lower: NDArray[np.bool_]
    ) -> NDArray[np.bool_]:
        """Which slots the preemptor's tenant may take: its own tenant's lower-priority pods;
        another tenant's only while that tenant is above its guarantee, and then lower
        priority pods, or (reclaim) any pod when the preemptor's tenant stays within its own
        guarantee after placing the pod(s)."""
        t = self.table
        h = self.handle
        tenant = h.tenancy.tenant_of(pod.namespace)
        tid = self._tenant_id.get(tenant, -2)
        qs = QuotaState.of(h)
        over = np.zeros(len(self._tenant_id) + 1, np.bool_)
        for name, i in self._tenant_id.items():
            # A tenant without an ElasticQuota has no guarantee: whatever it runs is borrowed.
            over[i] = name != tenant and (name not in qs.mins or qs.over_min(name, qs.used(name)))
        request = quota.ZERO
        for m in members:
            request = quota.add(request, quota.usage_of(m.request))
        # A tenant without an ElasticQuota has no guarantee to reclaim with (and its usage,
        # a walk over the placed pods, is not needed).
        reclaim = (
            self.args.reclaim == RECLAIM_ANY
            and tenant in qs.mins
            and qs.within_min(tenant, quota.add(qs.used(tenant), request), request)
        )
        same = t.tenant == tid
        other_over = over[np.where(t.tenant >= 0, t.tenant, len(self._tenant_id))]
        allowed: NDArray[np.bool_] = (same & lower) | (~same & other_over & (lower | reclaim))
        return allowed

    # -- choosing ------------------------------------------------------------------------------

    def _order(self, u: _Units) -> NDArray[np.int64]:
        """Per row, the slots in reprieve order, a unit's slots together; -1 after them."""
        su = u.slot_unit
        valid = su >= 0
        safe = np.where(valid, su, 0)
        unit = np.where(valid, su, np.iinfo(np.int64).max)
        if self.args.strategy == KUBE_DEFAULT:
            # kube: PDB-violating victims are reprieved first, then by priority, the
            # longest-running first (MoreImportantPod).
            keys_: tuple[NDArray[Any], ...] = (
                unit,
                u.start if u.start is not None else np.zeros(su.shape),
                -u.unit_prio[safe],
                -u.unit_viol[safe],
                ~valid,
            )
        else:
            keys_ = (unit, -u.unit_cost[safe], ~valid)
        order = np.lexsort(keys_, axis=-1).astype(np.int64)
        taken = np.take_along_axis(valid, order, axis=-1)
        return np.where(taken, order, -1)

    def _run(self, pod_req: PodRequest, u: _Units, cand: Mask, free: _Free | None = None) -> _Out:
        snap = self.handle.snapshot
        t = self.table
        out = _Out.of(t.n, t.k)
        src = free or _Free(
            snap.card_free_milli,
            snap.card_free_mem,
            snap.node_cpu_free,
            snap.node_mem_free,
            snap.node_pods_free,
        )
        victims_kernel(
            src.milli,
            src.mem,
            snap.card_total_mem,
            snap.card_model,
            snap.card_healthy,
            snap.card_island,
            src.cpu,
            src.memory,
            src.pods,
            cand[: t.n] & snap.node_valid[: t.n],
            snap.allowed_models(pod_req.gpu_models),
            pod_req.gpu_cards,
            pod_req.gpu_milli if not pod_req.gpu_cards else 0,
            pod_req.gpu_mem_mib,
            int(pod_req.nvlink),
            pod_req.cpu_milli,
            pod_req.memory_bytes,
            u.slot_unit,
            t.cpu,
            t.mem,
            t.milli,
            t.gmem,
            self._order(u),
            u.unit_cost,
            u.unit_pods,
            u.unit_prio,
            u.unit_viol,
            out.feasible,
            out.cost,
            out.pods,
            out.max_prio,
            out.sum_prio,
            out.viol,
            out.victim,
        )
        return out

    def _best(self, out: _Out, need_victims: bool) -> int:
        """The row to preempt on, -1 for none. LeastLostWork: the fewest GPU-hours lost,
        then the lowest highest victim priority, then the fewest pods; KubeDefault: kube's
        pickOneNodeForPreemption (fewest PDB violations, lowest highest priority, lowest
        priority sum, fewest victims)."""
        ok = out.feasible & (out.pods > 0) if need_victims else out.feasible
        rows = np.flatnonzero(ok)
        if not len(rows):
            return -1
        if self.args.strategy == KUBE_DEFAULT:
            keys_: tuple[NDArray[Any], ...] = (
                rows,
                out.pods[rows],
                out.sum_prio[rows],
                out.max_prio[rows],
                out.viol[rows],
            )
        else:
            keys_ = (rows, out.pods[rows], out.max_prio[rows], np.round(out.cost[rows], 9))
        return int(rows[np.lexsort(keys_)[0]])

    def _victim_units(self, u: _Units, out: _Out, row: int) -> list[int]:
        """The units evicted on `row`, each once, in slot order."""
        seen: dict[int, None] = {}
        for unit in u.slot_unit[row][out.victim[row]].tolist():
            seen.setdefault(int(unit), None)
        return list(seen)

    def _unit_pods(self, u: _Units, unit: int) -> tuple[PodInfo, ...]:
        t = self.table
        slots = u.gang_slots.get(unit)
        if slots is None:
            slots = [divmod(unit, t.k)]
        out: list[PodInfo] = []
        for r, kk in slots:
            p = t.pods[r][kk]
            if p is not None:
                out.append(p)
        return tuple(out)

    def _conflicts(self, pod: PodInfo, u: _Units, units: Sequence[int]) -> set[int]:
        """Units whose eviction together would exceed a PodDisruptionBudget or take another
        tenant below its GPU guarantee (LeastLostWork only: kube's choice is best effort)."""
        if self.args.strategy == KUBE_DEFAULT:
            return set()
        h = self.handle
        counts: dict[str, int] = {}
        allowed: dict[str, int] = {}
        unit_budgets: dict[int, set[str]] = {}
        tenant_gpu: dict[str, int] = {}
        unit_tenants: dict[int, set[str]] = {}
        mine = h.tenancy.tenant_of(pod.namespace)
        for unit in units:
            for p in self._unit_pods(u, unit):
                for b in h.disruption.budgets_of(p):
                    counts[b.key] = counts.get(b.key, 0) + 1
                    allowed[b.key] = b.disruptions_allowed
                    unit_budgets.setdefault(unit, set()).add(b.key)
                tenant = h.tenancy.tenant_of(p.namespace)
                if tenant != mine:
                    tenant_gpu[tenant] = tenant_gpu.get(tenant, 0) + quota.usage_of(p.request)[0]
                    unit_tenants.setdefault(unit, set()).add(tenant)
        bad = {key for key, n in counts.items() if n > max(allowed[key], 0)}
        if tenant_gpu:
            qs = QuotaState.of(h)
            for tenant, gpu in tenant_gpu.items():
                floor = qs.min_of(tenant)[0] if tenant in qs.mins else None
                if floor and qs.used(tenant)[0] - gpu < floor:
                    bad.add("tenant:" + tenant)
        return {
            unit
            for unit in units
            if unit_budgets.get(unit, set()) & bad
            or {"tenant:" + t for t in unit_tenants.get(unit, set())} & bad
        }

    def _single(self, pod: PodInfo, u: _Units, cand: Mask) -> Choice | None:
        n = self.table.n
        cand = cand[:n].copy()
        out = self._run(pod.request, u, cand)
        for _ in range(MAX_RETRIES):
            row = self._best(out, need_victims=True)
            if row < 0:
                return None
            units = self._victim_units(u, out, row)
            if not self._other_fits(pod.request, row, units, u):
                out.feasible[row] = False  # short of an extended resource even then
                continue
            bad = self._conflicts(pod, u, units)
            if not bad:
                return Choice(
                    [(pod, self.handle.snapshot.names[row])],
                    [self._unit_pods(u, unit) for unit in units],
                    float(out.cost[row]),
                )
            # A gang unit spans rows: every row that held one of its slots is computed
            # again, or another of the gang's rows would still offer it as a victim.
            only = np.zeros(n, np.bool_)
            only[row] = True
            for unit in bad:
                hit = u.slot_unit == unit
                only |= hit.any(axis=1)[:n]
                u.slot_unit[hit] = -1
            again = self._run(pod.request, u, only)
            for name in _Out.__slots__:
                getattr(out, name)[only] = getattr(again, name)[only]
        return None

    def _other_fits(self, req: PodRequest, row: int, units: Sequence[int], u: _Units) -> bool:
        """Whether the row has the pod's other resources (extended resources,
        ephemeral-storage, hugepages) once `units` are gone: the kernel counts cards, cpu,
        memory and pod slots only."""
        if not req.other:
            return True
        snap = self.handle.snapshot
        freed: dict[str, int] = {}
        for unit in units:
            for p in self._unit_pods(u, unit):
                if self.table.uid_slot.get(p.uid, (-1, 0))[0] != row:
                    continue  # a gang member elsewhere frees nothing here
                for name, amount in p.request.other:
                    freed[name] = freed.get(name, 0) + amount
        for name, amount in req.other:
            col = snap.other_column(name)
            have = int(snap.node_other_free[row, col]) if col >= 0 else 0
            if have + freed.get(name, 0) < amount:
                return False
        return True

    def _gang(
        self,
        pod: PodInfo,
        pol: tuple[str, int, str, bool],
        members: Sequence[PodInfo],
        u: _Units,
        potential: Mask,
    ) -> Choice | None:
        """Room for every missing member, or nothing: per allowed topology domain, place
        the members largest first, each on the node where it costs least (evicting there,
        whole units), and keep the cheapest domain whose every member found a node."""
        snap = self.handle.snapshot
        n = self.table.n
        potential = potential[:n] & ~self._held_for_others(pod)[:n]
        domain = self._domain(pol[2])
        if domain is None:
            domains: list[Mask] = [potential]
        else:
            placed_rows = [
                snap.row_of(node) for _, node in self.handle.gang_members(pol[0]) if node
            ]
            fixed = {int(domain[r]) for r in placed_rows if r >= 0}
            values = fixed if fixed else set(np.unique(domain[:n][potential]).tolist()) - {-1}
            if len(fixed) > 1 or -1 in fixed:
                return None  # its placed members already straddle domains
            domains = [potential & (domain[:n] == v) for v in sorted(values)]
        best: Choice | None = None
        for mask in domains:
            if not mask.any():
                continue
            got = self._gang_in(pod, members, u, mask)
            if got is not None and (
                best is None
                or (got.cost_gpu_hours, _count(got)) < (best.cost_gpu_hours, _count(best))
            ):
                best = got
        return best

    def _gang_in(
        self, pod: PodInfo, members: Sequence[PodInfo], base: _Units, mask: Mask
    ) -> Choice | None:
        snap = self.handle.snapshot
        t = self.table
        u = _Units(
            base.slot_unit.copy(),
            base.unit_cost,
            base.unit_pods,
            base.unit_prio,
            base.unit_viol,
            base.gang_slots,
            base.start,
        )
        free = _Free(
            snap.card_free_milli[: t.n].copy(),
            snap.card_free_mem[: t.n].copy(),
            snap.node_cpu_free[: t.n].copy(),
            snap.node_mem_free[: t.n].copy(),
            snap.node_pods_free[: t.n].copy(),
        )
        placements: list[tuple[PodInfo, str]] = []
        chosen: list[int] = []
        cost = 0.0
        order = sorted(members, key=lambda p: _size(p.request), reverse=True)
        for member in order:
            out = self._run(member.request, u, mask, free)
            row = self._best(out, need_victims=False)
            if row < 0:
                return None
            for unit in self._victim_units(u, out, row):
                chosen.append(unit)
                cost += float(u.unit_cost[unit])
                slots = base.gang_slots.get(unit) or [divmod(unit, t.k)]
                for r, kk in slots:
                    free.cpu[r] += t.cpu[r, kk]
                    free.memory[r] += t.mem[r, kk]
                    free.pods[r] += 1
                    free.milli[r] += t.milli[r, kk]
                    free.mem[r] += t.gmem[r, kk]
                    u.slot_unit[r, kk] = -1
            if not _place(self.handle, free, row, row, member.request):
                return None  # the kernel said it fits: a disagreement is no room
            placements.append((member, snap.names[row]))
        if self._conflicts(pod, base, chosen):
            return None
        if not chosen:
            return None  # it fits without evicting anyone: GangScheduling will place it
        return Choice(placements, [self._unit_pods(base, unit) for unit in chosen], cost)

    def _domain(self, tier: str) -> NDArray[np.int64] | None:
        return self._domains.of(self.handle.snapshot, tier)

    def _static_rows(self, pod: PodInfo) -> Mask:
        """Rows whose node the pod may use whatever runs there (nodeSelector, required node
        affinity, NoSchedule/NoExecute taints): the gang preemptor's other filters did not
        run (its gang was refused at PreFilter), and evicting where it may not go is loss
        for nothing."""
        return self._static.rows(self.handle.snapshot, pod, malformed=False)

    # -- acting --------------------------------------------------------------------------------

    def _act(self, pod: PodInfo, choice: Choice) -> None:
        now = self.handle.now()
        for member, node in choice.placements:
            self.nominations[member.uid] = Nomination(member, node, now)
            self._nominated_here.add(member.uid)
        node = next((n for p, n in choice.placements if p.uid == pod.uid), "")
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod"
        evict: list[tuple[PodInfo, ...]] = []
        for unit in choice.units:
            for p in unit:
                self.evicting[p.uid] = node
            waiting = [self.handle.get_waiting_pod(p.uid) for p in unit]
            if all(w is not None for w in waiting):
                # Not running yet: rejected at Permit (kube's waitingPod.Reject), no API
                # write, its cards free as soon as its binding cycle unwinds.
                for w in waiting:
                    assert w is not None
                    w.reject(NAME, f"preempted by {pod.key}")
                continue
            for w in waiting:
                if w is not None:
                    w.reject(NAME, f"preempted by {pod.key}")
            evict.append(tuple(p for p, w in zip(unit, waiting, strict=True) if w is None))
        self.preemptions += 1
        self.victims += sum(len(unit) for unit in choice.units)
        self.chosen_gpu_hours += choice.cost_gpu_hours
        _log.info(
            "preemption: pod %s nominated to %s, evicting %s (%.3f GPU-hours lost)",
            pod.key,
            node,
            ", ".join(p.key for unit in choice.units for p in unit) or "nobody",
            choice.cost_gpu_hours,
        )
        self._spawn(self._write(pod, choice.placements, evict, node, message))

    async def _write(
        self,
        pod: PodInfo,
        placements: Sequence[tuple[PodInfo, str]],
        units: Sequence[tuple[PodInfo, ...]],
        node: str,
        message: str,
    ) -> None:
        port = self.handle.disruption
        for member, where in placements:
            st = await port.nominate(member, where)
            if not st.is_success():
                _log.warning("preemption: nominating %s to %s: %s", member.key, where, st.message())
        failed = False
        for unit in units:
            if not unit:
                continue
            first, rest = unit[0], unit[1:]
            st = await port.evict(first, preemptor=pod, node=node, message=message)
            if not st.is_success():
                # Nothing of the unit is gone: keep the rest (a gang must not be broken).
                _log.warning("preemption: evicting %s failed: %s", first.key, st.message())
                for p in unit:
                    self.evicting.pop(p.uid, None)
                failed = True
                continue
            for p in rest:
                # One member is gone, so the job is lost anyway: the others go too.
                st = await port.evict(p, preemptor=pod, node=node, message=message)
                if not st.is_success():
                    _log.error(
                        "preemption: evicting gang member %s failed: %s", p.key, st.message()
                    )
        if failed:
            # The room will not come (a victim stayed): the nominations give it back, so
            # other pods are not kept off those nodes for nothing; the preemptor's next
            # attempt preempts again if it still does not fit.
            for member, _where in placements:
                self.nominations.pop(member.uid, None)
                await port.nominate(member, "")

    async def _clear(self, pod: PodInfo) -> None:
        st = await self.handle.disruption.nominate(pod, "")
        if not st.is_success():
            _log.warning("preemption: clearing the nomination of %s: %s", pod.key, st.message())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run the writes in the background (PostFilter never awaits). Without a running
        loop (the simulator, whose ports never suspend) they run to their end here."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            try:
                work.send(None)
            except StopIteration:
                return
            except Exception:
                _log.exception("preemption: the writes failed")
                return
            work.close()
            _log.error("preemption: a port write suspended without an event loop")
            return
        task = loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("preemption: the writes failed", exc_info=task.exception())


# -- helpers ------------------------------------------------------------------------------------


def _size(req: PodRequest) -> tuple[int, int, int]:
    return (req.gpu_milli_total, req.cpu_milli, req.memory_bytes)


def _count(choice: Choice) -> int:
    return sum(len(u) for u in choice.units)


def _row_free(handle: Handle, row: int) -> _Free:
    """One row's free capacity, copied (row 0 of the result)."""
    snap = handle.snapshot
    sl = slice(row, row + 1)
    return _Free(
        snap.card_free_milli[sl].copy(),
        snap.card_free_mem[sl].copy(),
        snap.node_cpu_free[sl].copy(),
        snap.node_mem_free[sl].copy(),
        snap.node_pods_free[sl].copy(),
    )


def _shortage(handle: Handle, free: _Free, at: int, row: int, req: PodRequest) -> int:
    """0 when `req` fits row `at` of `free` (untouched), else what is short: 1 cpu, 2
    memory, 3 pod slots, 4 whole cards, 5 a card share."""
    if free.cpu[at] < req.cpu_milli:
        return 1
    if free.memory[at] < req.memory_bytes:
        return 2
    if free.pods[at] < 1:
        return 3
    trial = _Free(
        free.milli[at : at + 1].copy(),
        free.mem[at : at + 1].copy(),
        free.cpu[at : at + 1].copy(),
        free.memory[at : at + 1].copy(),
        free.pods[at : at + 1].copy(),
    )
    if _place(handle, trial, 0, row, req):
        return 0
    return 4 if req.gpu_cards else 5


def _place(handle: Handle, free: _Free, at: int, row: int, req: PodRequest) -> bool:
    """Take `req` from row `at` of `free` (the snapshot's row `row`) by the card rules
    (whole cards: intact cards, in one island for NVLink required; a share: the best-fit
    card); False, untouched, when it does not fit."""
    snap = handle.snapshot
    if free.cpu[at] < req.cpu_milli or free.memory[at] < req.memory_bytes or free.pods[at] < 1:
        return False
    allowed = snap.allowed_models(req.gpu_models)
    model = snap.card_model[row]
    usable = (
        (model >= 0)
        & (model < len(allowed))
        & allowed[np.clip(model, 0, len(allowed) - 1)]
        & snap.card_healthy[row]
    )
    fm = free.milli[at]
    gm = free.mem[at]
    if req.gpu_cards:
        ok = usable & (fm >= INTACT_MILLI)
        if req.gpu_mem_mib:
            ok &= gm >= req.gpu_mem_mib
        cards = np.flatnonzero(ok)
        if req.nvlink is NVLink.REQUIRED:
            isl = snap.card_island[row]
            chosen = None
            for island in np.unique(isl[cards]).tolist():
                if island < 0:
                    continue
                inside = cards[isl[cards] == island]
                if len(inside) >= req.gpu_cards:
                    chosen = inside[: req.gpu_cards]
                    break
            if chosen is None:
                return False
            cards = chosen
        elif len(cards) < req.gpu_cards:
            return False
        for c in cards[: req.gpu_cards].tolist():
            fm[c] -= INTACT_MILLI
            gm[c] = 0
    elif req.gpu_milli or req.gpu_mem_mib:
        best, left = -1, 1 << 30
        for c in np.flatnonzero(usable).tolist():
            total = int(snap.card_total_mem[row, c])
            if req.gpu_mem_mib and total <= 0:
                continue
            milli, mem = share_on_card(req, total)
            if fm[c] >= milli and gm[c] >= mem and fm[c] - milli < left:
                best, left = c, int(fm[c]) - milli
        if best < 0:
            return False
        milli, mem = share_on_card(req, int(snap.card_total_mem[row, best]))
        fm[best] -= milli
        gm[best] -= mem
    free.cpu[at] -= req.cpu_milli
    free.memory[at] -= req.memory_bytes
    free.pods[at] -= 1
    return True
