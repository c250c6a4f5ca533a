"""Load a `GpuSchedulerConfiguration` document into a typed, validated `SchedulerConfig`.

The document follows KubeSchedulerConfiguration (see README.md in this folder); the
settings are read by settings.py's dataclasses, the profiles by profiles.py. Every problem
is reported with the field's path and the offending value, and all problems of a document
are reported together. Building each profile's Framework (plugin constructors included) is
the runtime's check: gpusched/core/runtime/validate.py.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gpusched.config.args import ErrorList, convert, show, to_data
from gpusched.config.defaults import (
    API_VERSION,
    DEFAULT_PLUGINS,
    DEFAULT_SCHEDULER_NAME,
    KIND,
    builtin_document,
)
from gpusched.config.profile import ConfigError, Point, Profile
from gpusched.config.profiles import read_profiles
from gpusched.config.settings import SchedulerConfig
from gpusched.framework.registry import Registry

__all__ = [
    "Source",
    "builtin_config",
    "builtin_profile",
    "config_from_dict",
    "config_to_document",
    "default_config",
    "load_config",
    "load_config_text",
]

# -- reading ---------------------------------------------------------------------------------

Source = str | os.PathLike[str] | Mapping[str, Any]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML keeps the last one silently, and a
    profile listed twice under `score:` would lose half of its settings without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are meant to be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable key: the base class reports it
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} (first at line {first.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _parse_yaml(text: str, name: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no object tags
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigError(where, f"invalid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(name, f"invalid YAML: {exc}") from None


def _looks_like_path(source: str) -> bool:
    if "\n" in source:
        return False
    return source.endswith((".yaml", ".yml", ".json")) or os.path.isfile(source)


def _read(source: Source) -> tuple[object, str]:
    if isinstance(source, Mapping):
        return source, "<mapping>"
    if isinstance(source, os.PathLike) or _looks_like_path(source):
        path = os.fspath(source)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(path, f"cannot read the file: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(
                path, f"not a UTF-8 text file (byte {exc.start}: {exc.reason}); save it as UTF-8"
            ) from None
        return _parse_yaml(text, path), path
    return _parse_yaml(source, "<text>"), "<text>"


# -- public entry points ---------------------------------------------------------------------


def load_config(source: Source, registry: Registry) -> SchedulerConfig:
    """Read a configuration from a file path, YAML text, or an already parsed mapping.

    Checks everything that can be checked without constructing plugins;
    `gpusched.core.runtime.validate.validate_profiles` additionally builds each profile's
    Framework."""
    doc, _ = _read(source)
    return config_from_dict(doc, registry)


def load_config_text(text: str, name: str, registry: Registry) -> SchedulerConfig:
    """`load_config` of a file's text already read, its errors naming `name`: the daemon's
    reload (daemon/reload.py) parses exactly the bytes it hashed, not a second read."""
    return config_from_dict(_parse_yaml(text, name), registry)


def default_config(registry: Registry | None = None) -> SchedulerConfig:
    """The configuration used when no file is given: the `ai-scheduler` profile, defaults.

    With a registry the profile is checked against it and every plugin's default Args are
    filled in; without one (tools that only need the settings) the plugin set is returned
    as is and the Framework fills the args in."""
    if registry is None:
        return SchedulerConfig(
            profiles=(Profile(DEFAULT_SCHEDULER_NAME, dict(DEFAULT_PLUGINS)),),
        )
    return config_from_dict({"apiVersion": API_VERSION, "kind": KIND}, registry)


def builtin_config(registry: Registry, *names: str) -> SchedulerConfig:
    """The named built-in profiles (`ai-scheduler`, `least-allocated`, `most-allocated`; all
    by default) in one configuration, for the simulator's comparisons."""
    return config_from_dict(builtin_document(*names), registry)


def builtin_profile(name: str, registry: Registry) -> Profile:
    """One built-in profile, loaded and checked against `registry`."""
    return builtin_config(registry, name).profiles[0]


_TOP_LEVEL = ("apiVersion", "kind", "profiles")
# Fields that existed once: a file that still sets one is told why it went, not "unknown".
_REMOVED = {
    "assumeTTLSeconds": (
        "removed: a pod whose Binding succeeded is never forgotten before the watch confirms"
        " it (forgetting it freed cards a running pod held); delete this field"
    ),
}


def config_from_dict(doc: object, registry: Registry) -> SchedulerConfig:
    errs = ErrorList()
    if doc is None:
        raise ConfigError("<root>", "the document is empty")
    if not isinstance(doc, Mapping):
        raise ConfigError("<root>", f"expected a mapping, got {show(doc)}")
    for key, want in (("apiVersion", API_VERSION), ("kind", KIND)):
        got = doc.get(key)
        if key not in doc:
            errs.add(key, f"required field is missing (want {want!r})")
        elif got != want:
            errs.add(key, f"must be {want!r}, got {show(got)}")

    removed = [key for key in _REMOVED if key in doc]
    for key in removed:
        errs.add(key, _REMOVED[key])
    settings = SchedulerConfig()
    try:
        settings = convert(
            SchedulerConfig, doc, "", skip={"profiles"}, handled=(*_TOP_LEVEL, *removed)
        )
    except ConfigError as exc:
        errs.extend(exc)

    profiles = read_profiles(doc.get("profiles"), registry, errs)
    errs.raise_if_any()
    return dataclasses.replace(settings, profiles=profiles)


# -- the way back ----------------------------------------------------------------------------


def config_to_document(config: SchedulerConfig) -> dict[str, Any]:
    """The effective configuration as a self-contained document (every point listed
    explicitly after disabling the defaults), for `explain` and for round-trip tests."""
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND}
    settings = to_data(config)
    settings.pop("profiles")
    doc.update(settings)
    profiles = []
    for p in config.profiles:
        plugins: dict[str, Any] = {}
        for point in Point:
            enabled = []
            for ref in p.enabled(point):
                item: dict[str, Any] = {"name": ref.name}
                if point is Point.SCORE:
                    item["weight"] = ref.weight
                enabled.append(item)
            plugins[point.value] = {"disabled": [{"name": "*"}], "enabled": enabled}
        pc = [{"name": n, "args": to_data(a)} for n, a in p.plugin_args.items()]
        profiles.append({"schedulerName": p.scheduler_name, "plugins": plugins, "pluginConfig": pc})
    doc["profiles"] = profiles
    return doc
