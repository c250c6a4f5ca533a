"""GPUFragmentation: the seed article's fragmentation score."""

from gpusched.plugins.gpu_fragmentation.plugin import GPUFragmentation

__all__ = ["GPUFragmentation"]
