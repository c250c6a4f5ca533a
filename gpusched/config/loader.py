"""Load a `GpuSchedulerConfiguration` document into a typed, validated `SchedulerConfig`.

The document follows KubeSchedulerConfiguration (see README.md in this folder):
every profile starts from the built-in plugin set; per point `disabled` removes defaults
(`*` all of them) and `enabled` appends after the defaults, replacing a default of the same
name in place; `multiPoint` enables a plugin at every point its class implements.
`pluginConfig[].args` become each plugin's typed `Args`.

Every problem is reported with the field's path and the offending value, and all problems of
a document are reported together.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from gpusched.config.args import (
    YAML_KEY,
    ConfigErrors,
    ErrorList,
    convert,
    join,
    show,
    to_data,
)
from gpusched.config.defaults import (
    API_VERSION,
    ASSUME_TTL_SECONDS,
    CLIENT_BURST,
    CLIENT_QPS,
    DEFAULT_PLUGINS,
    DEFAULT_SCHEDULER_NAME,
    KIND,
    LEADER_ELECT,
    LEASE_DURATION_SECONDS,
    LEASE_NAME,
    LEASE_NAMESPACE,
    MAX_CARDS_LIMIT,
    MAX_CARDS_PER_NODE,
    MULTI_POINT,
    POD_INITIAL_BACKOFF_SECONDS,
    POD_MAX_BACKOFF_SECONDS,
    POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION_SECONDS,
    POINT_METHODS,
    RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS,
    builtin_document,
    default_plugin_names,
)
from gpusched.config.profile import ConfigError, PluginRef, Point, Profile
from gpusched.core.cache.snapshot import Snapshot
from gpusched.framework.interfaces import ClusterPort, Handle, Rows
from gpusched.framework.status import Code, Status
from gpusched.model.node import TopologyKeys
from gpusched.model.pod import PodInfo

if TYPE_CHECKING:
    from gpusched.core.runtime.registry import Registry

__all__ = [
    "ClientConnection",
    "LeaderElection",
    "SchedulerConfig",
    "Source",
    "builtin_config",
    "builtin_profile",
    "check_config_main",
    "config_from_dict",
    "config_to_document",
    "default_config",
    "implements",
    "load_config",
    "validate_profiles",
]

# -- the typed result ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientConnection:
    """Rate limits of the scheduler's API client (kube-scheduler's clientConnection)."""

    qps: float = CLIENT_QPS
    burst: int = CLIENT_BURST

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not self.qps > 0:
            out.append(("qps", "must be > 0"))
        if self.burst < 1:
            out.append(("burst", "must be >= 1"))
        return out


@dataclass(frozen=True)
class LeaderElection:
    """Which replica schedules (kube-scheduler's leaderElection; gpusched/kube/lease.py)."""

    leader_elect: bool = LEADER_ELECT
    # An integer: the Lease stores whole seconds, and every candidate judges expiry by it.
    lease_duration_seconds: int = LEASE_DURATION_SECONDS
    renew_deadline_seconds: float = RENEW_DEADLINE_SECONDS
    retry_period_seconds: float = RETRY_PERIOD_SECONDS
    resource_name: str = LEASE_NAME
    resource_namespace: str = LEASE_NAMESPACE

    def validate(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for key, value in (
            ("leaseDurationSeconds", self.lease_duration_seconds),
            ("renewDeadlineSeconds", self.renew_deadline_seconds),
            ("retryPeriodSeconds", self.retry_period_seconds),
        ):
            if not value > 0:
                out.append((key, "must be > 0"))
        if out:
            return out
        # The leader must give up (renewDeadline) before a standby may take over
        # (leaseDuration), and must get several tries (retryPeriod) within the deadline.
        if not self.renew_deadline_seconds < self.lease_duration_seconds:
            out.append(
                (
                    "renewDeadlineSeconds",
                    f"must be < leaseDurationSeconds ({self.lease_duration_seconds})",
                )
            )
        if not self.retry_period_seconds < self.renew_deadline_seconds:
            out.append(
                (
                    "retryPeriodSeconds",
                    f"must be < renewDeadlineSeconds ({self.renew_deadline_seconds})",
                )
            )
        if len(self.resource_name) > 253 or not _DNS_SUBDOMAIN.match(self.resource_name):
            out.append(
                ("resourceName", "must be a DNS subdomain (lower-case alphanumerics, '-', '.')")
            )
        if not _DNS_LABEL.match(self.resource_namespace):
            out.append(
                (
                    "resourceNamespace",
                    "must be a namespace name (at most 63 lower-case alphanumerics or '-')",
                )
            )
        return out


# A Kubernetes label key: optional DNS-subdomain prefix and "/", then a name of at most 63
# characters (alphanumerics, '-', '_', '.', starting and ending alphanumeric).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _label_key_problem(key: str) -> str | None:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "is not a valid label key: the prefix must be a DNS subdomain"
    if not _LABEL_NAME.match(name):
        return (
            "is not a valid label key: the name must be 1-63 alphanumerics, '-', '_' or '.',"
            " starting and ending with an alphanumeric"
        )
    return None


@dataclass(frozen=True)
class SchedulerConfig:
    """A loaded configuration: profiles plus the daemon's settings, all validated."""

    profiles: tuple[Profile, ...] = ()
    client_connection: ClientConnection = field(default_factory=ClientConnection)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    pod_initial_backoff_seconds: float = POD_INITIAL_BACKOFF_SECONDS
    pod_max_backoff_seconds: float = POD_MAX_BACKOFF_SECONDS
    pod_max_in_unschedulable_pods_duration_seconds: float = (
        POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION_SECONDS
    )
    # Kubernetes spells acronyms in capitals; camel() alone would say assumeTtlSeconds.
    assume_ttl_seconds: float = field(
        default=ASSUME_TTL_SECONDS, metadata={YAML_KEY: "assumeTTLSeconds"}
    )
    topology_keys: TopologyKeys = field(default_factory=TopologyKeys)
    max_cards_per_node: int = MAX_CARDS_PER_NODE

    def validate(self) -> list[tuple[str, str]]:
        """The settings' cross-field rules (profiles are checked while they are built)."""
        out: list[tuple[str, str]] = []
        if not self.pod_initial_backoff_seconds > 0:
            out.append(("podInitialBackoffSeconds", "must be > 0"))
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            out.append(
                (
                    "podMaxBackoffSeconds",
                    f"must be >= podInitialBackoffSeconds ({self.pod_initial_backoff_seconds})",
                )
            )
        if not self.pod_max_in_unschedulable_pods_duration_seconds > 0:
            out.append(("podMaxInUnschedulablePodsDurationSeconds", "must be > 0"))
        if not self.assume_ttl_seconds > 0:
            out.append(("assumeTTLSeconds", "must be > 0"))
        if not 1 <= self.max_cards_per_node <= MAX_CARDS_LIMIT:
            out.append(("maxCardsPerNode", f"must be between 1 and {MAX_CARDS_LIMIT}"))
        for tier in ("rack", "spine"):
            problem = _label_key_problem(getattr(self.topology_keys, tier))
            if problem:
                out.append((f"topologyKeys.{tier}", problem))
        if self.topology_keys.rack == self.topology_keys.spine:
            out.append(("topologyKeys.spine", "must differ from topologyKeys.rack"))
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.scheduler_name for p in self.profiles)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.scheduler_name == name:
                return p
        raise KeyError(f"no profile named {name!r} (profiles: {', '.join(self.names)})")


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

    Checks everything that can be checked without constructing plugins; `validate_profiles`
    additionally builds each profile's Framework."""
    doc, _ = _read(source)
    return config_from_dict(doc, registry)


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

    settings = SchedulerConfig()
    try:
        settings = convert(SchedulerConfig, doc, "", skip={"profiles"}, handled=_TOP_LEVEL)
    except ConfigError as exc:
        errs.extend(exc)

    profiles = _profiles(doc.get("profiles"), registry, errs)
    errs.raise_if_any()
    return SchedulerConfig(
        profiles=profiles,
        client_connection=settings.client_connection,
        leader_election=settings.leader_election,
        pod_initial_backoff_seconds=settings.pod_initial_backoff_seconds,
        pod_max_backoff_seconds=settings.pod_max_backoff_seconds,
        pod_max_in_unschedulable_pods_duration_seconds=(
            settings.pod_max_in_unschedulable_pods_duration_seconds
        ),
        assume_ttl_seconds=settings.assume_ttl_seconds,
        topology_keys=settings.topology_keys,
        max_cards_per_node=settings.max_cards_per_node,
    )


# -- profiles --------------------------------------------------------------------------------


def implements(cls: object, point: Point) -> bool:
    """Whether a plugin class has the methods of `point`'s Protocol."""
    return all(callable(getattr(cls, m, None)) for m in POINT_METHODS[point])


def _points_of(cls: object) -> list[Point]:
    return [p for p in Point if implements(cls, p)]


@dataclass(slots=True)
class _Entry:
    name: str
    weight: float | None
    path: str  # where the item is written, for errors that surface after merging


@dataclass(slots=True)
class _PluginSet:
    enabled: list[_Entry] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)


