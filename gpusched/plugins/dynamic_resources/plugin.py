"""DynamicResources: gpusched allocates a pod's DRA ResourceClaims, as kube-scheduler's
plugin of that name does (pkg/scheduler/framework/plugins/dynamicresources, 1.36), with
the devices chosen by gpusched's card model.

* PreEnqueue: every claim the pod names exists (a template's claim has been made by the
  resourceclaim controller), is not being deleted and, when made from a template, belongs
  to the pod; otherwise the pod waits, with kube's message.
* expand (before the cycle): the pod's card-shaped claims (dra/cards.py) become the GPU
  request GPUFit and GPUFragmentation place, so a DRA pod is packed exactly as a pod that
  asks by annotation; the pod is marked `gpu_from_claims` and goes only to nodes whose
  cards come from ResourceSlices (GPUFit).
* PreFilter: the claims; an allocated claim reserved for others to the limit is "in use";
  one in the middle of another pod's allocation waits; the rest are validated by the
  allocator once (class exists, selectors compile).
* Filter: an allocated claim's node selector must select the node ("resourceclaim not
  available on the node"); the unallocated claims must be allocatable there (the
  allocator, dra/allocator.py: "cannot allocate all claims").
* Reserve: allocate on the chosen node with the cards GPUFit chose tried first, and count
  the allocation as in use at once (DraPort.assume; core/dra_ledger.py charges its cards).
  The pod itself is then assumed without cards: the claim holds them, not the pod.
* PreBind: write each allocation with the pod in status.reservedFor (DraPort.allocate:
  finalizer, then status, conditional on the claim's resourceVersion), or add the pod to
  an allocated claim's reservedFor.
* Unreserve: give the in-flight allocations up; remove the pod from what PreBind reserved.
* PostFilter: a claim allocated earlier for this pod (reserved by no one else) that keeps
  it from every node is deallocated, so the next attempt may allocate it elsewhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from gpusched.dra.allocator import (
    AllocationFailure,
    Allocator,
    FailureKind,
    InUse,
    InUseTracker,
    Node,
    SliceIndex,
    node_selector_matches,
    same_slices,
)
from gpusched.dra.cards import CardMap, DeviceId, card_demand, card_map
from gpusched.dra.cel import Selectors
from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import (
    ALLOCATION,
    Allocation,
    Diagnosis,
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
)
from gpusched.framework.status import Code, Status, skip, unresolvable, unschedulable
from gpusched.model.dra import AllocationResult, Device, ResourceClaim, ResourceSlice
from gpusched.model.pod import PodInfo
from gpusched.plugins.dynamic_resources.args import DynamicResourcesArgs
from gpusched.plugins.helper.args import checked_args

_log = logging.getLogger(__name__)

NAME = "DynamicResources"
# resource.k8s.io/v1 ResourceClaimReservedForMaxSize.
RESERVED_FOR_MAX = 256
NOT_AVAILABLE = "resourceclaim not available on the node"
# How long PreBind waits for the watch to show its allocation writes before checking them
# against other schedulers' (it binds unchecked after that, with a warning).
SETTLE_SECONDS = 5.0
IN_USE = "resourceclaim in use"


@dataclass(slots=True)
class _Cycle:
    claims: tuple[ResourceClaim, ...]  # every claim of the pod, in spec order
    to_allocate: tuple[ResourceClaim, ...]  # those without an allocation
    allocator: Allocator | None
    # row -> the allocations Filter found there (Reserve's fallback)
    found: dict[int, tuple[AllocationResult, ...]] = field(default_factory=dict)
    # Claims an allocated claim's node selector keeps off a node (PostFilter's candidates).
    unavailable: set[int] = field(default_factory=set)
    # What Reserve assumed, and what PreBind wrote (to be undone by Unreserve).
    assumed: tuple[ResourceClaim, ...] = ()
    reserved: list[ResourceClaim] = field(default_factory=list)


_CYCLE: StateKey[_Cycle] = StateKey("DynamicResources/cycle")


def not_created(pod: PodInfo) -> str:
    return f'pod "{pod.namespace}/{pod.name}": ResourceClaim not created yet'


class DynamicResources:
    name: ClassVar[str] = NAME
    Args: ClassVar[type[DynamicResourcesArgs]] = DynamicResourcesArgs

    def __init__(self, args: DynamicResourcesArgs | None, handle: Handle) -> None:
        self.args = checked_args(args, DynamicResourcesArgs)
        self.handle = handle
        self.selectors = Selectors()
        # Derived from the port, again whenever its version moves.
        self._index: tuple[tuple[ResourceSlice, ...], SliceIndex] | None = None
        self._in_use: tuple[int, InUse] | None = None
        # Derives what is in use from the claims added since the last cycle only.
        self._tracker = InUseTracker()
        self._maps: dict[str, tuple[tuple[ResourceSlice, ...], CardMap]] = {}
        self._unbound: tuple[int, bool] = (-1, False)
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the pod's claims ----------------------------------------------------------------------

    def _claims(self, pod: PodInfo) -> tuple[ResourceClaim, ...] | Status:
        """kube's foreachPodResourceClaim: the pod's claims, or why it must wait."""
        dra = self.handle.dra
        out: list[ResourceClaim] = []
        for pc in pod.pod_claims:
            if pc.not_needed:
                continue
            if not pc.claim and not pc.template:
                return unresolvable(
                    f'pod "{pod.namespace}/{pod.name}", spec.resourceClaim "{pc.name}": none'
                    " of the supported fields are set"
                )
            if not pc.claim:
                return unresolvable(not_created(pod))
            claim = dra.claim(pod.namespace, pc.claim)
            if claim is None:
                return unresolvable(f'resourceclaim.resource.k8s.io "{pc.claim}" not found')
            if claim.deleting:
                return unresolvable(f'resourceclaim "{claim.name}" is being deleted')
            if pc.template and claim.owner_pod_uid != pod.uid:
                return unresolvable(
                    f"ResourceClaim {claim.namespace}/{claim.name} was not created for Pod"
                    f" {pod.namespace}/{pod.name} (Pod is not owner)"
                )
            out.append(claim)
        return tuple(out)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.pod_claims:
            return Status()
        got = self._claims(pod)
        return got if isinstance(got, Status) else Status()

    # -- the pod as the cycle sees it --------------------------------------------------------

    def expand(self, pod: PodInfo) -> PodInfo:
        """The pod with its card-shaped claims as its GPU request (dra/cards.py)."""
        if not pod.pod_claims or pod.node_name or pod.request.gpu_milli_total > 0:
            # A pod asking for cards itself too is refused at PreFilter, not re-shaped.
            return pod
        claims = self._claims(pod)
        if isinstance(claims, Status):
            return pod
        demand = card_demand(
            [c for c in claims if c.allocation is None], frozenset(self.args.card_classes)
        )
        if demand.empty:
            return pod
        request = dataclasses.replace(
            pod.request, gpu_cards=demand.cards, gpu_milli=0, gpu_mem_mib=demand.mem_mib
        )
        return dataclasses.replace(pod, request=request, gpu_from_claims=True)

    # -- derived state -----------------------------------------------------------------------

    def _slice_index(self) -> SliceIndex:
        slices = self.handle.dra.slices()
        # Kept while the slices are the same objects: its per-node pool views and selector
        # results are most of a node's Filter cost.
        if self._index is None or not same_slices(self._index[0], slices):
            self._index = (slices, SliceIndex(slices))
        return self._index[1]

    def _allocated(self) -> InUse:
        dra = self.handle.dra
        if self._in_use is None or self._in_use[0] != dra.version:
            self._in_use = (dra.version, self._tracker.update(dra.allocated_claims(), dra.slices()))
        return self._in_use[1]

    def card_map(self, node: str) -> CardMap:
        slices = self.handle.dra.slices_for_node(node)
        got = self._maps.get(node)
        if got is None or got[0] != slices:
            got = (slices, card_map(node, slices, self.handle.snapshot.max_cards))
            self._maps[node] = got
        return got[1]

    def _only_local(self) -> bool:
        """No slice serves more than one node: only nodes with slices of their own can
        offer devices (the Filter loop then skips every other node)."""
        dra = self.handle.dra
        if self._unbound[0] != dra.version:
            self._unbound = (dra.version, any(not s.node_name for s in dra.slices()))
        return not self._unbound[1]

    # -- PreFilter ---------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod_claims:
            return None, skip()
        if pod.request.gpu_milli_total > 0 and not pod.gpu_from_claims:
            return None, unresolvable(
                "pod asks for GPUs both through resourceClaims and through nvidia.com/gpu or"
                " gpusched.io/gpu-* annotations: ask one way"
            )
        claims = self._claims(pod)
        if isinstance(claims, Status):
            return None, claims
        if not claims:
            return None, skip()
        dra = self.handle.dra
        to_allocate: list[ResourceClaim] = []
        for claim in claims:
            if dra.allocating(claim.uid):
                # Another pod's cycle allocated it and its binding cycle has not written it
                # yet (the port shows the claim allocated meanwhile): wait for the write,
                # as kube does for its inFlightAllocations.
                return None, unresolvable(
                    f"resource claim {claim.namespace}/{claim.name} is in the process of"
                    " being allocated"
                )
            mine = any(c.uid == pod.uid for c in claim.reserved_for)
            if claim.allocation is not None:
                if len(claim.reserved_for) >= RESERVED_FOR_MAX and not mine:
                    return None, unresolvable(IN_USE)
                continue
            for request in claim.requests:
                for sub in request.alternatives:
                    what = f"{request.name}/{sub.name}" if request.first_available else sub.name
                    st = self._check_class(sub.device_class, what)
                    if st is not None:
                        return None, st
            to_allocate.append(claim)
        allocator = None
        if to_allocate:
            classes = {
                sub.device_class: dc
                for c in to_allocate
                for r in c.requests
                for sub in r.alternatives
                if (dc := dra.device_class(sub.device_class)) is not None
            }
            allocator = Allocator(
                classes,
                self._slice_index(),
                self._allocated(),
                self.selectors,
                timeout=self.args.filter_timeout_seconds,
            )
            for claim in to_allocate:
                # What fails on every node (a malformed claim or class, a selector that
                # does not compile) ends the attempt with an Error, as kube's Filter does.
                why = allocator.validate(claim)
                if why:
                    return None, Status(Code.ERROR, (why,))
        state.write(_CYCLE, _Cycle(claims, tuple(to_allocate), allocator))
        rows = None
        if to_allocate and self._only_local():
            snap = self.handle.snapshot
            with_slices = {s.node_name for s in dra.slices()}
            rows = np.array(
                sorted(r for n in with_slices if (r := snap.row_of(n)) >= 0), dtype=np.int64
            )
        return PreFilterResult(rows), Status()

    def _check_class(self, name: str, request: str) -> Status | None:
        """kube's validateDeviceClass: a class that does not exist (yet) makes the pod wait
        for a DeviceClass event; a request without one is an API this version does not
        know."""
        if not name:
            return Status(Code.ERROR, (f"request {request}: unsupported request type",))
        if self.handle.dra.device_class(name) is None:
            return unresolvable(f"request {request}: device class {name} does not exist")
        return None

    # -- Filter ------------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        cyc = state.get(_CYCLE)
        if cyc is None:
            # A profile that runs this Filter without its PreFilter: do its work now.
            _, st = self.pre_filter(state, pod)
            cyc = state.get(_CYCLE)
            if st.is_skip() or (st.is_success() and cyc is None):
                return FilterResult(candidates.copy())
            if cyc is None:
                return FilterResult(
                    np.zeros_like(candidates),
                    st.reasons,
                    unresolvable=not st.is_rejected()
                    or st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                )
        snap = self.handle.snapshot
        feasible = candidates.copy()
        reasons: list[str] = []
        codes = np.zeros(len(candidates), np.int8)
        unresolvable_rows = np.zeros(len(candidates), np.bool_)

        def reason(text: str) -> int:
            if text not in reasons:
                reasons.append(text)
            return reasons.index(text)

        for row in np.flatnonzero(candidates):
            node = snap.nodes[row]
            if node is None:
                continue
            where = Node(node.name, node.labels)
            ok = True
            for i, claim in enumerate(cyc.claims):
                alloc = claim.allocation
                if alloc is not None and alloc.node_selector is not None:
                    selected = node_selector_matches(alloc.node_selector, where)
                    if isinstance(selected, str):
                        return FilterResult(
                            np.zeros_like(candidates),
                            (f"resourceclaim {claim.namespace}/{claim.name}: {selected}",),
                        )
                    if not selected:
                        cyc.unavailable.add(i)
                        feasible[row] = False
                        codes[row] = reason(NOT_AVAILABLE)
                        unresolvable_rows[row] = True
                        ok = False
                        break
            if not ok or cyc.allocator is None:
                continue
            got = cyc.allocator.allocate(where, cyc.to_allocate)
            if isinstance(got, AllocationFailure):
                if got.kind is FailureKind.ERROR:
                    # kube: an Error status ends the attempt (retried with backoff).
                    return FilterResult(
                        np.zeros_like(candidates), (f"node {node.name}: {got.message}",)
                    )
                feasible[row] = False
                codes[row] = reason(got.message)
                continue
            cyc.found[int(row)] = got
        if not reasons:
            return FilterResult(feasible)
        return FilterResult(feasible, tuple(reasons), codes, unresolvable_rows)

    # -- PostFilter --------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[str | None, Status]:
        cyc = state.get(_CYCLE)
        if cyc is None or not cyc.unavailable:
            return None, Status(Code.UNSCHEDULABLE, ("no new claims to deallocate",))
        for i in sorted(cyc.unavailable):
            claim = cyc.claims[i]
            others = [c for c in claim.reserved_for if c.uid != pod.uid]
            if not others:
                self._spawn(self.handle.dra.deallocate(claim, pod))
                return None, Status(
                    Code.UNSCHEDULABLE, ("deallocation of ResourceClaim requested",)
                )
        return None, Status(Code.UNSCHEDULABLE, ("still not schedulable",))

    # -- Reserve / Unreserve -----------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        cyc = state.get(_CYCLE)
        if cyc is None or cyc.allocator is None:
            return Status()
        snap = self.handle.snapshot
        row = snap.row_of(node)
        chosen = state.get(ALLOCATION)
        results = None
        if chosen is not None and chosen.cards:
            cards = self.card_map(node)
            wanted = {cards.devices[c] for c in chosen.cards if c < len(cards.devices)}

            def prefer(device: DeviceId, _d: Device) -> int:
                return 0 if device in wanted else 1

            nd = snap.nodes[row]
            got = cyc.allocator.allocate(
                Node(node, nd.labels if nd is not None else {}), cyc.to_allocate, prefer
            )
            if not isinstance(got, AllocationFailure):
                results = got
        if results is None:
            results = cyc.found.get(row)
        if results is None:
            return unschedulable("cannot allocate all claims", plugin=NAME)
        dra = self.handle.dra
        assumed = []
        for claim, result in zip(cyc.to_allocate, results, strict=True):
            done = dataclasses.replace(claim, allocation=result)
            dra.assume(done)
            assumed.append(done)
        cyc.assumed = tuple(assumed)
        if pod.gpu_from_claims and chosen is not None:
            # The claims hold the cards (the ledger charges them); the pod is assumed
            # with its CPU and memory only, or the cards would count twice.
            state.write(ALLOCATION, Allocation(node, row))
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        cyc = state.get(_CYCLE)
        if cyc is None:
            return
        dra = self.handle.dra
        for claim in cyc.assumed:
            dra.forget(claim.uid)
        cyc.assumed = ()
        for claim in cyc.reserved:
            self._spawn(dra.unreserve(claim, pod))
        cyc.reserved.clear()

    # -- PreBind -----------------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        cyc = state.get(_CYCLE)
        if cyc is None:
            return Status()
        dra = self.handle.dra
        allocated = {c.uid: c for c in cyc.assumed}
        ours: list[ResourceClaim] = []  # what this PreBind allocated and wrote
        for claim in cyc.claims:
            done = allocated.get(claim.uid)
            if done is not None and done.allocation is not None:
                written, st = await dra.allocate(claim, done.allocation, pod)
                # Written or not, it is no longer in flight (the port ended it). A written
                # allocation must not be forgotten by Unreserve: its devices stay in use
                # (the port keeps the written copy until the watch shows it).
                cyc.assumed = tuple(c for c in cyc.assumed if c.uid != claim.uid)
            elif any(c.uid == pod.uid for c in claim.reserved_for):
                continue
            else:
                written, st = await dra.reserve_for(claim, pod)
            if not st.is_success():
                return st.with_plugin(NAME)
            if written is not None:
                cyc.reserved.append(written)
                if done is not None:
                    ours.append(written)
        return await self._verify(pod, ours)

    async def _verify(self, pod: PodInfo, ours: list[ResourceClaim]) -> Status:
        """Another scheduler (kube-scheduler's DynamicResources) may have given one of our
        devices to another claim between our Reserve and our write: the API server checks
        no device across claims. Once the watch shows our writes (so every write before
        them has reached us too), a device also held by another claim means we lost the
        race: our allocations are cleared and the pod tries again. A write the other side
        makes after it (its Reserve having missed ours) remains possible: that window is
        its own informer's lag (README, "Next to kube-scheduler")."""
        if not ours:
            return Status()
        dra = self.handle.dra
        if not await dra.settled([c.uid for c in ours], SETTLE_SECONDS):
            _log.warning(
                "pod %s: the claims watch did not show our allocations within %.0fs;"
                " binding without checking them against other schedulers' writes",
                pod.key,
                SETTLE_SECONDS,
            )
            return Status()
        mine = {c.uid for c in ours}
        held: dict[tuple[str, str, str], str] = {}
        for other in dra.allocated_claims():
            if other.uid in mine or other.allocation is None:
                continue
            for r in other.allocation.results:
                if not r.admin_access and not r.share_id:
                    held[r.device_id] = other.key
        clashes = [
            (r.device_id, held[r.device_id])
            for c in ours
            if c.allocation is not None
            for r in c.allocation.results
            if not r.admin_access and r.device_id in held
        ]
        if not clashes:
            return Status()
        for c in ours:
            await dra.deallocate(c, pod)
        (driver, pool, device), other_key = clashes[0]
        return Status(
            Code.ERROR,
            (
                f"device {driver}/{pool}/{device} was also allocated to claim {other_key}"
                " by another scheduler meanwhile; our allocation was cleared and the pod"
                " is tried again",
            ),
            NAME,
        )

    # -- helpers -----------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        """Run a write of the port in the background (Unreserve and PostFilter are not
        coroutines). Without a running loop (the simulator, whose ports never suspend) it
        runs to its end here."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            try:
                work.send(None)
            except StopIteration:
                return
            work.close()
            _log.error("DynamicResources: a port write suspended without an event loop")
            return
        task = loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
