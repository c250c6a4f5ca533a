"""BestFitScore: an FGD-paper baseline policy (see plugin.py)."""

from gpusched.plugins.best_fit_score.plugin import BestFitScore

__all__ = ["BestFitScore"]
