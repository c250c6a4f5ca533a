"""Scheduler configuration: a YAML document shaped like KubeSchedulerConfiguration.

`load_config(path_or_text, registry)` returns a validated `SchedulerConfig`. A leaf of the
package: it imports only the framework (the extension points, the registry) and the model;
building each profile's Framework is the runtime's check
(`gpusched.core.runtime.validate.validate_profiles`), and `gpusched check-config FILE` lives
in the CLI. See README.md in this folder for the document's shape.

settings.py holds the typed settings, profiles.py reads `profiles[]`, load.py reads YAML and
holds the entry points below, defaults.py the built-in plugin set and settings defaults.
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
from gpusched.config.load import (
    Source,
    builtin_config,
    builtin_profile,
    config_from_dict,
    config_to_document,
    default_config,
    load_config,
    load_config_text,
)
from gpusched.config.profile import ConfigError, PluginRef, Point, Profile
from gpusched.config.profiles import default_args
from gpusched.config.settings import ClientConnection, LeaderElection, SchedulerConfig
from gpusched.framework.points import implements

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
    "Source",
    "builtin_config",
    "builtin_document",
    "builtin_profile",
    "builtin_profiles",
    "config_from_dict",
    "config_to_document",
    "convert",
    "default_args",
    "default_config",
    "implements",
    "load_config",
    "load_config_text",
    "to_data",
]
