"""What GPUFit computes once per pod and the other GPU plugins read from the CycleState."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState, StateKey
from gpusched.framework.interfaces import Mask
from gpusched.framework.snapshot import NodeColumns
from gpusched.kernels import (
    gpu_summary_nb,
    gpu_summary_np,
    gpu_summary_rows_nb,
    gpu_summary_rows_np,
)
from gpusched.kernels.dispatch import pick
from gpusched.model.pod import GpuKind, PodInfo
from gpusched.plugins.helper.row_cache import RowCache

gpu_summary = pick(gpu_summary_nb, gpu_summary_np)
gpu_summary_rows = pick(gpu_summary_rows_nb, gpu_summary_rows_np)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    cards: int
    milli: int
    mem_mib: int
    nvlink: int
    allowed: NDArray[np.bool_]  # by model id


@dataclass(slots=True)
class GpuSummary:
    """Per-row outputs of the gpu_summary kernel (see gpusched/kernels/gpu_summary.py)."""

    fit: NDArray[np.bool_]
    intact: NDArray[np.int16]
    usable: NDArray[np.int16]
    best_leftover: NDArray[np.int32]
    best_is_partial: NDArray[np.bool_]
    free_milli_total: NDArray[np.int32]
    fitting: int = 0

    @classmethod
    def empty(cls, n: int) -> GpuSummary:
        return cls(
            np.zeros(n, np.bool_),
            np.zeros(n, np.int16),
            np.zeros(n, np.int16),
            np.zeros(n, np.int32),
            np.zeros(n, np.bool_),
            np.zeros(n, np.int32),
        )


GPU_REQUEST: StateKey[GpuRequest] = StateKey("GPUFit/request")
GPU_SUMMARY: StateKey[GpuSummary] = StateKey("GPUFit/summary")
# A Score plugin that evaluates placements card by card (fragmentation gradient descent)
# already knows the best card on every node; it leaves it here (int16 by row, -1 = none)
# and Reserve takes it for a shared pod when it still fits, instead of best fit.
CARD_HINT: StateKey[NDArray[np.int16]] = StateKey("GPUFit/card-hint")
# Who wrote CARD_HINT and by which rule, in a few words for the decision record ("the
# GPUFragmentation pick: ..."): GPUFit's Reserve quotes it for the card it takes from it.
CARD_HINT_BY: StateKey[str] = StateKey("GPUFit/card-hint-by")


def gpu_request(snap: NodeColumns, pod: PodInfo) -> GpuRequest | None:
    req = pod.request
    if req.kind is GpuKind.NONE:
        return None
    return GpuRequest(
        cards=req.gpu_cards,
        milli=req.gpu_milli,
        mem_mib=req.gpu_mem_mib,
        nvlink=int(req.nvlink),
        allowed=snap.allowed_models(req.gpu_models),
    )


CardColumns = tuple[
    NDArray[np.int32],
    NDArray[np.int32],
    NDArray[np.int32],
    NDArray[np.int16],
    NDArray[np.bool_],
    NDArray[np.int8],
]


def card_columns(snap: NodeColumns) -> CardColumns:
    """The per-card columns every card-choosing kernel reads, in the kernels' order
    (gpu_summary, gpu_summary_rows, choose_cards): one list, so the callers cannot disagree."""
    return (
        snap.card_free_milli,
        snap.card_free_mem,
        snap.card_total_mem,
        snap.card_model,
        snap.card_healthy,
        snap.card_island,
    )


def compute_summary(snap: NodeColumns, request: GpuRequest, candidates: Mask) -> GpuSummary:
    out = GpuSummary.empty(snap.capacity)
    out.fitting = gpu_summary(
        *card_columns(snap),
        snap.node_valid,
        candidates,
        request.cards,
        request.milli,
        request.mem_mib,
        request.allowed,
        request.nvlink,
        out.fit,
        out.intact,
        out.usable,
        out.best_leftover,
        out.best_is_partial,
        out.free_milli_total,
    )
    return out


class SummaryCache(RowCache[GpuSummary]):
    """The gpu_summary of recent request shapes, brought up to date incrementally
    (RowCache): the per-pod cost of the GPU filter follows churn, not cluster size."""

    def summary(
        self, snap: NodeColumns, request: GpuRequest, models: tuple[str, ...]
    ) -> GpuSummary:
        shape = (
            request.cards,
            request.milli,
            request.mem_mib,
            request.nvlink,
            models,
            len(request.allowed),
        )
        return self.get(
            snap,
            shape,
            lambda: compute_summary(snap, request, snap.node_valid),
            lambda summary, rows: _recompute_rows(snap, request, summary, rows),
        )


def _recompute_rows(
    snap: NodeColumns, request: GpuRequest, summary: GpuSummary, rows: NDArray[np.intp]
) -> None:
    gpu_summary_rows(
        *card_columns(snap),
        snap.node_valid,
        rows,
        request.cards,
        request.milli,
        request.mem_mib,
        request.allowed,
        request.nvlink,
        summary.fit,
        summary.intact,
        summary.usable,
        summary.best_leftover,
        summary.best_is_partial,
        summary.free_milli_total,
    )


def restrict(summary: GpuSummary, candidates: Mask) -> GpuSummary:
    """The cached summary seen through this pod's candidate rows. The count arrays are
    shared, read-only, with the cache: only `fit` is the pod's own."""
    fit = summary.fit & candidates
    return GpuSummary(
        fit,
        summary.intact,
        summary.usable,
        summary.best_leftover,
        summary.best_is_partial,
        summary.free_milli_total,
        int(np.count_nonzero(fit)),
    )


def summary_for(
    state: CycleState, snap: NodeColumns, pod: PodInfo
) -> tuple[GpuRequest | None, GpuSummary | None]:
    """The pod's request and summary: from GPUFit's Filter when it ran, else computed here
    over every valid row (a profile may score GPUs without filtering them)."""
    request = state.get(GPU_REQUEST)
    if request is None:
        request = gpu_request(snap, pod)
        if request is None:
            return None, None
        state.write(GPU_REQUEST, request)
    summary = state.get(GPU_SUMMARY)
    if summary is None or len(summary.fit) != snap.capacity:
        summary = compute_summary(snap, request, snap.node_valid)
        state.write(GPU_SUMMARY, summary)
    return request, summary
