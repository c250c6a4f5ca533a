"""Configuration hot reload (daemon/reload.py): the file watcher over a kubelet-style
ConfigMap volume, the judgement of a new file (invalid, needs a restart, what changed), and
the swap in a daemon with in-memory ports."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from gpusched.config import ConfigError, ConfigErrors, SchedulerConfig, load_config_text
from gpusched.core.runtime.framework import Framework
from gpusched.core.runtime.validate import validate_profiles
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.daemon.reload import (
    INVALID,
    NEEDS_RESTART,
    ConfigWatcher,
    describe_changes,
    digest,
    needs_restart,
    read_new_config,
)
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.kube.writer import ObjectRef
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry
from tests.builders import watch_line
from tests.configmap_volume import ConfigMapVolume
from tests.fakes import Clock, FakeWriter

GUARD = 10.0
HEAD = "apiVersion: gpusched.io/v1alpha1\nkind: GpuSchedulerConfiguration\n"
NO_ELECTION = "leaderElection: {leaderElect: false}\n"


def doc(
    score: str = "GPUFragmentation, weight: 0.4", extra: str = "", args: str = "", points: str = ""
) -> str:
    """A configuration overriding one default score weight (and optionally more settings,
    pluginConfig items, and other points' plugin sets written before `score:`)."""
    text = HEAD + NO_ELECTION + extra
    text += "profiles:\n  - schedulerName: ai-scheduler\n    plugins:\n" + points + "      score:\n"
    text += f"        enabled: [{{name: {score}}}]\n"
    if args:
        text += f"    pluginConfig:\n{args}"
    return text


def load(text: str) -> SchedulerConfig:
    registry = default_registry()
    config = load_config_text(text, "test.yaml", registry)
    validate_profiles(config, registry)
    return config


# -- the watcher --------------------------------------------------------------------------


def _watcher(volume: ConfigMapVolume, errors: list[str]) -> ConfigWatcher:
    first = volume.path.read_bytes()
    return ConfigWatcher(str(volume.path), initial_digest=digest(first), on_error=errors.append)


def test_the_watcher_sees_each_kubelet_update_of_a_configmap_volume(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("one")
    errors: list[str] = []
    watcher = _watcher(volume, errors)
    assert watcher.poll() is None  # what the daemon started from
    inode = os.stat(volume.path).st_ino
    volume.write("two")
    # The old file was deleted with its directory, not rewritten: an inotify watch on it
    # would have seen nothing but its removal.
    assert os.stat(volume.path).st_ino != inode
    assert watcher.poll() == b"two"
    assert watcher.poll() is None
    volume.write("three")
    volume.write("four")  # two updates between polls: the latest counts
    assert watcher.poll() == b"four"
    assert errors == []


def test_an_update_with_the_same_content_is_no_change(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("same")
    watcher = _watcher(volume, [])
    volume.write("same")  # e.g. a label of the ConfigMap changed: new directory, same bytes
    assert watcher.poll() is None


def test_a_plain_file_edited_in_place_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("one")
    watcher = ConfigWatcher(str(path), initial_digest=digest(b"one"), on_error=lambda _: None)
    assert watcher.poll() is None
    path.write_text("a longer two")
    assert watcher.poll() == b"a longer two"


def test_a_vanished_file_is_reported_once_and_its_return_is_read(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("one")
    errors: list[str] = []
    watcher = _watcher(volume, errors)
    volume.remove_key()
    assert watcher.poll() is None
    assert watcher.poll() is None
    assert len(errors) == 1 and str(volume.path) in errors[0], errors
    volume.write("two")
    assert watcher.poll() == b"two"
    volume.remove_key()
    volume.write("two")  # back with the content already applied: nothing to do
    assert watcher.poll() is None


async def test_the_watcher_runs_until_cancelled_and_calls_back_on_a_change(
    tmp_path: Path,
) -> None:
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write("one")
    watcher = _watcher(volume, [])
    watcher.interval = 0.001
    got: asyncio.Queue[bytes] = asyncio.Queue()
    task = asyncio.create_task(watcher.run(got.put_nowait))
    volume.write("two")
    assert await asyncio.wait_for(got.get(), GUARD) == b"two"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- judging a new file --------------------------------------------------------------------


def test_an_invalid_file_reports_every_problem_with_its_path() -> None:
    bad = doc("GPUFragmentation, weight: -1") + "  - schedulerName: other\n"
    bad += "    plugins: {score: {enabled: [{name: NoSuchPlugin, weight: 1}]}}\n"
    with pytest.raises(ConfigErrors) as got:
        read_new_config(bad.encode(), "/etc/gpusched/config.yaml", default_registry())
    text = str(got.value)
    assert "profiles[0].plugins.score.enabled[GPUFragmentation].weight" in text
    assert "must be a positive finite number, got -1" in text
    assert "unknown plugin 'NoSuchPlugin'" in text


def test_a_file_that_is_not_utf8_or_not_yaml_is_refused_naming_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^/c.yaml: not a UTF-8 text file"):
        read_new_config(b"\xff\xfe", "/c.yaml", default_registry())
    with pytest.raises(ConfigError, match=r"^/c.yaml:4:1: invalid YAML"):
        read_new_config(HEAD.encode() + b"profiles: [\n", "/c.yaml", default_registry())


def test_the_leader_elect_flag_applies_to_a_new_file_as_at_start() -> None:
    text = HEAD + "leaderElection: {leaderElect: true}\n"
    config = read_new_config(text.encode(), "c", default_registry(), leader_elect=False)
    assert config.leader_election.leader_elect is False
    # So the flag does not make every reload look like a leader-election change.
    start = read_new_config(text.encode(), "c", default_registry(), leader_elect=False)
    assert needs_restart(start, config) == []


def test_weights_args_plugin_lists_and_the_tie_break_seed_reload() -> None:
    old = load(doc())
    new = load(
        doc(
            "GPUFragmentation, weight: 2}, {name: NodeResourcesFit, weight: 1",
            extra="tieBreakSeed: 7\n",
            args="      - name: GPUFragmentation\n        args: {refreshPods: 32}\n",
        ).replace(
            "      score:\n", "      filter:\n        disabled: [{name: Thermal}]\n      score:\n"
        )
    )
    assert needs_restart(old, new) == []
    assert describe_changes(old, new) == [
        "tieBreakSeed 0 -> 7",
        "ai-scheduler: GPUFragmentation args refreshPods: 64 -> 32",
        "ai-scheduler: GPUFragmentation weight 0.4 -> 2",
        "ai-scheduler: NodeResourcesFit enabled at score (weight 1)",
        "ai-scheduler: Thermal disabled at filter",
    ]
    assert describe_changes(old, load(doc())) == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("maxCardsPerNode: 16\n", "maxCardsPerNode: 8 -> 16"),
        ("topologyKeys: {rack: example.com/rack}\n", "topologyKeys.rack"),
        ("clientConnection: {qps: 10}\n", "clientConnection.qps: 50"),
        ("podMaxBackoffSeconds: 20\n", "podMaxBackoffSeconds: 10"),
        ("watch: {timeoutSeconds: 30}\n", "watch.timeoutSeconds: 60 -> 30"),
    ],
)
def test_settings_read_once_at_start_need_a_restart(extra: str, named: str) -> None:
    problems = needs_restart(load(doc()), load(doc(extra=extra)))
    assert len(problems) == 1 and problems[0].startswith(named), problems


def test_leader_election_needs_a_restart() -> None:
    old = load(doc())
    new = load(doc().replace(NO_ELECTION, "leaderElection: {leaderElect: true}\n"))
    assert needs_restart(old, new) == ["leaderElection.leaderElect: False -> True"]


def test_the_profiles_served_and_the_queue_order_need_a_restart() -> None:
    old = load(doc())
    renamed = load(doc().replace("schedulerName: ai-scheduler", "schedulerName: gpu"))
    assert needs_restart(old, renamed) == [
        "profiles[].schedulerName: ai-scheduler -> gpu (the set of profiles served)"
    ]
    queue_args = load(
        doc(args="      - name: GangScheduling\n        args: {tenantFairness: false}\n")
    )
    assert needs_restart(old, queue_args) == [
        "profiles[ai-scheduler].pluginConfig[GangScheduling].args.tenantFairness: True -> False"
        " (QueueSort args: they order the one queue)"
    ]
    sorted_by_priority = load(
        doc(
            points="      queueSort:\n        disabled: [{name: '*'}]\n"
            "        enabled: [{name: PrioritySort}]\n"
        )
    )
    assert needs_restart(old, sorted_by_priority) == [
        "profiles[ai-scheduler].plugins.queueSort: GangScheduling -> PrioritySort"
    ]


def test_enabling_a_plugin_whose_watches_did_not_start_needs_a_restart() -> None:
    without = load(
        doc().replace(
            "      score:\n",
            "      multiPoint:\n        disabled: [{name: Preemption}]\n      score:\n",
        )
    )
    with_it = load(doc())
    assert "Preemption" in with_it.profiles[0].names()
    assert needs_restart(without, with_it, unwatched={"Preemption"}) == [
        "profiles[ai-scheduler]: Preemption is enabled, but the watches it needs were not"
        " started (no profile enabled it at start-up)"
    ]
    # Disabling one is fine: its watches idle.
    assert needs_restart(with_it, without, unwatched=set()) == []


# -- the framework keeps unchanged plugin instances -----------------------------------------


def test_a_rebuilt_framework_keeps_the_plugin_instances_whose_args_are_unchanged() -> None:
    registry = default_registry()
    old_cfg = load(doc())
    new_cfg = load(
        doc(
            "GPUFragmentation, weight: 2",
            args="      - name: Thermal\n        args: {redLineCelsius: 80}\n",
        )
    )
    handle: Any = _handle()
    old = Framework(old_cfg.profiles[0], registry, handle)
    new = Framework(new_cfg.profiles[0], registry, handle, previous=old, generation=2)
    assert new.generation == 2
    assert new.plugins["GPUFragmentation"] is old.plugins["GPUFragmentation"]  # weight only
    assert new.plugins["Thermal"] is not old.plugins["Thermal"]  # its args changed
    assert "Thermal" not in new.reused and "GPUFragmentation" in new.reused
    assert [w for p, w in new.score if p.name == "GPUFragmentation"] == [2.0]
    assert new.timings is old.timings  # the plugin histogram goes on without a gap


def _handle() -> object:
    from gpusched.core.runtime.validate import _StubHandle  # noqa: PLC0415 - test only

    return _StubHandle(8)


# -- the daemon's swap -----------------------------------------------------------------------


def _raw_pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": "Pending"},
    }


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Daemon, FakeWriter, ConfigMapVolume, io.StringIO]:
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(doc())
    data = volume.path.read_bytes()
    registry = default_registry()
    stream = io.StringIO()
    d = Daemon(
        None,  # type: ignore[arg-type]
        read_new_config(data, str(volume.path), registry),
        registry,
        make_logger(stream),
        clock=Clock(),
        options=DaemonOptions(
            warm_up=False,
            pod_groups=False,
            config_file=str(volume.path),
            config_digest=digest(data),
        ),
    )
    writer = FakeWriter()
    d.writer = writer  # type: ignore[assignment]
    d.handle._cluster = writer
    d.schedule_one.fence = None
    raw = node_object(NodeSpec("n1", 0, "none", 8000, 16384, "r", "s"))
    raw["metadata"]["uid"] = "node-n1"
    d.node_watch._line(watch_line("ADDED", raw))
    assert d.reload is not None
    # The Event's object, as the ConfigMap's GET would have given it (no API server here).
    d.reload._target = ObjectRef("ConfigMap", "kube-system", "gpusched-config", "cm-uid")
    return d, writer, volume, stream


