"""A scheduling profile: which plugin runs at which extension point, with what weight/args.

Shaped like KubeSchedulerConfiguration's profiles[] so platform engineers read it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The extension points are the framework's (defined once there); re-exported because a
# profile is keyed by them.
from gpusched.framework.points import Point

__all__ = ["ConfigError", "PluginRef", "Point", "Profile"]


@dataclass(frozen=True, slots=True)
class PluginRef:
    name: str
    weight: float | None = None  # Score only


@dataclass(frozen=True)
class Profile:
    scheduler_name: str
    plugins: Mapping[Point, tuple[PluginRef, ...]]
    # Typed args per plugin name (instances of the plugin's Args dataclass).
    plugin_args: Mapping[str, Any] = field(default_factory=dict)

    def enabled(self, point: Point) -> tuple[PluginRef, ...]:
        return self.plugins.get(point, ())

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for refs in self.plugins.values():
            for r in refs:
                seen.setdefault(r.name, None)
        return list(seen)


class ConfigError(ValueError):
    """A configuration problem; the message names the field path and the bad value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