_POINT_BY_NAME = {p.value: p for p in Point}
_SET_KEYS = (*_POINT_BY_NAME, MULTI_POINT)
_PROFILE_KEYS = ("schedulerName", "plugins", "pluginConfig")


def _profiles(raw: object, registry: Registry, errs: ErrorList) -> tuple[Profile, ...]:
    if raw is None or raw == []:
        # As kube-scheduler: no profiles means one default profile.
        raw = [{"schedulerName": DEFAULT_SCHEDULER_NAME}]
    if not isinstance(raw, list):
        errs.add("profiles", f"expected a list of profiles, got {show(raw)}")
        return ()
    out: list[Profile] = []
    first_index: dict[str, int] = {}
    for i, item in enumerate(raw):
        path = f"profiles[{i}]"
        profile = _profile(item, path, registry, errs)
        if profile is None:
            continue
        name = profile.scheduler_name
        if name in first_index:
            errs.add(
                f"{path}.schedulerName",
                f"duplicate: profiles[{first_index[name]}] already uses {name!r}",
            )
            continue
        first_index[name] = i
        out.append(profile)
    _same_queue_sort(out, first_index, errs)
    return tuple(out)


def _same_queue_sort(profiles: list[Profile], index: Mapping[str, int], errs: ErrorList) -> None:
    # One scheduler process has one pending queue, so, as in kube-scheduler, every profile
    # must order it the same way.
    if len(profiles) < 2:
        return
    ref = profiles[0]
    want = [r.name for r in ref.enabled(Point.QUEUE_SORT)]
    if len(want) != 1:
        return  # already reported for that profile
    for p in profiles[1:]:
        got = [r.name for r in p.enabled(Point.QUEUE_SORT)]
        where = f"profiles[{index[p.scheduler_name]}].plugins.queueSort"
        if len(got) == 1 and got != want:
            errs.add(
                where,
                f"all profiles share one queue, so they must use the same QueueSort plugin as"
                f" {ref.scheduler_name!r} ({want[0]}), got {got[0]!r}",
            )
        elif len(got) == 1 and p.plugin_args.get(got[0]) != ref.plugin_args.get(want[0]):
            errs.add(
                f"profiles[{index[p.scheduler_name]}].pluginConfig[{got[0]}].args",
                f"all profiles share one queue, so {got[0]}'s args must equal those of"
                f" {ref.scheduler_name!r}",
            )


