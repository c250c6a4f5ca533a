"""PodTopologySpreadArgs, shaped like kube-scheduler's so its YAML reads the same:

    args:
      defaultingType: List              # System (default) | List
      defaultConstraints:               # only with List
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}

`System` is kube-scheduler's system default: ScheduleAnyway with maxSkew 3 on
kubernetes.io/hostname and maxSkew 5 on topology.kubernetes.io/zone. Either way the
defaults apply only to pods without topologySpreadConstraints of their own that belong to
a ReplicaSet, StatefulSet or ReplicationController (README: how the selector is chosen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpusched.plugins.pod_topology_spread.constraints import (
    DO_NOT_SCHEDULE,
    HOSTNAME,
    SCHEDULE_ANYWAY,
    ZONE,
)

SYSTEM = "System"
LIST = "List"
Action = Literal["DoNotSchedule", "ScheduleAnyway"]


@dataclass(frozen=True, slots=True)
class DefaultConstraint:
    """A v1.TopologySpreadConstraint without labelSelector: the selector is deduced for
    each pod, as kube-scheduler's validation requires."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: Action

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.max_skew <= 0:
            out.append(("maxSkew", "must be greater than zero"))
        if not self.topology_key:
            out.append(("topologyKey", "can not be empty"))
        return out


SYSTEM_DEFAULT_CONSTRAINTS = (
    DefaultConstraint(3, HOSTNAME, "ScheduleAnyway"),
    DefaultConstraint(5, ZONE, "ScheduleAnyway"),
)


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    defaulting_type: Literal["System", "List"] = "System"
    default_constraints: tuple[DefaultConstraint, ...] = ()

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.defaulting_type == SYSTEM and self.default_constraints:
            out.append(
                (
                    "defaultConstraints",
                    "when .defaultingType is System, .defaultConstraints must be empty",
                )
            )
        seen: dict[tuple[str, str], int] = {}
        for i, c in enumerate(self.default_constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                out.append(
                    (
                        f"defaultConstraints[{i}]",
                        f"Duplicate value: {{{c.topology_key!r}, {c.when_unsatisfiable!r}}}"
                        f" (also defaultConstraints[{seen[pair]}])",
                    )
                )
            seen.setdefault(pair, i)
        return out

    def constraints(self) -> tuple[DefaultConstraint, ...]:
        """The default constraints in force."""
        return (
            SYSTEM_DEFAULT_CONSTRAINTS
            if self.defaulting_type == SYSTEM
            else self.default_constraints
        )


__all__ = [
    "DO_NOT_SCHEDULE",
    "LIST",
    "SCHEDULE_ANYWAY",
    "SYSTEM",
    "DefaultConstraint",
    "PodTopologySpreadArgs",
]
