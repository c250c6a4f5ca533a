"""DynamicResources: pods with DRA resourceClaims are refused with a clear reason, for now."""

from gpusched.plugins.dynamic_resources.plugin import DynamicResources

__all__ = ["DynamicResources"]
