"""The simulator's loop (gpusched/sim/engine.py): the daemon's ScheduleOne over an in-memory
cluster, and proof that the daemon and the simulator place one pod stream identically."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import io
from typing import Any

import numpy as np
import pytest

from gpusched.config import builtin_profile, default_config
from gpusched.config.profile import PluginRef, Point, Profile
from gpusched.core.queue.queue import GATED
from gpusched.core.schedule_one import Result
from gpusched.daemon import Daemon, DaemonOptions
from gpusched.devcluster.nodes import NodeSpec, node_object
from gpusched.framework.registry import Registry
from gpusched.model import keys
from gpusched.model.node import node_from_k8s
from gpusched.model.pod import pod_from_k8s
from gpusched.observability.logging import make_logger
from gpusched.plugins import default_registry
from gpusched.sim.engine import Simulation
from tests.builders import ai_pod, ai_sim, gpu_node, make_pod, watch_line
from tests.fake_plugins import Binder, Gate, Sort
from tests.fakes import FakeWriter

SPECS = [
    NodeSpec("a100-0", 8, "A100M80", 64_000, 512 * 1024, "r0", "s0", 8),
    NodeSpec("a100-1", 8, "A100M80", 64_000, 512 * 1024, "r0", "s0", 8),
    NodeSpec("v100-0", 8, "V100M32", 64_000, 512 * 1024, "r1", "s0", 4),
    NodeSpec("t4-0", 2, "T4", 32_000, 128 * 1024, "r1", "s0"),
    NodeSpec("t4-1", 2, "T4", 32_000, 128 * 1024, "r2", "s0"),
    NodeSpec("cpu-0", 0, "none", 32_000, 128 * 1024, "r2", "s0"),
]


def raw_nodes() -> list[dict[str, Any]]:
    out = []
    for spec in SPECS:
        raw = node_object(spec)
        raw["metadata"]["uid"] = f"node-{spec.name}"
        out.append(raw)
    return out


def raw_pod(i: int, rng: np.random.Generator) -> dict[str, Any]:
    kind = rng.choice(["whole", "shared", "cpu"], p=[0.4, 0.45, 0.15])
    limits: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if kind == "whole":
        limits["nvidia.com/gpu"] = str(int(rng.choice([1, 1, 2, 4, 8])))
    elif kind == "shared":
        annotations[keys.GPU_MILLI] = str(int(rng.choice([100, 250, 470, 500, 810])))
    cpu = int(rng.choice([1000, 2000, 4000, 8000]))
    return {
        "metadata": {
            "name": f"p{i:03d}",
            "namespace": "ns",
            "uid": f"uid-{i:03d}",
            "resourceVersion": str(10 + i),
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "ai-scheduler",
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": f"{cpu}m", "memory": "1Gi"},
                        "limits": limits,
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


async def test_the_daemon_and_the_simulator_place_one_pod_stream_identically() -> None:
    """Same nodes, same pods, same profile: the daemon (watch events in, Binding out) and the
    simulator give every pod the same node and cards, and drop the same pods. The pods
    arrive one at a time and an unplaced one is deleted, as in the FGD protocol."""
    registry = default_registry()
    # The configured seed orders the daemon's ties, the run's seed the simulator's.
    config = dataclasses.replace(default_config(registry), tie_break_seed=5)
    d = Daemon(
        None,  # type: ignore[arg-type]  # no API server: watch lines are fed in below
        config,
        registry,
        make_logger(io.StringIO()),
        options=DaemonOptions(warm_up=False, pod_groups=False),
    )
    writer = FakeWriter(held=False)
    d.writer = writer  # type: ignore[assignment]
    d.handle._cluster = writer
    d.schedule_one.fence = None  # the loop body driven by hand, with no Lease to hold
    nodes = raw_nodes()
    for raw in nodes:
        d.node_watch._line(watch_line("ADDED", raw))
    sim = Simulation(
        [node_from_k8s(raw, config.topology_keys) for raw in nodes],
        builtin_profile("ai-scheduler", registry),
        registry,
        seed=5,
    )
    rng = np.random.default_rng(7)
    placed_daemon: list[tuple[str, str]] = []
    placed_sim: list[tuple[str, str]] = []
    for i in range(120):
        raw = raw_pod(i, rng)
        uid = raw["metadata"]["uid"]
        # The daemon: the watch delivers the pod, the loop attempts it, the binding task runs.
        d.pod_watch._line(watch_line("ADDED", raw))
        info = d.queue.pop_nowait()
        assert info is not None and d.queue.pop_nowait() is None
        d._attempt(info)
        await asyncio.gather(*d.bindings)
        if uid in writer.bound:
            bound = copy.deepcopy(raw)
            bound["spec"]["nodeName"] = writer.bound[uid]
            bound["metadata"]["annotations"].update(writer.annotations.get(uid, {}))
            bound["metadata"]["resourceVersion"] = str(1000 + i)
            d.pod_watch._line(watch_line("MODIFIED", bound))  # the API's answer to the Binding
            ids = bound["metadata"]["annotations"].get(keys.GPU_IDS, "")
            placed_daemon.append((writer.bound[uid], ids))
        else:
            d.pod_watch._line(watch_line("DELETED", raw))
            placed_daemon.append(("", ""))
        # The simulator: the same pod, parsed the same way.
        decision = sim.submit(pod_from_k8s(raw))
        if decision.result is Result.SCHEDULED:
            assert decision.alloc is not None
            cards = ",".join(map(str, decision.alloc.cards))
            placed_sim.append((decision.node, cards))
        else:
            sim.withdraw(uid)
            placed_sim.append(("", ""))
    assert placed_daemon == placed_sim
    dropped = sum(1 for node, _ in placed_sim if not node)
    assert 0 < dropped < 120, "the stream should fill the cluster and then overflow it"
    assert d.cache.snapshot.gpu_milli_free() == sim.snapshot.gpu_milli_free()


def gated_sim() -> Simulation:
    registry = Registry()
    for cls in (Sort, Binder, Gate):
        registry.register(cls)
    profile = Profile(
        "gated",
        {
            Point.QUEUE_SORT: (PluginRef("Sort"),),
            Point.PERMIT: (PluginRef("Gate"),),
            Point.BIND: (PluginRef("Binder"),),
        },
    )
    return Simulation([gpu_node("n0", cards=0)], profile, registry)


def test_a_pod_waiting_at_permit_binds_when_allowed() -> None:
    sim = gated_sim()
    d = sim.submit(make_pod("p"))
    assert d.result is Result.WAITING and sim.cache.is_assumed("uid-p")
    assert "uid-p" not in sim.cluster.bound
    wp = sim.fw.waiting.get("uid-p")
    assert wp is not None
    wp.allow("Gate")
    sim.run()
    assert sim.cluster.bound["uid-p"].node_name == "n0"
    assert not sim.cache.is_assumed("uid-p")  # confirmed, as the watch would


def test_a_pod_waiting_at_permit_times_out_on_the_virtual_clock() -> None:
    sim = gated_sim()
    sim.submit(make_pod("p"))
    sim.advance(4.0)  # Gate waits 5 s
    assert sim.cache.is_assumed("uid-p")
    sim.advance(6.0)
    assert sim.cache.get("uid-p") is None and "uid-p" not in sim.cluster.bound
    assert sim.queue.where("uid-p") == "unschedulable"


def test_a_deleted_pod_moves_waiting_pods_and_they_start() -> None:
    registry = default_registry()
    sim = Simulation([gpu_node("n0", cards=1)], builtin_profile("ai-scheduler", registry), registry)
    assert sim.submit(make_pod("a", gpu_cards=1)).result is Result.SCHEDULED
    blocked = sim.submit(make_pod("b", gpu_cards=1))
    assert blocked.result is Result.UNSCHEDULABLE
    started: list[str] = []
    sim.on_bound(lambda d: started.append(d.pod.name))
    sim.delete("uid-a")
    sim.advance(sim.clock() + 1.0)  # b's backoff ends
    assert started == ["b"]
    assert sim.cluster.bound["uid-b"].node_name == "n0"


def test_submitting_a_pod_twice_is_refused() -> None:
    sim = gated_sim()
    sim.submit(make_pod("p"))
    with pytest.raises(ValueError, match="already submitted"):
        sim.submit(make_pod("p"))


def test_a_withdrawn_pod_waiting_at_permit_is_rejected_and_undone() -> None:
    """As the daemon's watch handler does for a deleted pod: it never binds later."""
    sim = gated_sim()
    sim.submit(make_pod("p"))
    assert sim.cache.is_assumed("uid-p")
    sim.withdraw("uid-p")
    assert sim.cache.get("uid-p") is None and "uid-p" not in sim.cluster.bound
    assert sim.queue.where("uid-p") == "" and sim.fw.waiting.get("uid-p") is None


