"""The kernels' warm-up before serving."""

from __future__ import annotations

from gpusched.config import default_config
from gpusched.daemon.warmup import warm_kernels
from gpusched.plugins import default_registry


def test_kernel_warm_up_schedules_a_throwaway_workload_with_every_profile() -> None:
    registry = default_registry()
    config = default_config(registry)
    assert warm_kernels(config, registry) > 0
