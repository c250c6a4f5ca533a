"""RandomScore: an FGD-paper baseline policy (see plugin.py)."""

from gpusched.plugins.random_score.plugin import RandomScore

__all__ = ["RandomScore"]