def _records(stream: io.StringIO, event: str) -> list[dict[str, Any]]:
    out = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    return [r for r in out if r.get("event") == event]


def _reload(d: Daemon) -> None:
    assert d.reload is not None
    data = d.reload.watcher.poll()
    assert data is not None
    d.reload.changed(data)


def _sample(d: Daemon, name: str, **labels: str) -> float | None:
    return d.metrics.registry.get_sample_value(name, labels)


async def test_a_valid_file_swaps_the_frameworks_between_pods_keeping_learnt_state(
    setup: tuple[Daemon, FakeWriter, ConfigMapVolume, io.StringIO],
) -> None:
    d, writer, volume, stream = setup
    shared = d.frameworks  # the Reporter's and ClusterEvents' view
    before = d.frameworks["ai-scheduler"]
    # A pod in its binding cycle when the file changes.
    d.pod_watch._line(watch_line("ADDED", _raw_pod("a")))
    info = d.queue.pop_nowait()
    assert info is not None
    d._attempt(info)
    await writer.binding.wait()

    volume.write(doc("GPUFragmentation, weight: 3"))
    _reload(d)
    after = d.frameworks["ai-scheduler"]
    assert d.frameworks is shared and after is not before
    assert d.schedule_one.frameworks["ai-scheduler"] is after
    assert after.plugins["GPUFragmentation"] is before.plugins["GPUFragmentation"]
    assert [w for p, w in after.score if p.name == "GPUFragmentation"] == [3.0]
    assert d.config.profiles[0] is after.profile
    (line,) = _records(stream, "configuration reloaded")
    assert line["generation"] == 2 and line["file"] == str(volume.path)
    assert line["changes"] == ["ai-scheduler: GPUFragmentation weight 0.4 -> 3"]
    assert _sample(d, "gpusched_config_generation") == 2
    assert _sample(d, "gpusched_config_reloads_total", result="applied") == 1

    # The pod placed before finishes its binding with the framework it started with.
    writer.release.set()
    await asyncio.gather(*d.bindings)
    d.pod_watch._line(watch_line("ADDED", _raw_pod("b")))
    info = d.queue.pop_nowait()
    assert info is not None
    d._attempt(info)
    await asyncio.gather(*d.bindings)
    generation = {r["pod"]: r["config_generation"] for r in _records(stream, "decision")}
    assert generation == {"ns/a": 1, "ns/b": 2}


