"""GangScheduling: a gang's pods start all together or not at all, in the fewest racks.

One implementation behind the three gang APIs (model/pod.py `GangAPI`); the minimum and
the policy come from the PodGroup object (Handle.gangs) or from the pods' annotations.

    QueueSort   priority, then the gang's age, then the gang: a gang's pods pop together;
                across tenants, the lowest dominant share first (TenantFairSort)
    PreEnqueue  hold a member until minMember pods of its gang exist (and its PodGroup does)
    PreFilter   no plan yet: can the free capacity, card by card, hold the members still
                needed, inside one allowed topology domain? No -> refused before any member
                reserves a card. A plan exists -> only its racks' nodes.
    Filter      the first member plans for the whole gang over the nodes that passed its
                filters: the fewest racks, then spines, best fit (placement.py); nodes a
                starving gang reserved are refused to everyone else
    PostFilter  a member found no node: every member waiting at Permit is released
    Reserve     the member takes its planned slot; Unreserve (any failure after Reserve, a
                timeout at Permit, a failed binding) releases every waiting member
    Permit      wait until minMember are placed, then allow them all

No deadlock: a gang plans only what fits in the capacity nobody else holds (free capacity
minus the slots other assembling gangs planned and the nodes a starving gang reserved), so
two gangs never each hold half of what both need; a gang that cannot fit holds nothing.
No starvation: a gang refused for capacity for `starvationSeconds` reserves the nodes it
needs (on an empty cluster: the fewest racks, the emptiest nodes first); no other pod is
placed there, so as their pods finish the gang fits. At most one gang reserves at a time
(the first to starve); the reservation ends when the gang is placed or has no pending pods.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    PODS_TO_ACTIVATE,
    Diagnosis,
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
)
from gpusched.framework.status import SUCCESS, Status, skip, unresolvable, unschedulable, wait
from gpusched.kernels import gang_fit_nb, gang_fit_np
from gpusched.kernels.dispatch import pick
from gpusched.model import keys
from gpusched.model.pod import GangAPI, PodInfo, PodRequest
from gpusched.plugins.gang_scheduling import placement
from gpusched.plugins.gang_scheduling.args import GangSchedulingArgs
from gpusched.plugins.helper.args import checked_args
from gpusched.plugins.helper.fair import TenantShares
from gpusched.plugins.helper.node_rows import StaticRows, TierDomains

NAME = "GangScheduling"
RESERVED = "node(s) were reserved for a gang waiting longer"
OUTSIDE = "node(s) were outside the racks chosen for the pod's gang"

gang_fit = pick(gang_fit_nb, gang_fit_np)

_KIND = {
    GangAPI.WORKLOAD: "PodGroup (scheduling.k8s.io/v1alpha2)",
    GangAPI.COSCHEDULING: "PodGroup (scheduling.x-k8s.io/v1alpha1)",
    GangAPI.ANNOTATIONS: "gang (scheduling.ai/gang-name)",
}


@dataclass(frozen=True, slots=True)
class Policy:
    key: str
    api: GangAPI
    min_member: int
    timeout: float
    required: str  # "", "rack", "spine" or a node label key
    created: float
    # "", "rack" or "spine": tried as if required first, then the default order (fewest
    # racks anywhere). "spine" then keeps a gang in one spine even when racks of two
    # spines would be fewer.
    preferred: str = ""


@dataclass(slots=True)
class Plan:
    """Where an assembling gang goes: the racks chosen, and per node how many of its lead
    shape's pods the plan still expects there (what other gangs count as held)."""

    mask: Mask
    rows: NDArray[np.intp]
    slots: dict[int, int]
    shape: PodRequest
    cards: int
    cpu: int
    mem: int
    deadline: float
    racks: int


@dataclass(slots=True)
class Reservation:
    key: str
    mask: Mask
    since: float


@dataclass(frozen=True, slots=True)
class PlanState:
    """A Plan with its rows named (StatefulPlugin: another snapshot's rows differ)."""

    nodes: tuple[str, ...]
    slots: tuple[tuple[str, int], ...]
    shape: PodRequest
    cards: int
    cpu: int
    mem: int
    deadline: float
    racks: int


