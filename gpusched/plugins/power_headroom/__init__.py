"""PowerHeadroom: prefer nodes whose cards draw well below their power limit."""

from gpusched.plugins.power_headroom.plugin import PowerHeadroom

__all__ = ["PowerHeadroom"]
