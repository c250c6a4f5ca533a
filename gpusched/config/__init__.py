"""Scheduler configuration: a YAML document shaped like KubeSchedulerConfiguration.

`load_config(path_or_text, registry)` returns a validated `SchedulerConfig`;
`validate_profiles` additionally builds every profile's Framework; `check_config_main` is
`gpusched check-config FILE`. See README.md in this folder for the document's shape.
"""

from gpusched.config.args import ConfigErrors, convert, to_data
from gpusched.config.defaults import (
    API_VERSION,
    DEFAULT_PLUGINS,
    DEFAULT_SCHEDULER_NAME,
    KIND,
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    builtin_document,
    builtin_profiles,
)
from gpusched.config.loader import (
    ClientConnection,
    LeaderElection,
    SchedulerConfig,
    builtin_config,
    builtin_profile,
    check_config_main,
    config_from_dict,
    config_to_document,
    default_config,
    implements,
    load_config,
    validate_profiles,
)
from gpusched.config.profile import ConfigError, PluginRef, Point, Profile

__all__ = [
    "API_VERSION",
    "DEFAULT_PLUGINS",
    "DEFAULT_SCHEDULER_NAME",
    "KIND",
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "ClientConnection",
    "ConfigError",
    "ConfigErrors",
    "LeaderElection",
    "PluginRef",
    "Point",
    "Profile",
    "SchedulerConfig",
    "builtin_config",
    "builtin_document",
    "builtin_profile",
    "builtin_profiles",
    "check_config_main",
    "config_from_dict",
    "config_to_document",
    "convert",
    "default_config",
    "implements",
    "load_config",
    "to_data",
    "validate_profiles",
]
