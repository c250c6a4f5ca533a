"""Preemption: PostFilter that evicts the victim set losing the least GPU work."""

from gpusched.plugins.preemption.plugin import Preemption

__all__ = ["Preemption"]
