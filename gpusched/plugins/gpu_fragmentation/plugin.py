"""GPUFragmentation (Score): card prices and fragmentation gradient descent against a
learnt workload.

A shared pod goes where it loses the least of an optimal packing of the learnt size mix
(card prices, prices.py; the card is written to CARD_HINT, which GPUFit's Reserve takes);
every pod is also scored by how much the placement lowers the node's fragmentation (the
FGD measure, gpusched/kernels/fgd.py), which decides for whole-card and CPU-only pods.
Unlike the published FGD, the workload is not given: the plugin learns it online from the
pods it scores (ShapeLearner), the same way in the daemon and in the simulator. See
README.md for the variants measured and why these defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from gpusched.framework.cycle_state import CycleState
from gpusched.framework.interfaces import Handle, Rows, Scores, ScoreUnit
from gpusched.model.node import FULL_CARD_MILLI
from gpusched.model.pod import PodInfo
from gpusched.plugins.gpu_fragmentation.args import GPUFragmentationArgs
from gpusched.plugins.gpu_fragmentation.learner import ShapeLearner
from gpusched.plugins.gpu_fragmentation.models import model_pressure
from gpusched.plugins.gpu_fragmentation.prices import CardPrices, LossCache
from gpusched.plugins.helper.fgd_target import FragCache, allowed_of, placement_terms
from gpusched.plugins.helper.gpu_state import CARD_HINT, CARD_HINT_BY
from gpusched.plugins.helper.no_data import always, mark_no_data
from gpusched.plugins.helper.row_cache import RowCache

NEUTRAL = 50.0
log = logging.getLogger(__name__)


class GPUFragmentation:
    name: ClassVar[str] = "GPUFragmentation"
    score_unit: ClassVar[ScoreUnit] = ScoreUnit(
        "points (0-100)",
        (
            "how little of the learnt pod mix the placement spoils, not a GPU count: shared pods "
            "90 x (1 - cards lost at the card prices), the rest from 100 x sigmoid(dF / 1000), dF"
            " the fragmentation drop in milli-GPU"
        ),
    )
    Args: ClassVar[type[GPUFragmentationArgs]] = GPUFragmentationArgs

    def __init__(self, args: GPUFragmentationArgs | None, handle: Handle) -> None:
        self.args = args or GPUFragmentationArgs()
        self.handle = handle
        self.learner = ShapeLearner(
            self.args.half_life_pods,
            self.args.popularity,
            self.args.max_classes,
            self.args.cpu_classes,
        )
        self.cache = FragCache(self.args.cache_shapes)
        self.prices = CardPrices()
        self.losses = LossCache(self.args.cache_shapes)
        # Each row's score before the sum-of-squares term, and its card, per request shape.
        self.scores: RowCache[tuple[Scores, NDArray[np.int16]]] = RowCache(self.args.cache_shapes)
        self._since_refresh = 0
        self._since_prices = 0
        # Per model id, from the target and the free cards at its last refresh (models.py).
        self.pressure = np.zeros(0, np.float64)

    def warm_start(self, pods: Sequence[PodInfo]) -> None:
        """A new leader learns the shapes of the pods already placed (oldest first, so the
        decay weighs the latest most), then refreshes its target and prices once."""
        learned = False
        for pod in sorted(pods, key=lambda p: p.created):
            learned |= self.learner.observe(pod.uid, pod.request)
        if not learned:
            return
        self._since_refresh = self._since_prices = 0
        self._set_target()
        if self.args.price_weight > 0:
            try:
                self.prices.update(self.learner.shared_mix(), self.learner.cpu_per_card())
            except Exception as exc:
                log.warning("card prices not solved at warm start: %s", exc)

    def _set_target(self) -> None:
        self.cache.set_target(self.learner.target())
        if self.args.model_weight > 0:
            self.pressure = model_pressure(self.cache.classes, self.handle.snapshot)

    def _model(self, out: Scores, rows: Rows) -> Scores:
        """GPU pods: points for a node whose model constrained pods need least."""
        pressure = self.pressure
        if not len(pressure) or not pressure.any():
            return out
        model = self.handle.snapshot.card_model[rows, 0].astype(np.intp)
        known = (model >= 0) & (model < len(pressure))
        p = np.where(known, pressure[np.where(known, model, 0)], 0.0)
        w = self.args.model_weight
        res: Scores = out * (1.0 - w / 100.0) + w * (1.0 - np.minimum(p, 1.0))
        return res

    def _learn(self, pod: PodInfo) -> None:
        if not self.learner.observe(pod.uid, pod.request):
            return
        self._since_refresh += 1
        # Early on every pod changes the estimate a lot: refresh at 1, 2, 4, ... pods,
        # then every refresh_pods.
        seen = self.learner.seen
        due = self._since_refresh >= self.args.refresh_pods or (seen & (seen - 1)) == 0
        if due:
            self._set_target()
            self._since_refresh = 0
        if self.args.price_weight > 0:
            self._since_prices += 1
            if self._since_prices >= self.args.price_refresh_pods or (seen & (seen - 1)) == 0:
                self._since_prices = 0
                try:
                    self.prices.update(self.learner.shared_mix(), self.learner.cpu_per_card())
                except Exception as exc:  # a solver failure must not fail every shared pod
                    log.warning("card prices not re-solved, keeping the previous ones: %s", exc)

    def _pack(self, out: Scores, pod: PodInfo, rows: Rows) -> Scores:
        """Points for filling nodes where FGD cannot tell placements apart: a whole-card
        pod gets them on a node whose intact cards it takes all of (a 4-card job takes a
        4-card node, not half of an 8-card one); a CPU-only pod in proportion to the node's
        used GPU share, counting a node without GPUs as full, so it leaves the GPU nodes'
        CPU to GPU pods. Shared pods get none: the card prices place them. (Packing whole-
        card pods by used share, even as a bare tie-break, cost 0.6-1.2 points on the
        gpuspec10 trace: it fills the nodes model-constrained pods need.)"""
        snap = self.handle.snapshot
        req = pod.request
        w = self.args.pack_weight
        if req.gpu_cards:
            present = (
                np.arange(snap.card_free_milli.shape[1])[None, :]
                < (snap.node_card_count[rows][:, None])
            )
            intact = ((snap.card_free_milli[rows] >= FULL_CARD_MILLI) & present).sum(axis=1)
            fills: Scores = out * (1.0 - w / 100.0) + w * (intact == req.gpu_cards)
            return fills
        if req.gpu_milli:
            return out
        cap = snap.node_card_count[rows].astype(np.float64) * FULL_CARD_MILLI
        free = snap.card_free_milli[rows].sum(axis=1).astype(np.float64)
        used = np.divide(cap - free, cap, out=np.ones_like(cap), where=cap > 0)
        blended: Scores = out * (1.0 - w / 100.0) + w * np.minimum(used, 1.0)
        return blended

    def _card_gap(
        self, rows: Rows, card: NDArray[np.int16], milli: int
    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.int64]]:
        """Shared pods: whether a card was chosen, its free share and what is left after."""
        snap = self.handle.snapshot
        ok = card >= 0
        safe = np.where(ok, card, 0).astype(np.intp)
        gap = snap.card_free_milli[rows, safe].astype(np.int64)
        after = np.where(ok, gap - milli, FULL_CARD_MILLI)
        return ok, gap, after

    def _card_fit(self, out: Scores, rows: Rows, card: NDArray[np.int16], milli: int) -> Scores:
        """Shared pods: the best fit term on the card the pod would take (per row)."""
        if self.args.card_fit_weight <= 0:
            return out
        _, _, after = self._card_gap(rows, card, milli)
        w = self.args.card_fit_weight
        res: Scores = out * (1.0 - w / 100.0) + w * (1.0 - after / FULL_CARD_MILLI)
        return res

    def _sos(self, out: Scores, rows: Rows, card: NDArray[np.int16], milli: int) -> Scores:
        """Shared pods: the sum-of-squares term on the card the pod would take. It reads
        the cluster-wide gap histogram and normalises over the candidates, so unlike the
        other terms it is not cached per row."""
        if self.args.sos_weight <= 0:
            return out
        snap = self.handle.snapshot
        ok, gap, after = self._card_gap(rows, card, milli)
        present = snap.node_valid[:, None] & snap.card_healthy
        free = snap.card_free_milli[present].astype(np.int64)
        hist = np.bincount(np.clip(free, 0, FULL_CARD_MILLI), minlength=FULL_CARD_MILLI + 1)
        hist[0] = 0
        hist[FULL_CARD_MILLI] = 0
        # Change of sum_g N(g)^2 when the card's gap goes from gap to after.
        d = np.where((after > 0) & (after < FULL_CARD_MILLI), 2 * hist[after] + 1, 0)
        d = d + np.where((gap > 0) & (gap < FULL_CARD_MILLI), 1 - 2 * hist[gap], 0)
        d = d.astype(np.float64)
        seen = d[ok] if ok.any() else np.zeros(1)
        lo, hi = float(seen.min()), float(seen.max())
        norm = (hi - d) / (hi - lo) if hi > lo else np.ones_like(d)
        w = self.args.sos_weight
        res: Scores = out * (1.0 - w / 100.0) + w * np.where(ok, norm, 0.0)
        return res

    def _priced(
        self, out: Scores, pod: PodInfo, rows: Rows, fgd_card: NDArray[np.int16]
    ) -> tuple[Scores, NDArray[np.int16]]:
        """Shared pods: the card that loses the least at the learnt card prices (ties: the
        tightest; score writes it to CARD_HINT), and points for the node whose best card
        loses least (prices.py)."""
        req = pod.request
        loss_all, card_all = self.losses.losses(
            self.handle.snapshot,
            self.prices,
            milli=req.gpu_milli,
            cpu=req.cpu_milli,
            models=req.gpu_models,
            use_cpu=self.args.price_cpu,
            rows=np.asarray(rows, dtype=np.intp),
        )
        loss, card = loss_all[rows], card_all[rows]
        found = card >= 0
        chosen = np.where(found, card, fgd_card).astype(np.int16)
        w = self.args.price_weight
        points = np.where(found, 1.0 - np.minimum(loss, 1.0), 0.0)
        res: Scores = out * (1.0 - w / 100.0) + w * points
        return res, chosen

    def _cpu_balance(self, out: Scores, pod: PodInfo, rows: Rows) -> Scores:
        """Penalise idle GPU left without the CPU the learnt workload needs to use it."""
        cache = self.cache
        gpu = cache.cls_milli * np.maximum(cache.cls_num, 1)
        demand = float((cache.cls_p * gpu).sum())
        if demand <= 0:
            return out
        cpu_per_milli = float((cache.cls_p * np.where(gpu > 0, cache.cls_cpu, 0)).sum()) / demand
        snap = self.handle.snapshot
        cap = snap.node_card_count[rows].astype(np.float64) * FULL_CARD_MILLI
        free = snap.card_free_milli[rows].sum(axis=1).astype(np.float64)
        g2 = free - pod.request.gpu_milli_total
        c2 = (snap.node_cpu_free[rows] - pod.request.cpu_milli).astype(np.float64)
        stranded = np.maximum(0.0, g2 - np.maximum(c2, 0.0) / max(cpu_per_milli, 1e-9))
        frac = np.divide(stranded, cap, out=np.zeros_like(cap), where=cap > 0)
        w = self.args.cpu_balance_weight
        res: Scores = out * (1.0 - w / 100.0) + w * (1.0 - np.minimum(frac, 1.0))
        return res

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        self._learn(pod)
        if not self.cache.classes:
            mark_no_data(state, self.name, always)  # no workload learnt yet: all NEUTRAL
            return np.full(len(rows), NEUTRAL)
        snap = self.handle.snapshot
        req = pod.request
        allowed = allowed_of(state, snap, pod)
        rows_arr = np.asarray(rows, dtype=np.intp)
        prices = self.prices
        # Every input of a row's score besides the row itself: the pod's shape (and the
        # models it accepts, by name for the prices and by id for FGD), the target, the
        # card prices and the args. Rows changed since are computed again (RowCache.rows).
        shape = (
            req.cpu_milli,
            req.gpu_milli,
            req.gpu_cards,
            req.gpu_mem_mib,
            req.gpu_models,
            allowed.tobytes(),
            len(snap.models),
            self.cache.target_generation,
            prices.solves,
            prices.ready,
            prices.cpu_per_card,
            self.args,
        )

        def alloc() -> tuple[Scores, NDArray[np.int16]]:
            return np.zeros(snap.capacity, np.float64), np.full(snap.capacity, -1, np.int16)

        def recompute(out: tuple[Scores, NDArray[np.int16]], need: NDArray[np.intp]) -> None:
            value, card = self._row_terms(pod, need, allowed)
            out[0][need] = value
            out[1][need] = card

        values, cards = self.scores.rows(snap, shape, rows_arr, alloc, recompute)
        out: Scores = values[rows_arr]
        if req.gpu_cards == 0 and (req.gpu_milli > 0 or req.gpu_mem_mib > 0):
            card = cards[rows_arr]
            hint = np.full(snap.capacity, -1, np.int16)
            hint[rows_arr] = card
            state.write(CARD_HINT, hint)
            state.write(CARD_HINT_BY, self._hint_words())
            if req.gpu_milli > 0:
                out = self._sos(out, rows_arr, card, req.gpu_milli)
        return np.clip(out, 0.0, 100.0)

    def _hint_words(self) -> str:
        """Which rule chose the card GPUFit's Reserve takes from CARD_HINT (_row_terms)."""
        if self.args.price_weight > 0 and self.prices.ready:
            return (
                "GPUFragmentation's pick: the card that loses least of the learnt pod mix"
                " at the card prices"
            )
        return "GPUFragmentation's pick: the card where the node's fragmentation drops most"

    def _row_terms(
        self, pod: PodInfo, rows: NDArray[np.intp], allowed: NDArray[np.bool_]
    ) -> tuple[Scores, NDArray[np.int16]]:
        """Every term of the score that reads only the row (before the sum-of-squares term
        and the clip), and the card a shared pod would take there."""
        req = pod.request
        out, card = placement_terms(
            self.cache,
            self.handle.snapshot,
            pod,
            rows,
            allowed,
            quantize=self.args.quantize,
            card_by_raw=self.args.card_by_raw,
            cached=False,
        )
        if self.args.pack_weight > 0:
            out = self._pack(out, pod, rows)
        if self.args.cpu_balance_weight > 0:
            out = self._cpu_balance(out, pod, rows)
        if self.args.model_weight > 0 and (req.gpu_cards or req.gpu_milli):
            out = self._model(out, rows)
        if req.gpu_cards == 0 and req.gpu_milli > 0:
            if self.args.price_weight > 0 and self.prices.ready:
                # The optional card terms then judge the card the pod will really take.
                out, card = self._priced(out, pod, rows, card)
            out = self._card_fit(out, rows, card, req.gpu_milli)
        return out, card
