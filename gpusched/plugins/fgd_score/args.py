"""FGDScore arguments."""

from __future__ import annotations

from dataclasses import dataclass

from gpusched.plugins.helper.fgd_target import TargetClass


@dataclass(frozen=True, slots=True)
class FGDScoreArgs:
    # The target workload the score measures fragmentation against. The published FGD is
    # told it in advance (the trace's most popular pod shapes); the FGD protocol runner
    # passes it here. Empty: every node scores 50 (no information).
    target_workload: tuple[TargetClass, ...] = ()
    # True: the published integer score int64(100 * sigmoid(dF / 1000)) and card choice by
    # that score (first card wins ties); False: the raw drop in fragmentation decides.
    quantize: bool = True

    def validate(self) -> list[tuple[str, str]]:
        errors: list[tuple[str, str]] = []
        for i, c in enumerate(self.target_workload):
            errors.extend((f"targetWorkload[{i}].{f}", m) for f, m in c.validate())
        return errors
