"""DefaultBinder: the default Bind plugin."""

from gpusched.plugins.default_binder.plugin import DefaultBinder

__all__ = ["DefaultBinder"]
