"""GpuClusteringScore: an FGD-paper baseline policy (see plugin.py)."""

from gpusched.plugins.gpu_clustering_score.plugin import GpuClusteringScore

__all__ = ["GpuClusteringScore"]
