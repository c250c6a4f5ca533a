"""Thermal: red-line filter and cool-node preference."""

from gpusched.plugins.thermal.plugin import Thermal

__all__ = ["Thermal"]
