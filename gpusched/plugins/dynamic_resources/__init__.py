"""DynamicResources: gpusched allocates pods' DRA ResourceClaims (plugin.py, README.md)."""

from gpusched.plugins.dynamic_resources.plugin import DynamicResources

__all__ = ["DynamicResources"]