def _profile(raw: object, path: str, registry: Registry, errs: ErrorList) -> Profile | None:
    if not isinstance(raw, Mapping):
        errs.add(path, f"expected a mapping, got {show(raw)}")
        return None
    before = len(errs)
    _unknown_keys(raw, _PROFILE_KEYS, path, errs)
    name = raw.get("schedulerName", DEFAULT_SCHEDULER_NAME)
    if not isinstance(name, str) or not name.strip():
        errs.add(f"{path}.schedulerName", f"must be a non-empty string, got {show(name)}")
        return None

    plugins_raw = raw.get("plugins")
    ppath = f"{path}.plugins"
    sets: dict[str, _PluginSet] = {}
    if plugins_raw is not None and not isinstance(plugins_raw, Mapping):
        errs.add(ppath, f"expected a mapping of extension points, got {show(plugins_raw)}")
    elif plugins_raw:
        for key, val in plugins_raw.items():
            if key not in _SET_KEYS:
                errs.add(
                    join(ppath, str(key)),
                    f"unknown extension point; known: {', '.join(_SET_KEYS)}",
                )
                continue
            sets[key] = _plugin_set(val, join(ppath, key), key, registry, errs)

    multi = sets.get(MULTI_POINT, _PluginSet())
    plugins: dict[Point, tuple[PluginRef, ...]] = {}
    for point in Point:
        own = sets.get(point.value, _PluginSet())
        refs = _merge(point, own, multi, registry=registry, ppath=ppath, errs=errs)
        if refs:
            plugins[point] = refs

    queue_sort = plugins.get(Point.QUEUE_SORT, ())
    if len(queue_sort) != 1:
        names = f" ({', '.join(r.name for r in queue_sort)})" if queue_sort else ""
        errs.add(
            f"{ppath}.queueSort",
            f"exactly one QueueSort plugin must be enabled, got {len(queue_sort)}{names}",
        )
    if not plugins.get(Point.BIND):
        errs.add(f"{ppath}.bind", "at least one Bind plugin must be enabled, got none")

    profile = Profile(name, plugins)
    plugin_args = _plugin_config(raw.get("pluginConfig"), path, profile, registry, errs)
    if len(errs) > before:
        return None
    return Profile(name, plugins, plugin_args)


