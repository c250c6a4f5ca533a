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
    # Among equal fragmentation scores prefer the node whose GPUs are already most used
    # (adds up to this many points times the node's used GPU share).
    pack_weight: float = 2.0

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
        return errors
