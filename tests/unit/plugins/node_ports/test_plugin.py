"""NodePorts: host ports against the ports in use on each node, kube's HostPortInfo rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusched.core.cache.cache import ClusterCache
from gpusched.core.handle import SchedulerHandle
from gpusched.core.schedule_one import Result
from gpusched.framework import CycleState, FilterPlugin, PreFilterPlugin
from gpusched.framework.interfaces import Allocation
from gpusched.model.pod import HostPort
from gpusched.plugins.node_ports import NodePorts
from gpusched.plugins.node_ports.plugin import conflicts
from tests.builders import ai_pod, ai_sim, all_rows, gpu_node, node, passing, pod, snapshot
from tests.fakes import FakeCluster, FakeHandle

REASON = "node(s) didn't have free ports for the requested pod ports"


def used(*ports: HostPort) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = {}
    for p in ports:
        out.setdefault((p.protocol, p.port), {})[p.ip] = 1
    return out


@pytest.mark.parametrize(
    ("want", "held", "clash"),
    [
        (HostPort("0.0.0.0", "TCP", 80), HostPort("0.0.0.0", "TCP", 80), True),
        (HostPort("0.0.0.0", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),  # wildcard
        (HostPort("10.0.0.1", "TCP", 80), HostPort("0.0.0.0", "TCP", 80), True),
        (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.1", "TCP", 80), True),
        (HostPort("10.0.0.1", "TCP", 80), HostPort("10.0.0.2", "TCP", 80), False),
        (HostPort("0.0.0.0", "UDP", 80), HostPort("0.0.0.0", "TCP", 80), False),
        (HostPort("0.0.0.0", "TCP", 81), HostPort("0.0.0.0", "TCP", 80), False),
    ],
)
def test_conflict_rules(want: HostPort, held: HostPort, clash: bool) -> None:
    assert conflicts((want,), used(held)) is clash


def test_pre_filter_skips_a_pod_without_host_ports() -> None:
    plugin = NodePorts(None, FakeHandle(snapshot(node("a"))))
    assert isinstance(plugin, PreFilterPlugin)
    assert plugin.pre_filter(CycleState(), pod())[1].is_skip()
    with_port = pod(host_ports=(HostPort("0.0.0.0", "TCP", 80),))
    assert plugin.pre_filter(CycleState(), with_port)[1].is_success()


def test_nodes_holding_the_port_rejected_unschedulable() -> None:
    snap = snapshot(node("a"), node("b"), node("c"))
    handle = FakeHandle(snap, ports={"b": used(HostPort("0.0.0.0", "TCP", 80))})
    plugin = NodePorts(None, handle)
    assert isinstance(plugin, FilterPlugin)
    want = pod(host_ports=(HostPort("0.0.0.0", "TCP", 80),))
    res = plugin.filter(CycleState(), want, all_rows(snap))
    assert passing(snap, res) == ["a", "c"]
    assert res.reasons == (REASON,)
    assert not res.unresolvable  # preempting the holder frees the port
    other = pod(host_ports=(HostPort("0.0.0.0", "TCP", 8080),))
    mask = all_rows(snap)
    assert plugin.filter(CycleState(), other, mask).feasible is mask


def test_reads_the_cache_ports_of_bound_and_assumed_pods_and_frees_them() -> None:
    cache = ClusterCache(snapshot(node("a"), node("b")))
    handle = SchedulerHandle(cache, FakeCluster(), lambda: 0.0)
    plugin = NodePorts(None, handle)
    port = (HostPort("0.0.0.0", "TCP", 80),)
    cache.add_or_update_pod(pod("bound", node_name="a", host_ports=port))
    cache.assume(pod("assumed", host_ports=port), Allocation("b", cache.snapshot.row_of("b")))
    want = pod("new", host_ports=port)
    snap = cache.snapshot
    assert passing(snap, plugin.filter(CycleState(), want, all_rows(snap))) == []
    cache.remove_pod("uid-bound")
    cache.forget("uid-assumed")
    assert passing(snap, plugin.filter(CycleState(), want, all_rows(snap))) == ["a", "b"]
    assert cache.used_host_ports() == {}


def test_in_the_ai_scheduler_profile_a_taken_port_waits_for_its_holder_to_leave() -> None:
    s = ai_sim(gpu_node("only"))
    port = (HostPort("0.0.0.0", "TCP", 8080),)
    first = s.submit(replace(ai_pod("first"), host_ports=port))
    assert first.result is Result.SCHEDULED and first.node == "only"
    second = s.submit(replace(ai_pod("second"), host_ports=port))
    assert second.result is Result.UNSCHEDULABLE
    assert second.message == f"0/1 nodes are available: 1 {REASON}."
    assert "NodePorts" in second.rejected_by
    s.delete("uid-first")  # the port is free again: the waiting pod is moved and retried
    while s.cache.get("uid-second") is None and (t := s.next_wakeup()) is not None:
        s.advance(t)
    entry = s.cache.get("uid-second")
    assert entry is not None and entry.node == "only"
