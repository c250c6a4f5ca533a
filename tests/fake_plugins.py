"""Fake plugin classes: small ones the runtime tests register (Sort, Binder, EvenRows, ...)
and generated ones shaped like the built-ins for the config tests (`fake`, `make_registry`;
the real plugins are written elsewhere: these carry only a name, the methods of the points
they claim, and for two of them an Args dataclass shaped like the real ones).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from gpusched.config.profile import Point
from gpusched.framework import CycleState, FilterResult, Mask, Rows, Scores, Status
from gpusched.framework.points import POINT_METHODS
from gpusched.framework.registry import Registry
from gpusched.framework.status import wait
from gpusched.model.pod import PodInfo
from gpusched.plugins.dynamic_resources.args import DynamicResourcesArgs
from gpusched.plugins.gang_scheduling.args import GangSchedulingArgs

# --- for the runtime tests ---------------------------------------------------------------


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


# --- for the config tests ----------------------------------------------------------------


def _noop(self: object, *args: object) -> None:
    return None


def fake(name: str, *points: Point, args: type | None = None, fail: bool = False) -> type:
    """A plugin class implementing `points` (methods that do nothing)."""

    def init(self: Any, a: object, handle: object) -> None:
        if fail:
            raise ValueError(f"{name} refuses to start")
        self.args = a
        self.handle = handle

    ns: dict[str, Any] = {"name": name, "__init__": init}
    for p in points:
        for m in POINT_METHODS[p]:
            ns[m] = _noop
    if args is not None:
        ns["Args"] = args
    return type(name, (), ns)


@dataclass(frozen=True)
class ResourceSpec:
    name: str
    weight: int = 1

    def validate(self) -> list[tuple[str, str]]:
        return [] if self.weight > 0 else [("weight", "must be > 0")]


@dataclass(frozen=True)
class ScoringStrategy:
    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: tuple[ResourceSpec, ...] = (ResourceSpec("cpu"), ResourceSpec("memory"))

    def validate(self) -> list[tuple[str, str]]:
        names = [r.name for r in self.resources]
        if len(set(names)) != len(names):
            return [("resources", "resource names must be unique")]
        return []


@dataclass(frozen=True)
class FitArgs:
    """Shaped like kube-scheduler's NodeResourcesFitArgs, as the real plugin's is."""

    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)


class Mode(enum.Enum):
    STRICT = "strict"
    SOFT = "soft"


@dataclass(frozen=True)
class ThermalArgs:
    cool_celsius: float = 50.0
    red_line_celsius: float = 85.0
    mode: Mode = Mode.STRICT

    def validate(self) -> list[tuple[str, str]]:
        if self.red_line_celsius <= self.cool_celsius:
            return [("redLineCelsius", f"must be > coolCelsius ({self.cool_celsius})")]
        return []


P = Point
DEFAULT_FAKES = (
    fake("PrioritySort", P.QUEUE_SORT),
    fake(
        "GangScheduling",
        P.QUEUE_SORT,
        P.PRE_ENQUEUE,
        P.PRE_FILTER,
        P.FILTER,
        P.POST_FILTER,
        P.RESERVE,
        P.PERMIT,
        args=GangSchedulingArgs,
    ),
    fake("NodeResourcesFit", P.PRE_FILTER, P.FILTER, P.SCORE, args=FitArgs),
    fake("NodeAffinity", P.PRE_FILTER, P.FILTER),
    fake("GPUFit", P.PRE_FILTER, P.FILTER, P.RESERVE, P.PRE_BIND),
    fake("NodeUnschedulable", P.FILTER),
    fake("SchedulingGates", P.PRE_ENQUEUE),
    fake("NodeName", P.FILTER),
    fake("NodePorts", P.PRE_FILTER, P.FILTER),
    fake("InterPodAffinity", P.PRE_FILTER, P.FILTER, P.PRE_SCORE, P.SCORE),
    fake("PodTopologySpread", P.PRE_FILTER, P.FILTER, P.PRE_SCORE, P.SCORE),
    fake(
        "DynamicResources",
        P.PRE_ENQUEUE,
        P.PRE_FILTER,
        P.FILTER,
        P.POST_FILTER,
        P.RESERVE,
        P.PRE_BIND,
        args=DynamicResourcesArgs,
    ),
    fake("ElasticQuota", P.PRE_FILTER),
    fake("VolumeRestrictions", P.PRE_FILTER, P.FILTER),
    fake("NodeVolumeLimits", P.PRE_FILTER, P.FILTER),
    fake("VolumeBinding", P.PRE_FILTER, P.FILTER, P.RESERVE, P.PRE_BIND),
    fake("VolumeZone", P.PRE_FILTER, P.FILTER),
    fake("TaintToleration", P.FILTER),
    fake("Thermal", P.FILTER, P.SCORE, args=ThermalArgs),
    fake("NetworkLocality", P.PRE_SCORE, P.SCORE),
    fake("GPUFragmentation", P.SCORE),
    fake("DefaultBinder", P.BIND),
    fake("Preemption", P.FILTER, P.POST_FILTER, P.RESERVE),
    fake("TenantLoad", P.SCORE),
    fake("NVLinkTopology", P.PRE_SCORE, P.SCORE),
    fake("PowerHeadroom", P.SCORE),
)
EXTRA_FAKES = (
    fake("Coscheduling", P.PRE_FILTER, P.PERMIT, P.RESERVE, P.POST_BIND),
    fake("DefaultPreemption", P.POST_FILTER),
    fake("Spread", P.FILTER, P.SCORE),
    fake("OtherSort", P.QUEUE_SORT),
    fake("OtherBinder", P.BIND),
    fake("Broken", P.FILTER, fail=True),
)


def make_registry(*, extras: bool = True, without: tuple[str, ...] = ()) -> Registry:
    reg = Registry()
    for cls in (*DEFAULT_FAKES, *(EXTRA_FAKES if extras else ())):
        if cls.name not in without:
            reg.register(cls)
    return reg
