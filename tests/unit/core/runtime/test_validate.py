"""validate_profiles: every profile built, failures reported."""

from __future__ import annotations

import pytest

from gpusched.config import (
    SchedulerConfig,
    builtin_config,
    config_from_dict,
)
from gpusched.config.profile import ConfigError, PluginRef, Point, Profile
from gpusched.core.runtime.validate import validate_profiles
from gpusched.framework.registry import Registry
from tests.builders import config_doc, config_plugins


def test_validate_profiles_builds_every_profile(registry: Registry) -> None:
    cfg = builtin_config(registry)
    validate_profiles(cfg, registry)


def test_validate_profiles_reports_constructor_failures(registry: Registry) -> None:
    cfg = config_from_dict(
        config_doc(config_plugins(filter={"enabled": [{"name": "Broken"}]})), registry
    )
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
