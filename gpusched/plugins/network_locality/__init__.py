"""NetworkLocality: a job's pods prefer its rack, then its spine."""

from gpusched.plugins.network_locality.plugin import NetworkLocality

__all__ = ["NetworkLocality"]
