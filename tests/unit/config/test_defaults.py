"""The built-in profiles."""

from __future__ import annotations

import pytest

from gpusched.config import (
    builtin_config,
    builtin_document,
    builtin_profile,
    builtin_profiles,
)
from gpusched.config.profile import PluginRef, Point
from gpusched.framework.registry import Registry
from tests.fake_plugins import (
    FitArgs,
    ResourceSpec,
    ScoringStrategy,
)


def test_builtin_comparison_profiles(registry: Registry) -> None:
    cfg = builtin_config(registry)
    assert cfg.names == ("ai-scheduler", "least-allocated", "most-allocated")
    ai = cfg.profile("ai-scheduler")
    for name, strategy in (
        ("least-allocated", "LeastAllocated"),
        ("most-allocated", "MostAllocated"),
    ):
        p = cfg.profile(name)
        assert p.enabled(Point.SCORE) == (PluginRef("NodeResourcesFit", 1.0),)
        assert p.enabled(Point.PRE_SCORE) == ()
        for point in (Point.QUEUE_SORT, Point.PRE_FILTER, Point.RESERVE, Point.BIND):
            assert p.enabled(point) == ai.enabled(point), point
        # kube-scheduler has no temperatures: the baselines filter like us minus Thermal.
        assert p.enabled(Point.FILTER) == tuple(
            r for r in ai.enabled(Point.FILTER) if r.name != "Thermal"
        )
        resources = (
            ResourceSpec("cpu", 1),
            ResourceSpec("memory", 1),
            ResourceSpec("nvidia.com/gpu", 1),
        )
        assert p.plugin_args["NodeResourcesFit"] == FitArgs(
            ScoringStrategy(strategy, resources)  # type: ignore[arg-type]
        )
    assert builtin_config(registry, "most-allocated").names == ("most-allocated",)
    assert builtin_profile("most-allocated", registry) == cfg.profile("most-allocated")
    with pytest.raises(KeyError, match="unknown built-in profile"):
        builtin_document("nope")


def test_builtin_profiles_are_fresh_copies() -> None:
    first = builtin_profiles()
    first["least-allocated"]["pluginConfig"].clear()
    assert builtin_profiles()["least-allocated"]["pluginConfig"]
