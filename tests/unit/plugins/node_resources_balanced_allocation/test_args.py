"""NodeResourcesBalancedAllocationArgs: kube-scheduler's defaults and validation, from YAML."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.config import API_VERSION, KIND, config_from_dict
from gpusched.config.profile import ConfigError
from gpusched.framework.points import Point
from gpusched.plugins import default_registry
from gpusched.plugins.node_resources_balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
    ResourceSpec,
)

NAME = NodeResourcesBalancedAllocation.name


def load(resources: Any) -> NodeResourcesBalancedAllocationArgs:
    doc = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": "p",
                "plugins": {"score": {"enabled": [{"name": NAME, "weight": 1}]}},
                "pluginConfig": [{"name": NAME, "args": {"resources": resources}}],
            }
        ],
    }
    got = config_from_dict(doc, default_registry()).profiles[0].plugin_args[NAME]
    assert isinstance(got, NodeResourcesBalancedAllocationArgs)
    return got


def names(a: NodeResourcesBalancedAllocationArgs) -> list[tuple[str, int]]:
    return [(r.name, r.weight) for r in a.resources]


def test_defaults_are_cpu_and_memory() -> None:
    assert names(NodeResourcesBalancedAllocationArgs()) == [("cpu", 1), ("memory", 1)]
    assert NodeResourcesBalancedAllocationArgs().validate() == []
    # An empty list is defaulted the same way, as kube-scheduler's SetDefaults does.
    assert names(load([])) == [("cpu", 1), ("memory", 1)]


def test_yaml_resources_and_weight_defaulting() -> None:
    got = load([{"name": "cpu"}, {"name": "nvidia.com/gpu", "weight": 0}])
    assert names(got) == [("cpu", 1), ("nvidia.com/gpu", 1)]


@pytest.mark.parametrize(
    ("resources", "path", "message"),
    [
        ([{"name": "cpu", "weight": 2}], "resources[0].weight", "must be 1"),
        ([{"name": "cpu"}, {"name": "cpu"}], "resources[1].name", "Duplicate value: 'cpu'"),
        ([{"name": " "}], "resources[0].name", "must be a resource name"),
        ([{"weight": 1}], "resources[0].name", "required field is missing"),
        ([{"name": "cpu", "weight": "1"}], "resources[0].weight", "expected an integer"),
    ],
)
def test_invalid_args_are_refused_with_their_path(resources: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        load(resources)
    text = str(ei.value)
    assert f"pluginConfig[{NAME}].args.{path}" in text or f"args.{path}" in text, text
    assert message in text, text


def test_validate_lists_every_problem() -> None:
    a = NodeResourcesBalancedAllocationArgs(
        (ResourceSpec("cpu", 3), ResourceSpec("cpu"), ResourceSpec("memory", -1))
    )
    assert [p for p, _ in a.validate()] == [
        "resources[0].weight",
        "resources[1].name",
        "resources[2].weight",
    ]


def test_multi_point_enables_pre_score_and_score() -> None:
    doc = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "profiles": [
            {
                "schedulerName": "p",
                "plugins": {"multiPoint": {"enabled": [{"name": NAME, "weight": 2}]}},
            }
        ],
    }
    profile = config_from_dict(doc, default_registry()).profiles[0]
    assert NAME in [r.name for r in profile.enabled(Point.PRE_SCORE)]
    assert [(r.name, r.weight) for r in profile.enabled(Point.SCORE) if r.name == NAME] == [
        (NAME, 2)
    ]
    # Not in the default profile (chosen by measurement, docs/fgd-results.md).
    default = config_from_dict(
        {"apiVersion": API_VERSION, "kind": KIND}, default_registry()
    ).profiles[0]
    assert NAME not in [r.name for r in default.enabled(Point.SCORE)]
