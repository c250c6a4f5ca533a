"""GangScheduling: all-or-nothing gangs through Permit, in the fewest racks."""

from gpusched.plugins.gang_scheduling.plugin import GangScheduling

__all__ = ["GangScheduling"]
