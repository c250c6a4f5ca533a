"""NodeResourcesFitArgs, shaped like kube-scheduler's so its YAML reads the same:

    args:
      scoringStrategy:
        type: MostAllocated            # LeastAllocated | MostAllocated | RequestedToCapacityRatio
        resources:
        - {name: cpu, weight: 1}
        - {name: nvidia.com/gpu, weight: 5}
        requestedToCapacityRatio:      # only for RequestedToCapacityRatio
          shape:
          - {utilization: 0, score: 0}
          - {utilization: 100, score: 10}

The dataclasses accept plain mappings/lists for their nested fields (camelCase or
snake_case keys) so a generic YAML loader can hand over what it parsed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusched.model.keys import GPU_RESOURCE

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# Resource names scoring understands besides extended ones ("example.com/fpga"): a name
# outside these would never match a node's allocatable and silently score 0.
NATIVE_SCORED = ("cpu", "memory", "ephemeral-storage", GPU_RESOURCE)


def scorable(name: object) -> bool:
    """cpu, memory, ephemeral-storage, hugepages-<size>, or an extended resource (a name
    with a domain outside kubernetes.io): what kube-scheduler's scoring can read off a
    node's allocatable."""
    if not isinstance(name, str) or not name:
        return False
    return name in NATIVE_SCORED or name.startswith("hugepages-") or is_extended_resource(name)


def is_extended_resource(name: str) -> bool:
    """v1helper.IsExtendedResourceName, as far as names the API accepts go: a name with a
    domain ("rdma/hca", "nvidia.com/mig-1g.10gb") outside kubernetes.io; ephemeral-storage
    and hugepages-* are native."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


MAX_WEIGHT = 100  # kube-scheduler: resource weight in (0, 100]
MAX_UTILIZATION = 100
MAX_CUSTOM_SCORE = 10  # kube-scheduler's MaxCustomPriorityScore: shape scores are 0..10


def _get(m: Mapping[str, Any], snake: str, camel: str, default: Any) -> Any:
    if snake in m:
        return m[snake]
    return m.get(camel, default)


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class UtilizationShapePoint:
    utilization: int
    score: int


@dataclass(frozen=True, slots=True)
class RequestedToCapacityRatioParam:
    shape: tuple[UtilizationShapePoint, ...] = ()

    def __post_init__(self) -> None:
        raw: tuple[Any, ...] = tuple(self.shape or ())
        points = tuple(
            p
            if isinstance(p, UtilizationShapePoint)
            else UtilizationShapePoint(p.get("utilization"), p.get("score"))
            for p in raw
        )
        object.__setattr__(self, "shape", points)


def _default_resources() -> tuple[ResourceSpec, ...]:
    return (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: str = LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = field(default_factory=_default_resources)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = None

    def __post_init__(self) -> None:
        raw: tuple[Any, ...] = tuple(self.resources or ())
        res = tuple(
            r if isinstance(r, ResourceSpec) else ResourceSpec(r.get("name"), r.get("weight", 1))
            for r in raw
        )
        # kube-scheduler defaults an empty list to cpu and memory, weight 1 each.
        object.__setattr__(self, "resources", res or _default_resources())
        rtcr: Any = self.requested_to_capacity_ratio
        if isinstance(rtcr, Mapping):
            object.__setattr__(
                self,
                "requested_to_capacity_ratio",
                RequestedToCapacityRatioParam(tuple(rtcr.get("shape") or ())),
            )


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)
    # kube-scheduler's: extended resources Filter does not check, by name, and by group
    # (the part of the name before "/", e.g. "example.com").
    ignored_resources: tuple[str, ...] = ()
    ignored_resource_groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        s: Any = self.scoring_strategy
        if isinstance(s, Mapping):
            object.__setattr__(
                self,
                "scoring_strategy",
                ScoringStrategy(
                    type=s.get("type", LEAST_ALLOCATED),
                    resources=tuple(s.get("resources") or ()),
                    requested_to_capacity_ratio=_get(
                        s, "requested_to_capacity_ratio", "requestedToCapacityRatio", None
                    ),
                ),
            )

    def validate(self) -> list[tuple[str, str]]:
        errs: list[tuple[str, str]] = []
        s = self.scoring_strategy
        base = "scoringStrategy"
        if s.type not in STRATEGIES:
            errs.append(
                (
                    f"{base}.type",
                    f"unsupported value {s.type!r}: supported values: {', '.join(STRATEGIES)}",
                )
            )
        seen: set[str] = set()
        for i, r in enumerate(s.resources):
            where = f"{base}.resources[{i}]"
            if not scorable(r.name):
                errs.append(
                    (
                        f"{where}.name",
                        f"unsupported resource {r.name!r}: supported: "
                        + ", ".join(NATIVE_SCORED)
                        + ", hugepages-<size> and extended resources (domain/name)",
                    )
                )
            elif r.name in seen:
                errs.append((f"{where}.name", f"resource {r.name!r} listed twice"))
            seen.add(str(r.name))
            if not _is_int(r.weight) or not 0 < r.weight <= MAX_WEIGHT:
                errs.append(
                    (
                        f"{where}.weight",
                        f"resource weight of {r.name} is {r.weight!r},"
                        f" not in valid range (0, {MAX_WEIGHT}]",
                    )
                )
        for i, group in enumerate(self.ignored_resource_groups):
            if not isinstance(group, str) or not group or "/" in group:
                errs.append(
                    (
                        f"ignoredResourceGroups[{i}]",
                        f"{group!r} is not a resource group: the name part before '/',"
                        " e.g. example.com",
                    )
                )
        for i, name in enumerate(self.ignored_resources):
            if not isinstance(name, str) or not name:
                errs.append((f"ignoredResources[{i}]", f"{name!r} is not a resource name"))
        rtcr = s.requested_to_capacity_ratio
        where = f"{base}.requestedToCapacityRatio"
        if s.type == REQUESTED_TO_CAPACITY_RATIO:
            if rtcr is None or not rtcr.shape:
                errs.append(
                    (
                        f"{where}.shape",
                        "at least one point is required for RequestedToCapacityRatio",
                    )
                )
            else:
                errs += _validate_shape(rtcr.shape, f"{where}.shape")
        elif rtcr is not None:
            errs.append((where, f"only allowed when type is {REQUESTED_TO_CAPACITY_RATIO}"))
        return errs


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _validate_shape(shape: Sequence[UtilizationShapePoint], where: str) -> list[tuple[str, str]]:
    errs: list[tuple[str, str]] = []
    prev: int | None = None
    for i, p in enumerate(shape):
        if not _is_int(p.utilization) or not 0 <= p.utilization <= MAX_UTILIZATION:
            errs.append(
                (
                    f"{where}[{i}].utilization",
                    f"{p.utilization!r} not in valid range [0, {MAX_UTILIZATION}]",
                )
            )
        elif prev is not None and p.utilization <= prev:
            errs.append(
                (
                    f"{where}[{i}].utilization",
                    "utilization values must be sorted in increasing order",
                )
            )
        else:
            prev = p.utilization
        if not _is_int(p.score) or not 0 <= p.score <= MAX_CUSTOM_SCORE:
            errs.append(
                (f"{where}[{i}].score", f"{p.score!r} not in valid range [0, {MAX_CUSTOM_SCORE}]")
            )
    return errs
