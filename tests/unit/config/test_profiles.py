"""Profiles: plugin sets per extension point (enabled, disabled, multiPoint), weights,
pluginConfig."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.config import (
    DEFAULT_PLUGINS,
    config_from_dict,
)
from gpusched.config.profile import PluginRef, Point, Profile
from gpusched.framework.registry import Registry
from tests.builders import CONFIG_HEAD, config_doc, config_load_error, config_plugins
from tests.fake_plugins import (
    ThermalArgs,
    fake,
    make_registry,
)


def names(profile: Profile, point: Point) -> list[str]:
    return [r.name for r in profile.enabled(point)]


def test_empty_profiles_mean_the_default_profile(registry: Registry) -> None:
    assert config_from_dict({**CONFIG_HEAD, "profiles": []}, registry).names == ("ai-scheduler",)
    assert config_from_dict({**CONFIG_HEAD, "profiles": None}, registry).names == ("ai-scheduler",)


def test_enabled_is_appended_after_the_defaults(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(filter={"enabled": [{"name": "Spread"}]})), registry
    )
    p = cfg.profiles[0]
    assert names(p, Point.FILTER) == [*(r.name for r in DEFAULT_PLUGINS[Point.FILTER]), "Spread"]


def test_enabled_naming_a_default_replaces_it_in_place(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(score={"enabled": [{"name": "Thermal", "weight": 2}]})), registry
    )
    assert cfg.profiles[0].enabled(Point.SCORE) == (
        PluginRef("GPUFragmentation", 0.40),
        PluginRef("Thermal", 2.0),
        PluginRef("PowerHeadroom", 0.05),
        PluginRef("NetworkLocality", 0.25),
        PluginRef("InterPodAffinity", 2),
        PluginRef("PodTopologySpread", 2),
        PluginRef("TenantLoad", 0.1),
        PluginRef("NVLinkTopology", 0.25),
    )


def test_disabled_removes_a_default(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(filter={"disabled": [{"name": "Thermal"}]})), registry
    )
    p = cfg.profiles[0]
    assert "Thermal" not in names(p, Point.FILTER)
    assert "Thermal" in names(p, Point.SCORE)  # other points keep it


def test_star_disables_every_default_at_that_point(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                score={
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "Spread", "weight": 3}],
                },
                preScore={"disabled": [{"name": "*"}]},
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert p.enabled(Point.SCORE) == (PluginRef("Spread", 3.0),)
    assert Point.PRE_SCORE not in p.plugins
    assert names(p, Point.FILTER) == [r.name for r in DEFAULT_PLUGINS[Point.FILTER]]


def test_disable_then_enable_moves_a_default_to_the_end(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                filter={
                    "disabled": [{"name": "NodeUnschedulable"}],
                    "enabled": [{"name": "NodeUnschedulable"}],
                }
            )
        ),
        registry,
    )
    assert names(cfg.profiles[0], Point.FILTER)[-1] == "NodeUnschedulable"
    assert names(cfg.profiles[0], Point.FILTER).count("NodeUnschedulable") == 1


def test_replacing_queue_sort_and_bind(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                queueSort={"disabled": [{"name": "*"}], "enabled": [{"name": "OtherSort"}]},
                bind={"enabled": [{"name": "OtherBinder"}]},
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert names(p, Point.QUEUE_SORT) == ["OtherSort"]
    assert names(p, Point.BIND) == ["DefaultBinder", "OtherBinder"]


def test_multipoint_enables_every_point_the_class_implements(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(multiPoint={"enabled": [{"name": "Coscheduling"}]})), registry
    )
    p = cfg.profiles[0]
    for point in (Point.PRE_FILTER, Point.PERMIT, Point.RESERVE, Point.POST_BIND):
        assert names(p, point)[-1] == "Coscheduling", point
    for point in (Point.FILTER, Point.SCORE, Point.BIND, Point.QUEUE_SORT):
        assert "Coscheduling" not in names(p, point), point


def test_multipoint_comes_before_the_points_own_enabled(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                multiPoint={"enabled": [{"name": "Spread", "weight": 2}]},
                filter={"enabled": [{"name": "Broken"}]},
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert names(p, Point.FILTER)[-2:] == ["Spread", "Broken"]
    assert p.enabled(Point.SCORE)[-1] == PluginRef("Spread", 2.0)


def test_multipoint_naming_a_default_keeps_its_places(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(multiPoint={"enabled": [{"name": "Thermal", "weight": 1}]})),
        registry,
    )
    p = cfg.profiles[0]
    assert names(p, Point.FILTER) == [r.name for r in DEFAULT_PLUGINS[Point.FILTER]]
    assert p.enabled(Point.SCORE)[1] == PluginRef("Thermal", 1.0)


def test_points_own_entry_beats_multipoint(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                multiPoint={"enabled": [{"name": "Spread", "weight": 2}]},
                score={"enabled": [{"name": "Spread", "weight": 9}]},
            )
        ),
        registry,
    )
    score = cfg.profiles[0].enabled(Point.SCORE)
    assert [r for r in score if r.name == "Spread"] == [PluginRef("Spread", 9.0)]


def test_points_disabled_stops_multipoint(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                multiPoint={"enabled": [{"name": "Spread"}]},  # no weight needed: not at score
                score={"disabled": [{"name": "Spread"}]},
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert "Spread" in names(p, Point.FILTER)
    assert "Spread" not in names(p, Point.SCORE)

    cfg = config_from_dict(
        config_doc(
            config_plugins(
                multiPoint={"enabled": [{"name": "Coscheduling"}]},
                permit={"disabled": [{"name": "*"}]},
            )
        ),
        registry,
    )
    assert Point.PERMIT not in cfg.profiles[0].plugins


def test_multipoint_star_disables_all_defaults(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            config_plugins(
                multiPoint={
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"}],
                }
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert {pt: names(p, pt) for pt in p.plugins} == {
        Point.QUEUE_SORT: ["PrioritySort"],
        Point.BIND: ["DefaultBinder"],
    }
    assert p.plugin_args == {}


def test_multipoint_disabled_name_removes_it_everywhere(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(multiPoint={"disabled": [{"name": "GPUFit"}]})), registry
    )
    assert all("GPUFit" not in names(cfg.profiles[0], pt) for pt in Point)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"name": "Spread"},
            "profiles[0].plugins.score.enabled[Spread].weight: required: every score plugin"
            " needs a positive weight; Spread got none",
        ),
        (
            {"name": "Spread", "weight": 0},
            "profiles[0].plugins.score.enabled[Spread].weight: must be a positive finite number,"
            " got 0",
        ),
        (
            {"name": "Spread", "weight": -1.5},
            "profiles[0].plugins.score.enabled[Spread].weight: must be a positive finite number,"
            " got -1.5",
        ),
        (
            # Finite, but weight x 100 summed overflowed to inf: every total became NaN and
            # no node was ever selected (found by the config fuzz test).
            {"name": "Spread", "weight": 1e308},
            "profiles[0].plugins.score.enabled[Spread].weight: must be at most 1e+06, got 1e+308",
        ),
        (
            {"name": "Spread", "weight": "high"},
            "profiles[0].plugins.score.enabled[Spread].weight: expected a number, got 'high'",
        ),
        (
            {"name": "Spread", "weight": True},
            "profiles[0].plugins.score.enabled[Spread].weight: expected a number, got true",
        ),
        (
            {"name": "Thermal"},  # replacing a default still needs its own weight
            "profiles[0].plugins.score.enabled[Thermal].weight: required: every score plugin"
            " needs a positive weight; Thermal got none",
        ),
    ],
)
def test_score_weight_errors(registry: Registry, item: dict[str, Any], message: str) -> None:
    assert (
        config_load_error(config_doc(config_plugins(score={"enabled": [item]})), registry)
        == message
    )


def test_multipoint_score_plugin_needs_a_weight(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(multiPoint={"enabled": [{"name": "Spread"}]})), registry
    )
    assert msg == (
        "profiles[0].plugins.multiPoint.enabled[Spread].weight: required: every score plugin"
        " needs a positive weight; Spread got none"
    )


def test_weight_outside_score_is_an_error(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(filter={"enabled": [{"name": "Spread", "weight": 2}]})), registry
    )
    assert msg.startswith(
        "profiles[0].plugins.filter.enabled[Spread].weight: a weight only applies"
    )
    assert msg.endswith("got 2")
    msg = config_load_error(
        config_doc(config_plugins(multiPoint={"enabled": [{"name": "Coscheduling", "weight": 2}]})),
        registry,
    )
    assert msg.startswith("profiles[0].plugins.multiPoint.enabled[Coscheduling].weight:")


def test_unknown_plugin_lists_the_known_ones(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(filter={"enabled": [{"name": "Thermel"}]})), registry
    )
    assert msg.startswith(
        "profiles[0].plugins.filter.enabled[Thermel].name: unknown plugin 'Thermel' (known: Broken,"
    )
    assert "Thermal" in msg


def test_unknown_disabled_plugin(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(filter={"disabled": [{"name": "Nope"}]})), registry
    )
    assert msg.startswith("profiles[0].plugins.filter.disabled[0].name: unknown plugin 'Nope'")


def test_plugin_at_a_point_it_does_not_implement(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(score={"enabled": [{"name": "NodeAffinity", "weight": 1}]})),
        registry,
    )
    assert msg == (
        "profiles[0].plugins.score.enabled[NodeAffinity].name: plugin 'NodeAffinity' does not"
        " implement score (needs score); it implements: preFilter, filter"
    )


def test_plugin_enabled_twice_at_a_point(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(filter={"enabled": [{"name": "Spread"}, {"name": "Spread"}]})),
        registry,
    )
    assert (
        msg == "profiles[0].plugins.filter.enabled[Spread].name: plugin enabled twice at filter,"
        " got 'Spread'"
    )


def test_queue_sort_must_be_exactly_one(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(queueSort={"enabled": [{"name": "OtherSort"}]})), registry
    )
    assert msg == (
        "profiles[0].plugins.queueSort: exactly one QueueSort plugin must be enabled,"
        " got 2 (GangScheduling, OtherSort)"
    )
    msg = config_load_error(
        config_doc(config_plugins(queueSort={"disabled": [{"name": "*"}]})), registry
    )
    assert (
        msg == "profiles[0].plugins.queueSort: exactly one QueueSort plugin must be enabled, got 0"
    )


def test_bind_is_required(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(config_plugins(bind={"disabled": [{"name": "DefaultBinder"}]})), registry
    )
    assert msg == "profiles[0].plugins.bind: at least one Bind plugin must be enabled, got none"


def test_unknown_extension_point(registry: Registry) -> None:
    msg = config_load_error(config_doc(config_plugins(scores={"enabled": []})), registry)
    assert msg.startswith(
        "profiles[0].plugins.scores: unknown extension point; known: preEnqueue, queueSort,"
    )


def test_unregistered_default_plugin_must_be_disabled() -> None:
    reg = make_registry(without=("Thermal",))
    msg = config_load_error(config_doc({"schedulerName": "p"}), reg)
    assert msg.splitlines()[0].startswith(
        "profiles[0].plugins.filter: default plugin 'Thermal' is not registered"
    )
    cfg = config_from_dict(
        config_doc(config_plugins(multiPoint={"disabled": [{"name": "Thermal"}]})), reg
    )
    assert "Thermal" not in cfg.profiles[0].names()


def test_default_plugin_that_does_not_implement_its_point() -> None:
    reg = make_registry(without=("GPUFragmentation",))
    reg.register(fake("GPUFragmentation", Point.FILTER))
    msg = config_load_error(CONFIG_HEAD, reg)
    assert msg == (
        "profiles[0].plugins.score: default plugin 'GPUFragmentation' does not implement score"
        " (needs score)"
    )


def test_duplicate_scheduler_name(registry: Registry) -> None:
    msg = config_load_error(config_doc({"schedulerName": "a"}, {"schedulerName": "a"}), registry)
    assert msg == "profiles[1].schedulerName: duplicate: profiles[0] already uses 'a'"


def test_bad_scheduler_name_and_unknown_profile_field(registry: Registry) -> None:
    msg = config_load_error(config_doc({"schedulerName": ""}), registry)
    assert msg == "profiles[0].schedulerName: must be a non-empty string, got ''"
    msg = config_load_error(config_doc({"schedulerName": "a", "plugin": {}}), registry)
    assert msg.startswith("profiles[0].plugin: unknown field; known fields: schedulerName,")


def test_profiles_must_share_the_queue_sort(registry: Registry) -> None:
    other = {
        "schedulerName": "b",
        "plugins": {"queueSort": {"disabled": [{"name": "*"}], "enabled": [{"name": "OtherSort"}]}},
    }
    msg = config_load_error(config_doc({"schedulerName": "a"}, other), registry)
    assert msg == (
        "profiles[1].plugins.queueSort: all profiles share one queue, so they must use the same"
        " QueueSort plugin as 'a' (GangScheduling), got 'OtherSort'"
    )


def test_profiles_not_a_list(registry: Registry) -> None:
    assert config_load_error({**CONFIG_HEAD, "profiles": {"a": 1}}, registry) == (
        "profiles: expected a list of profiles, got a mapping"
    )


def test_plugin_config_args_are_typed(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(
            {
                "schedulerName": "a",
                "pluginConfig": [{"name": "Thermal", "args": {"coolCelsius": 40, "mode": "soft"}}],
            }
        ),
        registry,
    )
    args = cfg.profiles[0].plugin_args["Thermal"]
    assert isinstance(args, ThermalArgs)
    assert (args.cool_celsius, args.mode.value) == (40.0, "soft")


def test_plugin_config_error_path_names_profile_plugin_and_field(registry: Registry) -> None:
    msg = config_load_error(
        config_doc(
            {
                "schedulerName": "a",
                "pluginConfig": [{"name": "Thermal", "args": {"redLineCelsius": 40}}],
            }
        ),
        registry,
    )
    assert msg == (
        "profiles[0].pluginConfig[Thermal].args.redLineCelsius:"
        " must be > coolCelsius (50.0), got 40"
    )


def test_plugin_config_for_a_plugin_not_in_the_profile(registry: Registry) -> None:
    msg = config_load_error(
        config_doc({"schedulerName": "a", "pluginConfig": [{"name": "Spread"}]}), registry
    )
    assert msg.startswith(
        "profiles[0].pluginConfig[Spread].name: plugin 'Spread' is not enabled in this profile,"
        " so its args would be ignored (enabled: SchedulingGates, DynamicResources, GangScheduling,"
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            [{"name": "Nope", "args": {}}],
            "profiles[0].pluginConfig[Nope].name: unknown plugin 'Nope' (known: ",
        ),
        (
            [{"name": "Thermal"}, {"name": "Thermal"}],
            "profiles[0].pluginConfig[Thermal].name: duplicate pluginConfig for 'Thermal'",
        ),
        (
            [{"name": "GPUFit", "args": {"x": 1}}],
            "profiles[0].pluginConfig[GPUFit].args: plugin 'GPUFit' takes no args, got a mapping",
        ),
        (
            [{"name": "Thermal", "arg": {}}],
            "profiles[0].pluginConfig[Thermal].arg: unknown field; known fields: name, args",
        ),
        ("Thermal", "profiles[0].pluginConfig: expected a list of {name, args}, got 'Thermal'"),
        (
            [{"name": "Thermal", "args": {"coolCelsius": "x"}}],
            "profiles[0].pluginConfig[Thermal].args.coolCelsius: expected a number, got 'x'",
        ),
    ],
)
def test_plugin_config_errors(registry: Registry, items: Any, message: str) -> None:
    d = config_doc({"schedulerName": "a", "pluginConfig": items})
    assert config_load_error(d, registry).startswith(message)