async def test_an_invalid_file_is_refused_and_the_event_written_once_leading(
    setup: tuple[Daemon, FakeWriter, ConfigMapVolume, io.StringIO],
) -> None:
    d, writer, volume, stream = setup
    before = d.frameworks["ai-scheduler"]
    volume.write(doc("GPUFragmentation, weight: -1"))
    _reload(d)  # a standby: logs, writes nothing
    assert d.frameworks["ai-scheduler"] is before
    (line,) = _records(stream, "configuration refused; keeping the running configuration")
    assert line["level"] == "error" and line["file"] == str(volume.path)
    assert line["generation"] == 1 and line["reason"] == INVALID
    assert line["problems"] == [
        "profiles[0].plugins.score.enabled[GPUFragmentation].weight: must be a positive finite"
        " number, got -1"
    ]
    assert _sample(d, "gpusched_config_reloads_total", result="invalid") == 1
    assert _sample(d, "gpusched_config_generation") == 1
    await asyncio.sleep(0)
    assert writer.events == []
    d.leading.set()
    assert d.reload is not None
    d.reload.took_lead()
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    assert writer.events == [("gpusched-config", INVALID)]


async def test_a_restart_only_change_is_refused_with_the_field_named(
    setup: tuple[Daemon, FakeWriter, ConfigMapVolume, io.StringIO],
) -> None:
    d, writer, volume, stream = setup
    d.leading.set()
    volume.write(doc(extra="maxCardsPerNode: 4\n"))
    _reload(d)
    (line,) = _records(stream, "configuration refused; keeping the running configuration")
    assert line["reason"] == NEEDS_RESTART
    assert line["problems"] == ["maxCardsPerNode: 8 -> 4: needs a restart"]
    assert d.config.max_cards_per_node == 8
    await asyncio.wait_for(writer.event_written.wait(), GUARD)
    assert writer.events == [("gpusched-config", NEEDS_RESTART)]
    # Reverting to the running file: nothing to apply, nothing refused.
    volume.write(doc())
    _reload(d)
    assert _sample(d, "gpusched_config_reloads_total", result="unchanged") == 1
    assert d.reload is not None and d.reload.generation == 1


async def test_a_plugin_whose_args_changed_starts_fresh_and_learns_the_bound_pods(
    setup: tuple[Daemon, FakeWriter, ConfigMapVolume, io.StringIO],
) -> None:
    d, _, volume, stream = setup
    for i in range(3):
        raw = _raw_pod(f"b{i}")
        raw["spec"]["nodeName"] = "n1"
        raw["status"]["phase"] = "Running"
        d.pod_watch._line(watch_line("ADDED", raw))
    d.leading.set()  # the leader warm-starts new instances at once (a standby at takeover)
    old = d.frameworks["ai-scheduler"].plugins["GPUFragmentation"]
    volume.write(doc(args="      - name: GPUFragmentation\n        args: {refreshPods: 32}\n"))
    _reload(d)
    new = d.frameworks["ai-scheduler"].plugins["GPUFragmentation"]
    assert new is not old and new.learner.seen == 3
    (line,) = _records(stream, "configuration reloaded")
    assert line["new_plugin_instances"] == {"ai-scheduler": ["GPUFragmentation"]}
    assert line["changes"] == ["ai-scheduler: GPUFragmentation args refreshPods: 64 -> 32"]
