"""NodeUnschedulable: cordoned rows are rejected unless the pod tolerates the cordon taint."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.framework import CycleState, FilterPlugin
from gpusched.plugins.node_unschedulable import NodeUnschedulable
from tests.builders import all_rows, node, passing, pod, snapshot
from tests.fakes import FakeHandle

KEY = "node.kubernetes.io/unschedulable"


def run(tolerations: tuple[dict[str, Any], ...] = ()) -> tuple[list[str], Any]:
    snap = snapshot(node("ok"), node("cordoned", unschedulable=True))
    plugin = NodeUnschedulable(None, FakeHandle(snap))
    assert isinstance(plugin, FilterPlugin)
    res = plugin.filter(CycleState(), pod(tolerations=tolerations), all_rows(snap))
    return passing(snap, res), res


def test_cordoned_node_rejected_unresolvable_with_kube_reason() -> None:
    names, res = run()
    assert names == ["ok"]
    assert res.reasons == ("node(s) were unschedulable",)
    assert res.unresolvable


@pytest.mark.parametrize(
    "toleration",
    [
        {"operator": "Exists"},  # empty key + Exists tolerates every taint
        {"key": KEY, "operator": "Exists"},
        {"key": KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": KEY, "effect": "NoSchedule"},  # operator "" = Equal, value "" == ""
        {"key": KEY, "operator": "Equal", "value": ""},
    ],
)
def test_tolerating_the_cordon_taint_passes(toleration: dict[str, Any]) -> None:
    names, _ = run((toleration,))
    assert names == ["cordoned", "ok"]


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": KEY, "operator": "Exists", "effect": "NoExecute"},  # wrong effect
        {"key": KEY, "operator": "Equal", "value": "true"},  # taint value is ""
        {"key": "other", "operator": "Exists"},
        {"key": KEY, "operator": "Gt", "value": "1"},  # alpha operator: matches nothing
    ],
)
def test_other_tolerations_do_not_pass(toleration: dict[str, Any]) -> None:
    names, _ = run((toleration,))
    assert names == ["ok"]


def test_candidates_outside_the_mask_stay_out() -> None:
    snap = snapshot(node("a"), node("b"))
    mask = all_rows(snap)
    mask[snap.row_of("a")] = False
    res = NodeUnschedulable(None, FakeHandle(snap)).filter(CycleState(), pod(), mask)
    assert passing(snap, res) == ["b"]
