"""TaintToleration: taints must be tolerated; PreferNoSchedule taints lower the score."""

from gpusched.plugins.taint_toleration.plugin import TaintToleration

__all__ = ["TaintToleration"]
