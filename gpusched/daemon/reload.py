"""Configuration hot reload: the `--config` file is watched, and a new version's weights,
plugin args and plugin lists apply from the next pod on, without a restart.

    ConfigWatcher   polls the file (stat of the resolved path, then a content hash)
    read_new_config parses and validates the new bytes exactly as start-up does
    needs_restart   what in it only a restart can apply (refused, old config kept)
    describe_changes what the log line of an applied reload lists
    ConfigReload    the daemon's side: refuse (log line, metric, Warning Event) or build the
                    new Frameworks, reusing unchanged plugin instances, and swap them

Why a poll and not inotify (or watchfiles): the file is a ConfigMap volume. The kubelet
never edits it in place; it writes a new timestamped directory and swaps the `..data`
symlink to it with one rename(2), then deletes the old directory. An inotify watch on
`config.yaml` follows the old inode (the kubelet deletes it: the watch just ends with
IN_IGNORED and no change is ever seen); a correct watch is on the directory, filtered on
`..data`, re-armed when it is recreated, and different again for a `subPath` mount or a
plain file edited in place. watchfiles (Rust `notify`) handles the directory case but adds
a native dependency and a thread for an event that comes at most once a minute or so: the
kubelet refreshes ConfigMap volumes on its periodic pod sync (`syncFrequency`, 1 min by
default, plus jitter), so an edit reaches the file up to a minute or so later. A poll
of the resolved path (realpath, inode, mtime, size; the content is read and hashed only
when those change) costs one stat() per interval, sees every way the file can change, and
its interval (5 s by default) is small against the kubelet's own delay.

Semantics (docs/telemetry-reload.md): a new file is parsed and validated as at start-up
(load_config, validate_profiles, then building each profile's Framework with the daemon's
handle). If anything is wrong, or it changes a setting that only a restart can apply, the
running configuration stays: one error log line names the file and every problem, a
Warning Event is written (by the leader, as every Event; a standby writes it only if it
takes over while the file is still the refused one), and `gpusched_config_reloads{result}`
counts it. A valid file swaps the frameworks between two pods: the loop is
single-threaded asyncio and the scheduling cycle never awaits, so the swap never lands
inside one; a pod already in its binding cycle finishes with the framework it was placed
with (Decision.framework). Plugin instances whose args did not change are kept (what they
learnt survives); the generation (1 at start) grows by one and is named in every decision
record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from gpusched.config import ConfigError, ConfigErrors, SchedulerConfig, load_config_text, to_data
from gpusched.config.profile import Point, Profile
from gpusched.core.queue import ClusterEvent
from gpusched.core.runtime.framework import Framework, pre_enqueue_of
from gpusched.core.runtime.validate import validate_profiles
from gpusched.framework.registry import Registry
from gpusched.framework.status import SUCCESS
from gpusched.kube.client import ApiError
from gpusched.kube.writer import ObjectRef

if TYPE_CHECKING:
    from gpusched.daemon.daemon import Daemon
    from gpusched.model.pod import PodInfo

DEFAULT_POLL_SECONDS = 5.0
# The Event reasons of a refused file (kube-scheduler has no reload; these say what to do).
INVALID = "InvalidConfiguration"
NEEDS_RESTART = "ConfigurationNeedsRestart"
# An Event's message is meant for `kubectl describe`; the log line keeps every problem.
MAX_EVENT_MESSAGE = 1024
# Top-level settings a reload may change; every other one (and any added later) is read
# once at start-up (it sizes the snapshot, opens a watch or a client, runs the election or
# builds the queue), so a change to it is refused as needing a restart.
RELOADABLE_SETTINGS = frozenset({"profiles", "tieBreakSeed"})


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ConfigWatcher:
    """Polls one file: `poll()` returns its new content when the content changed since the
    last call (or since `initial_digest`, the bytes the daemon started from), else None.
    A missing or unreadable file is reported once through `on_error` and never counts as a
    change: the running configuration stays until a readable new version appears."""

    def __init__(
        self,
        path: str,
        *,
        initial_digest: str,
        on_error: Callable[[str], None],
        interval: float = DEFAULT_POLL_SECONDS,
    ) -> None:
        self.path = path
        self.interval = interval
        self.on_error = on_error
        self._digest = initial_digest
        self._key: tuple[str, int, int, int] | None = None
        self._error = ""

    def poll(self) -> bytes | None:
        try:
            # The symlink chain config.yaml -> ..data/config.yaml -> ..2026_.../config.yaml
            # resolves to a new directory on every kubelet update: a new key.
            real = os.path.realpath(self.path)
            st = os.stat(real)
            key = (real, st.st_ino, st.st_mtime_ns, st.st_size)
            if key == self._key:
                return None
            with open(real, "rb") as f:
                data = f.read()
        except OSError as exc:
            self._key = None  # whatever appears next is read
            message = f"cannot read {self.path}: {exc.strerror or exc}"
            if message != self._error:
                self._error = message
                self.on_error(message)
            return None
        self._error = ""
        self._key = key
        new = digest(data)
        if new == self._digest:
            return None
        self._digest = new
        return data

    async def run(self, on_change: Callable[[bytes], None]) -> None:
        """Poll forever; `on_change` runs on the event loop between two awaits, so never
        inside a scheduling cycle."""
        while True:
            await asyncio.sleep(self.interval)
            data = self.poll()
            if data is not None:
                on_change(data)


# -- judging a new file -------------------------------------------------------------------


def problems_of(exc: ConfigError) -> list[str]:
    """Every problem of a refused document, each with its field path."""
    if isinstance(exc, ConfigErrors):
        return [str(e) for e in exc.errors]
    return [str(exc)]


def read_new_config(
    data: bytes, name: str, registry: Registry, leader_elect: bool | None = None
) -> SchedulerConfig:
    """The new file's configuration, checked as `gpusched run` checks its --config (load,
    then every profile's Framework built with a stub handle), with the --leader-elect flag
    applied as at start. Raises ConfigError (ConfigErrors: several problems)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            name, f"not a UTF-8 text file (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    config = load_config_text(text, name, registry)
    validate_profiles(config, registry)
    if leader_elect is not None:
        election = dataclasses.replace(config.leader_election, leader_elect=leader_elect)
        config = dataclasses.replace(config, leader_election=election)
    return config


