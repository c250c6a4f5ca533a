"""NodeResourcesBalancedAllocationArgs, kube-scheduler's shape, so its YAML reads the same:

    args:
      resources:                 # default: cpu and memory
      - {name: cpu, weight: 1}
      - {name: memory, weight: 1}
      - {name: nvidia.com/gpu}   # weight may be left out (or 0): it means 1

As in kube-scheduler the weight takes no part in the score (the plugin compares the
resources' requested fractions, unweighted); it exists because the type is shared with
NodeResourcesFit, and anything but 1 is refused rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    # kube-scheduler's defaulting turns an unset or 0 weight into 1.
    weight: int = 1


def _default_resources() -> tuple[ResourceSpec, ...]:
    return (ResourceSpec("cpu"), ResourceSpec("memory"))


@dataclass(frozen=True, slots=True)
class NodeResourcesBalancedAllocationArgs:
    resources: tuple[ResourceSpec, ...] = field(default_factory=_default_resources)

    def __post_init__(self) -> None:
        # kube-scheduler's SetDefaults_NodeResourcesBalancedAllocationArgs: an empty list
        # means cpu and memory; a weight of 0 means 1.
        res = tuple(r if r.weight != 0 else ResourceSpec(r.name, 1) for r in self.resources)
        object.__setattr__(self, "resources", res or _default_resources())

    def validate(self) -> list[tuple[str, str]]:
        """kube-scheduler's ValidateNodeResourcesBalancedAllocationArgs (duplicates, weight
        1), plus a non-empty name."""
        errs: list[tuple[str, str]] = []
        seen: set[str] = set()
        for i, r in enumerate(self.resources):
            where = f"resources[{i}]"
            if not r.name.strip():
                errs.append((f"{where}.name", "must be a resource name, e.g. cpu"))
            elif r.name in seen:
                errs.append((f"{where}.name", f"Duplicate value: {r.name!r}"))
            seen.add(r.name)
            if r.weight != 1:
                errs.append((f"{where}.weight", f"Invalid value: {r.weight}: must be 1"))
        return errs
