"""VolumeBinding: a pod's claims must be bound, or bindable on its node, and are bound
before the pod."""

from gpusched.plugins.volume_binding.plugin import VolumeBinding

__all__ = ["VolumeBinding"]