@dataclass(frozen=True, slots=True)
class GangState:
    """What GangScheduling remembers that its Filter depends on (StatefulPlugin): when each
    gang was first refused for capacity (its starvation clock), the nodes a starving gang
    reserved, the gangs that gave a reservation up, and the plans of the gangs assembling
    (their slots are held from other gangs)."""

    refused_since: tuple[tuple[str, float], ...] = ()
    # (gang, reserved nodes, since)
    reservation: tuple[str, tuple[str, ...], float] | None = None
    no_reserve: frozenset[str] = frozenset()
    plans: tuple[tuple[str, PlanState], ...] = ()


@dataclass(frozen=True, slots=True)
class _Cycle:
    policy: Policy
    need: int  # members still to place for minMember
    # The gang's lead shape: the largest request among its unplaced members, and how many
    # of them are needed. The gang is planned for these; smaller members (a launcher
    # beside GPU workers) go inside the racks chosen for them.
    lead: PodInfo
    lead_need: int


_GANG: StateKey[_Cycle] = StateKey("GangScheduling/cycle")
# Written when the gang passed PreFilter in this cycle: a failure after that is the gang's
# failure to assemble (backed off), not a refusal for capacity (which waits for an event).
_PASSED: StateKey[bool] = StateKey("GangScheduling/passed")