def _unknown_keys(raw: Mapping[Any, Any], known: Iterable[str], path: str, errs: ErrorList) -> None:
    allowed = tuple(known)
    for key in raw:
        if key not in allowed:
            errs.add(join(path, str(key)), f"unknown field; known fields: {', '.join(allowed)}")


def _known(registry: Registry) -> str:
    return ", ".join(registry.names()) or "none registered"


def _plugin_set(
    raw: object, path: str, point_name: str, registry: Registry, errs: ErrorList
) -> _PluginSet:
    out = _PluginSet()
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        errs.add(path, f"expected a mapping with enabled/disabled, got {show(raw)}")
        return out
    _unknown_keys(raw, ("enabled", "disabled"), path, errs)
    point = _POINT_BY_NAME.get(point_name)  # None for multiPoint

    enabled = raw.get("enabled") or []
    if not isinstance(enabled, list):
        errs.add(f"{path}.enabled", f"expected a list of plugins, got {show(enabled)}")
        enabled = []
    seen: set[str] = set()
    for j, item in enumerate(enabled):
        entry = _enabled_item(item, f"{path}.enabled", j, point, registry=registry, errs=errs)
        if entry is None:
            continue
        if entry.name in seen:
            errs.add(
                f"{entry.path}.name", f"plugin enabled twice at {point_name}, got {entry.name!r}"
            )
            continue
        seen.add(entry.name)
        out.enabled.append(entry)

    disabled = raw.get("disabled") or []
    if not isinstance(disabled, list):
        errs.add(f"{path}.disabled", f"expected a list of plugins, got {show(disabled)}")
        disabled = []
    # Disabling a default that this registry lacks is legitimate (that is how a build
    # without, say, Thermal runs); anything else unknown is a typo worth reporting.
    disable_ok = {"*", *registry.names(), *default_plugin_names()}
    for j, item in enumerate(disabled):
        ipath = f"{path}.disabled[{j}]"
        if not isinstance(item, Mapping):
            errs.add(ipath, f"expected a mapping with a name, got {show(item)}")
            continue
        _unknown_keys(item, ("name",), ipath, errs)
        name = item.get("name")
        if not isinstance(name, str) or name not in disable_ok:
            errs.add(
                f"{ipath}.name",
                f"unknown plugin {show(name)} (known: {_known(registry)}, or '*')",
            )
            continue
        out.disabled.add(name)
    return out


