"""Loading a configuration document: YAML, apiVersion and kind, errors, round trip."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpusched.config import (
    DEFAULT_PLUGINS,
    ConfigErrors,
    builtin_config,
    builtin_profiles,
    config_from_dict,
    config_to_document,
    default_config,
    load_config,
)
from gpusched.config.profile import ConfigError, PluginRef, Point
from gpusched.core.runtime.validate import validate_profiles
from gpusched.core.schedule_one import Result
from gpusched.framework.registry import Registry
from gpusched.plugins import default_registry
from gpusched.plugins.dynamic_resources.args import DynamicResourcesArgs
from gpusched.plugins.gang_scheduling.args import GangSchedulingArgs
from gpusched.sim.engine import Simulation
from tests.builders import (
    CONFIG_HEAD,
    ai_pod,
    config_documents,
    config_load_error,
    config_plugins,
    fuzz_settings,
    gpu_node,
)
from tests.fake_plugins import (
    FitArgs,
    ThermalArgs,
)

ROOT = Path(__file__).resolve().parents[3]


EXAMPLE = ROOT / "config" / "scheduler-config.yaml"


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
        PluginRef("PowerHeadroom", 0.05),
        PluginRef("NetworkLocality", 0.25),
        PluginRef("InterPodAffinity", 2),
        PluginRef("PodTopologySpread", 2),
        PluginRef("TenantLoad", 0.1),
        PluginRef("NVLinkTopology", 0.25),
    )
    # Every plugin with an Args type gets its defaults filled in at load time.
    assert p.plugin_args == {
        "NodeResourcesFit": FitArgs(),
        "Thermal": ThermalArgs(),
        "GangScheduling": GangSchedulingArgs(),
        "DynamicResources": DynamicResourcesArgs(),
    }


def test_default_config_with_and_without_registry(registry: Registry) -> None:
    bare = default_config()
    assert bare.names == ("ai-scheduler",)
    assert dict(bare.profiles[0].plugins) == dict(DEFAULT_PLUGINS)
    full = default_config(registry)
    assert dict(full.profiles[0].plugins) == dict(DEFAULT_PLUGINS)
    assert full.profiles[0].plugin_args["Thermal"] == ThermalArgs()


def test_example_manifest_loads_and_builds(registry: Registry) -> None:
    cfg = load_config(EXAMPLE, registry)
    assert cfg.names == ("ai-scheduler", "least-allocated")
    assert dict(cfg.profile("ai-scheduler").plugins) == dict(DEFAULT_PLUGINS)
    assert cfg == load_config(str(EXAMPLE), registry)
    assert cfg.profile("least-allocated") == builtin_config(registry, "least-allocated").profiles[0]
    validate_profiles(cfg, registry)


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
    assert config_load_error(head, registry) == message


def test_all_errors_are_reported_together(registry: Registry) -> None:
    d = {
        "apiVersion": "v2",
        "kind": "GpuSchedulerConfiguration",
        "maxCardsPerNode": 0,
        "profiles": [
            config_plugins(score={"enabled": [{"name": "Spread"}]}),
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


def test_document_round_trip(registry: Registry) -> None:
    cfg = load_config(EXAMPLE, registry)
    again = config_from_dict(config_to_document(cfg), registry)
    assert again == cfg
    custom = config_from_dict(
        {**CONFIG_HEAD, "tieBreakSeed": 7, "profiles": [builtin_profiles()["most-allocated"]]},
        registry,
    )
    assert config_from_dict(config_to_document(custom), registry) == custom


# --- fuzzed documents: a configuration or a ConfigError naming the path, nothing else ------

_TOP_KEYS = (
    "<root>",
    "<text>",
    "apiVersion",
    "kind",
    "profiles",
    "clientConnection",
    "leaderElection",
    "watch",
    "liveness",
    "topologyKeys",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "podMaxInUnschedulablePodsDurationSeconds",
    "maxCardsPerNode",
    "tieBreakSeed",
)


def _names_a_path(error: ConfigError, doc: Any) -> None:
    """Each error starts with a non-blank path whose head is a field of the schema or a key
    the document has (an unknown field)."""
    keys = {str(k) for k in doc} if isinstance(doc, dict) else set()
    errors = error.errors if isinstance(error, ConfigErrors) else (error,)
    for e in errors:
        assert e.path.strip() and str(e).startswith(f"{e.path}: "), str(e)
        head = re.split(r"[.\[]", e.path, maxsplit=1)[0]
        known = head in _TOP_KEYS or e.path.startswith("[")
        assert known or any(e.path.startswith(k) for k in keys), str(e)
        assert len(str(e)) < 2000, str(e)[:200]  # a message, not a dump of the document


@given(doc=config_documents(default_registry()), as_yaml=st.booleans())
@fuzz_settings(150)
def test_any_document_is_a_configuration_that_builds_or_a_config_error_naming_the_path(
    doc: Any, as_yaml: bool
) -> None:
    reg = default_registry()
    source = yaml.safe_dump(doc) if as_yaml else doc
    try:
        cfg = load_config(source, reg) if as_yaml or isinstance(doc, dict) else None
        if cfg is None:
            cfg = config_from_dict(doc, reg)
        validate_profiles(cfg, reg)
    except ConfigError as exc:
        _names_a_path(exc, doc)
        return
    assert cfg.profiles and 1 <= cfg.max_cards_per_node <= 63
    assert config_from_dict(config_to_document(cfg), reg) == cfg  # it round-trips
    # A configuration that loads and builds also schedules: a CPU and a GPU pod per profile.
    for profile in cfg.profiles:
        sim = Simulation([gpu_node("a"), gpu_node("b")], profile, reg, seed=1, max_cards=8)
        decision = sim.submit(ai_pod("cpu"))
        assert decision.result is Result.SCHEDULED, decision.message
        decision = sim.submit(ai_pod("gpu", gpu_milli=300))
        # A profile without GPUFit at Reserve cannot place a GPU pod, and says so.
        assert decision.result is Result.SCHEDULED or (
            decision.result is Result.ERROR and "enable GPUFit at Reserve" in decision.message
        ), decision.message
