"""RandomScore arguments."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RandomScoreArgs:
    seed: int = 0  # the node and card draws are reproducible per seed
