"""GPUFit: per-card GPU feasibility (Filter), card choice (Reserve), gpu-ids (PreBind).

kube-scheduler sees `nvidia.com/gpu: 8` as a count; this plugin sees every card, so a
whole-card pod needs intact cards (free share 1000) of an allowed model, and a shared pod
needs one card with enough free share and memory. The cards are chosen at Reserve, in the
same code for the simulator and the daemon, and handed to the Binding (PreBind fills the
cycle's BINDING_ANNOTATIONS) so the API server writes `gpusched.io/gpu-ids` onto the pod
together with its node, for a device plugin or webhook to honour.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import (
    ALLOCATION,
    BINDING_ANNOTATIONS,
    CARD_REASON,
    Allocation,
    FilterResult,
    Handle,
    Mask,
    PreFilterResult,
)
from gpusched.framework.snapshot import NodeColumns
from gpusched.framework.status import Code, Status
from gpusched.kernels import choose_cards_nb, choose_cards_np
from gpusched.kernels.dispatch import pick
from gpusched.model import keys
from gpusched.model.gpu_models import describe
from gpusched.model.pod import PodInfo
from gpusched.model.share import share_on_card
from gpusched.plugins.gpu_fit.why import shared_card_reason, whole_cards_reason
from gpusched.plugins.helper.gpu_state import (
    CARD_HINT,
    CARD_HINT_BY,
    GPU_REQUEST,
    GPU_SUMMARY,
    GpuRequest,
    SummaryCache,
    card_columns,
    gpu_request,
    restrict,
)

choose_cards = pick(choose_cards_nb, choose_cards_np)

INSUFFICIENT_WHOLE = f"Insufficient {keys.GPU_RESOURCE}"
INSUFFICIENT_SHARE = "Insufficient GPU share (no single card with enough free share and memory)"
NO_ISLAND = "node(s) had no NVLink island with enough free cards"
# A required-NVLink pod on a node that never said which cards share an island: not "no
# island is free enough" (that would send the user hunting for pods to move).
NVLINK_UNKNOWN = (
    f"node(s) had NVLink layout unknown (no {keys.GPU_INVENTORY}: GPU Feature Discovery"
    " labels and DRA slices do not say which cards share an NVLink island)"
)
NO_GPU = "node(s) had no GPU"
NO_HEALTHY = "node(s) had no healthy GPU"
NO_MODEL = "node(s) had no GPU of model"  # then the models asked for, "|"-joined
NOT_DRA = "node(s) had no GPU published through DRA (ResourceSlices)"
DRA_ONLY = "node(s) had GPUs only through DRA: ask for them with a ResourceClaim"


class GPUFit:
    name: ClassVar[str] = "GPUFit"

    def __init__(self, args: object, handle: Handle) -> None:
        self.handle = handle
        self.summaries = SummaryCache()
        self._codes_key: tuple[int, int, int, int] | None = None
        self._codes: NDArray[np.int8] = np.zeros(0, np.int8)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        request = gpu_request(self.handle.snapshot, pod)
        if request is None:
            return None, Status(Code.SKIP)
        # Against the models some node has now, not every model ever seen: a pod asking
        # for the model of a node that left gets the list of what is there instead.
        snap = self.handle.snapshot
        if pod.request.gpu_models and not request.allowed[snap.present_model_ids()].any():
            return None, Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                (unknown_model_reason(pod.request.gpu_models, snap),),
            )
        state.write(GPU_REQUEST, request)
        return None, Status()

    def _request(self, state: CycleState, pod: PodInfo) -> GpuRequest | None:
        """What PreFilter wrote, or worked out now when a profile runs GPUFit at Filter or
        Reserve without its PreFilter (the cycle state then has no request: Filter raised
        KeyError for every pod and Reserve chose no cards for a GPU pod)."""
        request = state.get(GPU_REQUEST)
        if request is None:
            request = gpu_request(self.handle.snapshot, pod)
            if request is not None:
                state.write(GPU_REQUEST, request)
        return request

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        snap = self.handle.snapshot
        request = self._request(state, pod)
        if request is None:
            return FilterResult(candidates.copy())  # no GPU asked: every node fits
        # Cards published through DRA go only to claims (through the allocator), and a
        # claim's cards only come from there: one owner per card, and nothing on a DRA
        # node would honour a gpu-ids annotation.
        n = len(candidates)
        if snap.dra_nodes == 0 and not pod.gpu_from_claims:
            wrong = None  # no node publishes its cards through DRA: the common case, no pass
            allowed = candidates
        else:
            dra_rows = snap.node_dra_cards[:n]
            wrong = candidates & (~dra_rows if pod.gpu_from_claims else dra_rows)
            allowed = candidates & ~wrong
        summary = restrict(self.summaries.summary(snap, request, pod.request.gpu_models), allowed)
        state.write(GPU_SUMMARY, summary)
        if summary.fitting == np.count_nonzero(candidates):
            return FilterResult(summary.fit)
        # Reason per rejected row, in the order an operator would fix things. The Diagnosis
        # reads a code only for rejected rows, so a fitting row's code is left as it falls.
        models = pod.request.gpu_models
        reasons = (
            INSUFFICIENT_WHOLE if request.cards else INSUFFICIENT_SHARE,
            NO_ISLAND,
            NO_GPU,
            f"{NO_MODEL} {'|'.join(models)}" if models else NO_HEALTHY,
            NOT_DRA if pod.gpu_from_claims else DRA_ONLY,
            NVLINK_UNKNOWN,
        )
        # 0: insufficient; no usable card: 2 on a node without cards, 3 on one with cards.
        codes = np.where(summary.usable[:n] == 0, self._no_usable_code(snap, n), np.int8(0))
        unresolvable: bool | NDArray[np.bool_] = False
        if request.cards and request.nvlink == 2:
            # Enough intact cards but no island holding them: on a node that published its
            # islands, none is free enough (1); on one that did not (GFD labels, DRA), the
            # layout is unknown (5): the fix is an inventory, not fewer pods.
            islandless = (candidates & ~summary.fit) & (summary.intact[:n] >= request.cards)
            codes[islandless] = 1
            unknown = islandless & snap.node_nvlink_unknown[:n]
            if unknown.any():
                codes[unknown] = 5
                unresolvable = unknown  # preempting pods does not tell us the islands
        if wrong is not None:
            codes[wrong] = 4
        return FilterResult(summary.fit, reasons, codes, unresolvable)

    def _no_usable_code(self, snap: NodeColumns, n: int) -> NDArray[np.int8]:
        """Per row, the reason code of a node with no usable card: 2 without cards, 3 with
        some. Changes only with the card layout or the rows' nodes."""
        key = (id(snap), snap.card_layout, snap.membership, n)
        if self._codes_key != key:
            has_cards = snap.node_card_count[:n] > 0
            self._codes = np.where(has_cards, np.int8(3), np.int8(2))
            self._codes_key = key
        return self._codes

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        request = self._request(state, pod)
        if request is None:
            return Status()
        snap = self.handle.snapshot
        row = snap.row_of(node)
        hinted = self._hinted_card(state, pod, row)
        if hinted >= 0:
            milli, mem = share_on_card(pod.request, int(snap.card_total_mem[row, hinted]))
            state.write(ALLOCATION, Allocation(node, row, (hinted,), (milli,), (mem,)))
            self._reason_shared(state, hinted, int(snap.card_free_milli[row, hinted]), milli, True)
            return Status()
        cards = choose_cards(
            *card_columns(snap),
            # Cool cards first among equally good ones (NaN everywhere: today's choice).
            snap.card_temp,
            row,
            request.cards,
            request.milli,
            request.mem_mib,
            request.allowed,
            request.nvlink,
        )
        if len(cards) == 0:
            # Filter said it fits; only a bug or a concurrent change gets here.
            return Status(Code.UNSCHEDULABLE, (f"no cards left on {node} for the pod at Reserve",))
        ids = tuple(int(c) for c in cards)
        held = [share_on_card(pod.request, int(snap.card_total_mem[row, c])) for c in ids]
        state.write(
            ALLOCATION,
            Allocation(node, row, ids, tuple(m for m, _ in held), tuple(mm for _, mm in held)),
        )
        if request.cards:
            self._reason_whole(state, ids, row, request)
        else:
            c = ids[0]
            self._reason_shared(state, c, int(snap.card_free_milli[row, c]), held[0][0], False)
        return Status()

    # -- the decision record ----------------------------------------------------------------

    def _reason_whole(
        self, state: CycleState, cards: tuple[int, ...], row: int, request: GpuRequest
    ) -> None:
        """Keep the row as choose_cards saw it: the record is written after binding (or a
        gang's wait at Permit), when the pod has rewritten the free shares, a reading may
        have changed the temperatures and the row may hold another node. Six copies of
        one row's few cards (1-3 µs); the words are built only if the record asks (why.py)."""
        snap = self.handle.snapshot
        seen = (
            snap.card_free_milli[row].copy(),
            snap.card_free_mem[row].copy(),
            snap.card_model[row].copy(),
            snap.card_healthy[row].copy(),
            snap.card_island[row].copy(),
            snap.card_temp[row].copy(),
        )

        def words() -> str:
            return whole_cards_reason(cards, *seen, request.mem_mib, request.allowed)

        state.write(CARD_REASON, words)

    @staticmethod
    def _reason_shared(
        state: CycleState, card: int, free_before: int, held: int, hinted: bool
    ) -> None:
        by = state.get(CARD_HINT_BY, "the Score plugins' card hint") if hinted else None
        state.write(CARD_REASON, lambda: shared_card_reason(card, free_before, held, by))

    def _hinted_card(self, state: CycleState, pod: PodInfo, row: int) -> int:
        """The card a Score plugin chose for a shared pod on this row, if it still fits."""
        hint = state.get(CARD_HINT)
        if hint is None or pod.request.gpu_cards or row >= len(hint) or hint[row] < 0:
            return -1
        snap = self.handle.snapshot
        c = int(hint[row])
        request = state.read(GPU_REQUEST)
        milli, mem = share_on_card(pod.request, int(snap.card_total_mem[row, c]))
        usable = (
            snap.card_healthy[row, c]
            and snap.card_model[row, c] >= 0
            and request.allowed[snap.card_model[row, c]]
        )
        fits = (
            milli >= 0
            and snap.card_free_milli[row, c] >= milli
            and snap.card_free_mem[row, c] >= mem
        )
        return c if usable and fits else -1

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        state.delete(ALLOCATION)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        alloc = state.get(ALLOCATION)
        if alloc is None or not alloc.cards:
            return Status()
        # Carried by the Binding, not patched onto the pod: the pod becomes bound and
        # assigned in one write (no window where a watcher sees it bound without cards, no
        # right to patch pods needed, nothing to undo if the Binding is refused).
        annotations = state.get(BINDING_ANNOTATIONS)
        if annotations is None:
            annotations = {}
            state.write(BINDING_ANNOTATIONS, annotations)
        annotations[keys.GPU_IDS] = ",".join(str(c) for c in alloc.cards)
        if not pod.request.gpu_cards:
            annotations[keys.GPU_MILLI_ASSIGNED] = str(alloc.milli[0])
        return Status()


def unknown_model_reason(models: tuple[str, ...], snap: NodeColumns) -> str:
    """Why a pod asking for models no node has cannot be placed, with the models the
    cluster has in every spelling `gpusched.io/gpu-model` accepts."""
    asked = describe(models, sep=" or ")
    present = snap.present_models()
    if not present:
        return f"no node has a GPU of model {asked}; no node has a GPU at all"
    return (
        f"no node has a GPU of model {asked}; {keys.GPU_MODEL} accepts these models present"
        f" in the cluster (either name): {describe(present)}"
    )
