"""Plugin registry: name -> class and its typed args."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol


class PluginClass(Protocol):
    name: str

    def __call__(self, args: Any, handle: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    cls: Any
    args_type: type | None


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, PluginSpec] = {}

    def register(self, cls: Any) -> Any:
        """Register a plugin class (usable as a decorator). The class has a `name`, an
        optional `Args` dataclass, and takes `(args, handle)`."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls!r} has no plugin name")
        if name in self._specs:
            raise ValueError(f"plugin {name} registered twice")
        self._specs[name] = PluginSpec(name, cls, getattr(cls, "Args", None))
        return cls

    def get(self, name: str) -> PluginSpec:
        try:
            return self._specs[name]
        except KeyError:
            known = ", ".join(sorted(self._specs))
            raise KeyError(f"unknown plugin {name!r} (known: {known})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[PluginSpec]:
        return iter(self._specs.values())

    def names(self) -> list[str]:
        return sorted(self._specs)
