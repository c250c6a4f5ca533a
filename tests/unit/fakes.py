"""In-memory stand-ins for the ports plugins and the runtime use (unit tests only)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework import Rows, Status
from gpusched.model.pod import PodInfo


@dataclass
class FakeCluster:
    """Records writes; `answer` is what every bind returns."""

    binds: list[tuple[str, str]] = field(default_factory=list)
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    answer: Status = field(default_factory=Status)

    async def annotate(self, pod: PodInfo, annotations: Mapping[str, str]) -> Status:
        self.annotations.setdefault(pod.uid, {}).update(annotations)
        return Status()

    async def bind(self, pod: PodInfo, node: str) -> Status:
        self.binds.append((pod.key, node))
        return self.answer


@dataclass
class FakeHandle:
    snapshot: Snapshot
    cluster: FakeCluster = field(default_factory=FakeCluster)
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def pods_on_node(self, node: str) -> Iterable[PodInfo]:
        return ()

    def job_rows(self, job_id: str) -> Rows:
        return np.empty(0, np.intp)
