"""Small in-memory stand-ins for unit tests of the runtime (pure logic, no cluster)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from gpusched.framework import CycleState, FilterResult, Mask, Rows, Scores, Status
from gpusched.framework.status import wait
from gpusched.model.node import Card, NodeModel
from gpusched.model.pod import PodInfo, PodRequest


def gpu_node(
    name: str, cards: int = 8, mem: int = 81920, model: str = "A100", rack: str = ""
) -> NodeModel:
    return NodeModel(
        name=name,
        cpu_milli=64_000,
        memory_bytes=512 * 2**30,
        pods=110,
        cards=tuple(Card(i, model, mem, nvlink_island=i // 4) for i in range(cards)),
        rack=rack,
        labels={"rack": rack} if rack else {},
    )


def make_pod(name: str = "p", **req: Any) -> PodInfo:
    return PodInfo(uid=f"uid-{name}", namespace="ns", name=name, request=PodRequest(**req))


class Sort:
    name: ClassVar[str] = "Sort"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return a.priority > b.priority


class Binder:
    name: ClassVar[str] = "Binder"

    def __init__(self, args: Any, handle: Any) -> None:
        self.handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        return await self.handle.cluster.bind(pod, node)


class EvenRows:
    """Filter: only even rows pass."""

    name: ClassVar[str] = "EvenRows"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def filter(self, state: CycleState, pod: PodInfo, candidates: Mask) -> FilterResult:
        ok = candidates.copy()
        ok[1::2] = False
        return FilterResult(ok, ("odd row",))


class RowScore:
    """Score: the row number (needs normalising: rows go past 100)."""

    name: ClassVar[str] = "RowScore"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        return rows.astype(np.float64) * 50.0

    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> None:
        top = scores.max() if len(scores) else 0.0
        if top > 0:
            scores *= 100.0 / top


class ReverseRowScore:
    name: ClassVar[str] = "ReverseRowScore"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        return 100.0 - rows.astype(np.float64)


class OutOfRange:
    name: ClassVar[str] = "OutOfRange"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def score(self, state: CycleState, pod: PodInfo, rows: Rows) -> Scores:
        return np.full(len(rows), 150.0)


class Gate:
    """Permit: Wait with a timeout, until allowed."""

    name: ClassVar[str] = "Gate"

    def __init__(self, args: Any, handle: Any) -> None:
        pass

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:

        return wait(self.name), 5.0
