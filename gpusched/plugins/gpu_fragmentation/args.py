"""GPUFragmentation arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GPUFragmentationArgs:
    # The target workload is learnt online from the pods this scheduler scores: a histogram
    # of pod shapes whose counts decay with this half-life (in pods), so a shift in the
    # workload is followed within a few half-lives. 0 = no decay.
    half_life_pods: float = 20000.0
    # Re-derive the target workload (and recompute every node's fragmentation) after this
    # many new pods; between refreshes only the changed nodes are recomputed.
    refresh_pods: int = 64
    # Shapes kept: the most frequent ones covering this share of the (decayed) count, as
    # FGD's "typical pods" (95 %), at most max_classes of them.
    popularity: float = 0.95
    max_classes: int = 64
    # Score resolution: the FGD score int(100 * sigmoid(dF / 1000)) groups placements
    # within about 40 milli-GPU of fragmentation change into one score, and the tie-break
    # (then packing, below) decides among them. True keeps that grouping (measured better
    # than the raw gradient, see README).
    quantize: bool = True
    # A shared pod's card: the one with the largest fragmentation drop (True), not the
    # first one with the best integer score (the published FGD).
    card_by_raw: bool = True
    # Points for filling nodes (plugin._pack): a whole-card pod that takes all of a node's
    # intact cards, a CPU-only pod by the node's used GPU share. Shared pods: none.
    pack_weight: float = 2.0
    # Shared pods: points (times the chosen card's used share after the placement) for
    # filling a card, so among near-equal FGD scores the tightest card cluster-wide wins.
    card_fit_weight: float = 0.0
    # Shared pods: points for the sum-of-squares bin-packing rule (Csirik et al.) on the
    # cluster-wide histogram of partly used cards' free share: prefer moving a card from a
    # common gap to a rare one (or to zero). 0 = off.
    sos_weight: float = 0.0
    # Points for keeping CPU next to idle GPU: the node's idle GPU that its remaining CPU
    # could not serve at the learnt workload's CPU per GPU is penalised (0 = off).
    cpu_balance_weight: float = 0.0
    # GPU pods: points for a node whose GPU model model-constrained pods of the learnt
    # workload need least (models.py: the share of the model's free cards they would take,
    # re-estimated with the target). No constrained pod seen: no effect. 0 = off. 30 was
    # chosen on seeds 42-46 of gpuspec10 and its spec33 variant (README: 20/30/40).
    model_weight: float = 30.0
    # Shared pods: points for the card-price rule (prices.py): the card, and the node, on
    # which the pod loses the least of an optimal packing of the learnt size mix. At 90 it
    # decides, and the FGD score above only breaks its near-ties (docs/fgd-results.md).
    price_weight: float = 90.0
    # Re-solve the prices after this many new pods (and at 1, 2, 4, ... pods).
    price_refresh_pods: int = 512
    # The prices see the node's CPU: its gaps count only as far as its free CPU can serve
    # them at the learnt CPU per card of GPU, so a pod does not strand a node's GPU.
    price_cpu: bool = True
    # Keep the simulator's quirk that CPU-only classes count all idle GPU as fragment
    # (True) or leave CPU-only shapes out of the learnt target (False).
    cpu_classes: bool = True
    # Request shapes whose per-row FGD term and card-price loss are kept (each a
    # capacity-long column pair, about 10 bytes a node), least recently used dropped first.
    cache_shapes: int = 64

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        if self.half_life_pods < 0:
            errors.append(("halfLifePods", f"must be >= 0, got {self.half_life_pods}"))
        if self.refresh_pods < 1:
            errors.append(("refreshPods", f"must be >= 1, got {self.refresh_pods}"))
        if not 0 < self.popularity <= 1:
            errors.append(("popularity", f"must be in (0, 1], got {self.popularity}"))
        if self.max_classes < 1:
            errors.append(("maxClasses", f"must be >= 1, got {self.max_classes}"))
        if not 0 <= self.pack_weight <= 50:
            errors.append(("packWeight", f"must be in [0, 50], got {self.pack_weight}"))
        if not 0 <= self.card_fit_weight <= 50:
            errors.append(("cardFitWeight", f"must be in [0, 50], got {self.card_fit_weight}"))
        if not 0 <= self.cpu_balance_weight <= 50:
            errors.append(
                ("cpuBalanceWeight", f"must be in [0, 50], got {self.cpu_balance_weight}")
            )
        if not 0 <= self.model_weight <= 50:
            errors.append(("modelWeight", f"must be in [0, 50], got {self.model_weight}"))
        if not 0 <= self.price_weight <= 100:
            errors.append(("priceWeight", f"must be in [0, 100], got {self.price_weight}"))
        if self.price_refresh_pods < 1:
            errors.append(("priceRefreshPods", f"must be >= 1, got {self.price_refresh_pods}"))
        if not 0 <= self.sos_weight <= 50:
            errors.append(("sosWeight", f"must be in [0, 50], got {self.sos_weight}"))
        if not 1 <= self.cache_shapes <= 4096:
            errors.append(("cacheShapes", f"must be in [1, 4096], got {self.cache_shapes}"))
        return errors
