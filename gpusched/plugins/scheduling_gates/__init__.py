"""SchedulingGates: pods with spec.schedulingGates wait, not attempted."""

from gpusched.plugins.scheduling_gates.plugin import SchedulingGates

__all__ = ["SchedulingGates"]
