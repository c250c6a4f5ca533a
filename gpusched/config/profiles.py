"""Reading a document's `profiles[]` into typed `Profile`s, kube-scheduler's way.

Every profile starts from the built-in plugin set; per point `disabled` removes defaults
(`*` all of them) and `enabled` appends after the defaults, replacing a default of the same
name in place; `multiPoint` enables a plugin at every point its class implements.
`pluginConfig[].args` become each plugin's typed `Args`, and every plugin without them gets
its default Args here (`default_args`, the one place defaults are filled: the runtime calls
it too for a profile built by hand). Problems are collected in an ErrorList, with paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.config.args import ErrorList, convert, join, show
from gpusched.config.defaults import (
    DEFAULT_PLUGINS,
    DEFAULT_SCHEDULER_NAME,
    MULTI_POINT,
    default_plugin_names,
)
from gpusched.config.profile import ConfigError, PluginRef, Profile
from gpusched.framework.points import POINT_METHODS, Point, implements
from gpusched.framework.registry import PluginSpec, Registry

__all__ = ["default_args", "read_profiles"]


def default_args(spec: PluginSpec, path: str) -> Any:
    """A plugin's Args with every field at its default, validated (None: it takes none).
    Raises ConfigError naming `path` when the defaults break the Args' own validate()."""
    if spec.args_type is None:
        return None
    return convert(spec.args_type, {}, path)


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
# Weights are relative (0.40, 0.05, 0.25 by default); far above any policy, far below where
# a total of weight x 100 over every score plugin stops being a finite float.
MAX_WEIGHT = 1e6
_SET_KEYS = (*_POINT_BY_NAME, MULTI_POINT)
_PROFILE_KEYS = ("schedulerName", "plugins", "pluginConfig")


def read_profiles(raw: object, registry: Registry, errs: ErrorList) -> tuple[Profile, ...]:
    """The `profiles:` list of a document; problems go to `errs`."""
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
        if raw_w > MAX_WEIGHT:
            # weight x 100 points summed over the plugins overflowed to inf, then inf - inf
            # made every total NaN and no node was ever selected.
            errs.add(f"{ipath}.weight", f"must be at most {MAX_WEIGHT:g}, got {show(raw_w)}")
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
        try:
            out[name] = default_args(registry.get(name), f"{cpath}[{name}].args")
        except ConfigError as exc:
            errs.extend(exc)
    return {k: v for k, v in out.items() if v is not None}