class GangScheduling:
    name: ClassVar[str] = NAME
    Args: ClassVar[type[GangSchedulingArgs]] = GangSchedulingArgs

    def __init__(self, args: GangSchedulingArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, GangSchedulingArgs)
        self.handle = handle
        self._shares = TenantShares(handle)
        self.plans: dict[str, Plan] = {}
        # gang -> when it was first refused for capacity (its starvation clock)
        self.refused_since: dict[str, float] = {}
        self.reservation: Reservation | None = None
        # gang -> its place in the queue (fixed at first sight: the heap needs a stable order)
        self._order: dict[str, float] = {}
        # Bumped whenever a plan or the reservation comes or goes: with the snapshot's
        # version it says whether a gang's last refusal still holds.
        self._epoch = 0
        # gang -> (snapshot version, membership, epoch) and the refusal then: a refused
        # gang's other members are refused without recounting until something changed.
        self._refusals: dict[str, tuple[tuple[int, int, int], Status]] = {}
        # Gangs whose reservation drained without the gang fitting (it is held back by
        # something other than capacity): they do not reserve again.
        self._no_reserve: set[str] = set()
        # gang -> (failed attempts to assemble in a row, until when, why it failed): for
        # that long its members do not pull their siblings into activeQ (see PreFilter).
        self._failed: dict[str, tuple[int, float, str]] = {}
        self._domains = TierDomains()
        self._static = StaticRows()

    # -- the gang's policy -------------------------------------------------------------------

    def policy(self, pod: PodInfo) -> Policy | Status | None:
        """The pod's gang policy; None when the pod needs no gang handling (no gang, a
        `basic` PodGroup, a minimum of one); a Status when the gang cannot be used yet."""
        g = pod.gang
        if g is None:
            return None
        if g.api is GangAPI.ANNOTATIONS:
            if g.min_member <= 1:
                return None
            required = pod.annotations.get(keys.TOPOLOGY_REQUIRED, "")
            preferred = pod.annotations.get(keys.TOPOLOGY_PREFERRED, "")
            return Policy(
                g.name,
                g.api,
                g.min_member,
                self.args.default_timeout_seconds,
                required,
                0.0,
                preferred,
            )
        spec = self.handle.gangs.pod_group(g.api, g.name)
        if spec is None:
            return unschedulable(f"waiting for {_KIND[g.api]} {g.name} to exist")
        if spec.problem:
            return unresolvable(f"{_KIND[g.api]} {g.name}: {spec.problem}")
        if not spec.gang or spec.min_member <= 1:
            return None
        return Policy(
            g.name,
            g.api,
            spec.min_member,
            spec.timeout_seconds or self.args.default_timeout_seconds,
            spec.topology_required,
            spec.created,
            spec.topology_preferred,
        )

    # -- QueueSort ------------------------------------------------------------------------------

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        """Priority first, then the older gang (a pod without one is its own gang, aged by
        its creation), then the gang's name, then the older pod: a gang's pods sit together
        in the queue, so its members are attempted one after the other."""
        if a.priority != b.priority:
            return a.priority > b.priority
        ta, ka = self._queue_key(a)
        tb, kb = self._queue_key(b)
        if ta != tb:
            return ta < tb
        if ka != kb:
            return ka < kb
        if a.created != b.created:
            return a.created < b.created
        return (a.namespace, a.name) < (b.namespace, b.name)

    def tenant_of(self, pod: PodInfo) -> str:
        """TenantFairSort: the queue keeps a heap per tenant and serves the tenant with the
        lowest dominant share first among equal priorities (core/queue/active.py)."""
        if not self.args.tenant_fairness:
            return ""
        return self.handle.tenancy.tenant_of(pod.namespace)

    def shares(self, tenants: Collection[str]) -> Mapping[str, float]:
        return self._shares(tenants)

    def _queue_key(self, pod: PodInfo) -> tuple[float, str]:
        g = pod.gang
        if g is None:
            return pod.created, ""
        t = self._order.get(g.name)
        if t is None:
            spec = (
                None if g.api is GangAPI.ANNOTATIONS else self.handle.gangs.pod_group(g.api, g.name)
            )
            t = spec.created if spec is not None and spec.created else pod.created
            self._order[g.name] = t
        return t, g.name

    # -- PreEnqueue -----------------------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if pod.errors:
            return SUCCESS  # its attempt says what is wrong with it; waiting would hide that
        pol = self.policy(pod)
        if pol is None:
            return SUCCESS
        if isinstance(pol, Status):
            return pol
        have = len(self.handle.gang_members(pol.key))
        if have >= pol.min_member:
            return SUCCESS
        return unschedulable(
            f"waiting for the pods of {_KIND[pol.api]} {pol.key}: {have} of its minimum"
            f" {pol.min_member} exist"
        )

    # -- PreFilter ------------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        pol = self.policy(pod)
        if isinstance(pol, Status):
            return None, pol  # the PodGroup went away or broke since the pod was queued
        reservation = self._live_reservation()
        members = self.handle.gang_members(pol.key) if pol is not None else ()
        placed = sum(1 for _, node in members if node)
        if pol is None or placed >= pol.min_member:
            # Not a gang, or its minimum is placed: the pod goes alone, but off the nodes a
            # starving gang reserved.
            if reservation is None or (pol is not None and reservation.key == pol.key):
                return None, skip()
            return None, SUCCESS
        need = pol.min_member - placed
        lead, lead_need = _lead(pod, members, need)
        cyc = _Cycle(pol, need, lead, lead_need)
        state.write(_GANG, cyc)
        plan = self.plans.get(pol.key)
        if plan is not None:
            return PreFilterResult(plan.rows), SUCCESS
        snap = self.handle.snapshot
        stamp = (snap.version, snap.membership, self._epoch)
        cached = self._refusals.get(pol.key)
        if cached is not None and cached[0] == stamp:
            self._refused(pol, lead)
            return None, cached[1]
        near = self._rows_of(members)
        counts = self._counts(lead, pol.key, lead_need, self._usable(pol.key, lead))
        choice = self._choose(counts, lead_need, pol, near)
        if isinstance(choice, Status):
            return None, choice
        if choice is None:
            refusal = unschedulable(_refusal(cyc, counts))
            self._refused(pol, lead)
            self._refusals[pol.key] = ((snap.version, snap.membership, self._epoch), refusal)
            return None, refusal
        self._refusals.pop(pol.key, None)
        state.write(_PASSED, True)
        failed = self._failed.get(pol.key)
        if failed is not None and self.handle.now() < failed[1]:
            # It failed to assemble a moment ago: its members come back at the queue's own
            # pace (backoff, events), not pulled in at once, or a member that fits and one
            # that never does would pull each other back forever. Refusing them instead
            # would strand them: a refusal waits for an event that helps the gang, and the
            # event that would have (a claim created, a node freed) may already be past.
            return None, SUCCESS
        pending = {p.uid for p, node in members if not node and p.uid != pod.uid}
        if pending:
            activate = state.get(PODS_TO_ACTIVATE)
            if activate is None:
                state.write(PODS_TO_ACTIVATE, pending)
            else:
                activate |= pending
        return None, SUCCESS

    # -- Filter ---------------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        mask = candidates
        reservation = self.reservation
        cyc = state.get(_GANG)
        codes = np.zeros(len(candidates), np.int8)
        if reservation is not None and (cyc is None or cyc.policy.key != reservation.key):
            mask = candidates & ~reservation.mask[: len(candidates)]
        if cyc is None:
            if mask is candidates:
                return FilterResult(candidates)
            return FilterResult(mask, (RESERVED,))
        pol = cyc.policy
        plan = self.plans.get(pol.key)
        if plan is None:
            # The lead's own filters are known only when this pod is of its shape.
            where = mask if pod.request == cyc.lead.request else self._usable(pol.key, cyc.lead)
            counts = self._counts(cyc.lead, pol.key, cyc.lead_need, where)
            near = self._rows_of(self.handle.gang_members(pol.key))
            choice = self._choose(counts, cyc.lead_need, pol, near)
            if choice is None or isinstance(choice, Status):
                if choice is None:
                    self._refused(pol, cyc.lead)  # for capacity, on the nodes it may use
                reason = f"node(s) could not hold the pod's gang: {_refusal(cyc, counts)}"
                codes[mask] = 1
                return FilterResult(np.zeros_like(candidates), (RESERVED, reason), codes)
            plan = self._plan(cyc, counts, choice)
        feasible = mask & plan.mask[: len(candidates)]
        codes[mask & ~feasible] = 1
        return FilterResult(feasible, (RESERVED, OUTSIDE), codes)

    # -- PostFilter -----------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[str | None, Status]:
        # Also after a PreFilter rejection (another plugin's, before this one's PreFilter
        # ran): the gang's plan, not the cycle state, says whether members wait.
        g = pod.gang
        if g is not None and (g.name in self.plans or state.get(_PASSED)):
            self.release(g.name, f"its pod {pod.key} could not be placed")
        res = self.reservation
        if g is not None and res is not None and res.key == g.name and self._drained(res):
            # Its reserved nodes run nothing and its pods still find no node there.
            self._drop_reservation(g.name)
        return None, unschedulable()

    # -- Reserve / Unreserve --------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        cyc = state.get(_GANG)
        plan = self.plans.get(cyc.policy.key) if cyc is not None else None
        if plan is None or pod.request != plan.shape:
            return SUCCESS  # no plan, or a smaller member beside the lead shape: no slot
        row = self.handle.snapshot.row_of(node)
        if row not in plan.slots and plan.slots:
            row = max(plan.slots, key=lambda r: plan.slots[r])  # landed off-plan: any slot
        if row in plan.slots:
            plan.slots[row] -= 1
            if plan.slots[row] <= 0:
                del plan.slots[row]
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        cyc = state.get(_GANG)
        if cyc is not None and cyc.policy.key in self.plans:
            self.release(
                cyc.policy.key,
                f"its pod {pod.key} gave up its place (timed out at Permit, failed to bind,"
                " or was deleted)",
            )

    # -- Permit ---------------------------------------------------------------------------------

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        cyc = state.get(_GANG)
        if cyc is None:
            return SUCCESS, 0.0
        pol = cyc.policy
        placed = sum(1 for _, n in self.handle.gang_members(pol.key) if n)
        if placed >= pol.min_member:
            for wp in self.handle.waiting_pods():
                g = wp.pod.gang
                if g is not None and g.name == pol.key:
                    wp.allow(NAME)
            self._complete(pol.key)
            return SUCCESS, 0.0
        now = self.handle.now()
        plan = self.plans.get(pol.key)
        deadline = plan.deadline if plan is not None else now + pol.timeout
        return wait(), max(deadline - now, 0.001)

    # -- StatefulPlugin: the gangs' history, for a copy of the scheduler (explain) ------------

    def export_state(self) -> GangState:
        names = self.handle.snapshot.names

        def named(mask: Mask) -> tuple[str, ...]:
            return tuple(names[r] for r in np.flatnonzero(mask).tolist() if r < len(names))

        res = self.reservation
        return GangState(
            refused_since=tuple(self.refused_since.items()),
            reservation=None if res is None else (res.key, named(res.mask), res.since),
            no_reserve=frozenset(self._no_reserve),
            plans=tuple(
                (
                    key,
                    PlanState(
                        named(plan.mask),
                        tuple((names[r], k) for r, k in plan.slots.items() if 0 <= r < len(names)),
                        plan.shape,
                        plan.cards,
                        plan.cpu,
                        plan.mem,
                        plan.deadline,
                        plan.racks,
                    ),
                )
                for key, plan in self.plans.items()
            ),
        )

    def import_state(self, state: object) -> None:
        if not isinstance(state, GangState):
            raise TypeError(f"GangScheduling state is a GangState, got {type(state)}")
        snap = self.handle.snapshot
        n = len(snap.node_valid)

        def mask_of(nodes: Sequence[str]) -> Mask:
            mask = np.zeros(n, np.bool_)
            for name in nodes:
                row = snap.row_of(name)
                if row >= 0:
                    mask[row] = True
            return mask

        self.refused_since = dict(state.refused_since)
        self._no_reserve = set(state.no_reserve)
        self.reservation = None
        if state.reservation is not None:
            key, nodes, since = state.reservation
            self.reservation = Reservation(key, mask_of(nodes), since)
        self.plans = {}
        for key, p in state.plans:
            mask = mask_of(p.nodes)
            slots = {snap.row_of(name): k for name, k in p.slots if snap.row_of(name) >= 0}
            self.plans[key] = Plan(
                mask=mask,
                rows=np.flatnonzero(mask),
                slots=slots,
                shape=p.shape,
                cards=p.cards,
                cpu=p.cpu,
                mem=p.mem,
                deadline=p.deadline,
                racks=p.racks,
            )
        self._refusals.clear()
        self._epoch += 1

    # -- gang state -----------------------------------------------------------------------------

    def release(self, key: str, why: str) -> int:
        """The gang failed to assemble: drop its plan and reject every member waiting at
        Permit (their placements are undone and they are requeued). Returns how many."""
        if self.plans.pop(key, None) is not None:
            self._epoch += 1
        count = self._failed.get(key, (0, 0.0, ""))[0] + 1
        self._failed[key] = (count, self.handle.now() + _backoff(count), why)
        rejected = 0
        for wp in self.handle.waiting_pods():
            g = wp.pod.gang
            if g is not None and g.name == key and not wp.done:
                wp.reject(NAME, f"gang {key} was rejected: {why}")
                rejected += 1
        return rejected

    def _complete(self, key: str) -> None:
        self.plans.pop(key, None)
        self.refused_since.pop(key, None)
        self._refusals.pop(key, None)
        self._no_reserve.discard(key)
        self._failed.pop(key, None)
        self._epoch += 1
        if self.reservation is not None and self.reservation.key == key:
            self.reservation = None

    def _usable(self, key: str, pod: PodInfo) -> Mask:
        """Rows a gang may plan on: nodes `pod` (its lead) may use, not reserved by another
        gang."""
        usable = self._eligible(pod)
        res = self.reservation
        if res is not None and res.key != key:
            usable = usable & ~res.mask
        return usable

    def _eligible(self, pod: PodInfo) -> Mask:
        """Rows whose node the pod may use whatever runs there: schedulable, its
        nodeSelector and required node affinity match, every NoSchedule/NoExecute taint
        tolerated. Free cards anywhere else are no capacity for the gang, and reserving
        them does not help it: counted over every node, a gang confined to a full pool
        passed PreFilter on another pool's free cards, was refused in Filter without its
        starvation clock running, and could reserve the other pool's nodes."""
        snap = self.handle.snapshot
        return self._static_rows(pod) & snap.node_valid & ~snap.node_unschedulable

    def _static_rows(self, pod: PodInfo) -> Mask:
        """The label and taint part of `_eligible`, cached per pod shape until a node
        joins or leaves or a label or taint set changes (the snapshot's stamps)."""
        return self._static.rows(self.handle.snapshot, pod, malformed=True)

    def _refused(self, pol: Policy, pod: PodInfo) -> None:
        now = self.handle.now()
        since = self.refused_since.setdefault(pol.key, now)
        if len(self.refused_since) > 4 * max(len(self._order), 64):
            self._forget_gone()
        res = self.reservation
        if res is not None and res.key == pol.key and self._drained(res):
            self._drop_reservation(pol.key)
            return
        if (
            res is None
            and pol.key not in self._no_reserve
            and now - since >= self.args.starvation_seconds
        ):
            self.reservation = self._reserve(pol, pod, now)
            if self.reservation is not None:
                self._epoch += 1

    def _drop_reservation(self, key: str) -> None:
        """The gang's reserved nodes run nothing and it still does not fit there: not a
        matter of capacity (its pods' filters exclude those nodes, or they changed). Holding
        them would starve everyone else, so it gives them up and does not reserve again."""
        self.reservation = None
        self._no_reserve.add(key)
        self._epoch += 1

    def _drained(self, res: Reservation) -> bool:
        snap = self.handle.snapshot
        rows = np.flatnonzero(res.mask[: len(snap.node_valid)] & snap.node_valid)
        return bool(np.all(snap.node_pods_free[rows] == snap.node_pods_alloc[rows]))

    def _live_reservation(self) -> Reservation | None:
        """The reservation, dropped once its gang has no pending pod left (placed, or its
        pods deleted)."""
        res = self.reservation
        if res is None:
            return None
        if not any(not node for _, node in self.handle.gang_members(res.key)):
            self.reservation = None
            self.refused_since.pop(res.key, None)
            self._epoch += 1
            return None
        return res

    def _forget_gone(self) -> None:
        for key in list(self.refused_since):
            if not self.handle.gang_members(key):
                self.refused_since.pop(key, None)
                self._order.pop(key, None)
                self._refusals.pop(key, None)
                self._no_reserve.discard(key)
                self._failed.pop(key, None)

    def _reserve(self, pol: Policy, pod: PodInfo, now: float) -> Reservation | None:
        """Nodes that hold the gang's lead shape (`pod`) once their pods finish: racks chosen
        as on an empty cluster, and in them the nodes with the most free room now."""
        snap = self.handle.snapshot
        members = self.handle.gang_members(pol.key)
        placed = sum(1 for _, n in members if n)
        _, need = _lead(pod, members, pol.min_member - placed)
        usable = self._eligible(pod)
        empty = self._counts(pod, pol.key, need, usable, empty=True)
        choice = self._choose(empty, need, pol)
        if choice is None or isinstance(choice, Status):
            return None
        rack = _rack_ids(snap.node_rack)
        inside = usable & np.isin(rack, np.asarray(choice.racks, np.int64))
        if choice.within is not None:
            inside &= choice.within
        now_counts = self._counts(pod, pol.key, need, inside)
        rows = np.flatnonzero(inside & (empty > 0))
        order = rows[np.lexsort((rows, -empty[rows], -now_counts[rows]))]
        mask = np.zeros(len(snap.node_valid), np.bool_)
        total = 0
        for r in order.tolist():
            if total >= need:
                break
            mask[r] = True
            total += int(empty[r])
        return Reservation(pol.key, mask, now)

    # -- capacity -------------------------------------------------------------------------------

    def _counts(
        self, pod: PodInfo, key: str, need: int, mask: Mask, *, empty: bool = False
    ) -> NDArray[np.int64]:
        """Per row, how many pods shaped like `pod` fit at once (at most `need`), net of the
        slots other assembling gangs planned; `empty`: as if no pod ran anywhere."""
        snap = self.handle.snapshot
        n = len(snap.node_valid)
        req = pod.request
        held_cards = np.zeros(n, np.int32)
        held_cpu = np.zeros(n, np.int64)
        held_mem = np.zeros(n, np.int64)
        held_pods = np.zeros(n, np.int32)
        if not empty:
            for other, plan in self.plans.items():
                if other == key:
                    continue
                for row, k in plan.slots.items():
                    held_cards[row] += k * plan.cards
                    held_cpu[row] += k * plan.cpu
                    held_mem[row] += k * plan.mem
                    held_pods[row] += k
        if empty:
            present = snap.card_model >= 0
            free_milli = np.where(present, np.int32(1000), np.int32(0)).astype(np.int32)
            free_mem = snap.card_total_mem
            cpu, mem, pods = snap.node_cpu_alloc, snap.node_mem_alloc, snap.node_pods_alloc
        else:
            free_milli, free_mem = snap.card_free_milli, snap.card_free_mem
            cpu, mem, pods = snap.node_cpu_free, snap.node_mem_free, snap.node_pods_free
        out = np.zeros(n, np.int32)
        gang_fit(
            free_milli,
            free_mem,
            snap.card_total_mem,
            snap.card_model,
            snap.card_healthy,
            snap.card_island,
            snap.node_valid,
            mask,
            cpu,
            mem,
            pods,
            held_cards,
            held_cpu,
            held_mem,
            held_pods,
            req.gpu_cards,
            req.gpu_milli,
            req.gpu_mem_mib,
            snap.allowed_models(req.gpu_models),
            int(req.nvlink),
            req.cpu_milli,
            req.memory_bytes,
            need,
            out,
        )
        return out.astype(np.int64)

    def _choose(
        self,
        counts: NDArray[np.int64],
        need: int,
        pol: Policy,
        near: NDArray[np.intp] | None = None,
    ) -> placement.Choice | Status | None:
        """The racks for the gang's missing members. `near`: rows of members already
        placed (a replaced member, members beyond a failed attempt): the gang grows in their
        racks when those can hold the rest, and never leaves their required domain.

        When nodes carry NVLink fabric cliques (nvidia.com/gpu.clique), one clique that
        holds the missing members comes first (inside the required domain; a growing gang:
        one of its members' cliques), before the preferred tier and the fewest racks."""
        snap = self.handle.snapshot
        domain = self._domain(pol.required)
        if isinstance(domain, Status):
            return domain
        rack, spine = _rack_ids(snap.node_rack), _rack_ids(snap.node_spine)
        clique = _clique_domains(snap.node_clique, snap.node_valid, domain)
        if clique is not None:
            if near is not None and len(near):
                clique = np.where(np.isin(clique, clique[near]), clique, -1)
            choice = placement.choose(counts, rack, spine, need, clique)
            if choice is not None:
                return choice
        if domain is None and pol.preferred and (near is None or not len(near)):
            preferred = self._domain(pol.preferred)
            if isinstance(preferred, np.ndarray):
                choice = placement.choose(counts, rack, spine, need, preferred)
                if choice is not None:
                    return choice
        if near is not None and len(near):
            inside = np.isin(rack, np.unique(rack[near]))
            if domain is not None:
                held = np.isin(domain, np.unique(domain[near]))
                inside &= held
                domain = np.where(held, domain, -1)
            choice = placement.choose(counts, rack, spine, need, np.where(inside, 0, -1))
            if choice is not None:
                return choice
        return placement.choose(counts, rack, spine, need, domain)

    def _rows_of(self, members: Sequence[tuple[PodInfo, str]]) -> NDArray[np.intp]:
        snap = self.handle.snapshot
        rows = [snap.row_of(node) for _, node in members if node]
        return np.asarray([r for r in rows if r >= 0], np.intp)

    def _domain(self, tier: str) -> NDArray[np.int64] | Status | None:
        """Per row, the required topology domain's id (-1: the node is in none)."""
        return self._domains.of(self.handle.snapshot, tier)

    def _plan(self, cyc: _Cycle, counts: NDArray[np.int64], choice: placement.Choice) -> Plan:
        snap = self.handle.snapshot
        pol = cyc.policy
        inside = np.isin(_rack_ids(snap.node_rack), np.asarray(choice.racks, np.int64))
        if choice.within is not None:
            inside &= choice.within
        mask = inside & self._usable(pol.key, cyc.lead)
        req = cyc.lead.request
        plan = Plan(
            mask=mask,
            rows=np.flatnonzero(mask),
            slots=placement.slots(counts, mask, cyc.lead_need),
            shape=req,
            cards=req.gpu_cards
            if req.gpu_cards
            else (1 if req.gpu_milli or req.gpu_mem_mib else 0),
            cpu=req.cpu_milli,
            mem=req.memory_bytes,
            deadline=self.handle.now() + pol.timeout,
            racks=len(choice.racks),
        )
        self.plans[pol.key] = plan
        self._epoch += 1
        return plan