def _enabled_item(
    item: object,
    list_path: str,
    j: int,
    point: Point | None,
    *,
    registry: Registry,
    errs: ErrorList,
) -> _Entry | None:
    ipath = f"{list_path}[{j}]"
    if not isinstance(item, Mapping):
        errs.add(ipath, f"expected a mapping with name and weight, got {show(item)}")
        return None
    name = item.get("name")
    if isinstance(name, str) and name:
        ipath = f"{list_path}[{name}]"
    _unknown_keys(item, ("name", "weight"), ipath, errs)
    if not isinstance(name, str) or not name:
        errs.add(f"{ipath}.name", f"required: a plugin name, got {show(name)}")
        return None
    if name not in registry:
        errs.add(f"{ipath}.name", f"unknown plugin {name!r} (known: {_known(registry)})")
        return None
    cls = registry.get(name).cls
    where = point.value if point is not None else MULTI_POINT
    if point is not None and not implements(cls, point):
        methods = ", ".join(POINT_METHODS[point])
        errs.add(
            f"{ipath}.name",
            f"plugin {name!r} does not implement {point.value} (needs {methods});"
            f" it implements: {', '.join(p.value for p in _points_of(cls)) or 'nothing'}",
        )
        return None
    if point is None and not _points_of(cls):
        errs.add(f"{ipath}.name", f"plugin {name!r} implements no extension point")
        return None

    weight: float | None = None
    if "weight" in item:
        raw_w = item["weight"]
        scores = implements(cls, Point.SCORE) if point is None else point is Point.SCORE
        if not scores:
            errs.add(
                f"{ipath}.weight",
                f"a weight only applies at score, and {name} is not enabled there at {where};"
                f" got {show(raw_w)}",
            )
            return None
        if isinstance(raw_w, bool) or not isinstance(raw_w, int | float):
            errs.add(f"{ipath}.weight", f"expected a number, got {show(raw_w)}")
            return None
        if not raw_w > 0 or raw_w == float("inf"):
            errs.add(f"{ipath}.weight", f"must be a positive finite number, got {show(raw_w)}")
            return None
        weight = float(raw_w)
    return _Entry(name, weight, ipath)


def _merge(
    point: Point,
    own: _PluginSet,
    multi: _PluginSet,
    *,
    registry: Registry,
    ppath: str,
    errs: ErrorList,
) -> tuple[PluginRef, ...]:
    """One point's plugin list, in kube-scheduler's order: the surviving defaults (an entry
    naming a default replaces it in place), then plugins added by multiPoint, then plugins
    added by this point's `enabled`. A point's own entry beats a multiPoint entry for the
    same plugin, and a point's `disabled` also stops multiPoint from adding a plugin there."""
    pointpath = f"{ppath}.{point.value}"
    disabled = own.disabled | multi.disabled
    base: list[tuple[PluginRef, str]] = []
    if "*" not in disabled:
        for ref in DEFAULT_PLUGINS.get(point, ()):
            if ref.name in disabled:
                continue
            if ref.name not in registry:
                errs.add(
                    pointpath,
                    f"default plugin {ref.name!r} is not registered (known: {_known(registry)});"
                    f" disable it or register it",
                )
                continue
            if not implements(registry.get(ref.name).cls, point):
                errs.add(
                    pointpath,
                    f"default plugin {ref.name!r} does not implement {point.value}"
                    f" (needs {', '.join(POINT_METHODS[point])})",
                )
                continue
            base.append((ref, pointpath))
    at = {ref.name: i for i, (ref, _) in enumerate(base)}
    own_names = {e.name for e in own.enabled}

    def place(entry: _Entry, tail: list[tuple[PluginRef, str]]) -> None:
        ref = PluginRef(entry.name, entry.weight if point is Point.SCORE else None)
        if entry.name in at:
            base[at[entry.name]] = (ref, entry.path)
        else:
            tail.append((ref, entry.path))

    from_multi: list[tuple[PluginRef, str]] = []
    if "*" not in own.disabled:  # kube-scheduler skips multiPoint expansion at such a point
        for entry in multi.enabled:
            if entry.name in own.disabled or entry.name in own_names:
                continue
            if implements(registry.get(entry.name).cls, point):
                place(entry, from_multi)
    from_own: list[tuple[PluginRef, str]] = []
    for entry in own.enabled:
        place(entry, from_own)

    merged = base + from_multi + from_own
    if point is Point.SCORE:
        for ref, where in merged:
            if ref.weight is None:
                errs.add(
                    f"{where}.weight",
                    f"required: every score plugin needs a positive weight; {ref.name} got none",
                )
    return tuple(ref for ref, _ in merged)