def _leaves(data: Any, path: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_leaves(value, f"{path}.{key}" if path else str(key)))
        return out
    return {path: data}


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    """`path: old -> new` for every leaf of two YAML-shaped values that differs."""
    a, b = _leaves(to_data(old), path), _leaves(to_data(new), path)
    return [
        f"{key or '<value>'}: {a.get(key, '<unset>')} -> {b.get(key, '<unset>')}"
        for key in sorted(a.keys() | b.keys())
        if a.get(key, "<unset>") != b.get(key, "<unset>")
    ]


def needs_restart(
    old: SchedulerConfig, new: SchedulerConfig, unwatched: Collection[str] = ()
) -> list[str]:
    """What in `new` only a restart can apply, one line each ("needs a restart" said by the
    caller). `unwatched`: plugins whose informers this daemon did not start (no profile
    enabled them at start-up), so enabling one now would run it blind."""
    out: list[str] = []
    before, after = to_data(old), to_data(new)
    for key in sorted((before.keys() | after.keys()) - RELOADABLE_SETTINGS):
        if before.get(key) != after.get(key):
            out.extend(_diff(before.get(key), after.get(key), key))
    if set(old.names) != set(new.names):
        out.append(
            f"profiles[].schedulerName: {', '.join(old.names)} -> {', '.join(new.names)}"
            " (the set of profiles served)"
        )
        return out
    for p in new.profiles:
        was = old.profile(p.scheduler_name)
        # One queue orders every profile's pods, built with the QueueSort plugin at start.
        sort_old = [r.name for r in was.enabled(Point.QUEUE_SORT)]
        sort_new = [r.name for r in p.enabled(Point.QUEUE_SORT)]
        where = f"profiles[{p.scheduler_name}]"
        if sort_old != sort_new:
            out.append(f"{where}.plugins.queueSort: {', '.join(sort_old)} -> {', '.join(sort_new)}")
        elif sort_new and was.plugin_args.get(sort_new[0]) != p.plugin_args.get(sort_new[0]):
            args = f"{where}.pluginConfig[{sort_new[0]}].args"
            out.extend(
                f"{line} (QueueSort args: they order the one queue)"
                for line in _diff(
                    was.plugin_args.get(sort_new[0]), p.plugin_args.get(sort_new[0]), args
                )
            )
        for name in p.names():
            if name in unwatched and name not in was.names():
                out.append(
                    f"{where}: {name} is enabled, but the watches it needs were not started"
                    " (no profile enabled it at start-up)"
                )
    return out