def _backoff(failures: int) -> float:
    """Seconds a gang that failed to assemble `failures` times in a row is held back:
    1, 2, 4, ... 60."""
    return float(min(2 ** min(failures - 1, 6), 60))


def _rack_ids(column: NDArray[np.int32]) -> NDArray[np.int64]:
    """Tier ids with the unlabelled rows (-1) gathered in one pseudo domain of their own."""
    ids = column.astype(np.int64)
    if len(ids):
        ids[ids < 0] = int(ids.max()) + 1
    return ids


def _clique_domains(
    clique: NDArray[np.int32], valid: NDArray[np.bool_], domain: NDArray[np.int64] | None
) -> NDArray[np.int64] | None:
    """Per row, the id of its NVLink fabric clique (inside a required domain: of the pair
    (domain, clique), so a clique straddling two domains counts as one per domain); -1 for
    a node in none. None when no node has a clique: placement as without cliques."""
    ids = clique.astype(np.int64)
    if not (valid & (ids >= 0)).any():
        return None
    if domain is None:
        return ids
    inside = (ids >= 0) & (domain >= 0)
    pair = domain * (int(ids.max()) + 1) + ids
    return np.where(inside, pair, -1)


def _tier_word(tier: str) -> str:
    return tier if tier in ("rack", "spine") else f"{tier} domain"


