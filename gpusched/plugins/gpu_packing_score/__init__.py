"""GpuPackingScore: an FGD-paper baseline policy (see plugin.py)."""

from gpusched.plugins.gpu_packing_score.plugin import GpuPackingScore

__all__ = ["GpuPackingScore"]
