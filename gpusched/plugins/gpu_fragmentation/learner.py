"""Online estimate of the workload's pod shapes (the target workload FGD needs).

The published FGD is told the trace's shape distribution in advance; a live scheduler is
not. This learner counts the shapes of the pods the scheduler has scored, with an
exponential decay (half-life in pods), and hands out FGD-style "typical pods": the most
frequent shapes covering ``popularity`` of the count, renormalised.

CPU milli and GPU model strings are whatever pods ask for, so the shapes are user input:
past ``MAX_SHAPES`` distinct shapes the lightest are pruned (down to three quarters of the
cap), which leaves the heavy shapes the target is made of untouched. The openb traces have
at most 249 distinct shapes, so they never reach the cap.
"""

from __future__ import annotations

from collections import deque

from gpusched.model.pod import PodRequest
from gpusched.plugins.helper.fgd_target import TargetClass

Shape = tuple[int, int, int, str]  # cpu milli, gpu milli per card, cards, models

MAX_SHAPES = 1024


def shape_of(req: PodRequest) -> Shape:
    if req.gpu_cards:
        return (req.cpu_milli, 1000, req.gpu_cards, "|".join(req.gpu_models))
    if req.gpu_milli > 0:
        return (req.cpu_milli, req.gpu_milli, 1, "|".join(req.gpu_models))
    return (req.cpu_milli, 0, 0, "")


class ShapeLearner:
    def __init__(
        self,
        half_life_pods: float,
        popularity: float,
        max_classes: int,
        cpu_classes: bool = True,
    ) -> None:
        # Counts are stored scaled by 1/decay**t so an observation costs O(1); they are
        # renormalised when the scale grows large.
        self._decay = 0.5 ** (1.0 / half_life_pods) if half_life_pods > 0 else 1.0
        self._scale = 1.0
        self.counts: dict[Shape, float] = {}
        self.popularity = popularity
        self.max_classes = max_classes
        self.cpu_classes = cpu_classes
        self.seen = 0
        self._recent: deque[str] = deque(maxlen=4096)
        self._recent_set: set[str] = set()

    def observe(self, uid: str, req: PodRequest) -> bool:
        """Count a pod once (a pod retried after failing is not counted again)."""
        if uid in self._recent_set:
            return False
        if len(self._recent) == self._recent.maxlen:
            self._recent_set.discard(self._recent[0])
        self._recent.append(uid)
        self._recent_set.add(uid)
        self._scale /= self._decay
        if self._scale > 1e100:
            self.counts = {k: v / self._scale for k, v in self.counts.items()}
            self._scale = 1.0
        key = shape_of(req)
        self.counts[key] = self.counts.get(key, 0.0) + self._scale
        if len(self.counts) > MAX_SHAPES:
            self._prune()
        self.seen += 1
        return True

    def _prune(self) -> None:
        """Keep the heaviest three quarters of the cap (ties: the larger shape, as
        `target` ranks them), so a pruning runs at most once per MAX_SHAPES / 4 new shapes."""
        ranked = sorted(self.counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        self.counts = dict(ranked[: MAX_SHAPES * 3 // 4])

    def shared_mix(self) -> dict[int, float]:
        """Weight of each per-card share among the shared (one partial card) pods seen."""
        mix: dict[int, float] = {}
        for (_, milli, cards, _), c in self.counts.items():
            if cards == 1 and 0 < milli < 1000:
                mix[milli] = mix.get(milli, 0.0) + c
        return mix

    def cpu_per_card(self) -> float:
        """CPU milli the GPU pods seen ask per full card of GPU they ask (0 if none)."""
        cpu = gpu = 0.0
        for (c, milli, cards, _), n in self.counts.items():
            if milli > 0:
                cpu += n * c
                gpu += n * milli * cards / 1000.0
        return cpu / gpu if gpu > 0 else 0.0

    def target(self) -> tuple[TargetClass, ...]:
        total = sum(self.counts.values())
        if total <= 0:
            return ()
        ranked = sorted(self.counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        out: list[TargetClass] = []
        cum = 0.0
        for (cpu, milli, cards, models), c in ranked[: self.max_classes]:
            cum += c
            if milli == 0 and not self.cpu_classes:
                if cum >= self.popularity * total:
                    break
                continue
            out.append(TargetClass(cpu, milli, cards, models, c / total))
            if cum >= self.popularity * total:
                break
        return tuple(out)
