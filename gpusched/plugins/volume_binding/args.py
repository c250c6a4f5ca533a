"""VolumeBinding arguments (kube-scheduler's VolumeBindingArgs, without the capacity
scoring `shape`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VolumeBindingArgs:
    # How long PreBind waits for the PV controller (or a provisioner) to finish binding the
    # pod's claims before the attempt fails and the assumed bindings are undone.
    bind_timeout_seconds: int = 600

    def validate(self) -> list[tuple[str, str]]:
        if self.bind_timeout_seconds < 0:
            # kube-scheduler's ValidateVolumeBindingArgs wording.
            return [
                (
                    "bindTimeoutSeconds",
                    f"invalid BindTimeoutSeconds, should not be a negative value, got"
                    f" {self.bind_timeout_seconds}",
                )
            ]
        return []
