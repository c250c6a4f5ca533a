"""CycleState: per-attempt scratch space shared by the plugins of one scheduling cycle.

Keys are typed objects rather than strings so mypy checks what a plugin reads back.
"""

from __future__ import annotations

import copy
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class StateKey(Generic[T]):
    """A typed key; identity, not the name, tells keys apart (the name is for humans)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


class CycleState:
    __slots__ = ("_data", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[StateKey[Any], Any] = {}
        # Plugins whose PreFilter/PreScore returned Skip: the runtime does not call their
        # Filter/Score for this pod (kube-scheduler's SkipFilterPlugins/SkipScorePlugins).
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key] = value

    def read(self, key: StateKey[T]) -> T:
        try:
            return cast(T, self._data[key])
        except KeyError:
            raise KeyError(f"cycle state has no {key.name!r}") from None

    def get(self, key: StateKey[T], default: T | None = None) -> T | None:
        return cast("T | None", self._data.get(key, default))

    def delete(self, key: StateKey[Any]) -> None:
        self._data.pop(key, None)

    def __contains__(self, key: StateKey[Any]) -> bool:
        return key in self._data

    def clone(self) -> CycleState:
        """Copy for a what-if run (preemption): values are copied one level deep so a
        plugin that mutates its own entry in the clone does not change the original."""
        out = CycleState()
        out._data = {k: copy.copy(v) for k, v in self._data.items()}
        out.skip_filter = set(self.skip_filter)
        out.skip_score = set(self.skip_score)
        return out