def _refusal(cyc: _Cycle, counts: NDArray[np.int64]) -> str:
    pol = cyc.policy
    total = int(counts.sum())
    head = f"{_KIND[pol.api]} {pol.key} needs {cyc.need} more of its {pol.min_member} pods placed"
    if total < cyc.lead_need:
        if cyc.lead_need == cyc.need:
            return f"{head} together; the capacity free for it holds {total}"
        return (
            f"{head} together; the capacity free for it holds {total} of the"
            f" {cyc.lead_need} largest"
        )
    tier = _tier_word(pol.required)
    return f"{head} in one {tier}; no {tier} holds them"


def _lead(pod: PodInfo, members: Sequence[tuple[PodInfo, str]], need: int) -> tuple[PodInfo, int]:
    """The gang's largest unplaced request (GPU, then cpu, then memory) and how many of the
    `need` missing members the plan counts of it. `pod` leads when it is of that shape."""
    shapes: dict[PodRequest, list[PodInfo]] = {}
    for p, node in members:
        if not node:
            shapes.setdefault(p.request, []).append(p)
    shapes.setdefault(pod.request, []).append(pod)
    if len(shapes) == 1:
        return pod, need
    req = max(shapes, key=lambda r: (r.gpu_milli_total, r.cpu_milli, r.memory_bytes))
    lead = pod if pod.request == req else shapes[req][0]
    return lead, min(need, len({p.uid for p in shapes[req]}))
