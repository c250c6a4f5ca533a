"""DotProductScore: an FGD-paper baseline policy (see plugin.py)."""

from gpusched.plugins.dot_product_score.plugin import DotProductScore

__all__ = ["DotProductScore"]
