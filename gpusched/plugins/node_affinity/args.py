"""NodeAffinityArgs: kube-scheduler's `addedAffinity`, a nodeAffinity every pod of the
profile must also satisfy (required) or is scored by (preferred)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.plugins.helper.node_selector import parse_preferred, parse_required

ADDED = "addedAffinity"


def split_error(error: str) -> tuple[str, str]:
    """'path: message' -> (path, message), the shape validate() returns."""
    path, _, message = error.partition(": ")
    return path, message


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    # A raw nodeAffinity object as in a pod spec: requiredDuringSchedulingIgnoredDuringExecution
    # and/or preferredDuringSchedulingIgnoredDuringExecution.
    added_affinity: Mapping[str, Any] | None = None

    def validate(self) -> list[tuple[str, str]]:
        raw: Any = self.added_affinity
        if raw is None:
            return []
        if not isinstance(raw, Mapping):
            return [(ADDED, f"must be a nodeAffinity object, got {type(raw).__name__}")]
        errors: list[str] = []
        parse_required({}, raw, ADDED, errors)
        parse_preferred(raw, ADDED, errors)
        return [split_error(e) for e in errors]
