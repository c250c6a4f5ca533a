"""A Namespace as the scheduler reads it: its name and labels (namespaceSelector)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


def namespace_from_k8s(obj: Mapping[str, Any]) -> NamespaceInfo:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return NamespaceInfo(
        str(meta["name"]),
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
    )
