"""NodeResourcesFit's args: defaults like kube-scheduler's, validation, YAML input."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.plugins.node_resources_fit import (
    NodeResourcesFitArgs,
    ResourceSpec,
    UtilizationShapePoint,
)
from tests.builders import (
    fit_strategy,
)


def test_default_args_are_valid_and_kube_like() -> None:
    args = NodeResourcesFitArgs()
    assert args.validate() == []
    assert args.scoring_strategy.type == "LeastAllocated"
    assert [(r.name, r.weight) for r in args.scoring_strategy.resources] == [
        ("cpu", 1),
        ("memory", 1),
    ]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (fit_strategy("Balanced"), "scoringStrategy.type"),
        (fit_strategy("MostAllocated", ("cpu", 0)), "scoringStrategy.resources[0].weight"),
        (fit_strategy("MostAllocated", ("cpu", 101)), "scoringStrategy.resources[0].weight"),
        (
            # not a resource name a node's allocatable can have
            fit_strategy("MostAllocated", ("storage", 1)),
            "scoringStrategy.resources[0].name",
        ),
        (
            fit_strategy("MostAllocated", ("cpu", 1), ("kubernetes.io/foo", 1)),
            "scoringStrategy.resources[1].name",
        ),
        (
            fit_strategy("MostAllocated", ("cpu", 1), ("cpu", 2)),
            "scoringStrategy.resources[1].name",
        ),
        (
            fit_strategy("RequestedToCapacityRatio"),
            "scoringStrategy.requestedToCapacityRatio.shape",
        ),
        (
            fit_strategy("RequestedToCapacityRatio", shape=((50, 1), (50, 2))),
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
        ),
        (
            fit_strategy("RequestedToCapacityRatio", shape=((0, 11),)),
            "scoringStrategy.requestedToCapacityRatio.shape[0].score",
        ),
        (
            fit_strategy("RequestedToCapacityRatio", shape=((101, 1),)),
            "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
        ),
        (
            fit_strategy("MostAllocated", shape=((0, 1),)),
            "scoringStrategy.requestedToCapacityRatio",
        ),
    ],
)
def test_invalid_args_name_the_field(args: NodeResourcesFitArgs, field: str) -> None:
    problems = args.validate()
    assert [f for f, _ in problems] == [field], problems


def test_args_accept_what_a_yaml_loader_parsed() -> None:
    raw: Any = {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": "nvidia.com/gpu", "weight": 5}],
        "requestedToCapacityRatio": {
            "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
        },
    }
    args = NodeResourcesFitArgs(raw)
    assert args.validate() == []
    s = args.scoring_strategy
    assert s.resources == (ResourceSpec("nvidia.com/gpu", 5),)
    assert s.requested_to_capacity_ratio is not None
    assert s.requested_to_capacity_ratio.shape[1] == UtilizationShapePoint(100, 10)
    # An empty resource list defaults to cpu and memory, as upstream.
    empty: Any = {"type": "MostAllocated", "resources": []}
    assert len(NodeResourcesFitArgs(empty).scoring_strategy.resources) == 2
