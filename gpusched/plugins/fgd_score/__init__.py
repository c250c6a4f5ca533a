"""FGDScore: fragmentation gradient descent (the FGD paper's policy)."""

from gpusched.plugins.fgd_score.plugin import FGDScore

__all__ = ["FGDScore"]