def _profile_changes(old: Profile, new: Profile) -> list[str]:
    out: list[str] = []
    for point in Point:
        before = {r.name: r for r in old.enabled(point)}
        after = {r.name: r for r in new.enabled(point)}
        at = point.value
        for name in after.keys() - before.keys():
            w = after[name].weight
            out.append(f"{name} enabled at {at}" + (f" (weight {w:g})" if w is not None else ""))
        out.extend(f"{name} disabled at {at}" for name in before.keys() - after.keys())
        for name in before.keys() & after.keys():
            wa, wb = before[name].weight, after[name].weight
            if wa != wb:
                out.append(f"{name} weight {wa:g} -> {wb:g}" if wa and wb else f"{name} weight")
        common = [n for n in before if n in after]
        if common != [n for n in after if n in before]:
            out.append(f"order at {at}: {', '.join(after)}")
    for name in sorted(old.plugin_args.keys() & new.plugin_args.keys()):
        a, b = old.plugin_args[name], new.plugin_args[name]
        if a != b:
            out.append(f"{name} args " + "; ".join(_diff(a, b)))
    return sorted(out)


def describe_changes(old: SchedulerConfig, new: SchedulerConfig) -> list[str]:
    """What a reload changes, one line each (empty: the same effective configuration)."""
    out: list[str] = []
    if old.tie_break_seed != new.tie_break_seed:
        out.append(f"tieBreakSeed {old.tie_break_seed} -> {new.tie_break_seed}")
    for p in new.profiles:
        out.extend(
            f"{p.scheduler_name}: {line}"
            for line in _profile_changes(old.profile(p.scheduler_name), p)
        )
    return out


# -- the daemon's side ----------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    reason: str  # INVALID or NEEDS_RESTART
    message: str


