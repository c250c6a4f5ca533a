"""VolumeZone: a pod goes to a node in the zone and region of its bound volumes."""

from gpusched.plugins.volume_zone.plugin import VolumeZone

__all__ = ["VolumeZone"]
