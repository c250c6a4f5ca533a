"""A target workload and the per-row fragmentation cache that FGD-style scores share.

``TargetClass`` is one task class (a pod shape and its weight). ``FragCache`` holds the
per-(row, class) statistics of ``gpusched/kernels/fgd.py`` and refreshes only the rows
whose card or CPU columns changed since the last cycle, so a cycle costs one pass over the
candidate rows instead of recomputing every node's fragmentation.

It also keeps each row's FGD term (the delta and the card) per request shape, for the
shapes seen since the target last changed (a ``RowCache``, least recently used shapes
dropped first): a row's term depends only on that row, the shape, the target and the model
set, so a pod of a shape seen before recomputes just the rows changed since (a bind, a
deletion, a node update or health change: ``NodeColumns.row_version``), not every
candidate row. The target's generation and the model count are part of the shape key, so
a new target or a new card model recomputes every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Rows, Scores
from gpusched.framework.snapshot import NodeColumns
from gpusched.kernels.dispatch import pick
from gpusched.kernels.fgd import (
    fgd_delta_nb,
    fgd_delta_np,
    fgd_refresh_nb,
    fgd_refresh_np,
    fgd_refresh_rows_nb,
    fgd_refresh_rows_np,
)
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodInfo
from gpusched.model.share import share_on_card
from gpusched.plugins.helper.gpu_state import CARD_HINT, CARD_HINT_BY, GPU_REQUEST
from gpusched.plugins.helper.row_cache import RowCache

fgd_refresh = pick(fgd_refresh_nb, fgd_refresh_np)
fgd_refresh_rows = pick(fgd_refresh_rows_nb, fgd_refresh_rows_np)
fgd_delta = pick(fgd_delta_nb, fgd_delta_np)


@dataclass(frozen=True, slots=True)
class TargetClass:
    """One task class: CPU milli, GPU milli per card (0 for CPU-only), cards, acceptable
    models (``A|B``, empty = any) and its weight (weights are normalised to sum 1)."""

    cpu_milli: int = 0
    gpu_milli: int = 0
    gpu_count: int = 0
    gpu_models: str = ""
    weight: float = 1.0

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if not 0 <= self.gpu_milli <= 1000:
            errors.append(("gpuMilli", f"must be in [0, 1000], got {self.gpu_milli}"))
        if self.gpu_count < 0 or (self.gpu_milli > 0) != (self.gpu_count > 0):
            errors.append(("gpuCount", "must be > 0 exactly when gpuMilli > 0"))
        if not self.weight >= 0:
            errors.append(("weight", f"must be >= 0, got {self.weight}"))
        return errors


Terms = tuple[NDArray[np.float64], NDArray[np.int16]]  # per snapshot row: value, card


class FragCache:
    """Fragmentation statistics per snapshot row against one target workload, and the FGD
    term of recent request shapes (module docstring)."""

    def __init__(self, max_shapes: int = 64) -> None:
        self.classes: tuple[TargetClass, ...] = ()
        self.cls_cpu = np.zeros(0, np.int64)
        self.cls_milli = np.zeros(0, np.int64)
        self.cls_num = np.zeros(0, np.int64)
        self.cls_p = np.zeros(0, np.float64)
        self.cls_access = np.zeros((0, 1), np.bool_)
        self._force = True
        self._membership = -1
        self._card_layout = -1
        self._models = -1
        self._seen_version = 0  # the snapshot's version at the last refresh
        self._snap_id = 0
        self.cnt = np.zeros((0, 0), np.int16)
        self.fs = np.zeros((0, 0), np.int64)
        self.before = np.zeros(0, np.float64)
        self.seen_free = np.zeros((0, 0), np.int32)
        self.seen_cpu = np.zeros(0, np.int64)
        self.seen_model = np.zeros((0, 0), np.int16)
        self.refreshed = 0  # rows recomputed, for tests and benchmarks
        # Bumped by set_target: part of every term's shape key, so no term of an older
        # target is ever served.
        self.target_generation = 0
        self.terms: RowCache[Terms] = RowCache(max_shapes)

    def set_target(self, classes: Sequence[TargetClass]) -> None:
        total = sum(c.weight for c in classes)
        self.classes = tuple(classes)
        self.cls_cpu = np.array([c.cpu_milli for c in classes], np.int64)
        self.cls_milli = np.array([c.gpu_milli for c in classes], np.int64)
        self.cls_num = np.array([c.gpu_count for c in classes], np.int64)
        self.cls_p = np.array([c.weight / total if total > 0 else 0.0 for c in classes], np.float64)
        self._force = True
        self._models = -1
        self.target_generation += 1

    def refresh(self, snap: NodeColumns) -> None:
        """Bring the statistics up to date with the snapshot (changed rows only)."""
        n, k = snap.capacity, len(self.classes)
        if self.cnt.shape != (n, k) or self.seen_free.shape != snap.card_free_milli.shape:
            self.cnt = np.zeros((n, k), np.int16)
            self.fs = np.zeros((n, k), np.int64)
            self.before = np.zeros(n, np.float64)
            self.seen_free = np.zeros_like(snap.card_free_milli)
            self.seen_cpu = np.zeros(n, np.int64)
            self.seen_model = snap.card_model.copy()
            self._force = True
        if len(snap.models) != self._models:
            m = max(1, len(snap.models))
            access = np.zeros((k, m), np.bool_)
            for i, c in enumerate(self.classes):
                models = tuple(x for x in c.gpu_models.split("|") if x)
                access[i] = snap.allowed_models(models)[:m]
            self.cls_access = access
            self._models = len(snap.models)
            self._force = True
        if snap.membership != self._membership:
            # Nodes added or removed: a row may now hold another node (a removed node's row
            # was zeroed without updating seen_*, so its statistics must be recomputed).
            self._membership = snap.membership
            self._force = True
        if snap.card_layout != self._card_layout:
            # Some node's cards were rewritten (inventory, health): a row whose card models
            # changed is stale even if its free shares are not; mark just those rows.
            self._card_layout = snap.card_layout
            if self.seen_model.shape != snap.card_model.shape:
                self.seen_model = snap.card_model.copy()
                self._force = True
            else:
                moved = (snap.card_model != self.seen_model).any(axis=1)
                if moved.any():
                    self.seen_cpu[moved] = np.iinfo(np.int64).min
                    self.seen_model[moved] = snap.card_model[moved]
        # Labels are not read here: a relabelled node (GPU Feature Discovery's timestamp
        # every minute) recomputes nothing.
        if snap.version < self._seen_version or id(snap) != self._snap_id:
            self._force = True  # another snapshot: its versions say nothing of ours
        self._snap_id = id(snap)
        args = (self.cls_cpu, self.cls_milli, self.cls_num, self.cls_p, self.cls_access)
        if self._force:
            self.refreshed += fgd_refresh(
                True,
                snap.node_valid,
                snap.card_free_milli,
                snap.node_card_count,
                snap.card_model,
                snap.node_cpu_free,
                self.seen_free,
                self.seen_cpu,
                *args,
                self.cnt,
                self.fs,
                self.before,
            )
        else:
            # Every writer of the columns read here stamps the row's version (the cache's
            # Snapshot.touch), so only rows stamped since the last refresh can be stale:
            # the kernel then compares those rows, not every card column of the snapshot.
            rows = np.flatnonzero(snap.row_version > self._seen_version)
            if len(rows):
                self.refreshed += fgd_refresh_rows(
                    rows,
                    snap.node_valid,
                    snap.card_free_milli,
                    snap.node_card_count,
                    snap.card_model,
                    snap.node_cpu_free,
                    self.seen_free,
                    self.seen_cpu,
                    *args,
                    self.cnt,
                    self.fs,
                    self.before,
                )
        self._seen_version = snap.version
        self._force = False

    def delta(
        self,
        snap: NodeColumns,
        rows: Rows,
        *,
        cpu: int,
        milli: int,
        cards: int,
        allowed: NDArray[np.bool_],
        quantize: bool,
        card_by_raw: bool = False,
        cached: bool = True,
    ) -> tuple[NDArray[np.float64], NDArray[np.int16]]:
        """Per row: FGD value of the placement (see the kernel) and the chosen card,
        cached per request shape (module docstring): only rows of `rows` changed since
        the shape was last asked, or never computed for it, are computed. `cached=False`:
        computed afresh (a caller that caches the whole score per shape itself)."""
        self.refresh(snap)
        rows_arr = np.asarray(rows, dtype=np.intp)
        if not cached:
            fresh = np.empty(len(rows_arr), np.float64), np.empty(len(rows_arr), np.int16)
            self.compute(
                snap,
                rows_arr,
                cpu=cpu,
                milli=milli,
                cards=cards,
                allowed=allowed,
                quantize=quantize,
                card_by_raw=card_by_raw,
                out_value=fresh[0],
                out_card=fresh[1],
            )
            return fresh

        def alloc() -> Terms:
            return np.zeros(snap.capacity, np.float64), np.full(snap.capacity, -1, np.int16)

        def recompute(out: Terms, need: NDArray[np.intp]) -> None:
            value = np.empty(len(need), np.float64)
            card = np.empty(len(need), np.int16)
            self.compute(
                snap,
                need,
                cpu=cpu,
                milli=milli,
                cards=cards,
                allowed=allowed,
                quantize=quantize,
                card_by_raw=card_by_raw,
                out_value=value,
                out_card=card,
            )
            out[0][need] = value
            out[1][need] = card

        # The accepted models by id (the bytes of the mask: two constraints naming the
        # same ids share a shape), the target's generation and the model count (cls_access)
        # are inputs of every row's term besides the row itself.
        shape = (
            cpu,
            milli,
            cards,
            allowed.tobytes(),
            quantize,
            card_by_raw,
            self.target_generation,
            self._models,
        )
        value, card = self.terms.rows(snap, shape, rows_arr, alloc, recompute)
        return value[rows_arr], card[rows_arr]

    def compute(
        self,
        snap: NodeColumns,
        rows: NDArray[np.intp],
        *,
        cpu: int,
        milli: int,
        cards: int,
        allowed: NDArray[np.bool_],
        quantize: bool,
        card_by_raw: bool,
        out_value: NDArray[np.float64],
        out_card: NDArray[np.int16],
    ) -> None:
        """The uncached FGD term of `rows` (statistics must be current: refresh first)."""
        fgd_delta(
            rows,
            snap.card_free_milli,
            snap.node_card_count,
            snap.card_model,
            snap.card_healthy,
            snap.node_cpu_free,
            self.cnt,
            self.fs,
            self.before,
            self.cls_cpu,
            self.cls_milli,
            self.cls_num,
            self.cls_p,
            self.cls_access,
            allowed,
            cpu,
            milli,
            cards,
            quantize,
            card_by_raw,
            out_value,
            out_card,
        )


def score_placements(
    cache: FragCache,
    state: CycleState,
    snap: NodeColumns,
    pod: PodInfo,
    rows: Rows,
    *,
    quantize: bool,
    card_by_raw: bool = False,
) -> tuple[Scores, NDArray[np.int16]]:
    """FGD scores in [0, 100] for `rows` and each row's best card, with the card written
    to CARD_HINT for a shared pod (GPUFit's Reserve takes it). Shared by FGDScore and
    GPUFragmentation, which differ only in where their target workload comes from."""
    req = pod.request
    out, card = placement_terms(
        cache,
        snap,
        pod,
        rows,
        allowed_of(state, snap, pod),
        quantize=quantize,
        card_by_raw=card_by_raw,
    )
    if req.gpu_cards == 0 and (req.gpu_milli > 0 or req.gpu_mem_mib > 0):
        hint = np.full(snap.capacity, -1, np.int16)
        hint[rows] = card
        state.write(CARD_HINT, hint)
        state.write(CARD_HINT_BY, "FGD's pick: the card where the node's fragmentation drops most")
    return out, card


def allowed_of(state: CycleState, snap: NodeColumns, pod: PodInfo) -> NDArray[np.bool_]:
    """The card models the pod accepts, by model id (GPUFit's PreFilter works it out)."""
    request = state.get(GPU_REQUEST)
    if request is not None:
        return request.allowed
    return snap.allowed_models(pod.request.gpu_models)


def placement_terms(
    cache: FragCache,
    snap: NodeColumns,
    pod: PodInfo,
    rows: Rows,
    allowed: NDArray[np.bool_],
    *,
    quantize: bool,
    card_by_raw: bool = False,
    cached: bool = True,
) -> tuple[Scores, NDArray[np.int16]]:
    """score_placements without the CARD_HINT: each row's score depends on that row, the
    pod's shape and the target alone (GPUFragmentation caches it per shape, and passes
    cached=False: FragCache's own term cache would then only repeat its bookkeeping)."""
    req = pod.request
    if req.gpu_cards == 0 and req.gpu_mem_mib > 0:
        value, card = _memory_share_delta(
            cache, snap, rows, pod, allowed, quantize, card_by_raw, cached
        )
    else:
        value, card = cache.delta(
            snap,
            rows,
            cpu=req.cpu_milli,
            milli=req.gpu_milli if not req.gpu_cards else FULL_CARD_MILLI,
            cards=req.gpu_cards,
            allowed=allowed,
            quantize=quantize,
            card_by_raw=card_by_raw,
            cached=cached,
        )
    if quantize:
        return value, card
    # Unquantised: the same sigmoid without the truncation, still in [0, 100].
    out: Scores = 100.0 / (1.0 + np.exp(-np.clip(value, -5e5, 5e5) / 1000.0))
    return out, card


def _memory_share_delta(
    cache: FragCache,
    snap: NodeColumns,
    rows: Rows,
    pod: PodInfo,
    allowed: NDArray[np.bool_],
    quantize: bool,
    card_by_raw: bool,
    cached: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.int16]]:
    """A share asked by memory (gpusched.io/gpu-memory-mib, or a DRA claim's memory
    capacity) holds the compute share it implies on the card (model/share.py), which
    depends on the card's memory: rows are priced in groups of equal card memory, with the
    share the node's first card implies (a node mixing card sizes is priced at its first)."""
    req = pod.request
    rows_arr = np.asarray(rows)
    card_mem = snap.card_total_mem[rows_arr, 0]
    value = np.empty(len(rows_arr), np.float64)
    card = np.empty(len(rows_arr), np.int16)
    for mem in np.unique(card_mem):
        sel = card_mem == mem
        milli, _ = share_on_card(req, int(mem))
        v, c = cache.delta(
            snap,
            rows_arr[sel],
            cpu=req.cpu_milli,
            # Unknown card memory: no share fits (GPUFit's Filter keeps such rows out).
            milli=milli if milli >= 0 else FULL_CARD_MILLI + 1,
            cards=0,
            allowed=allowed,
            quantize=quantize,
            card_by_raw=card_by_raw,
            cached=cached,
        )
        value[sel] = v
        card[sel] = c
    return value, card
