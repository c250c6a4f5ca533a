"""NodeName: a pod with spec.nodeName fits only the node of that name."""

from __future__ import annotations

from gpusched.framework import CycleState, FilterPlugin
from gpusched.plugins.node_name import NodeName
from tests.builders import all_rows, node, passing, pod, snapshot
from tests.fakes import FakeHandle


def test_without_node_name_every_candidate_passes_untouched() -> None:
    snap = snapshot(node("a"), node("b"))
    plugin = NodeName(None, FakeHandle(snap))
    assert isinstance(plugin, FilterPlugin)
    mask = all_rows(snap)
    assert plugin.filter(CycleState(), pod(), mask).feasible is mask


def test_only_the_named_node_passes_others_unresolvable_with_kube_reason() -> None:
    snap = snapshot(node("a"), node("b"), node("c"))
    res = NodeName(None, FakeHandle(snap)).filter(CycleState(), pod(node_name="b"), all_rows(snap))
    assert passing(snap, res) == ["b"]
    assert res.reasons == ("node(s) didn't match the requested node name",)
    assert res.unresolvable


def test_named_node_not_a_candidate_or_unknown_passes_nothing() -> None:
    snap = snapshot(node("a"), node("b"))
    plugin = NodeName(None, FakeHandle(snap))
    mask = all_rows(snap)
    mask[snap.row_of("b")] = False
    assert passing(snap, plugin.filter(CycleState(), pod(node_name="b"), mask)) == []
    assert passing(snap, plugin.filter(CycleState(), pod(node_name="zz"), all_rows(snap))) == []
