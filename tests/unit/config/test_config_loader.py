"""The configuration document: defaults, enabled/disabled/multiPoint, weights, errors."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpusched.cli import check_config_main
from gpusched.config import (
    DEFAULT_PLUGINS,
    ConfigErrors,
    LeaderElection,
    SchedulerConfig,
    builtin_config,
    builtin_document,
    builtin_profile,
    builtin_profiles,
    config_from_dict,
    config_to_document,
    default_config,
    load_config,
)
from gpusched.config.profile import ConfigError, PluginRef, Point, Profile
from gpusched.core.runtime.validate import validate_profiles
from gpusched.framework import interfaces
from gpusched.framework.points import POINT_METHODS
from gpusched.framework.registry import Registry
from gpusched.framework.snapshot import MAX_CARDS_LIMIT
from gpusched.kernels._card_rules import MAX_CARDS
from gpusched.model.node import TopologyKeys
from tests.unit.config.config_fakes import (
    FitArgs,
    ResourceSpec,
    ScoringStrategy,
    ThermalArgs,
    fake,
    make_registry,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "manifests" / "examples" / "scheduler-config.yaml"
HEAD = {"apiVersion": "gpusched.io/v1alpha1", "kind": "GpuSchedulerConfiguration"}


def doc(*profiles: dict[str, Any], **settings: Any) -> dict[str, Any]:
    return {**HEAD, **settings, "profiles": list(profiles)}


def plugins(**points: Any) -> dict[str, Any]:
    return {"schedulerName": "p", "plugins": points}


def names(profile: Profile, point: Point) -> list[str]:
    return [r.name for r in profile.enabled(point)]


def error_lines(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return str(exc.value).splitlines()


def load_error(d: Any, registry: Registry) -> str:
    with pytest.raises(ConfigError) as ei:
        config_from_dict(d, registry)
    return str(ei.value)


# -- defaults --------------------------------------------------------------------------------


def test_minimal_document_is_the_default_profile(registry: Registry) -> None:
    cfg = load_config(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n", registry
    )
    assert cfg.names == ("ai-scheduler",)
    p = cfg.profile("ai-scheduler")
    assert dict(p.plugins) == dict(DEFAULT_PLUGINS)
    assert p.enabled(Point.SCORE) == (
        PluginRef("GPUFragmentation", 0.40),
        PluginRef("Thermal", 0.05),
        PluginRef("NetworkLocality", 0.25),
    )
    # Every plugin with an Args type gets its defaults filled in at load time.
    assert p.plugin_args == {"NodeResourcesFit": FitArgs(), "Thermal": ThermalArgs()}


def test_default_settings(registry: Registry) -> None:
    cfg = config_from_dict(HEAD, registry)
    assert cfg.client_connection.qps == 50
    assert cfg.client_connection.burst == 100
    assert cfg.pod_initial_backoff_seconds == 1
    assert cfg.pod_max_backoff_seconds == 10
    assert cfg.pod_max_in_unschedulable_pods_duration_seconds == 300
    assert cfg.assume_ttl_seconds == 30
    assert cfg.topology_keys == TopologyKeys(
        "topology.gpusched.io/rack", "topology.gpusched.io/spine"
    )
    assert cfg.max_cards_per_node == 8
    # kube-scheduler's leaderElection defaults; the Lease next to its own in kube-system.
    assert cfg.leader_election == LeaderElection(
        leader_elect=True,
        lease_duration_seconds=15,
        renew_deadline_seconds=10.0,
        retry_period_seconds=2.0,
        resource_name="gpusched",
        resource_namespace="kube-system",
    )


def test_leader_election_is_read(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **HEAD,
            "leaderElection": {
                "leaderElect": False,
                "leaseDurationSeconds": 3,
                "renewDeadlineSeconds": 2,
                "retryPeriodSeconds": 0.5,
                "resourceName": "gpusched-test",
                "resourceNamespace": "gpu-system",
            },
        },
        registry,
    )
    assert cfg.leader_election == LeaderElection(False, 3, 2.0, 0.5, "gpusched-test", "gpu-system")
    assert config_from_dict(config_to_document(cfg), registry) == cfg


def test_settings_are_read(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **HEAD,
            "clientConnection": {"qps": 5, "burst": 7},
            "podInitialBackoffSeconds": 2,
            "podMaxBackoffSeconds": 20.5,
            "podMaxInUnschedulablePodsDurationSeconds": 60,
            "assumeTTLSeconds": 90,
            "topologyKeys": {"rack": "example.com/rack"},
            "maxCardsPerNode": 16,
            "tieBreakSeed": 42,
        },
        registry,
    )
    assert cfg.tie_break_seed == 42
    assert (cfg.client_connection.qps, cfg.client_connection.burst) == (5.0, 7)
    assert cfg.pod_initial_backoff_seconds == 2.0
    assert cfg.pod_max_backoff_seconds == 20.5
    assert cfg.pod_max_in_unschedulable_pods_duration_seconds == 60
    assert cfg.assume_ttl_seconds == 90
    assert cfg.topology_keys == TopologyKeys("example.com/rack", "topology.gpusched.io/spine")
    assert cfg.max_cards_per_node == 16


def test_empty_profiles_mean_the_default_profile(registry: Registry) -> None:
    assert config_from_dict({**HEAD, "profiles": []}, registry).names == ("ai-scheduler",)
    assert config_from_dict({**HEAD, "profiles": None}, registry).names == ("ai-scheduler",)


def test_default_config_with_and_without_registry(registry: Registry) -> None:
    bare = default_config()
    assert bare.names == ("ai-scheduler",)
    assert dict(bare.profiles[0].plugins) == dict(DEFAULT_PLUGINS)
    full = default_config(registry)
    assert dict(full.profiles[0].plugins) == dict(DEFAULT_PLUGINS)
    assert full.profiles[0].plugin_args["Thermal"] == ThermalArgs()


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


def test_example_manifest_loads_and_builds(registry: Registry) -> None:
    cfg = load_config(EXAMPLE, registry)
    assert cfg.names == ("ai-scheduler", "least-allocated")
    assert dict(cfg.profile("ai-scheduler").plugins) == dict(DEFAULT_PLUGINS)
    assert cfg == load_config(str(EXAMPLE), registry)
    assert cfg.profile("least-allocated") == builtin_config(registry, "least-allocated").profiles[0]
    validate_profiles(cfg, registry)


# -- enabled / disabled / "*" ----------------------------------------------------------------


def test_enabled_is_appended_after_the_defaults(registry: Registry) -> None:
    cfg = config_from_dict(doc(plugins(filter={"enabled": [{"name": "Spread"}]})), registry)
    p = cfg.profiles[0]
    assert names(p, Point.FILTER) == [*(r.name for r in DEFAULT_PLUGINS[Point.FILTER]), "Spread"]


def test_enabled_naming_a_default_replaces_it_in_place(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(plugins(score={"enabled": [{"name": "Thermal", "weight": 2}]})), registry
    )
    assert cfg.profiles[0].enabled(Point.SCORE) == (
        PluginRef("GPUFragmentation", 0.40),
        PluginRef("Thermal", 2.0),
        PluginRef("NetworkLocality", 0.25),
    )


def test_disabled_removes_a_default(registry: Registry) -> None:
    cfg = config_from_dict(doc(plugins(filter={"disabled": [{"name": "Thermal"}]})), registry)
    p = cfg.profiles[0]
    assert "Thermal" not in names(p, Point.FILTER)
    assert "Thermal" in names(p, Point.SCORE)  # other points keep it


def test_star_disables_every_default_at_that_point(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(
            plugins(
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
        doc(
            plugins(
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
        doc(
            plugins(
                queueSort={"disabled": [{"name": "*"}], "enabled": [{"name": "OtherSort"}]},
                bind={"enabled": [{"name": "OtherBinder"}]},
            )
        ),
        registry,
    )
    p = cfg.profiles[0]
    assert names(p, Point.QUEUE_SORT) == ["OtherSort"]
    assert names(p, Point.BIND) == ["DefaultBinder", "OtherBinder"]


# -- multiPoint ------------------------------------------------------------------------------


def test_multipoint_enables_every_point_the_class_implements(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(plugins(multiPoint={"enabled": [{"name": "Coscheduling"}]})), registry
    )
    p = cfg.profiles[0]
    for point in (Point.PRE_FILTER, Point.PERMIT, Point.RESERVE, Point.POST_BIND):
        assert names(p, point)[-1] == "Coscheduling", point
    for point in (Point.FILTER, Point.SCORE, Point.BIND, Point.QUEUE_SORT):
        assert "Coscheduling" not in names(p, point), point


def test_multipoint_comes_before_the_points_own_enabled(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(
            plugins(
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
        doc(plugins(multiPoint={"enabled": [{"name": "Thermal", "weight": 1}]})), registry
    )
    p = cfg.profiles[0]
    assert names(p, Point.FILTER) == [r.name for r in DEFAULT_PLUGINS[Point.FILTER]]
    assert p.enabled(Point.SCORE)[1] == PluginRef("Thermal", 1.0)


def test_points_own_entry_beats_multipoint(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(
            plugins(
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
        doc(
            plugins(
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
        doc(
            plugins(
                multiPoint={"enabled": [{"name": "Coscheduling"}]},
                permit={"disabled": [{"name": "*"}]},
            )
        ),
        registry,
    )
    assert Point.PERMIT not in cfg.profiles[0].plugins


def test_multipoint_star_disables_all_defaults(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(
            plugins(
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
    cfg = config_from_dict(doc(plugins(multiPoint={"disabled": [{"name": "GPUFit"}]})), registry)
    assert all("GPUFit" not in names(cfg.profiles[0], pt) for pt in Point)


# -- weights ---------------------------------------------------------------------------------


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
    assert load_error(doc(plugins(score={"enabled": [item]})), registry) == message


def test_multipoint_score_plugin_needs_a_weight(registry: Registry) -> None:
    msg = load_error(doc(plugins(multiPoint={"enabled": [{"name": "Spread"}]})), registry)
    assert msg == (
        "profiles[0].plugins.multiPoint.enabled[Spread].weight: required: every score plugin"
        " needs a positive weight; Spread got none"
    )


def test_weight_outside_score_is_an_error(registry: Registry) -> None:
    msg = load_error(doc(plugins(filter={"enabled": [{"name": "Spread", "weight": 2}]})), registry)
    assert msg.startswith(
        "profiles[0].plugins.filter.enabled[Spread].weight: a weight only applies"
    )
    assert msg.endswith("got 2")
    msg = load_error(
        doc(plugins(multiPoint={"enabled": [{"name": "Coscheduling", "weight": 2}]})), registry
    )
    assert msg.startswith("profiles[0].plugins.multiPoint.enabled[Coscheduling].weight:")


# -- plugin errors ---------------------------------------------------------------------------


def test_unknown_plugin_lists_the_known_ones(registry: Registry) -> None:
    msg = load_error(doc(plugins(filter={"enabled": [{"name": "Thermel"}]})), registry)
    assert msg.startswith(
        "profiles[0].plugins.filter.enabled[Thermel].name: unknown plugin 'Thermel' (known: Broken,"
    )
    assert "Thermal" in msg


def test_unknown_disabled_plugin(registry: Registry) -> None:
    msg = load_error(doc(plugins(filter={"disabled": [{"name": "Nope"}]})), registry)
    assert msg.startswith("profiles[0].plugins.filter.disabled[0].name: unknown plugin 'Nope'")


def test_plugin_at_a_point_it_does_not_implement(registry: Registry) -> None:
    msg = load_error(
        doc(plugins(score={"enabled": [{"name": "NodeAffinity", "weight": 1}]})), registry
    )
    assert msg == (
        "profiles[0].plugins.score.enabled[NodeAffinity].name: plugin 'NodeAffinity' does not"
        " implement score (needs score); it implements: preFilter, filter"
    )


def test_plugin_enabled_twice_at_a_point(registry: Registry) -> None:
    msg = load_error(
        doc(plugins(filter={"enabled": [{"name": "Spread"}, {"name": "Spread"}]})), registry
    )
    assert (
        msg == "profiles[0].plugins.filter.enabled[Spread].name: plugin enabled twice at filter,"
        " got 'Spread'"
    )


def test_queue_sort_must_be_exactly_one(registry: Registry) -> None:
    msg = load_error(doc(plugins(queueSort={"enabled": [{"name": "OtherSort"}]})), registry)
    assert msg == (
        "profiles[0].plugins.queueSort: exactly one QueueSort plugin must be enabled,"
        " got 2 (PrioritySort, OtherSort)"
    )
    msg = load_error(doc(plugins(queueSort={"disabled": [{"name": "*"}]})), registry)
    assert (
        msg == "profiles[0].plugins.queueSort: exactly one QueueSort plugin must be enabled, got 0"
    )


def test_bind_is_required(registry: Registry) -> None:
    msg = load_error(doc(plugins(bind={"disabled": [{"name": "DefaultBinder"}]})), registry)
    assert msg == "profiles[0].plugins.bind: at least one Bind plugin must be enabled, got none"


def test_unknown_extension_point(registry: Registry) -> None:
    msg = load_error(doc(plugins(scores={"enabled": []})), registry)
    assert msg.startswith("profiles[0].plugins.scores: unknown extension point; known: queueSort,")


def test_unregistered_default_plugin_must_be_disabled() -> None:
    reg = make_registry(without=("Thermal",))
    msg = load_error(doc({"schedulerName": "p"}), reg)
    assert msg.splitlines()[0].startswith(
        "profiles[0].plugins.filter: default plugin 'Thermal' is not registered"
    )
    cfg = config_from_dict(doc(plugins(multiPoint={"disabled": [{"name": "Thermal"}]})), reg)
    assert "Thermal" not in cfg.profiles[0].names()


def test_default_plugin_that_does_not_implement_its_point() -> None:
    reg = make_registry(without=("GPUFragmentation",))
    reg.register(fake("GPUFragmentation", Point.FILTER))
    msg = load_error(HEAD, reg)
    assert msg == (
        "profiles[0].plugins.score: default plugin 'GPUFragmentation' does not implement score"
        " (needs score)"
    )


# -- profiles --------------------------------------------------------------------------------


def test_duplicate_scheduler_name(registry: Registry) -> None:
    msg = load_error(doc({"schedulerName": "a"}, {"schedulerName": "a"}), registry)
    assert msg == "profiles[1].schedulerName: duplicate: profiles[0] already uses 'a'"


def test_bad_scheduler_name_and_unknown_profile_field(registry: Registry) -> None:
    msg = load_error(doc({"schedulerName": ""}), registry)
    assert msg == "profiles[0].schedulerName: must be a non-empty string, got ''"
    msg = load_error(doc({"schedulerName": "a", "plugin": {}}), registry)
    assert msg.startswith("profiles[0].plugin: unknown field; known fields: schedulerName,")


def test_profiles_must_share_the_queue_sort(registry: Registry) -> None:
    other = {
        "schedulerName": "b",
        "plugins": {"queueSort": {"disabled": [{"name": "*"}], "enabled": [{"name": "OtherSort"}]}},
    }
    msg = load_error(doc({"schedulerName": "a"}, other), registry)
    assert msg == (
        "profiles[1].plugins.queueSort: all profiles share one queue, so they must use the same"
        " QueueSort plugin as 'a' (PrioritySort), got 'OtherSort'"
    )


def test_profiles_not_a_list(registry: Registry) -> None:
    assert load_error({**HEAD, "profiles": {"a": 1}}, registry) == (
        "profiles: expected a list of profiles, got a mapping"
    )


# -- pluginConfig ----------------------------------------------------------------------------


def test_plugin_config_args_are_typed(registry: Registry) -> None:
    cfg = config_from_dict(
        doc(
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
    msg = load_error(
        doc(
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
    msg = load_error(doc({"schedulerName": "a", "pluginConfig": [{"name": "Spread"}]}), registry)
    assert msg.startswith(
        "profiles[0].pluginConfig[Spread].name: plugin 'Spread' is not enabled in this profile,"
        " so its args would be ignored (enabled: PrioritySort,"
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
    d = doc({"schedulerName": "a", "pluginConfig": items})
    assert load_error(d, registry).startswith(message)


# -- document-level errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (
            {"apiVersion": "v1", "kind": "GpuSchedulerConfiguration"},
            "apiVersion: must be 'gpusched.io/v1alpha1', got 'v1'",
        ),
        (
            {"apiVersion": "gpusched.io/v1alpha1", "kind": "KubeSchedulerConfiguration"},
            "kind: must be 'GpuSchedulerConfiguration', got 'KubeSchedulerConfiguration'",
        ),
        (
            {"kind": "GpuSchedulerConfiguration"},
            "apiVersion: required field is missing (want 'gpusched.io/v1alpha1')",
        ),
    ],
)
def test_api_version_and_kind(registry: Registry, head: dict[str, str], message: str) -> None:
    assert load_error(head, registry) == message


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"podMaxBackoffSeconds": 0.5},
            "podMaxBackoffSeconds: must be >= podInitialBackoffSeconds (1.0), got 0.5",
        ),
        ({"podInitialBackoffSeconds": 0}, "podInitialBackoffSeconds: must be > 0, got 0"),
        (
            {"podMaxInUnschedulablePodsDurationSeconds": -1},
            "podMaxInUnschedulablePodsDurationSeconds: must be > 0, got -1",
        ),
        ({"assumeTTLSeconds": 0}, "assumeTTLSeconds: must be > 0, got 0"),
        (
            {"assumeTtlSeconds": 5},
            "assumeTtlSeconds: unknown field (did you mean 'assumeTTLSeconds'?)",
        ),
        ({"maxCardsPerNode": 0}, "maxCardsPerNode: must be between 1 and 63, got 0"),
        ({"tieBreakSeed": -1}, "tieBreakSeed: must be between 0 and 2^63-1, got -1"),
        ({"tieBreakSeed": "x"}, "tieBreakSeed: expected an integer, got 'x'"),
        ({"maxCardsPerNode": 64}, "maxCardsPerNode: must be between 1 and 63, got 64"),
        ({"maxCardsPerNode": 8.5}, "maxCardsPerNode: expected an integer, got 8.5"),
        (
            {"clientConnection": {"qps": "fast"}},
            "clientConnection.qps: expected a number, got 'fast'",
        ),
        ({"clientConnection": {"burst": 0}}, "clientConnection.burst: must be >= 1, got 0"),
        ({"clientConnection": {"kubeconfig": "x"}}, "clientConnection.kubeconfig: unknown field"),
        ({"topologyKeys": {"rack": "bad key!"}}, "topologyKeys.rack: is not a valid label key"),
        (
            {"topologyKeys": {"rack": "Bad_Prefix/rack"}},
            "topologyKeys.rack: is not a valid label key: the prefix",
        ),
        (
            {"topologyKeys": {"spine": "topology.gpusched.io/rack"}},
            "topologyKeys.spine: must differ from topologyKeys.rack,"
            " got 'topology.gpusched.io/rack'",
        ),
        ({"profile": []}, "profile: unknown field (did you mean 'profiles'?)"),
        (
            {"leaderElection": {"renewDeadlineSeconds": 15}},
            "leaderElection.renewDeadlineSeconds: must be < leaseDurationSeconds (15), got 15",
        ),
        (
            {"leaderElection": {"retryPeriodSeconds": 12, "leaseDurationSeconds": 20}},
            "leaderElection.retryPeriodSeconds: must be < renewDeadlineSeconds (10.0), got 12",
        ),
        (
            {"leaderElection": {"retryPeriodSeconds": 0}},
            "leaderElection.retryPeriodSeconds: must be > 0, got 0",
        ),
        (
            {"leaderElection": {"leaseDurationSeconds": -1}},
            "leaderElection.leaseDurationSeconds: must be > 0, got -1",
        ),
        (
            {"leaderElection": {"leaseDurationSeconds": 2.5}},
            "leaderElection.leaseDurationSeconds: expected an integer, got 2.5",
        ),
        (
            {"leaderElection": {"leaderElect": "no"}},
            "leaderElection.leaderElect: expected a boolean (true/false), got 'no'",
        ),
        (
            {"leaderElection": {"resourceName": "GPU_sched"}},
            "leaderElection.resourceName: must be a DNS subdomain",
        ),
        (
            {"leaderElection": {"resourceNamespace": "kube.system"}},
            "leaderElection.resourceNamespace: must be a namespace name",
        ),
        (
            {"leaderElection": {"leaseDuration": 15}},
            "leaderElection.leaseDuration: unknown field (did you mean 'leaseDurationSeconds'?)",
        ),
    ],
)
def test_setting_errors(registry: Registry, settings: dict[str, Any], message: str) -> None:
    assert load_error({**HEAD, **settings}, registry).startswith(message)


def test_valid_label_keys(registry: Registry) -> None:
    cfg = config_from_dict(
        {
            **HEAD,
            "topologyKeys": {"rack": "cloud.google.com/gke-placement-group", "spine": "spine"},
        },
        registry,
    )
    assert cfg.topology_keys.spine == "spine"


def test_all_errors_are_reported_together(registry: Registry) -> None:
    d = {
        "apiVersion": "v2",
        "kind": "GpuSchedulerConfiguration",
        "maxCardsPerNode": 0,
        "profiles": [
            plugins(score={"enabled": [{"name": "Spread"}]}),
            {
                "schedulerName": "q",
                "pluginConfig": [{"name": "Thermal", "args": {"redLineCelsius": 1}}],
            },
        ],
    }
    with pytest.raises(ConfigErrors) as ei:
        config_from_dict(d, registry)
    paths = [e.path for e in ei.value.errors]
    assert paths == [
        "apiVersion",
        "maxCardsPerNode",
        "profiles[0].plugins.score.enabled[Spread].weight",
        "profiles[1].pluginConfig[Thermal].args.redLineCelsius",
    ]
    assert isinstance(ei.value, ConfigError)


# -- reading ---------------------------------------------------------------------------------


def test_bad_yaml_reports_line_and_column(registry: Registry, tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("apiVersion: gpusched.io/v1alpha1\nkind: [unclosed\nprofiles: []\n")
    with pytest.raises(ConfigError) as ei:
        load_config(f, registry)
    assert ei.value.path.startswith(f"{f}:3:")
    assert "invalid YAML" in str(ei.value)


def test_duplicate_yaml_keys_are_refused(registry: Registry) -> None:
    text = textwrap.dedent(
        """\
        apiVersion: gpusched.io/v1alpha1
        kind: GpuSchedulerConfiguration
        profiles:
          - schedulerName: a
            plugins:
              score:
                enabled: [{name: Spread, weight: 1}]
              score:
                disabled: [{name: "*"}]
        """
    )
    with pytest.raises(ConfigError) as ei:
        load_config(text, registry)
    assert ei.value.path == "<text>:8:7"
    assert "found duplicate key 'score' (first at line 6)" in str(ei.value)


def test_yaml_merge_keys_still_work(registry: Registry) -> None:
    text = textwrap.dedent(
        """\
        apiVersion: gpusched.io/v1alpha1
        kind: GpuSchedulerConfiguration
        clientConnection: &cc {qps: 5, burst: 10}
        topologyKeys: {rack: a/rack}
        profiles:
          - schedulerName: a
        """
    )
    assert load_config(text, registry).client_connection.burst == 10


def test_missing_file_and_empty_or_scalar_documents(registry: Registry, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read the file"):
        load_config(str(missing), registry)
    with pytest.raises(ConfigError, match=r"^<root>: the document is empty$"):
        load_config("", registry)
    with pytest.raises(ConfigError, match=r"^<root>: expected a mapping, got 'hello'$"):
        load_config("hello", registry)


# -- building, round trip, CLI ---------------------------------------------------------------


def test_validate_profiles_builds_every_profile(registry: Registry) -> None:
    cfg = builtin_config(registry)
    validate_profiles(cfg, registry)


def test_validate_profiles_reports_constructor_failures(registry: Registry) -> None:
    cfg = config_from_dict(doc(plugins(filter={"enabled": [{"name": "Broken"}]})), registry)
    with pytest.raises(ConfigError) as ei:
        validate_profiles(cfg, registry)
    assert str(ei.value) == (
        "profiles[0]: building profile 'p' failed: ValueError('Broken refuses to start')"
    )


def test_validate_profiles_reports_framework_refusals(registry: Registry) -> None:
    bad = SchedulerConfig(
        profiles=(Profile("x", {Point.QUEUE_SORT: (PluginRef("PrioritySort"),)}),)
    )
    with pytest.raises(ConfigError, match=r"^profiles\[x\]\.plugins\.bind: at least one Bind"):
        validate_profiles(bad, registry)


def test_document_round_trip(registry: Registry) -> None:
    cfg = load_config(EXAMPLE, registry)
    again = config_from_dict(config_to_document(cfg), registry)
    assert again == cfg
    custom = config_from_dict(
        {**HEAD, "assumeTTLSeconds": 7, "profiles": [builtin_profiles()["most-allocated"]]},
        registry,
    )
    assert config_from_dict(config_to_document(custom), registry) == custom


def test_check_config_main_ok(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert check_config_main(str(EXAMPLE), registry) == 0
    out = capsys.readouterr()
    assert out.out == "OK: 2 profiles (ai-scheduler, least-allocated)\n"
    assert out.err == ""


def test_check_config_main_errors(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "maxCardsPerNode: 99\nprofiles:\n- schedulerName: a\n  plugins:\n"
        "    score: {enabled: [{name: Spread, weight: 0}]}\n"
    )
    assert check_config_main(str(f), registry) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{f}: 2 errors",
        "  maxCardsPerNode: must be between 1 and 63, got 99",
        "  profiles[0].plugins.score.enabled[Spread].weight:"
        " must be a positive finite number, got 0",
    ]


def test_check_config_main_build_failure(
    registry: Registry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
        "profiles: [{schedulerName: a, plugins: {filter: {enabled: [{name: Broken}]}}}]\n"
    )
    assert check_config_main(str(f), registry) == 1
    assert "Broken refuses to start" in capsys.readouterr().err


# -- the tables that mirror other modules ----------------------------------------------------

_PROTOCOLS: dict[Point, type] = {
    Point.QUEUE_SORT: interfaces.QueueSortPlugin,
    Point.PRE_FILTER: interfaces.PreFilterPlugin,
    Point.FILTER: interfaces.FilterPlugin,
    Point.POST_FILTER: interfaces.PostFilterPlugin,
    Point.PRE_SCORE: interfaces.PreScorePlugin,
    Point.SCORE: interfaces.ScorePlugin,
    Point.RESERVE: interfaces.ReservePlugin,
    Point.PERMIT: interfaces.PermitPlugin,
    Point.PRE_BIND: interfaces.PreBindPlugin,
    Point.BIND: interfaces.BindPlugin,
    Point.POST_BIND: interfaces.PostBindPlugin,
}


@pytest.mark.parametrize("point", list(Point))
def test_point_methods_match_the_protocols(point: Point) -> None:
    members = {
        name
        for name in vars(_PROTOCOLS[point])
        if not name.startswith("_") and callable(getattr(_PROTOCOLS[point], name))
    }
    assert set(POINT_METHODS[point]) == members
    full = fake("Full", point)
    assert isinstance(full(None, None), _PROTOCOLS[point])


def test_max_cards_limit_matches_the_kernels() -> None:

    assert MAX_CARDS_LIMIT == MAX_CARDS