def _plugin_config(
    raw: object, path: str, profile: Profile, registry: Registry, errs: ErrorList
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cpath = f"{path}.pluginConfig"
    items = raw if raw is not None else []
    if not isinstance(items, list):
        errs.add(cpath, f"expected a list of {{name, args}}, got {show(items)}")
        items = []
    in_profile = profile.names()
    for j, item in enumerate(items):
        ipath = f"{cpath}[{j}]"
        if not isinstance(item, Mapping):
            errs.add(ipath, f"expected a mapping with name and args, got {show(item)}")
            continue
        name = item.get("name")
        if isinstance(name, str) and name:
            ipath = f"{cpath}[{name}]"
        _unknown_keys(item, ("name", "args"), ipath, errs)
        if not isinstance(name, str) or name not in registry:
            errs.add(f"{ipath}.name", f"unknown plugin {show(name)} (known: {_known(registry)})")
            continue
        if name in out:
            errs.add(f"{ipath}.name", f"duplicate pluginConfig for {name!r}")
            continue
        if name not in in_profile:
            errs.add(
                f"{ipath}.name",
                f"plugin {name!r} is not enabled in this profile, so its args would be ignored"
                f" (enabled: {', '.join(in_profile)})",
            )
            continue
        args_type = registry.get(name).args_type
        args = item.get("args")
        if args_type is None:
            if args:
                errs.add(f"{ipath}.args", f"plugin {name!r} takes no args, got {show(args)}")
            continue
        try:
            out[name] = convert(args_type, args, f"{ipath}.args")
        except ConfigError as exc:
            errs.extend(exc)
            out[name] = None  # keeps the defaults below from reporting the same plugin again
    for name in in_profile:
        # Fill every plugin's default Args now, so the profile shows what will run and a
        # default that breaks the plugin's own validate() is caught at load time.
        if name in out or name not in registry:
            continue
        args_type = registry.get(name).args_type
        if args_type is not None:
            try:
                out[name] = convert(args_type, {}, f"{cpath}[{name}].args")
            except ConfigError as exc:
                errs.extend(exc)
    return {k: v for k, v in out.items() if v is not None}


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


# -- building and the CLI hook ---------------------------------------------------------------


class _StubCluster:
    """A cluster port that refuses every write: check-config never touches a cluster."""

    async def annotate(self, pod: PodInfo, annotations: Mapping[str, str]) -> Status:
        return Status(Code.ERROR, ("check-config: no cluster",))

    async def bind(self, pod: PodInfo, node: str) -> Status:
        return Status(Code.ERROR, ("check-config: no cluster",))


class _StubHandle:
    """Lets plugins be constructed without a cluster: an empty snapshot, a clock at zero."""

    def __init__(self, max_cards: int) -> None:
        self._cluster = _StubCluster()
        self._snapshot = Snapshot(max_cards, capacity=1)

    @property
    def cluster(self) -> ClusterPort:
        return self._cluster

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def now(self) -> float:
        return 0.0

    def pods_on_node(self, node: str) -> Iterable[PodInfo]:
        return ()

    def job_rows(self, job_id: str) -> Rows:
        return np.empty(0, np.intp)


def validate_profiles(config: SchedulerConfig, registry: Registry) -> None:
    """Build every profile's Framework (with a stub handle) and raise what it refuses,
    including plugin constructors that reject their args."""
    # Imported here: the framework imports gpusched.config.profile, so importing it at the
    # top would make `import gpusched.core.runtime.framework` re-enter this half-built module.
    from gpusched.core.runtime.framework import Framework

    errs = ErrorList()
    handle: Handle = _StubHandle(config.max_cards_per_node)
    for i, profile in enumerate(config.profiles):
        try:
            Framework(profile, registry, handle)
        except ConfigError as exc:
            errs.extend(exc)
        except Exception as exc:  # a plugin constructor's failure is a config problem too
            errs.add(
                f"profiles[{i}]",
                f"building profile {profile.scheduler_name!r} failed: {exc!r}",
            )
    errs.raise_if_any()


def check_config_main(path: str, registry: Registry) -> int:
    """`gpusched check-config FILE`: 0 and a one-line summary, or 1 and every error."""
    try:
        config = load_config(Path(path), registry)
        validate_profiles(config, registry)
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else (exc,)
        noun = "error" if len(errors) == 1 else "errors"
        print(f"{path}: {len(errors)} {noun}", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    n = len(config.profiles)
    print(f"OK: {n} profile{'' if n == 1 else 's'} ({', '.join(config.names)})")
    return 0