class ConfigReload:
    """Judges each new version of the daemon's --config file and applies the valid ones
    (see the module docstring). Owned by the Daemon; runs on its event loop."""

    def __init__(
        self,
        daemon: Daemon,
        path: str,
        *,
        initial_digest: str,
        interval: float,
        config_map: str = "",
        pod_namespace: str = "",
        leader_elect: bool | None = None,
        unwatched: Collection[str] = (),
    ) -> None:
        self.daemon = daemon
        self.path = path
        self.generation = 1
        self.leader_elect = leader_elect
        self.unwatched = frozenset(unwatched)
        self.config_map = config_map
        self.pod_namespace = pod_namespace
        self.watcher = ConfigWatcher(
            path, initial_digest=initial_digest, on_error=self._unreadable, interval=interval
        )
        # The last refusal while this instance did not lead: written once it leads, if the
        # file is still the refused one (an applied reload clears it).
        self.unwritten: Refusal | None = None
        self._target: ObjectRef | None = None
        daemon.metrics.config_generation.set(self.generation)

    async def run(self) -> None:
        await self.watcher.run(self._changed)

    def _changed(self, data: bytes) -> None:
        try:
            self.changed(data)
        except Exception:  # a bug here must not end the daemon (a core task ending does)
            self.daemon.log.exception("configuration reload raised", file=self.path)

    def _unreadable(self, message: str) -> None:
        self.daemon.log.error(
            "configuration file unreadable; keeping the running configuration",
            file=self.path,
            generation=self.generation,
            problem=message,
        )

    def changed(self, data: bytes) -> None:
        """A new version of the file: refuse it or swap it in, with no await in between."""
        d = self.daemon
        try:
            new = read_new_config(data, self.path, d.registry, self.leader_elect)
        except ConfigError as exc:
            self._refuse(INVALID, problems_of(exc))
            return
        restart = needs_restart(d.config, new, self.unwatched)
        if restart:
            self._refuse(NEEDS_RESTART, [f"{line}: needs a restart" for line in restart])
            return
        changes = describe_changes(d.config, new)
        if not changes:
            self.unwritten = None
            d.metrics.config_reloads.labels("unchanged").inc()
            d.log.info(
                "configuration file changed; the effective configuration is the same",
                file=self.path,
                generation=self.generation,
            )
            return
        try:
            frameworks = self._build(new)
        except ConfigError as exc:
            self._refuse(INVALID, problems_of(exc))
            return
        except Exception as exc:  # a plugin constructor's failure with the real handle
            self._refuse(INVALID, [f"building the profiles failed: {exc!r}"])
            return
        self._swap(new, frameworks)
        d.metrics.config_reloads.labels("applied").inc()
        d.log.info(
            "configuration reloaded",
            file=self.path,
            generation=self.generation,
            changes=changes,
            new_plugin_instances={
                name: sorted(set(fw.plugins) - fw.reused) for name, fw in frameworks.items()
            },
        )

    def _build(self, new: SchedulerConfig) -> dict[str, Framework]:
        d = self.daemon
        return {
            p.scheduler_name: Framework(
                p,
                d.registry,
                d.handle,
                seed=new.tie_break_seed,
                waiting=d.handle.waiting,
                previous=d.frameworks[p.scheduler_name],
                generation=self.generation + 1,
            )
            for p in new.profiles
        }

    def _swap(self, new: SchedulerConfig, frameworks: dict[str, Framework]) -> None:
        d = self.daemon
        self.generation += 1
        self.unwritten = None
        d.config = new
        # One dict is shared by the Reporter and ScheduleOne's own copy is refreshed: a
        # pod popped from now on is scheduled with the new frameworks.
        d.frameworks.clear()
        d.frameworks.update(frameworks)
        d.schedule_one.frameworks = dict(frameworks)
        queue = d.queue
        queue.pre_enqueue = pre_enqueue_of(frameworks)
        if queue.gated:
            # The PreEnqueue plugins may have changed: judge the held pods again (with none
            # left, every held pod goes on).
            check = queue.pre_enqueue
            if check is None:
                queue.pre_enqueue = lambda _pod: SUCCESS
            queue.recheck_gated(list(queue.gated))
            queue.pre_enqueue = check
        # A pod found unschedulable under the old filters or args is judged again.
        queue.move_all(ClusterEvent.FLUSH)
        d.metrics.config_generation.set(self.generation)
        if d.leading.is_set():
            # New instances learn from the bound pods as at a takeover (the kept ones have).
            bound: dict[str, list[PodInfo]] = {name: [] for name in frameworks}
            for entry in d.cache.allocations():
                if not entry.assumed and entry.pod.scheduler_name in bound:
                    bound[entry.pod.scheduler_name].append(entry.pod)
            for name, fw in frameworks.items():
                fw.warm_start(bound[name], only=set(fw.plugins) - fw.reused)

    def _refuse(self, reason: str, problems: list[str]) -> None:
        d = self.daemon
        result = "invalid" if reason == INVALID else "needs_restart"
        d.metrics.config_reloads.labels(result).inc()
        d.log.error(
            "configuration refused; keeping the running configuration",
            file=self.path,
            generation=self.generation,
            reason=reason,
            problems=problems,
        )
        what = "is invalid" if reason == INVALID else "changes what only a restart applies"
        message = (
            f"{self.path} {what}; keeping configuration generation {self.generation}: "
            + "; ".join(problems)
        )
        if len(message) > MAX_EVENT_MESSAGE:
            message = message[: MAX_EVENT_MESSAGE - 40] + " ... (every problem: scheduler log)"
        refusal = Refusal(reason, message)
        if d.leading.is_set():
            self.write(refusal)
        else:
            self.unwritten = refusal

    def took_lead(self) -> None:
        """Now leading: write the refusal a standby kept, if the file is still refused."""
        if self.unwritten is not None:
            self.write(self.unwritten)
            self.unwritten = None

    def write(self, refusal: Refusal) -> None:
        d = self.daemon

        async def event() -> None:
            ref = await self.target()
            if ref is None:
                return
            await d.writer.event(ref, "Warning", refusal.reason, refusal.message, "Reload")

        d.tasks.spawn(event(), "event configuration refused")

    async def target(self) -> ObjectRef | None:
        """What the Events regard: the ConfigMap when the daemon is told it
        (--config-map / GPUSCHED_CONFIG_MAP), else its own Pod (POD_NAME, POD_NAMESPACE);
        the uid is read so `kubectl describe` lists the Event. None: neither is known."""
        if self._target is not None:
            return self._target
        d = self.daemon
        if self.config_map:
            namespace, _, name = self.config_map.rpartition("/")
            kind, path = "ConfigMap", f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        elif d.options.instance and self.pod_namespace:
            namespace, name = self.pod_namespace, d.options.instance
            kind, path = "Pod", f"/api/v1/namespaces/{namespace}/pods/{name}"
        else:
            d.log.warning(
                "configuration refused: no object to write its Event on; set --config-map"
                " NAMESPACE/NAME (or POD_NAME and POD_NAMESPACE)"
            )
            return None
        uid = ""
        try:
            raw = await d.kube.get(path)
            uid = str(raw.get("metadata", {}).get("uid", ""))
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            # Forbidden or gone: the Event is still written, found by the object's name.
            d.log.warning("reading the object of a configuration Event", path=path, error=str(exc))
        self._target = ObjectRef(kind, namespace, name, uid)
        return self._target