def test_next_wakeup_includes_permit_timeouts() -> None:
    """A clock that only stops at next_wakeup must still time a Permit wait out."""
    sim = gated_sim()
    sim.submit(make_pod("p"))
    due = sim.next_wakeup()
    assert due == 5.0  # Gate waits 5 s from t=0
    sim.advance(due)
    assert sim.cache.get("uid-p") is None
    assert sim.queue.where("uid-p") == "unschedulable"


def test_a_gated_pod_is_held_by_the_queue_until_its_last_gate_goes() -> None:
    s = ai_sim(gpu_node("n1"))
    gated = dataclasses.replace(ai_pod("g", gpu_cards=1), scheduling_gates=("x.io/hold",))
    s.events.pod_changed(gated)
    s.run()
    assert s.queue.where(gated.uid) == GATED
    assert s.cache.get(gated.uid) is None  # never attempted, so never placed
    s.events.pod_changed(dataclasses.replace(gated, scheduling_gates=()))
    s.run()
    entry = s.cache.get(gated.uid)
    assert entry is not None and entry.node == "n1"


def test_submitting_a_gated_pod_says_it_is_gated() -> None:
    s = ai_sim(gpu_node("n1"))
    gated = dataclasses.replace(ai_pod("g"), scheduling_gates=("x.io/hold",))
    with pytest.raises(ValueError, match="held at PreEnqueue"):
        s.submit(gated)
    assert s.queue.where(gated.uid) == GATED
