"""VolumeRestrictions: ReadWriteOncePod claims and in-tree disks are not shared."""

from gpusched.plugins.volume_restrictions.plugin import VolumeRestrictions

__all__ = ["VolumeRestrictions"]
