"""GPUFit: per-card GPU feasibility, card choice and the gpu-ids annotation."""

from gpusched.plugins.gpu_fit.plugin import GPUFit

__all__ = ["GPUFit"]
